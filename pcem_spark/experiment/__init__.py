"""The paper's evaluation protocol: seeded splits, label rates, every method, and the report.

``protocol`` runs Table 2 and Figures 2-3 (semi-supervised and dataless
settings) into a CSV; ``report`` turns that CSV into the paper-shaped tables
and figures. Imports :mod:`pcem_spark.baselines`, :mod:`pcem_spark.ml` and below.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "assign_roles": "pcem_spark.experiment.protocol",
    "run_experiment": "pcem_spark.experiment.protocol",
    "write_report": "pcem_spark.experiment.report",
    "ExperimentSettings": "pcem_spark.experiment.settings",
    "SupervisionSettings": "pcem_spark.experiment.settings",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "ExperimentSettings",
    "SupervisionSettings",
    "run_experiment",
    "assign_roles",
    "write_report",
]
