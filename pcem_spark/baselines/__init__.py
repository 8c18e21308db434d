"""The discriminative baselines of the paper's Table 2 (LR, SVM, HierCost) on Spark MLlib.

They share the featurisation and the predictions schema with the generative
methods so the experiment protocol scores them the same way. Imports
:mod:`pcem_spark.model` (the predictions schema) and below.
"""

from pcem_spark.baselines.discriminative import (  # noqa: F401
    LinearLeafModel,
    LinearSettings,
    LinearWeights,
    fit_linear,
)

__all__ = [
    "fit_linear",
    "LinearLeafModel",
    "LinearSettings",
    "LinearWeights",
]
