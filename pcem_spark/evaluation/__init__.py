"""Scoring predictions: hierarchical micro/macro F1 and per-level accuracy (the paper's
Section 5.1.3) over a predictions DataFrame (``metrics``), and the same numbers as a
pyspark.ml ``Evaluator`` for ``CrossValidator`` (``evaluator``). Imports
:mod:`pcem_spark.core` (the taxonomy) and :mod:`pcem_spark.errors`.
"""

from pcem_spark.evaluation.evaluator import (  # noqa: F401
    HierarchicalF1Evaluator,
)
from pcem_spark.evaluation.metrics import (  # noqa: F401
    evaluate_predictions,
    f1_scores,
    format_metrics,
    node_confusion,
)

__all__ = [
    "HierarchicalF1Evaluator",
    "evaluate_predictions",
    "format_metrics",
    "f1_scores",
    "node_confusion",
]
