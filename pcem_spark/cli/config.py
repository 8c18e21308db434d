"""Settings from TOML files in ``conf/`` (with ``--set section.key=value`` overrides)."""

from __future__ import annotations

import ast
import copy
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Dict, List, Optional

from pcem_spark.engine.features import FeatureSettings
from pcem_spark.engine.python_tokens import TOKENIZERS
from pcem_spark.engine.session import SparkSettings
from pcem_spark.experiment.settings import ConfigError, ExperimentSettings, SupervisionSettings
from pcem_spark.io.output_policy import OutputSettings
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.model.settings import ModelSettings
from pcem_spark.util.constraints import Interval, Options, check_constraints

__all__ = [
    "ConfigError",
    "ExperimentSettings",
    "SupervisionSettings",
    "PredictSettings",
    "OutputSettings",
    "Settings",
    "load_settings",
]


@dataclass
class PredictSettings:
    """``pcem predict`` defaults (its flags override them)."""

    min_probability: float = 0.0  # stop a path at its deepest node this probable (0 = the full path)
    top_k: int = 0  # add the k most probable paths with their probabilities (0 = no)
    # 0 = the exact argmax over every path, N = a beam search of width N down the tree, "auto" = exact up to
    # core.BEAM_AUTO_PATHS paths and a beam of core.BEAM_AUTO_WIDTH above (docs/BENCHMARKS.md)
    beam: object = "auto"
    # where text is tokenised: "python" in the scoring task (engine.python_tokens), "spark" by Spark ML
    tokenizer: str = "python"
    # > 0: add paths, every path whose calibrated probability is >= this (the predicted path first)
    multi_path: float = 0.0
    # add node_probabilities: the (calibrated) marginal probability of each node of the predicted path
    node_probabilities: bool = False
    # input columns copied into the predictions (Parquet documents), e.g. ["url", "crawl_date"]
    keep_columns: List[str] = field(default_factory=list)
    # write the predictions partitioned by a kept column, or "level1" (the first node of the path); "" = not
    partition_by: str = ""
    # more distinct values of the partition column than this: exit 2 before writing (a folder per value)
    max_partitions: int = 10000

    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "beam": [Interval(int, 0, None, note="(0 = exact, N = beam width)"), "auto"],
        "tokenizer": Options(TOKENIZERS),
        "max_partitions": Interval(int, 1, None),
    }

    def validate(self) -> None:
        from pcem_spark.model.schema import check_multi_path, check_prediction_options

        if isinstance(self.beam, float) and self.beam.is_integer():
            self.beam = int(self.beam)  # a number read for an "auto" default comes as a float
        check_constraints(self, self.CONSTRAINTS, "predict", error=ConfigError)
        if isinstance(self.keep_columns, str):  # --set predict.keep_columns=url,crawl_date
            self.keep_columns = [c.strip() for c in self.keep_columns.split(",") if c.strip()]
        if not isinstance(self.keep_columns, list) or not all(isinstance(c, str) for c in self.keep_columns):
            raise ConfigError(f"predict.keep_columns = {self.keep_columns!r}: expected a list of column names")
        try:
            check_multi_path(self.multi_path, "predict.multi_path")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(self.node_probabilities, bool):
            raise ConfigError(f"predict.node_probabilities = {self.node_probabilities!r}: expected true or false")
        if not isinstance(self.partition_by, str):
            raise ConfigError(f'predict.partition_by = {self.partition_by!r}: expected a column name or ""')
        try:
            check_prediction_options(
                self.min_probability, self.top_k, names=("predict.min_probability", "predict.top_k")
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


@dataclass
class Settings:
    spark: SparkSettings = field(default_factory=SparkSettings)
    features: FeatureSettings = field(default_factory=FeatureSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    experiment: ExperimentSettings = field(default_factory=ExperimentSettings)
    supervision: SupervisionSettings = field(default_factory=SupervisionSettings)
    tune: TuneSettings = field(default_factory=TuneSettings)
    predict: PredictSettings = field(default_factory=PredictSettings)
    output: OutputSettings = field(default_factory=OutputSettings)


_SECTIONS = {
    "spark": SparkSettings,
    "features": FeatureSettings,
    "model": ModelSettings,
    "experiment": ExperimentSettings,
    "supervision": SupervisionSettings,
    "tune": TuneSettings,
    "predict": PredictSettings,
    "output": OutputSettings,
}


def _build(cls, values: Dict[str, Any], where: str):
    known = {f.name: f for f in fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {sorted(known)}")
    obj = cls()
    for key, value in values.items():
        default = getattr(obj, key)
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true/false, got {value!r}")
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if default == "auto":
            # A number or "auto" (model.smoothing, unlabeled_weight, path_weight).
            if isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if isinstance(value, bool) or not isinstance(value, (float, str)):
                raise ConfigError(f'{where}.{key}: expected a number or "auto", got {value!r}')
            setattr(obj, key, value)
            continue
        if default is not None and not isinstance(value, type(default)):
            raise ConfigError(f"{where}.{key}: expected {type(default).__name__}, got {value!r}")
        setattr(obj, key, value)
    return obj


def load_settings(path: Optional[str] = None, overrides: Optional[List[str]] = None) -> Settings:
    """Read a TOML settings file (sections spark, features, model, experiment).

    ``overrides`` are ``section.key=value`` strings; the value is parsed as a
    Python literal when possible (``0.01``, ``[1, 2]``), else taken as a string.
    """
    raw: Dict[str, Dict[str, Any]] = {}
    if path:
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"settings file {path!r} not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    raw = copy.deepcopy(raw)
    for item in overrides or []:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"override {item!r}: expected section.key=value")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        if section == "spark" and name.startswith("conf."):
            raw.setdefault("spark", {}).setdefault("conf", {})[name[5:]] = str(value)
        else:
            raw.setdefault(section, {})[name] = parsed
    where = path or "settings"
    for section in raw:
        if section not in _SECTIONS:
            raise ConfigError(f"{where}: unknown section [{section}]; known: {sorted(_SECTIONS)}")
    settings = Settings(
        **{name: _build(cls, raw.get(name, {}), f"{where} [{name}]") for name, cls in _SECTIONS.items()}
    )
    settings.features.validate()
    settings.model.validate()
    settings.supervision.validate()
    settings.experiment.validate()
    settings.predict.validate()
    settings.output.validate(error=ConfigError)
    try:
        settings.tune.validate()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return settings
