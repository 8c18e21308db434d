"""Hierarchical micro/macro F1 (the paper's Section 5.1.3) and per-level accuracy.

Each document's predicted node set (the real nodes of its predicted path) is
compared with its true node set (its label path). Per node ``c`` (all
non-root, non-dummy nodes) TP/FP/FN are counted; micro-F1 pools them, macro-F1
averages the per-node F1. A node with TP + FP + FN = 0 (never true, never
predicted) has no defined F1 and is left out of the macro average; a node
with TP = 0 but some FP or FN scores 0.

Only rows whose true labels are a path of the taxonomy (a parent -> child
chain from the root's child down, every node known) are scored, for the
level accuracies and the F1s alike, so the two cannot contradict. A true
label the taxonomy does not know can be neither right nor wrong: such rows
are counted (``n_unknown_labels``) and left out. A predicted path the
taxonomy does not know is scored (wrong at the levels where it differs) and
counted (``n_unknown_predictions``). When most labelled rows are of either
kind the predictions were made with another taxonomy or model and
:func:`evaluate_predictions` refuses them (:class:`InputError`); a minority
is a loud warning and part of the metrics.
"""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import PATH_KEY_SEP, Taxonomy
from pcem_spark.engine.label_columns import has_label_paths
from pcem_spark.errors import InputError

__all__ = [
    "OUT_OF_TAXONOMY_LABEL",
    "is_out_of_scope",
    "out_of_scope_metrics",
    "f1_scores",
    "node_confusion",
    "confusion_arrays",
    "metric_nodes",
    "known_path",
    "evaluate_predictions",
    "format_metrics",
]

log = logging.getLogger(__name__)

# More labelled rows than this share naming nodes or paths the taxonomy does not know: refused.
MAX_UNKNOWN_SHARE = 0.5
# Unknown node names / paths listed in a message or in the metrics.
MAX_LISTED = 20


def f1_scores(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> Dict[str, float]:
    """Micro and macro F1 from per-node counts (arrays of equal length)."""
    tp, fp, fn = (np.asarray(a, dtype=np.float64) for a in (tp, fp, fn))
    p_den, r_den = tp.sum() + fp.sum(), tp.sum() + fn.sum()
    p = tp.sum() / p_den if p_den else 0.0
    r = tp.sum() / r_den if r_den else 0.0
    micro = 2 * p * r / (p + r) if p + r else 0.0
    present = (tp + fp + fn) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        per_node = np.where(tp > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
    macro = float(per_node[present].mean()) if present.any() else 0.0
    return {"micro_f1": float(micro), "macro_f1": macro, "micro_precision": float(p), "micro_recall": float(r)}


def node_confusion(
    pred: DataFrame, path_col: str = "path", labels_col: str = "labels"
) -> Tuple[Dict[str, int], Dict[str, int], Dict[str, int]]:
    """Per-node counts ``(n_pred, n_true, n_tp)`` of a predictions DataFrame.

    Over the rows whose ``labels_col`` is not null: ``n_pred[c]`` is how often
    node ``c`` occurs in ``path_col`` (the predicted path), ``n_true[c]`` in
    ``labels_col`` (the true path) and ``n_tp[c]`` in both (their array
    intersection). Nodes that never occur are absent. One Spark job (explode +
    groupBy); only one row per node reaches the driver, never a document.
    Then ``fp = n_pred - n_tp`` and ``fn = n_true - n_tp``.
    """
    p = F.coalesce(F.col(path_col), F.array().cast("array<string>"))  # null path: no predicted node
    t = F.col(labels_col)

    def tagged(arr, i_pred: int, i_true: int, i_tp: int):
        return F.transform(
            arr,
            lambda x: F.struct(
                x.alias("node"), F.lit(i_pred).alias("np"), F.lit(i_true).alias("nt"), F.lit(i_tp).alias("ntp")
            ),
        )

    rows = (
        pred.where(F.col(labels_col).isNotNull())
        .select(p.alias("p"), t.alias("t"))
        .select(
            F.explode(
                F.concat(
                    tagged(F.col("p"), 1, 0, 0),
                    tagged(F.col("t"), 0, 1, 0),
                    tagged(F.array_intersect("p", "t"), 0, 0, 1),
                )
            ).alias("e")
        )
        .groupBy(F.col("e.node").alias("node"))
        .agg(F.sum("e.np").alias("np"), F.sum("e.nt").alias("nt"), F.sum("e.ntp").alias("ntp"))
        .collect()
    )  # <= one row per node

    def pick(field: str) -> Dict[str, int]:
        return {r["node"]: int(r[field]) for r in rows if r[field]}

    return pick("np"), pick("nt"), pick("ntp")


def confusion_arrays(
    nodes: Iterable[str], n_pred: Dict[str, int], n_true: Dict[str, int], n_tp: Dict[str, int]
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tp, fp, fn)`` arrays over ``nodes`` (in that order) from :func:`node_confusion`."""
    nodes = list(nodes)
    tp = np.array([n_tp.get(c, 0) for c in nodes], dtype=np.int64)
    fp = np.array([n_pred.get(c, 0) for c in nodes], dtype=np.int64) - tp
    fn = np.array([n_true.get(c, 0) for c in nodes], dtype=np.int64) - tp
    return tp, fp, fn


def metric_nodes(taxonomy: Taxonomy) -> List[str]:
    """The nodes the metrics count: the taxonomy's real non-root nodes, by depth then name."""
    return sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))


