"""Loading saved pyspark.ml Params (an estimator's or an evaluator's folder) without running code it names.

pyspark's ``DefaultParamsReader`` imports the module and calls the class that the folder's metadata names
before it checks anything, so a folder on shared storage would choose the code that runs.
:class:`CheckedParamsReader` reads the metadata as JSON, checks that it names the class being loaded, and
only then builds that class (``PathEM.read()``, ``HierarchicalF1Evaluator.read()``).
"""

from __future__ import annotations

from pyspark.ml.util import DefaultParamsReader

from pcem_spark.errors import InputError

__all__ = ["CheckedParamsReader", "saved_class_name"]


def saved_class_name(cls) -> str:
    """The name pyspark.ml's writers record for ``cls``: ``module.Class``."""
    return f"{cls.__module__}.{cls.__name__}"


class CheckedParamsReader(DefaultParamsReader):
    """``DefaultParamsReader`` that refuses (``InputError``) a folder naming another class than its own."""

    def load(self, path: str):
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)  # JSON only: nothing imported
        expected = saved_class_name(self.cls)
        if metadata.get("class") != expected:
            raise InputError(
                f"{path}: its metadata names the class {metadata.get('class')!r}, not {expected!r}; refusing to "
                "load it (a saved folder never chooses the code that runs)"
            )
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        return instance
