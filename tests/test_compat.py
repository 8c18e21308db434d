"""Models saved by the release before the package layout load and predict as they did.

tests/data/legacy_model holds a PathEMModel, a PathModel and a PipelineModel saved by that
release (flat ``pcem_spark/``; their metadata names ``pcem_spark.ml.PathEMModel`` and
``pcem_spark.model.PathModel``) and the predictions it made (``expected.json``; how they were
made: ``make_legacy_model.py`` there).
"""

import json
import os

import pytest

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "legacy_model")


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(LEGACY, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def legacy_docs(spark, expected):
    return spark.createDataFrame(
        [tuple(d) for d in expected["documents"]], "id string, text string, labels array<string>"
    )


def _check_same_predictions(pred_df, expected):
    got = {r["id"]: r for r in pred_df.select("id", "path", "leaf", "probability").collect()}
    assert len(got) == len(expected["predictions"])
    for want in expected["predictions"]:
        row = got[want["id"]]
        assert list(row["path"]) == want["path"] and row["leaf"] == want["leaf"], want["id"]
        assert row["probability"] == pytest.approx(want["probability"], rel=1e-9, abs=1e-12), want["id"]


def test_saved_metadata_names_the_old_import_paths():
    """The fixture is what it claims to be: metadata written with the flat package's class names."""
    names = set()
    for root, _, files in os.walk(LEGACY):
        for name in files:
            if name.startswith("part-") and root.endswith("metadata"):
                names.add(json.loads(open(os.path.join(root, name), encoding="utf-8").readline())["class"])
    assert {"pcem_spark.ml.PathEMModel", "pcem_spark.model.PathModel"} <= names


def test_pathem_model_of_the_previous_release_predicts_identically(spark, legacy_docs, expected):
    from pcem_spark.ml import PathEMModel

    model = PathEMModel.load(os.path.join(LEGACY, "pathem_model"))
    _check_same_predictions(model.transform(legacy_docs), expected)


def test_path_model_of_the_previous_release_predicts_identically(spark, legacy_docs, expected):
    from pcem_spark.model import PathModel

    model = PathModel.load(os.path.join(LEGACY, "path_model"))
    _check_same_predictions(model.transform(legacy_docs), expected)


def test_pipeline_of_the_previous_release_loads_by_its_recorded_class_names(spark, legacy_docs, expected):
    """pyspark imports each stage's class from the name in its metadata: pcem_spark.ml.PathEMModel."""
    from pyspark.ml import PipelineModel

    model = PipelineModel.load(os.path.join(LEGACY, "pipeline_model"))
    _check_same_predictions(model.transform(legacy_docs), expected)


def test_new_saves_keep_the_public_class_names(spark, legacy_docs, tmp_path):
    """A model saved today names the same public paths, so older and newer releases read each other's."""
    from pyspark.ml.util import DefaultParamsReader

    from pcem_spark.evaluation import HierarchicalF1Evaluator
    from pcem_spark.ml import PathEM, PathEMModel

    model = PathEMModel.load(os.path.join(LEGACY, "pathem_model"))
    model.write().save(str(tmp_path / "m"))
    meta = json.loads(open(next((tmp_path / "m" / "metadata").glob("part-*")), encoding="utf-8").readline())
    assert meta["class"] == "pcem_spark.ml.PathEMModel"
    est = PathEM(maxIter=2)
    est.write().save(str(tmp_path / "est"))
    assert (
        DefaultParamsReader.loadMetadata(str(tmp_path / "est"), spark.sparkContext)["class"] == "pcem_spark.ml.PathEM"
    )
    ev = HierarchicalF1Evaluator()
    ev.write().save(str(tmp_path / "ev"))
    assert (
        DefaultParamsReader.loadMetadata(str(tmp_path / "ev"), spark.sparkContext)["class"]
        == "pcem_spark.evaluation.HierarchicalF1Evaluator"
    )
