"""A fitted model and how one method is fitted on packed blocks.

``settings`` holds :class:`ModelSettings` and its declarative constraints;
``schema`` the predictions table's columns; ``path_model`` the fitted
:class:`PathModel` (prediction and persistence); ``labels`` and
``label_checks`` the checks of label paths against the taxonomy; ``fitting``
fits one method on already packed blocks (:func:`fit_blocks`); ``warm``
starts EM from a previous model; ``weak_labels`` turns label descriptions or
similarities into weak labels (the dataless setting). Training from raw
documents, with cross-validation, is one level up in :mod:`pcem_spark.ml`.
Imports :mod:`pcem_spark.io`, :mod:`pcem_spark.engine`,
:mod:`pcem_spark.core` and below.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "fit_blocks": "pcem_spark.model.fitting",
    "score_matrix": "pcem_spark.model.fitting",
    "PathModel": "pcem_spark.model.path_model",
    "PREDICTION_SCHEMA": "pcem_spark.model.schema",
    "prediction_schema": "pcem_spark.model.schema",
    "AUTO": "pcem_spark.model.settings",
    "PAPER_MODEL_SETTINGS": "pcem_spark.model.settings",
    "ModelSettings": "pcem_spark.model.settings",
    "fallback_stop_words": "pcem_spark.model.stop_words",
    "resolve_stop_words": "pcem_spark.model.stop_words",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AUTO",
    "ModelSettings",
    "PAPER_MODEL_SETTINGS",
    "PathModel",
    "fit_blocks",
    "score_matrix",
    "PREDICTION_SCHEMA",
    "prediction_schema",
    "resolve_stop_words",
    "fallback_stop_words",
]
