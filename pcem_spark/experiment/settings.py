"""The ``[experiment]`` and ``[supervision]`` settings: what an experiment runs and how weak labels are made.

Plain dataclasses (one per section of a settings file, read by
:mod:`pcem_spark.cli.config`), checked by their ``validate``; a bad value
raises :class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List

from pcem_spark.core.methods import check_methods
from pcem_spark.errors import InputError
from pcem_spark.util.constraints import Interval, ListOf, Options, check_constraints

__all__ = ["ConfigError", "ExperimentSettings", "SupervisionSettings"]


class ConfigError(InputError):
    """A settings file or override is not valid."""


@dataclass
class ExperimentSettings:
    methods: List[str] = field(default_factory=lambda: ["pcnb", "pcem", "flat-nb", "flat-em"])
    rates: List[float] = field(default_factory=lambda: [0.01])
    seeds: List[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    test_fraction: float = 0.2
    settings: List[str] = field(default_factory=lambda: ["labeled"])  # labeled and/or dataless
    discriminative_c: float = 1.0  # LibLinear-style C of lr / svm / hiercost (regParam = 1 / (C n))
    report_rate: float = 0.01  # label rate of the Table-2 report
    paper_reference: str = ""  # "20ng": print the paper's Table-2 numbers beside ours

    # What each setting accepts (pcem_spark.util.constraints); methods: core.methods.check_methods.
    # Empty methods / rates / seeds pass here: pcem experiment says which flag or key planned no run.
    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "settings": ListOf(Options(("labeled", "dataless")), non_empty=True),
        "rates": ListOf(Interval(float, 0, 1, closed="right")),
        "discriminative_c": Interval(float, 0, None, closed="neither"),
        "paper_reference": Options(("", "20ng")),
    }

    def validate(self) -> None:
        check_methods(self.methods, "experiment.methods", error=ConfigError)
        check_constraints(self, self.CONSTRAINTS, "experiment", error=ConfigError)


@dataclass
class SupervisionSettings:
    kind: str = "labels"  # labels | descriptions | similarities
    descriptions: str = ""  # JSON node -> description (kind = descriptions)
    weak_mode: str = "argmax"  # argmax (the paper's rule) | soft
    min_similarity: float = 0.0  # no weak label unless every depth's best similarity is above this

    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "kind": Options(("labels", "descriptions", "similarities")),
        "weak_mode": Options(("argmax", "soft", "path")),
    }

    def validate(self) -> None:
        check_constraints(self, self.CONSTRAINTS, "supervision", error=ConfigError)
