"""The one ModelSettings / FeatureSettings <-> PathEM Param mapping covers every setting, both ways."""

import dataclasses

import pytest

from pcem_spark.engine.features import FeatureSettings
from pcem_spark.ml import PathEM
from pcem_spark.ml.params import FEATURE_PARAMS, MODEL_PARAMS, TUNE_PARAMS
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.model.settings import ModelSettings


@pytest.mark.parametrize("cls, table", [(ModelSettings, MODEL_PARAMS), (FeatureSettings, FEATURE_PARAMS)])
def test_every_setting_has_a_param(cls, table):
    """A setting added to the dataclass without a Param would silently keep its default inside PathEM."""
    assert set(table) == {f.name for f in dataclasses.fields(cls)}
    assert all(PathEM().hasParam(name) for name in table.values())


def test_tune_params_name_real_settings_and_params():
    assert set(TUNE_PARAMS) <= {f.name for f in dataclasses.fields(TuneSettings)}
    assert all(PathEM().hasParam(name) for name in TUNE_PARAMS.values())


def test_settings_round_trip_through_params():
    ms = ModelSettings(method="tdem", smoothing=0.05, unlabeled_weight=0.3, path_weight=0.0, max_iter=7, seed=11)
    fs = FeatureSettings(min_df=1.0, max_df=0.9, vocab_size=123, stop_words="none")
    est = PathEM(
        **{MODEL_PARAMS[k]: getattr(ms, k) for k in MODEL_PARAMS},
        **{FEATURE_PARAMS[k]: getattr(fs, k) for k in FEATURE_PARAMS},
    )
    assert est.model_settings() == ms
    assert est.feature_settings() == fs
