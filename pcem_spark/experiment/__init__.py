"""The paper's evaluation protocol: seeded splits, label rates, every method, and the report.

``protocol`` runs Table 2 and Figures 2-3 (semi-supervised and dataless
settings) into a CSV; ``report`` turns that CSV into the paper-shaped tables
and figures. Imports :mod:`pcem_spark.baselines`, :mod:`pcem_spark.ml` and below.
"""

from pcem_spark.experiment.protocol import (  # noqa: F401
    assign_roles,
    run_experiment,
)
from pcem_spark.experiment.report import (  # noqa: F401
    write_report,
)
from pcem_spark.experiment.settings import (  # noqa: F401
    ExperimentSettings,
    SupervisionSettings,
)

__all__ = [
    "ExperimentSettings",
    "SupervisionSettings",
    "run_experiment",
    "assign_roles",
    "write_report",
]
