"""The discriminative baselines of the paper's Table 2 (LR, SVM, HierCost) on Spark MLlib.

They share the featurisation and the predictions schema with the generative
methods so the experiment protocol scores them the same way. Imports
:mod:`pcem_spark.model` (the predictions schema) and below.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "LinearLeafModel": "pcem_spark.baselines.discriminative",
    "LinearSettings": "pcem_spark.baselines.discriminative",
    "LinearWeights": "pcem_spark.baselines.discriminative",
    "fit_linear": "pcem_spark.baselines.discriminative",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "fit_linear",
    "LinearLeafModel",
    "LinearSettings",
    "LinearWeights",
]
