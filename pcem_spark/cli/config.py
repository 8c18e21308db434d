"""Settings: the package's shipped defaults, then ``PCEM_CONFIG``, then ``--config``, then ``--set`` overrides.

The defaults live in the package (``pcem_spark/conf/defaults.toml``), so a
command gives the same settings from any folder: an installed package on an
Airflow worker runs with exactly what a run inside the checkout gets. Each
layer needs only the settings it changes; sections merge key by key (and
``[spark.conf]`` entry by entry). :attr:`Settings.sources` names the layers
used, for the first log line of every command.
"""

from __future__ import annotations

import ast
import copy
import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, ClassVar, Dict, List, Optional

from pcem_spark.engine.feature_settings import TOKENIZERS, FeatureSettings
from pcem_spark.engine.session import SparkSettings
from pcem_spark.errors import InputError
from pcem_spark.experiment.settings import ConfigError, ExperimentSettings, SupervisionSettings
from pcem_spark.io.output_policy import OutputSettings
from pcem_spark.ml.checkpointing import CheckpointSettings
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.model.settings import ModelSettings
from pcem_spark.util.constraints import Interval, Options, check_constraints
from pcem_spark.util.redaction import redact

__all__ = [
    "check_min_in_taxonomy",
    "ConfigError",
    "ExperimentSettings",
    "SupervisionSettings",
    "PredictSettings",
    "OutputSettings",
    "Settings",
    "CONFIG_ENV",
    "DEFAULTS_RESOURCE",
    "load_settings",
    "shipped_defaults",
    "describe_sources",
    "settings_table",
]

CONFIG_ENV = "PCEM_CONFIG"  # a settings file layered over the defaults for every command (below --config)
DEFAULTS_RESOURCE = "conf/defaults.toml"  # inside the pcem_spark package


def check_min_in_taxonomy(value, name: str, error=InputError):
    """Refuse a minimum in_taxonomy that is not a finite number, "suggested" or "none" (``error`` naming ``name``)."""
    if isinstance(value, str) and value.strip().lower() in ("none", "suggested", ""):
        return
    try:
        ok = not isinstance(value, bool) and math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise error(f"{name} = {value!r}: expected a number (nats per token), 'suggested' or 'none'")


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
    # a document whose in_taxonomy score is below this is out of the taxonomy (empty path, null leaf): a number
    # (nats per token), "suggested" (the model's threshold) or "none" (every document gets a path)
    min_in_taxonomy: object = "none"

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
        check_min_in_taxonomy(self.min_in_taxonomy, "predict.min_in_taxonomy", error=ConfigError)
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
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    # the layers these settings came from, lowest first ("package defaults", "PCEM_CONFIG=...", ...)
    sources: List[str] = field(default_factory=list)


_SECTIONS = {
    "spark": SparkSettings,
    "features": FeatureSettings,
    "model": ModelSettings,
    "experiment": ExperimentSettings,
    "supervision": SupervisionSettings,
    "tune": TuneSettings,
    "predict": PredictSettings,
    "output": OutputSettings,
    "checkpoint": CheckpointSettings,
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


def shipped_defaults() -> Dict[str, Dict[str, Any]]:
    """The package's default settings (``pcem_spark/conf/defaults.toml``) as a TOML table."""
    text = resources.files("pcem_spark").joinpath(DEFAULTS_RESOURCE).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _read_toml(path: str, what: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path!r} not found (current folder: {os.getcwd()})") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path!r} is a folder; expected a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None


def _merge(base: Dict[str, Any], layer: Dict[str, Any], where: str) -> None:
    """Layer ``layer`` onto ``base`` in place: a section's keys replace the base's, ``[spark.conf]`` by entry."""
    for section, values in layer.items():
        if section not in _SECTIONS:
            raise ConfigError(f"{where}: unknown section [{section}]; known: {sorted(_SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: [{section}] must be a table of settings, got {values!r}")
        into = base.setdefault(section, {})
        for key, value in values.items():
            if section == "spark" and key == "conf" and isinstance(value, dict):
                into.setdefault("conf", {}).update({k: str(v) for k, v in value.items()})
            else:
                into[key] = value


def load_settings(
    path: Optional[str] = None, overrides: Optional[List[str]] = None, *, environment: bool = True
) -> Settings:
    """The effective settings: the shipped defaults, then ``$PCEM_CONFIG`` (when ``environment``), then the
    TOML file ``path``, then ``overrides``.

    ``overrides`` are ``section.key=value`` strings; the value is parsed as a
    Python literal when possible (``0.01``, ``[1, 2]``), else taken as a string.
    """
    raw: Dict[str, Dict[str, Any]] = {}
    _merge(raw, shipped_defaults(), "pcem_spark/" + DEFAULTS_RESOURCE)
    sources = ["package defaults"]
    env_path = os.environ.get(CONFIG_ENV, "").strip() if environment else ""
    if env_path:
        _merge(raw, _read_toml(env_path, f"{CONFIG_ENV} names settings file"), env_path)
        sources.append(f"{CONFIG_ENV}={env_path}")
    if path:
        _merge(raw, _read_toml(path, "settings file"), path)
        sources.append(f"--config {path}")
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
            if section not in _SECTIONS:
                raise ConfigError(f"override {item!r}: unknown section [{section}]; known: {sorted(_SECTIONS)}")
            raw.setdefault(section, {})[name] = parsed
    if overrides:
        sources.append(f"{len(overrides)} --set")
    where = path or "settings"
    settings = Settings(
        **{name: _build(cls, raw.get(name, {}), f"{where} [{name}]") for name, cls in _SECTIONS.items()},
        sources=sources,
    )
    settings.features.validate()
    settings.model.validate()
    settings.supervision.validate()
    settings.experiment.validate()
    settings.predict.validate()
    settings.output.validate(error=ConfigError)
    settings.checkpoint.validate(error=ConfigError)
    try:
        settings.tune.validate()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return settings


def describe_sources(settings: Settings) -> str:
    """One line: where the settings came from, and the Spark settings they give (for every command's first line);
    secrets redacted (:func:`pcem_spark.util.redaction.redact`)."""
    spark = settings.spark
    conf = ", ".join(f"{k}={v}" for k, v in sorted(redact(spark.conf).items()))
    master = spark.master or "(from the environment)"
    sources = " + ".join(settings.sources or ["built-in"])
    return redact(f"settings: {sources}; spark: master {master}, app {spark.app_name}" + (f", {conf}" if conf else ""))


def settings_table(settings: Settings) -> Dict[str, Any]:
    """Every section's effective values (what ``pcem settings`` prints), with ``sources``; secrets redacted."""
    from dataclasses import asdict

    return redact({name: asdict(getattr(settings, name)) for name in _SECTIONS} | {"sources": list(settings.sources)})