def known_path(col: Column, taxonomy: Taxonomy) -> Column:
    """Boolean column: ``col`` (array<string>) is a parent -> child chain of ``taxonomy`` from the root down.

    Every element must be a real node whose parent is the previous element
    (the root for the first): a full path, or a prefix of one (an abstaining
    prediction). An empty or null array is a known (empty) path; a null
    element makes the path unknown. Evaluated on the executors against the
    set of the taxonomy's edges (one literal per node).
    """
    edges = sorted(f"{taxonomy.parent(n)}{PATH_KEY_SEP}{n}" for n in taxonomy.real_nodes)
    arr = F.coalesce(col, F.array().cast("array<string>"))
    steps = F.transform(
        arr,
        lambda x, i: F.concat(
            F.when(i == 0, F.lit(taxonomy.root)).otherwise(F.get(arr, i - 1)), F.lit(PATH_KEY_SEP), x
        ),
    )
    return F.coalesce(F.forall(steps, lambda e: e.isin(edges)), F.lit(False))


def _unknown_examples(rows: DataFrame, col: str, taxonomy: Taxonomy) -> Tuple[List[str], List[List[str]]]:
    """Up to MAX_LISTED node names of ``col`` the taxonomy does not know, and paths of known nodes that are
    not chains of it (only those reach the driver)."""
    real = sorted(taxonomy.real_nodes)
    arr = F.coalesce(F.col(col), F.array().cast("array<string>"))
    nodes = (
        rows.select(F.explode(arr).alias("n"))
        .where(F.col("n").isNull() | ~F.col("n").isin(real))
        .distinct()
        .limit(MAX_LISTED)
        .collect()
    )
    names = sorted(str(r["n"]) for r in nodes)
    paths: List[List[str]] = []
    if not names:
        paths = sorted(
            [str(x) for x in r[0]]
            for r in rows.where(~known_path(F.col(col), taxonomy)).select(col).distinct().limit(3).collect()
        )
    return names, paths


def _deeper_than(k: int):
    """Lambda for ``exists``: a true path with a level ``k``."""
    return lambda path: F.size(path) >= k


def _same_node_at(k: int, predicted: Column):
    """Lambda for ``exists``: a true path whose level-``k`` node is ``predicted``."""
    return lambda path: F.try_element_at(path, F.lit(k)) == predicted


