"""Hierarchical micro/macro F1 (the paper's Section 5.1.3) and per-level accuracy.

Each document's predicted node set (the real nodes of its predicted path) is
compared with its true node set (its label path). Per node ``c`` (all
non-root, non-dummy nodes) TP/FP/FN are counted; micro-F1 pools them, macro-F1
averages the per-node F1. A node with TP + FP + FN = 0 (never true, never
predicted) has no defined F1 and is left out of the macro average; a node
with TP = 0 but some FP or FN scores 0.
"""

from __future__ import annotations

from typing import Dict

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


def evaluate_predictions(pred: DataFrame, taxonomy: Taxonomy, path_col: str = "path",
                         labels_col: str = "labels") -> Dict[str, object]:
    """Metrics of a predictions DataFrame (columns ``path`` and ``labels``).

    Rows with null labels are not scored (their count is reported). Only
    per-node and per-level aggregates reach the driver.
    """
    scored = pred.where(F.col(labels_col).isNotNull()).select(
        F.col(path_col).alias("p"), F.col(labels_col).alias("t"))
    real = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depth = taxonomy.depth
    agg_exprs = [F.count(F.lit(1)).alias("n")]
    for k in range(1, depth + 1):
        has_k = F.size("t") >= k
        agg_exprs.append(F.sum(F.when(has_k, 1).otherwise(0)).alias(f"n{k}"))
        agg_exprs.append(F.sum(F.when(has_k & (F.element_at("p", k) == F.element_at("t", k)), 1)
                               .otherwise(0)).alias(f"c{k}"))
    totals = scored.agg(*agg_exprs).first()
    n_scored = int(totals["n"])
    n_unscored = pred.where(F.col(labels_col).isNull()).count()

    def node_counts(col) -> Dict[str, int]:
        rows = scored.select(F.explode(col).alias("node")).groupBy("node").count().collect()
        return {r["node"]: int(r["count"]) for r in rows}  # <= one row per node

    n_pred = node_counts(F.col("p"))
    n_true = node_counts(F.col("t"))
    n_tp = node_counts(F.array_intersect("p", "t"))
    unknown = sorted(set(n_true) - taxonomy.real_nodes)
    tp = np.array([n_tp.get(c, 0) for c in real])
    fp = np.array([n_pred.get(c, 0) for c in real]) - tp
    fn = np.array([n_true.get(c, 0) for c in real]) - tp
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
