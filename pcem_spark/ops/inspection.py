"""Model inspection (``pcem inspect``): what a user checks before trusting a model.

Per taxonomy node (dummy padding nodes hidden):

* its **training mass** -- the document weight the M-step gave the
  components (paths) through the node, split into the labelled part and the
  expected part (``total - labelled``: lambda x the unlabelled documents'
  last E-step posteriors), from the training summary's ``path_mass_labeled``
  / ``path_mass`` (R,). For PCNB / PCEM a labelled document weighs Eq. 2's
  path scores (``D`` on its own path, ``d`` on a path sharing ``d`` nodes
  with it, scaled by ``path_weight``), so an inner node's labelled mass is
  larger than its number of labelled documents; the number of **labelled
  documents** through the node is recovered exactly from those masses
  (:func:`labeled_documents`) when the supervision was true labels. Models
  saved before the summary had the masses fall back to the word mass ``N_j``
  of the parameters (the output says so);
* its **prior** -- the sum of the path priors through it (top-down methods:
  the product of the per-parent priors down to it), summing to 1 per depth;
* its **top terms** against its siblings: ranked by the signed log-likelihood
  ratio, shown with their log-odds under the model's smoothing
  (:func:`sibling_log_odds`).

Given a predictions table with true labels, a per-level confusion table
(:func:`confusion_counts`, one Spark aggregation; only the (true, predicted)
node pairs reach the driver).

Outputs (:func:`write_inspection`): ``model.md``, ``model.json``,
``taxonomy.html`` (self-contained), ``taxonomy.png`` (with matplotlib) and,
with predictions, ``confusion.md`` / ``confusion.json`` -- plain files,
readable without Spark, written to a **local** directory atomically.

Everything here except :func:`confusion_counts` is numpy / scipy on the
driver. Shapes: ``R`` components, ``M`` paths, ``K`` nodes (dummies
included), ``V`` terms.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from pcem_spark.core.methods import EM_METHODS
from pcem_spark.core.node_stats import (
    component_paths,
    labeled_documents,
    node_counts,
    node_mass,
    padded_parents,
    sibling_log_odds,
    sibling_weight_contrasts,
    tree_order,
)
from pcem_spark.core.parameters import recovered_counts
from pcem_spark.errors import InputError
from pcem_spark.ops.rendering import (
    NONE_LABEL,
    render_confusion_markdown,
    render_html,
    render_model_markdown,
    render_png,
)
from pcem_spark.util.redaction import redact

__all__ = [
    "INSPECT_KIND",
    "inspect_model",
    "confusion_counts",
    "confusion_tables",
    "check_local_output",
    "write_inspection",
    "inspection_files",
]

log = logging.getLogger(__name__)


INSPECT_KIND = "inspect"


# ------------------------------------------------------------- the report
def _rounded(x, digits: int = 4):
    return None if x is None else float(round(float(x), digits))


def inspect_model(model, top_n: int = 10, model_path: Optional[str] = None, rank: str = "llr") -> Dict[str, object]:
    """Everything ``model.md`` / ``model.json`` / the views show, as a JSON-able dict (no Spark).

    ``model`` is a :class:`pcem_spark.model.PathModel`; ``top_n`` / ``rank``: the top terms per node
    (:func:`sibling_log_odds`).
    """
    tax, params, ms = model.taxonomy, model.params, model.model_settings
    summary = dict(model.training_summary or {})
    smoothing = float(ms.smoothing)
    spec = model.spec
    path_nodes, owner = component_paths(tax, spec)
    counts, word_mass = node_counts(params, smoothing, path_nodes, owner)
    parents = spec.structure.parents if spec.structure is not None else None
    R = params.shape[0]
    lab_path, tot_path = summary.get("path_mass_labeled"), summary.get("path_mass")
    if lab_path is not None and tot_path is not None and len(lab_path) == R and len(tot_path) == R:
        source = "training_summary"
        mass = node_mass(
            path_nodes, np.asarray(tot_path, float), params.log_prior, np.asarray(lab_path, float), owner, parents
        )
        g = float(ms.path_weight) if ms.method in ("pcnb", "pcem") else 0.0
        docs = labeled_documents(path_nodes, np.asarray(lab_path, float), g, owner)
        lam = float(ms.unlabeled_weight)
        exp_docs = mass.expected / lam if ms.method in EM_METHODS and lam > 0 else None
        mass_note = (
            "document mass as the M-step counts it: labelled = the labelled documents' weights "
            "(Eq. 2 path scores for PCNB/PCEM), expected = total - labelled = unlabelled weight "
            "(lambda) x the last E-step posteriors; a node sums the paths / components through it"
        )
    else:
        source = "word_counts"
        _, comp_words = recovered_counts(params, smoothing)
        mass = node_mass(path_nodes, comp_words, params.log_prior, None, owner, parents)
        docs = exp_docs = None
        mass_note = (
            "this model was saved without path_mass in its training summary (an older pcem-spark): "
            "the mass shown is the word mass N of the parameters (tokens after doc_length "
            "normalisation, labelled + expected), with no labelled / expected split; retrain to get it"
        )
        if lab_path is not None or tot_path is not None:
            mass_note = f"the training summary's path masses do not have {R} entries: " + mass_note
    show = ~np.asarray(tax.is_dummy, dtype=bool)
    parent_idx = padded_parents(tax)
    top = sibling_log_odds(counts, parent_idx, smoothing, top_n, show, rank)
    linear = getattr(model, "linear", None)
    if linear is not None and ms.family == "vmf":
        linear = None  # the vectors' mixture has no weight per term (its summary's "vmf" says what it is)
    weighted = (
        # the terms' rows only: a model with document vectors has D more, which name no term
        sibling_weight_contrasts(
            linear.weights_t[: len(model.vocabulary)], tax.path_node_matrix(sparse=True), parent_idx, top_n, show
        )
        if linear is not None
        else None
    )
    vocab = model.vocabulary
    nodes = []
    for name in tree_order(tax):
        k = tax.node_index[name]
        parent = tax.parent(name)
        kids = tax.children(name)
        siblings = [s for s in tax.children(parent) if s != name]
        nodes.append(
            {
                "node": name,
                "depth": tax.node_depth(name),
                "parent": None if parent == tax.root else parent,
                "leaf": not kids,
                "children": kids,
                "labeled_documents": None if docs is None else int(round(docs[k])),
                "labeled_mass": None if mass.labeled is None else _rounded(mass.labeled[k]),
                "expected_mass": None if mass.expected is None else _rounded(mass.expected[k]),
                "expected_documents": None if exp_docs is None else _rounded(exp_docs[k], 2),
                "total_mass": _rounded(mass.total[k]),
                "word_mass": _rounded(word_mass[k], 2),
                "prior": _rounded(mass.prior[k], 6),
                "n_siblings": len(siblings),
                "top_terms": [
                    {
                        "term": vocab[t.term],
                        "log_odds": _rounded(t.log_odds),
                        "llr": _rounded(t.llr, 2),
                        "count": _rounded(t.count, 2),
                        "sibling_count": _rounded(t.sibling_count, 2),
                    }
                    for t in top[k]
                ],
                **(
                    {
                        "top_weighted_terms": [
                            {"term": vocab[t.term], "contrast": _rounded(t.contrast), "weight": _rounded(t.weight)}
                            for t in weighted[k]
                        ]
                    }
                    if weighted is not None
                    else {}
                ),
            }
        )
    depth_prior = {
        str(d): _rounded(sum(mass.prior[tax.node_index[n]] for n in tax.nodes if tax.node_depth(n) == d), 6)
        for d in range(1, tax.depth + 1)
    }
    history = summary.get("loglik_history") or []
    iters = summary.get("iter_seconds") or []
    keep_summary = {
        k: summary[k] for k in ("n_labeled", "n_unlabeled", "n_iter", "converged", "smoothing") if k in summary
    }
    if history:
        keep_summary["final_loglik"] = float(history[-1])
    if iters:
        keep_summary["em_seconds"] = round(float(sum(iters)), 2)
    if isinstance(summary.get("tuning"), dict):
        keep_summary["tuning_chosen"] = summary["tuning"].get("chosen")
    # What the probabilities (and so every marginal a threshold cuts at) mean for this model.
    calibration = summary.get("calibration")
    if model.temperature is not None:
        keep_summary["calibration"] = {
            "temperature": model.temperature,
            **{
                k: calibration[k]
                for k in (
                    "ece_uncalibrated",
                    "ece_temperature",
                    "ece_calibrated",
                    "log_loss_uncalibrated",
                    "log_loss_calibrated",
                    "probability_spread",
                    "documents",
                )
                if isinstance(calibration, dict) and k in calibration
            },
        }
    else:
        reason = calibration.get("reason") if isinstance(calibration, dict) else "saved before calibration"
        keep_summary["calibration"] = {"temperature": None, "reason": reason}
    # The in_taxonomy score: its scale, the corpus's unknown-token rates, the labelled documents' quantiles.
    if isinstance(summary.get("in_taxonomy"), dict):
        keep_summary["in_taxonomy"] = summary["in_taxonomy"]
    elif spec.structure is None:
        keep_summary["in_taxonomy"] = {"suggested_threshold": None, "reason": "saved before the in_taxonomy score"}
    if isinstance(summary.get("input"), dict):
        keep_summary["input"] = {
            k: v
            for k, v in summary["input"].items()
            if k in ("source", "rows_read", "valid", "rejected", "split", "selected")
        }
    paths = []
    nodes_are_components = spec.structure is not None and owner is None  # top-down / win-driven
    for j in range(tax.n_paths):
        entry = {"path": tax.real_path(j)}
        if not nodes_are_components:
            cols = np.flatnonzero(owner == j) if owner is not None else np.array([j])
            entry["prior"] = _rounded(np.exp(params.log_prior[cols]).sum(), 6)
            if source == "training_summary":
                entry["labeled_mass"] = _rounded(np.asarray(lab_path, float)[cols].sum())
                entry["mass"] = _rounded(np.asarray(tot_path, float)[cols].sum())
        paths.append(entry)
    return {
        "model": model_path,
        "method": ms.method,
        "model_settings": asdict(ms),
        "feature_settings": asdict(model.feature_settings),
        "vocabulary_size": len(vocab),
        "n_components": int(R),
        "nnz_parameters": int(params.log_ratio.nnz),
        "taxonomy": {
            "root": tax.root,
            "depth": tax.depth,
            "nodes": len(tax.real_nodes),
            "leaves": len(tax.leaves),
            "padded_nodes_hidden": int((~show).sum()),
        },
        "training_summary": keep_summary,
        "mass": {
            "source": source,
            "unit": "documents" if source == "training_summary" else "words",
            "note": mass_note,
            "labeled_documents_known": docs is not None,
            "expected_documents_known": exp_docs is not None,
            "prior_sum_per_depth": depth_prior,
        },
        "log_odds": {
            "smoothing": smoothing,
            "top_n": top_n,
            "ranked_by": rank,
            "definition": "log-odds = log theta(node, w) - log theta(siblings pooled, w), theta = "
            "(c + s) / (N + V s), s = the model's word smoothing; llr = Dunning's "
            "log-likelihood ratio G^2 of (term, other terms) x (node, siblings), signed + "
            "where the node's rate is higher; candidates: terms with count > 0 in the node; "
            "a top-level node's siblings are the other top-level nodes",
        },
        **(
            {
                "regression": {
                    "family": ms.family,
                    "generative_weight": float(linear.generative_weight),
                    "top_n": top_n,
                    "definition": "the path logits are F W^T + b over sublinear tf-idf rows F of unit length; "
                    "a node's weight of a term is the mean W[path, term] over the paths through it, its "
                    "contrast that minus the mean over its siblings' paths (a top-level node's siblings "
                    "are the other top-level nodes); terms with contrast > 0, largest first",
                }
            }
            if linear is not None
            else {}
        ),
        "nodes": nodes,
        "paths": paths,
    }


# -------------------------------------------------------------- confusion
def confusion_counts(pred, path_col: str = "path", labels_col: str = "labels"):
    """Spark: ``(level, true, predicted, n)`` rows of a predictions DataFrame, and the row counts.

    Per level d, every document whose true path reaches d is counted under
    (its true node at d, its predicted node at d); a predicted path that
    stops above d (or a null path) counts as predicted None. Rows without
    labels are not scored. One aggregation: at most ``(nodes at d + 1)^2``
    rows per level reach the driver, never a document.

    Returns
    -------
    (list of (level, true, predicted or None, n), n_scored, n_without_labels)
    """
    from pyspark.sql import functions as F

    for col in (path_col, labels_col):
        if col not in pred.columns:
            raise InputError(f"predictions: column {col!r} is missing (found {pred.columns})")
    from pcem_spark.engine.label_columns import closest_label_path

    counts = pred.select(F.count(F.lit(1)).alias("n"), F.count(labels_col).alias("n_lab")).first()
    # A document with several true paths is one row, against the true path closest to its prediction
    # (as pcem evaluate's level accuracy: right at a level when any true path is).
    path = F.coalesce(F.col(path_col), F.array().cast("array<string>"))
    scored = pred.where(F.col(labels_col).isNotNull()).withColumn(
        labels_col, closest_label_path(pred, path, labels_col)
    )
    cells = (
        scored.select(
            F.coalesce(F.col(path_col), F.array().cast("array<string>")).alias("p"),
            F.posexplode(labels_col).alias("pos", "t"),
        )
        .select(
            (F.col("pos") + 1).alias("level"),
            F.col("t").alias("true"),
            F.try_element_at("p", (F.col("pos") + 1).cast("int")).alias("predicted"),
        )
        .groupBy("level", "true", "predicted")
        .count()
        .collect()
    )
    rows = [(int(r["level"]), r["true"], r["predicted"], int(r["count"])) for r in cells]
    return rows, int(counts["n_lab"]), int(counts["n"]) - int(counts["n_lab"])


def confusion_tables(
    cells: Sequence[Tuple[int, str, Optional[str], int]],
    taxonomy,
    n_scored: int,
    n_without_labels: int = 0,
    top_errors: int = 10,
) -> Dict[str, object]:
    """Per-level confusion tables (pure) from :func:`confusion_counts`' cells.

    Rows and columns: the taxonomy's real nodes at that level (by name), then
    any other name met (unknown labels), then ``(none)`` as a column.
    Accuracy at level d = diagonal / documents whose true path reaches d
    (the ``level_accuracy`` of ``pcem evaluate``).
    """
    levels = {}
    depth = max([taxonomy.depth] + [c[0] for c in cells])
    for d in range(1, depth + 1):
        here = [c for c in cells if c[0] == d]
        known = sorted(n for n in taxonomy.real_nodes if taxonomy.node_depth(n) == d)
        seen = {c[1] for c in here} | {c[2] for c in here if c[2] is not None}
        unknown = sorted(seen - set(known))
        labels = known + unknown
        index = {n: i for i, n in enumerate(labels)}
        mat = np.zeros((len(labels), len(labels) + 1), dtype=np.int64)  # last column: (none)
        for _, t, p, n in here:
            mat[index[t], len(labels) if p is None else index[p]] += n
        total = int(mat.sum())
        correct = int(np.trace(mat[:, : len(labels)]))
        off = [
            (int(mat[i, j]), labels[i], NONE_LABEL if j == len(labels) else labels[j])
            for i, j in zip(*np.nonzero(mat))
            if i != j
        ]
        off.sort(key=lambda x: (-x[0], x[1], x[2]))
        row_tot = mat.sum(axis=1)
        levels[str(d)] = {
            "nodes": labels,
            "columns": labels + [NONE_LABEL],
            "counts": mat.tolist(),
            "documents": total,
            "correct": correct,
            "accuracy": (correct / total) if total else None,
            "unknown_nodes": unknown,
            "recall": {labels[i]: (float(mat[i, i]) / row_tot[i] if row_tot[i] else None) for i in range(len(labels))},
            "largest_errors": [
                {"true": t, "predicted": p, "count": n, "share_of_true": n / float(row_tot[index[t]])}
                for n, t, p in off[:top_errors]
            ],
        }
    return {"n_scored": n_scored, "n_without_labels": n_without_labels, "levels": levels}


# ----------------------------------------------------------------- writing
def check_local_output(path: str) -> str:
    """The absolute local path of an inspect output directory; other filesystems are refused (ValueError)."""
    if "://" in path and not path.startswith("file://"):
        raise InputError(
            f"--output {path!r}: pcem inspect writes plain files to a local directory; "
            "give a local path (and copy the folder elsewhere afterwards)"
        )
    path = path[len("file://") :] if path.startswith("file://") else path
    path = os.path.abspath(path.rstrip("/") or "/")
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"--output {path!r} exists and is not a directory")
    return path


def write_inspection(
    out_dir: str, files: Dict[str, bytes], overwrite: bool = False, info: Optional[dict] = None
) -> str:
    """Write ``files`` (name -> bytes) as the directory ``out_dir``, atomically; returns its absolute path.

    The atomic-output protocol of :mod:`pcem_spark.io.outputs` on the local
    disk (:func:`~pcem_spark.io.outputs.write_local_output`): built in a
    hidden temporary sibling with a ``_PCEM_COMPLETE`` marker of kind
    :data:`INSPECT_KIND`, then renamed into place; a killed run leaves the old
    folder or the new one. Local filesystem only (:func:`check_local_output`).
    """
    from pcem_spark.io.outputs import write_local_output

    return write_local_output(check_local_output(out_dir), files, INSPECT_KIND, overwrite, info)


def inspection_files(report: Dict[str, object], confusion: Optional[Dict[str, object]] = None) -> Dict[str, bytes]:
    """The output files (name -> bytes) of a report and, optionally, its confusion tables; the paths they
    name (the model, the predictions, the training inputs) redacted."""
    report, confusion = redact(report), redact(confusion)
    files = {
        "model.md": render_model_markdown(report).encode("utf-8"),
        "model.json": (json.dumps(report, indent=1, ensure_ascii=False) + "\n").encode("utf-8"),
        "taxonomy.html": render_html(report).encode("utf-8"),
    }
    png = render_png(report)
    if png is not None:
        files["taxonomy.png"] = png
    if confusion is not None:
        files["confusion.md"] = render_confusion_markdown(confusion).encode("utf-8")
        files["confusion.json"] = (json.dumps(confusion, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    return files
