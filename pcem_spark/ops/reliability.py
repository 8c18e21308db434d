"""Reliability of a predictions table's node probabilities: the diagram and the calibration error.

The events a threshold acts on are the nodes of each predicted path: the
``node_probabilities`` column (``pcem predict --node-probabilities``) gives
each node's marginal probability, and a node is correct when the true path
(``labels``) has the same prefix down to it. The events are counted in 15
equal-width probability bins by one Spark aggregation (at most 15 rows reach
the driver, never a document); ECE is the count-weighted mean gap between a
bin's mean probability and its share correct, as
:func:`pcem_spark.core.calibration.expected_calibration_error` computes it on arrays.
"""

from __future__ import annotations

import io
import json
from typing import Dict, Optional

import numpy as np

from pcem_spark.errors import InputError
from pcem_spark.ops.rendering import md_text
from pcem_spark.util.redaction import redact

__all__ = ["N_BINS", "reliability_counts", "reliability_report", "reliability_files"]

N_BINS = 15


def reliability_counts(pred, n_bins: int = N_BINS):
    """Spark: per probability bin, ``(count, sum of probabilities, correct)`` of the predicted-path nodes.

    Rows without labels are not scored. Returns ``(bins, n_scored_rows)``,
    ``bins`` a list of ``n_bins`` ``(count, probability_sum, correct)``.
    """
    from pyspark.sql import functions as F

    for col in ("path", "labels", "node_probabilities"):
        if col not in pred.columns:
            raise InputError(
                f"predictions: column {col!r} is missing (found {pred.columns}); a reliability diagram needs "
                "predictions written with --node-probabilities, of documents that carry labels"
            )
    from pcem_spark.engine.label_columns import label_paths_col

    scored = pred.where(F.col("labels").isNotNull())
    truth = label_paths_col(pred, "labels").alias("truth")
    events = scored.select("path", truth, F.posexplode("node_probabilities").alias("pos", "p")).select(
        F.col("p"),
        # correct: a true path (one, or any of several) has the predicted prefix down to this node
        F.exists("truth", lambda t: F.slice(t, 1, F.col("pos") + 1) == F.slice("path", 1, F.col("pos") + 1))
        .cast("int")
        .alias("ok"),
        F.least(F.floor(F.col("p") * n_bins), F.lit(n_bins - 1)).cast("int").alias("bin"),
    )
    rows = events.groupBy("bin").agg(F.count(F.lit(1)).alias("n"), F.sum("p").alias("p"), F.sum("ok").alias("ok"))
    bins = [(0, 0.0, 0)] * n_bins
    for r in rows.collect():
        bins[int(r["bin"])] = (int(r["n"]), float(r["p"]), int(r["ok"]))
    return bins, scored.count()


def reliability_report(bins, n_scored: int, source: Optional[str] = None) -> Dict[str, object]:
    """JSON-able report of :func:`reliability_counts`: per bin count, mean probability, precision; ECE."""
    n_bins = len(bins)
    count = np.array([b[0] for b in bins], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.array([b[1] for b in bins]) / count
        precision = np.array([b[2] for b in bins]) / count
    total = count.sum()
    ece = float(np.nansum(count * np.abs(mean_p - precision)) / total) if total else float("nan")
    return {
        "predictions": source,
        "documents_scored": int(n_scored),
        "node_events": int(total),
        "ece": round(ece, 6),
        "bins": [
            {
                "lower": i / n_bins,
                "upper": (i + 1) / n_bins,
                "count": int(count[i]),
                "mean_probability": None if not count[i] else round(float(mean_p[i]), 6),
                "precision": None if not count[i] else round(float(precision[i]), 6),
            }
            for i in range(n_bins)
        ],
    }


def _markdown(report: Dict[str, object]) -> str:
    lines = [
        "# Reliability of the node probabilities",
        "",
        f"{report['node_events']:,} predicted-path nodes of {report['documents_scored']:,} labelled documents "
        f"({md_text(report['predictions'])}); expected calibration error (ECE) **{report['ece']:.4f}**.",
        "",
        "| probability bin | nodes | mean probability | precision (share correct) |",
        "|---|---|---|---|",
    ]
    for b in report["bins"]:
        if b["count"]:
            lines.append(
                f"| {b['lower']:.2f}-{b['upper']:.2f} | {b['count']:,} | {b['mean_probability']:.3f} |"
                f" {b['precision']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def _png(report: Dict[str, object]) -> Optional[bytes]:
    """The reliability diagram (predicted probability vs observed precision), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    bins = [b for b in report["bins"] if b["count"]]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    ax.plot([b["mean_probability"] for b in bins], [b["precision"] for b in bins], marker="o", label="predictions")
    ax.set_xlabel("predicted node probability (bin mean)")
    ax.set_ylabel("observed precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(f"Reliability of node probabilities (ECE {report['ece']:.3f})")
    ax.legend(loc="upper left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def reliability_files(report: Dict[str, object]) -> Dict[str, bytes]:
    """``reliability.md``, ``reliability.json`` and (with matplotlib) ``reliability.png``; the predictions' path
    redacted."""
    report = redact(report)
    files = {
        "reliability.md": _markdown(report).encode("utf-8"),
        "reliability.json": (json.dumps(report, indent=1) + "\n").encode("utf-8"),
    }
    png = _png(report)
    if png is not None:
        files["reliability.png"] = png
    return files
