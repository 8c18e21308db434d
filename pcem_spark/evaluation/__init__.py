"""Scoring predictions: hierarchical micro/macro F1 and per-level accuracy (the paper's
Section 5.1.3) over a predictions DataFrame (``metrics``), and the same numbers as a
pyspark.ml ``Evaluator`` for ``CrossValidator`` (``evaluator``). Imports
:mod:`pcem_spark.core` (the taxonomy) and :mod:`pcem_spark.errors`.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "HierarchicalF1Evaluator": "pcem_spark.evaluation.evaluator",
    "evaluate_predictions": "pcem_spark.evaluation.metrics",
    "f1_scores": "pcem_spark.evaluation.metrics",
    "format_metrics": "pcem_spark.evaluation.metrics",
    "node_confusion": "pcem_spark.evaluation.metrics",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "HierarchicalF1Evaluator",
    "evaluate_predictions",
    "format_metrics",
    "f1_scores",
    "node_confusion",
]