def evaluate_predictions(
    pred: DataFrame, taxonomy: Taxonomy, path_col: str = "path", labels_col: str = "labels", where: Optional[str] = None
) -> Dict[str, object]:
    """Metrics of a predictions DataFrame (columns ``path`` and ``labels``).

    With a ``paths`` column (several predicted paths per document, ``pcem
    predict --multi-path``) the F1s count the union of their nodes as the
    predicted nodes; per-level accuracy stays on ``path``. With ``labels``
    as several paths per document (array<array<string>>) the true nodes are
    the union of theirs, and a level is right when the predicted node there
    is any true path's; a row is scored when every true path is known.

    Rows with null labels are not scored (their count is reported). Rows
    whose labels are not a path of ``taxonomy`` are not scored either, for
    the accuracies and the F1s alike (``n_unknown_labels``); rows whose
    predicted path is not one are scored (``n_unknown_predictions``). When
    more than half of the labelled rows are of either kind the predictions
    come from another taxonomy or model: :class:`InputError` (``where``
    names the predictions in the message); otherwise a warning. Only
    per-node and per-level aggregates (and a few unknown names) reach the
    driver.
    """
    real = metric_nodes(taxonomy)
    depth = taxonomy.depth
    # Several paths per document (pcem predict --multi-path): the nodes scored are the union of their nodes
    # (hierarchical precision / recall, Kiritchenko et al.); per-level accuracy stays on the predicted path.
    multi = path_col == "path" and "paths" in pred.columns
    nodes = F.array_distinct(F.flatten(F.col("paths"))) if multi else F.col(path_col)
    # Several true paths per document: the true nodes are the union of their nodes, a level is right when
    # the predicted path's node there is any true path's node there.
    several = has_label_paths(pred, labels_col)
    if several:
        truth = [
            F.array_distinct(F.flatten(F.col(labels_col))).alias("t"),
            F.col(labels_col).alias("tt"),
            F.try_element_at(F.filter(labels_col, lambda x: ~known_path(x, taxonomy)), F.lit(1)).alias("t_bad"),
        ]
        t_known = F.forall("tt", lambda x: known_path(x, taxonomy))
    else:
        truth = [F.col(labels_col).alias("t"), F.array(F.col(labels_col)).alias("tt"), F.col(labels_col).alias("t_bad")]
        t_known = known_path(F.col("t"), taxonomy)
    rows = pred.select(F.col(path_col).alias("p"), nodes.alias("pn"), *truth).select(
        "p",
        "t",
        "tt",
        "t_bad",
        "pn",
        F.col("t").isNotNull().alias("has_t"),
        (F.col("t").isNotNull() & t_known).alias("t_ok"),
        known_path(F.col("p"), taxonomy).alias("p_ok"),
    )

    def n_where(cond: Column) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0))

    agg_exprs = [
        n_where(F.col("has_t")).alias("n_labelled"),
        n_where(~F.col("has_t")).alias("n_unscored"),
        n_where(F.col("has_t") & ~F.col("t_ok")).alias("n_bad_t"),
        n_where(F.col("t_ok") & ~F.col("p_ok")).alias("n_bad_p"),
    ]
    for k in range(1, depth + 1):
        if several:
            has_k = F.col("t_ok") & F.exists("tt", _deeper_than(k))
            same_k = F.coalesce(F.exists("tt", _same_node_at(k, F.try_element_at("p", F.lit(k)))), F.lit(False))
        else:
            has_k = F.col("t_ok") & (F.size("t") >= k)
            # try_element_at: a predicted path shallower than k (a shallow leaf) is wrong at level k,
            # not an ANSI index error.
            same_k = F.coalesce(F.try_element_at("p", F.lit(k)) == F.try_element_at("t", F.lit(k)), F.lit(False))
        agg_exprs.append(n_where(has_k).alias(f"n{k}"))
        agg_exprs.append(n_where(has_k & same_k).alias(f"c{k}"))
    totals = rows.agg(*agg_exprs).first()
    n_labelled = int(totals["n_labelled"] or 0)
    n_bad_t, n_bad_p = int(totals["n_bad_t"] or 0), int(totals["n_bad_p"] or 0)
    n_unknown = n_bad_t + n_bad_p
    unknown_info: Dict[str, object] = {}
    if n_unknown:
        bad_rows = rows.where(F.col("has_t") & (~F.col("t_ok") | ~F.col("p_ok")))
        t_names, t_paths = _unknown_examples(bad_rows.where(~F.col("t_ok")), "t_bad", taxonomy)
        p_names, p_paths = _unknown_examples(bad_rows, "p", taxonomy)
        names = sorted(set(t_names) | set(p_names))[:MAX_LISTED]
        paths = sorted({tuple(x) for x in t_paths + p_paths})[:3]
        shown = (
            (", ".join(repr(n) for n in names[:10]) + (", ..." if len(names) > 10 else ""))
            if names
            else "paths that are not parent -> child chains: " + ", ".join(str(list(x)) for x in paths)
        )
        refuse = n_unknown > MAX_UNKNOWN_SHARE * n_labelled
        detail = (
            f"in the true labels: {n_bad_t}, only in the predicted path: {n_bad_p}"
            if refuse
            else f"in the true labels: {n_bad_t}, not scored; only in the predicted path: {n_bad_p}, scored as wrong"
        )
        what = (
            f"{n_unknown} of the {n_labelled} labelled predictions name nodes or paths the taxonomy does not "
            f"know ({detail}); e.g. {shown}"
        )
        prefix = f"{where}: " if where else ""
        if refuse:
            raise InputError(
                f"{prefix}{what}: predictions were made with another taxonomy / model? Evaluate "
                "them with the model (--model) or taxonomy (--taxonomy) that made them"
            )
        log.warning(
            "%sUNKNOWN TO THE TAXONOMY: %s. The metrics score the other %d rows; were some predictions "
            "made with another taxonomy / model?",
            prefix,
            what,
            n_labelled - n_bad_t,
        )
        unknown_info["n_unknown"] = n_unknown
        for key, value in (
            ("unknown_nodes", names),
            ("unknown_true_labels", t_names),
            ("unknown_paths", [list(x) for x in paths]),
        ):
            if value:
                unknown_info[key] = value

    n_pred, n_true, n_tp = node_confusion(rows.where(F.col("t_ok")), "pn", "t")
    tp, fp, fn = confusion_arrays(real, n_pred, n_true, n_tp)
    out: Dict[str, object] = dict(f1_scores(tp, fp, fn))
    out["n_documents"] = n_labelled - n_bad_t
    out["n_without_labels"] = int(totals["n_unscored"] or 0)
    out["n_unknown_labels"] = n_bad_t
    out["n_unknown_predictions"] = n_bad_p
    out["scored_nodes"] = "union of paths" if multi else "path"
    out["level_accuracy"] = {
        str(k): (totals[f"c{k}"] / totals[f"n{k}"] if totals[f"n{k}"] else None) for k in range(1, depth + 1)
    }
    out["per_node"] = {c: {"tp": int(a), "fp": int(b), "fn": int(d)} for c, a, b, d in zip(real, tp, fp, fn)}
    out.update(unknown_info)
    return out


