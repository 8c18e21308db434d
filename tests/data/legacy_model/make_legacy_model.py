"""How the models in this directory were made: by the release before the package layout
(commit d8b47f1, flat ``pcem_spark/``), so tests/test_compat.py can check that a model saved
by that release still loads and predicts identically.

    PYTHONPATH=<checkout of d8b47f1> python tests/data/legacy_model/make_legacy_model.py

writes ``pathem_model/`` (PathEMModel.save), ``path_model/`` (PathModel.save),
``pipeline_model/`` (a PipelineModel holding the PathEMModel) and ``expected.json``
(the documents and the predictions of that release).
"""
import json
import os
import shutil

from pyspark.ml import Pipeline
from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))
TAXONOMY = {"root": "root", "children": {"root": ["sci", "rec"], "sci": ["space", "med"],
                                          "rec": ["autos", "hockey"]}}
WORDS = {"space": "orbit rocket launch nasa moon shuttle", "med": "doctor patient disease clinic drug pain",
         "autos": "engine car driver wheel brake dealer", "hockey": "puck goal team season ice player"}
PARENT = {"space": "sci", "med": "sci", "autos": "rec", "hockey": "rec"}


def documents():
    rows = []
    for leaf, words in WORDS.items():
        w = words.split()
        for i in range(12):
            text = " ".join(w[(i + j) % len(w)] for j in range(5)) + " common words here"
            labels = [PARENT[leaf], leaf] if i < 3 else None
            rows.append((f"{leaf}-{i}", text, labels))
    return rows


def main():
    from pcem_spark.ml import PathEM
    from pcem_spark.model import PathModel

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.createDataFrame(documents(), "id string, text string, labels array<string>")
    est = PathEM(taxonomy=json.dumps(TAXONOMY), method="pcem", smoothing=0.1, unlabeledWeight=0.5,
                 pathWeight=1.0, minDF=1.0, maxDF=1.0, maxIter=5, docLength=0.0)
    for name in ("pathem_model", "path_model", "pipeline_model"):
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)
    model = est.fit(df)
    model.write().save(os.path.join(HERE, "pathem_model"))
    model.path_model.save(os.path.join(HERE, "path_model"))
    Pipeline(stages=[est]).fit(df).write().save(os.path.join(HERE, "pipeline_model"))
    pred = model.transform(df).select("id", "path", "leaf", "probability").orderBy("id").collect()
    expected = {"taxonomy": TAXONOMY, "documents": [list(r) for r in documents()],
                "predictions": [{"id": r["id"], "path": list(r["path"]), "leaf": r["leaf"],
                                 "probability": r["probability"]} for r in pred]}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
