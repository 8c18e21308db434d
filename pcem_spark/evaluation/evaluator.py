"""A pyspark.ml ``Evaluator`` for the hierarchical micro/macro F1 of ``pcem evaluate``.

So ``CrossValidator`` / ``TrainValidationSplit`` can tune by the paper's metric::

    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder
    ev = HierarchicalF1Evaluator(metricName="macroF1", taxonomy=taxonomy.to_json())
    cv = CrossValidator(estimator=PathEM(...), estimatorParamMaps=grid, evaluator=ev)

The number is the one :func:`pcem_spark.evaluation.metrics.evaluate_predictions` reports
(``micro_f1`` for ``microF1``, ``macro_f1`` for ``macroF1``, their mean for
``meanF1``); both count TP/FP/FN per node with
:func:`pcem_spark.evaluation.metrics.node_confusion`, so only per-node counts reach the
driver.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from pyspark import keyword_only
from pyspark.errors import AnalysisException
from pyspark.ml.evaluation import Evaluator
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasLabelCol, HasPredictionCol
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.errors import InputError
from pcem_spark.evaluation.metrics import confusion_arrays, evaluate_predictions, f1_scores, node_confusion

__all__ = ["HierarchicalF1Evaluator"]

# metricName -> how it is computed from f1_scores(); meanF1 = (micro-F1 + macro-F1) / 2.
METRICS = {
    "microF1": lambda m: m["micro_f1"],
    "macroF1": lambda m: m["macro_f1"],
    "meanF1": lambda m: (m["micro_f1"] + m["macro_f1"]) / 2,
}


def _check_metric_name(value: Any) -> str:
    value = TypeConverters.toString(value)
    if value not in METRICS:
        raise InputError(f"HierarchicalF1Evaluator metricName must be one of {sorted(METRICS)}, got {value!r}")
    return value


def _to_taxonomy_json(value: Any) -> str:
    """A :class:`Taxonomy` or its JSON (checked); ``""`` means no taxonomy."""
    if isinstance(value, Taxonomy):
        return value.to_json()
    value = TypeConverters.toString(value)
    if value:
        _parse_taxonomy(value)
    return value


def _parse_taxonomy(text: str) -> Taxonomy:
    try:
        return Taxonomy.from_json(text)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(
            "HierarchicalF1Evaluator taxonomy Param is not the JSON of Taxonomy.to_json() "
            f"({type(exc).__name__}: {exc})"
        ) from None
    except TaxonomyError as exc:
        raise InputError(f"HierarchicalF1Evaluator taxonomy Param is not a valid taxonomy: {exc}") from None


class HierarchicalF1Evaluator(
    Evaluator, HasPredictionCol, HasLabelCol, DefaultParamsReadable["HierarchicalF1Evaluator"], DefaultParamsWritable
):
    """Hierarchical micro- or macro-F1 of predicted paths against true label paths.

    Expects two ``array<string>`` columns: ``predictionCol`` (default ``path``,
    the predicted path from level 1 to the leaf, as ``PathEMModel`` outputs)
    and ``labelCol`` (default ``labels``, the true path). Rows whose label is
    null are not scored. With the ``taxonomy`` Param set, only the taxonomy's
    real non-root nodes count, and only rows whose label is a path of the
    taxonomy (exactly as ``pcem evaluate``, by the same code: a minority of
    other rows is a warning, a majority an :class:`InputError`, "made with
    another taxonomy / model?"); with it empty, every node seen in either
    column counts. Larger is better.

    Parameters
    ----------
    predictionCol : str
        The predicted path, ``array<string>`` (default ``"path"``), or several
        per row, ``array<array<string>>`` (``"paths"``, scored by the union of
        their nodes).
    labelCol : str
        The true path, ``array<string>``, or several per row,
        ``array<array<string>>`` (scored by the union of their nodes);
        null = not scored (default ``"labels"``).
    metricName : {"microF1", "macroF1", "meanF1"}
        ``meanF1`` is the mean of the other two (default ``"microF1"``).
    taxonomy : str or Taxonomy
        ``Taxonomy.to_json()`` (a :class:`Taxonomy` is stored as its JSON);
        ``""`` counts every node seen (default).

    Notes
    -----
    ``evaluate(dataset)`` returns a float in [0, 1]; only the per-node
    TP / FP / FN counts, (K, 3) for K nodes, reach the driver.

    Examples
    --------
    >>> predictions = spark.createDataFrame(
    ...     [(["sci", "space"], ["sci", "space"]), (["sci", "med"], ["sci", "space"]), (["rec", "autos"], None)],
    ...     "path array<string>, labels array<string>",
    ... )
    >>> HierarchicalF1Evaluator(metricName="microF1").evaluate(predictions)
    0.75
    >>> round(HierarchicalF1Evaluator(metricName="macroF1").evaluate(predictions), 3)
    0.556
    >>> HierarchicalF1Evaluator().isLargerBetter()
    True
    """

    metricName: "Param[str]" = Param(
        Params._dummy(),
        "metricName",
        "metric name in evaluation (microF1|macroF1|meanF1 = their mean)",
        typeConverter=_check_metric_name,
    )
    taxonomy: "Param[str]" = Param(
        Params._dummy(),
        "taxonomy",
        "taxonomy as the JSON of Taxonomy.to_json(); only its real non-root nodes are counted. "
        "Empty = every node seen in the prediction or label column counts",
        typeConverter=_to_taxonomy_json,
    )

    _input_kwargs: Dict[str, Any]

    @keyword_only
    def __init__(
        self, *, predictionCol: str = "path", labelCol: str = "labels", metricName: str = "microF1", taxonomy: str = ""
    ):
        """
        __init__(self, \\*, predictionCol="path", labelCol="labels", metricName="microF1", taxonomy="")
        """
        super().__init__()
        self._setDefault(predictionCol="path", labelCol="labels", metricName="microF1", taxonomy="")
        kwargs = self._input_kwargs
        self._set(**kwargs)

    @keyword_only
    def setParams(
        self, *, predictionCol: str = "path", labelCol: str = "labels", metricName: str = "microF1", taxonomy: str = ""
    ) -> "HierarchicalF1Evaluator":
        """
        setParams(self, \\*, predictionCol="path", labelCol="labels", metricName="microF1", taxonomy="")
        Sets params for the hierarchical F1 evaluator.
        """
        kwargs = self._input_kwargs
        return self._set(**kwargs)

    def setPredictionCol(self, value: str) -> "HierarchicalF1Evaluator":
        return self._set(predictionCol=value)

    def setLabelCol(self, value: str) -> "HierarchicalF1Evaluator":
        return self._set(labelCol=value)

    def setMetricName(self, value: str) -> "HierarchicalF1Evaluator":
        return self._set(metricName=value)

    def getMetricName(self) -> str:
        return self.getOrDefault(self.metricName)

    def setTaxonomy(self, value: Any) -> "HierarchicalF1Evaluator":
        """Sets :py:attr:`taxonomy` (a :class:`Taxonomy` or its JSON; ``""`` for none)."""
        return self._set(taxonomy=value)

    def getTaxonomy(self) -> str:
        return self.getOrDefault(self.taxonomy)

    @classmethod
    def read(cls):
        """The reader of a saved evaluator: it checks that the folder names this class before building anything
        (:class:`pcem_spark.io.params_reader.CheckedParamsReader`)."""
        from pcem_spark.io.params_reader import CheckedParamsReader

        return CheckedParamsReader(cls)

    def isLargerBetter(self) -> bool:
        return True

    def _evaluate(self, dataset: DataFrame) -> float:
        metric = _check_metric_name(self.getMetricName())
        path_col, labels_col = self.getPredictionCol(), self.getLabelCol()
        multi = _check_path_column(dataset, "predictionCol", path_col, allow_paths=True)
        several_true = _check_path_column(dataset, "labelCol", labels_col, allow_paths=True)
        if multi:
            # Several paths per row (pcem predict --multi-path): scored by the union of their nodes; the
            # first path (the predicted one) is the row's path for the per-level checks.
            dataset = dataset.select(
                F.element_at(F.col(path_col), 1).alias("path"), F.col(path_col).alias("paths"), F.col(labels_col)
            )
            path_col = "path"
        nothing = InputError(
            f"HierarchicalF1Evaluator: nothing to score, no row has a non-null label in column {labels_col!r}"
        )
        tax_json = self.getTaxonomy()
        if tax_json:
            # The very code (and numbers) of pcem evaluate: rows whose labels are not a path of the taxonomy
            # are not scored (a warning), and predictions of another taxonomy are refused (InputError).
            m = evaluate_predictions(
                dataset, _parse_taxonomy(tax_json), path_col, labels_col, where="HierarchicalF1Evaluator"
            )
            if m["n_documents"] + m["n_unknown_labels"] == 0:
                raise nothing
            return float(METRICS[metric](m))
        if multi:
            dataset = dataset.withColumn("path", F.array_distinct(F.flatten("paths")))
        if several_true:  # several true paths: the union of their nodes
            dataset = dataset.withColumn(labels_col, F.array_distinct(F.flatten(labels_col)))
        n_pred, n_true, n_tp = node_confusion(dataset, path_col, labels_col)
        if not n_true and dataset.where(F.col(labels_col).isNotNull()).isEmpty():
            raise nothing
        nodes: List[str] = sorted(c for c in set(n_pred) | set(n_true) if c is not None)
        tp, fp, fn = confusion_arrays(nodes, n_pred, n_true, n_tp)
        return float(METRICS[metric](f1_scores(tp, fp, fn)))


def _check_path_column(dataset: DataFrame, role: str, col: str, allow_paths: bool = False) -> bool:
    """Refuse a column that is not a path (array<string>); with ``allow_paths`` also accept several paths
    (array<array<string>>) and return True for them."""
    try:
        dtype = dataset.select(F.col(col)).schema.fields[0].dataType
    except AnalysisException:
        raise InputError(f"HierarchicalF1Evaluator {role}: no column {col!r}; columns are {dataset.columns}") from None
    if (
        allow_paths
        and isinstance(dtype, T.ArrayType)
        and isinstance(dtype.elementType, T.ArrayType)
        and isinstance(dtype.elementType.elementType, T.StringType)
    ):
        return True
    if not (isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.StringType)):
        raise InputError(
            f"HierarchicalF1Evaluator {role}: column {col!r} must be array<string> (a path from "
            f"level 1 to the leaf), got {dtype.simpleString()}"
        )
    return False


# Saved metadata (a CrossValidatorModel's evaluator) names the public path, pcem_spark.evaluation.
HierarchicalF1Evaluator.__module__ = "pcem_spark.evaluation"