# The label that marks a test document out of the taxonomy: ``"labels": ["__out_of_taxonomy__"]``. No category may
# be named so (training refuses it: pcem_spark.model.labels.infer_taxonomy, and a given taxonomy does not have it).
OUT_OF_TAXONOMY_LABEL = "__out_of_taxonomy__"


def is_out_of_scope(labels: Column, paths: bool = False) -> Column:
    """True for a row whose labels hold the out-of-taxonomy mark (:data:`OUT_OF_TAXONOMY_LABEL`), else false;
    ``paths``: the labels are a list of paths (``array<array<string>>``)."""
    if paths:
        found = F.exists(labels, lambda path: F.array_contains(path, OUT_OF_TAXONOMY_LABEL))
    else:
        found = F.array_contains(labels, OUT_OF_TAXONOMY_LABEL)
    return F.coalesce(found, F.lit(False))


def out_of_scope_metrics(pred: DataFrame, threshold: Optional[float]) -> Optional[Dict[str, object]]:
    """What happened to the documents a test set marks out of the taxonomy (:data:`OUT_OF_TAXONOMY_LABEL`), or
    None when it marks none: how many, how many got an empty ``path`` (``pcem predict --min-in-taxonomy``: the
    recall), and the share of the in-scope labelled documents that got one too. ``threshold``: the minimum
    ``in_taxonomy`` the predictions were made with (their marker's), reported beside it."""
    out = is_out_of_scope(F.col("labels"), has_label_paths(pred, "labels"))
    inside = F.col("labels").isNotNull() & ~out
    empty = F.size(F.col("path")) == 0
    row = pred.select(
        F.sum(F.when(out, 1).otherwise(0)).alias("out"),
        F.sum(F.when(out & empty, 1).otherwise(0)).alias("caught"),
        F.sum(F.when(inside, 1).otherwise(0)).alias("inside"),
        F.sum(F.when(inside & empty, 1).otherwise(0)).alias("inside_empty"),
    ).first()
    n_out = int(row["out"] or 0)
    if n_out == 0:
        return None
    inside = int(row["inside"] or 0)
    return {
        "documents": n_out,
        "caught": int(row["caught"] or 0),
        "recall": int(row["caught"] or 0) / n_out,
        "in_scope_documents": inside,
        "in_scope_without_path": (int(row["inside_empty"] or 0) / inside) if inside else None,
        "min_in_taxonomy": threshold,
    }


def format_metrics(m: Dict[str, object]) -> str:
    lines = [f"documents scored: {m['n_documents']} (without labels: {m['n_without_labels']})"]
    if m.get("scored_nodes") == "union of paths":
        lines.append("F1 over the nodes of every predicted path (paths); level accuracy over path")
    n_unknown = m.get("n_unknown", 0)
    if n_unknown:
        n_labelled = m["n_documents"] + m.get("n_unknown_labels", 0)
        names = m.get("unknown_nodes") or m.get("unknown_paths") or []
        lines.append(
            f"WARNING: unknown to the taxonomy: {n_unknown} of {n_labelled} labelled predictions "
            f"(in the true labels: {m.get('n_unknown_labels', 0)}, not scored; only in the predicted "
            f"path: {m.get('n_unknown_predictions', 0)}, scored as wrong); e.g. " + ", ".join(map(str, names[:10]))
        )
    lines += [f"micro-F1: {100 * m['micro_f1']:.2f}", f"macro-F1: {100 * m['macro_f1']:.2f}"]
    for k, acc in m["level_accuracy"].items():
        lines.append(f"level {k} accuracy: " + ("n/a" if acc is None else f"{100 * acc:.2f}"))
    oos = m.get("out_of_scope")
    if oos:
        kept = oos["in_scope_without_path"]
        lines.append(
            f"out of scope ({OUT_OF_TAXONOMY_LABEL}): {oos['documents']}, given no path: {oos['caught']} "
            f"(recall {100 * oos['recall']:.2f}; min_in_taxonomy {oos['min_in_taxonomy']}); in-scope documents "
            "given no path: " + ("n/a" if kept is None else f"{100 * kept:.2f}%")
        )
    return "\n".join(lines)
