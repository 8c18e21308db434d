"""The pyspark.ml API and training orchestration: what ``PathEM.fit`` and ``pcem train`` share.

``estimator`` holds :class:`PathEM` / :class:`PathEMModel` (an Estimator /
Model pair, persisted with MLWritable / MLReadable, so it drops into a
``Pipeline``) and :func:`train`, which ``pcem train`` calls; ``params`` their
typed Params and the one mapping of the settings onto them;
``tune_settings`` the ``[tune]`` section;
``training`` is the one home of training from documents (vocabulary, label
checks, warm start, cross-validation of the settings left at "auto", the
fit); ``tuning`` cross-validates with Spark ML's own ``CrossValidator`` over
an estimator class it is given, so the recursion ``PathEM.fit`` ->
``training.train`` -> ``tuning.resolve_auto`` -> ``CrossValidator(PathEM)``
is a call, not an import cycle. Imports :mod:`pcem_spark.model` and below.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "HierarchicalF1Evaluator": "pcem_spark.evaluation.evaluator",
    "PathEM": "pcem_spark.ml.estimator",
    "PathEMModel": "pcem_spark.ml.estimator",
    "train": "pcem_spark.ml.estimator",
    "TrainOptions": "pcem_spark.ml.training",
    "train_weak": "pcem_spark.ml.training",
    "TuneSettings": "pcem_spark.ml.tuning",
    "resolve_auto": "pcem_spark.ml.tuning",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "PathEM",
    "PathEMModel",
    "train",
    "train_weak",
    "TrainOptions",
    "TuneSettings",
    "resolve_auto",
    "HierarchicalF1Evaluator",
]
