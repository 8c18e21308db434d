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

from pcem_spark.evaluation.evaluator import (  # noqa: F401
    HierarchicalF1Evaluator,
)
from pcem_spark.ml.estimator import (  # noqa: F401
    PathEM,
    PathEMModel,
    train,
)
from pcem_spark.ml.training import (  # noqa: F401
    TrainOptions,
    train_weak,
)
from pcem_spark.ml.tuning import (  # noqa: F401
    TuneSettings,
    resolve_auto,
)

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
