"""Saving and loading :class:`~pcem_spark.ml.PathEM` and :class:`~pcem_spark.ml.PathEMModel` (MLWritable /
MLReadable).

pyspark's ``DefaultParamsReader`` imports the module and calls the class that a saved folder's metadata
names, before it checks anything: a folder on shared storage would choose the code that runs. PathEM's
reader checks the name first (:class:`pcem_spark.io.params_reader.CheckedParamsReader`); a model's folder
is read by :meth:`pcem_spark.model.PathModel.load` (JSON and Parquet, every file verified).
"""

from __future__ import annotations

from pyspark.ml.util import MLReader, MLWriter

from pcem_spark.io.params_reader import CheckedParamsReader, saved_class_name
from pcem_spark.model.path_model import PathModel

__all__ = ["PathEMReader", "PathEMModelReader", "PathEMModelWriter"]

# PathEM's reader: the Params of a saved estimator, after checking that its folder names PathEM.
PathEMReader = CheckedParamsReader


class PathEMModelWriter(MLWriter):
    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        # MLWriter.save deletes an existing path before saveImpl; PathModel.save replaces it atomically
        # instead (pcem_spark.io.outputs), so the old model survives a killed save.
        self.saveImpl(path)

    def saveImpl(self, path: str) -> None:
        name = saved_class_name(type(self.instance))
        self.instance.path_model.save(path, overwrite=self.shouldOverwrite, class_name=name)


class PathEMModelReader(MLReader):
    """Loads a :class:`~pcem_spark.ml.PathEMModel` from a model folder (:meth:`PathModel.load`)."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        pm = PathModel.load(path)
        model = self.cls(pm)
        model._set_from_model(pm)
        return model
