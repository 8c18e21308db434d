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

from pcem_spark.model.fitting import (  # noqa: F401
    fit_blocks,
    score_matrix,
)
from pcem_spark.model.path_model import (  # noqa: F401
    PathModel,
)
from pcem_spark.model.schema import (  # noqa: F401
    PREDICTION_SCHEMA,
    prediction_schema,
)
from pcem_spark.model.settings import (  # noqa: F401
    AUTO,
    PAPER_MODEL_SETTINGS,
    ModelSettings,
)
from pcem_spark.model.stop_words import (  # noqa: F401
    fallback_stop_words,
    resolve_stop_words,
)

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
