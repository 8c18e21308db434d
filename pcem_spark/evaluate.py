"""Hierarchical micro/macro F1 (the paper's Section 5.1.3) and per-level accuracy.

Each document's predicted node set (the real nodes of its predicted path) is
compared with its true node set (its label path). Per node ``c`` (all
non-root, non-dummy nodes) TP/FP/FN are counted; micro-F1 pools them, macro-F1
averages the per-node F1. A node with TP + FP + FN = 0 (never true, never
predicted) has no defined F1 and is left out of the macro average; a node
with TP = 0 but some FP or FN scores 0.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .taxonomy import Taxonomy


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
    return {"micro_f1": float(micro), "macro_f1": macro, "micro_precision": float(p),
            "micro_recall": float(r)}


def node_confusion(pred: DataFrame, path_col: str = "path", labels_col: str = "labels"
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
        return F.transform(arr, lambda x: F.struct(x.alias("node"), F.lit(i_pred).alias("np"),
                                                   F.lit(i_true).alias("nt"), F.lit(i_tp).alias("ntp")))

    rows = (pred.where(F.col(labels_col).isNotNull())
            .select(p.alias("p"), t.alias("t"))
            .select(F.explode(F.concat(tagged(F.col("p"), 1, 0, 0), tagged(F.col("t"), 0, 1, 0),
                                       tagged(F.array_intersect("p", "t"), 0, 0, 1))).alias("e"))
            .groupBy(F.col("e.node").alias("node"))
            .agg(F.sum("e.np").alias("np"), F.sum("e.nt").alias("nt"), F.sum("e.ntp").alias("ntp"))
            .collect())  # <= one row per node

    def pick(field: str) -> Dict[str, int]:
        return {r["node"]: int(r[field]) for r in rows if r[field]}

    return pick("np"), pick("nt"), pick("ntp")


def confusion_arrays(nodes: Iterable[str], n_pred: Dict[str, int], n_true: Dict[str, int],
                     n_tp: Dict[str, int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tp, fp, fn)`` arrays over ``nodes`` (in that order) from :func:`node_confusion`."""
    nodes = list(nodes)
    tp = np.array([n_tp.get(c, 0) for c in nodes], dtype=np.int64)
    fp = np.array([n_pred.get(c, 0) for c in nodes], dtype=np.int64) - tp
    fn = np.array([n_true.get(c, 0) for c in nodes], dtype=np.int64) - tp
    return tp, fp, fn


def metric_nodes(taxonomy: Taxonomy) -> List[str]:
    """The nodes the metrics count: the taxonomy's real non-root nodes, by depth then name."""
    return sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))


def evaluate_predictions(pred: DataFrame, taxonomy: Taxonomy, path_col: str = "path",
                         labels_col: str = "labels") -> Dict[str, object]:
    """Metrics of a predictions DataFrame (columns ``path`` and ``labels``).

    Rows with null labels are not scored (their count is reported). Only
    per-node and per-level aggregates reach the driver.
    """
    scored = pred.where(F.col(labels_col).isNotNull()).select(
        F.col(path_col).alias("p"), F.col(labels_col).alias("t"))
    real = metric_nodes(taxonomy)
    depth = taxonomy.depth
    agg_exprs = [F.count(F.lit(1)).alias("n")]
    for k in range(1, depth + 1):
        has_k = F.size("t") >= k
        agg_exprs.append(F.sum(F.when(has_k, 1).otherwise(0)).alias(f"n{k}"))
        # try_element_at: a predicted path shallower than k (a shallow leaf) is wrong at level k,
        # not an ANSI index error.
        same_k = F.try_element_at("p", F.lit(k)) == F.try_element_at("t", F.lit(k))
        agg_exprs.append(F.sum(F.when(has_k & same_k, 1).otherwise(0)).alias(f"c{k}"))
    totals = scored.agg(*agg_exprs).first()
    n_scored = int(totals["n"])
    n_unscored = pred.where(F.col(labels_col).isNull()).count()

    n_pred, n_true, n_tp = node_confusion(pred, path_col, labels_col)
    unknown = sorted(set(n_true) - taxonomy.real_nodes)
    tp, fp, fn = confusion_arrays(real, n_pred, n_true, n_tp)
    out: Dict[str, object] = dict(f1_scores(tp, fp, fn))
    out["n_documents"] = n_scored
    out["n_without_labels"] = int(n_unscored)
    out["level_accuracy"] = {str(k): (totals[f"c{k}"] / totals[f"n{k}"] if totals[f"n{k}"] else None)
                             for k in range(1, depth + 1)}
    out["per_node"] = {c: {"tp": int(a), "fp": int(b), "fn": int(d)} for c, a, b, d in zip(real, tp, fp, fn)}
    if unknown:
        out["unknown_true_labels"] = unknown[:20]
    return out


def format_metrics(m: Dict[str, object]) -> str:
    lines = [f"documents scored: {m['n_documents']} (without labels: {m['n_without_labels']})",
             f"micro-F1: {100 * m['micro_f1']:.2f}", f"macro-F1: {100 * m['macro_f1']:.2f}"]
    for k, acc in m["level_accuracy"].items():
        lines.append(f"level {k} accuracy: " + ("n/a" if acc is None else f"{100 * acc:.2f}"))
    return "\n".join(lines)
