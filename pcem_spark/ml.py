"""pyspark.ml Estimator / Model pair, so PCEM drops into a ``Pipeline``.

>>> est = PathEM(method="pcem", maxIter=30, taxonomy=Taxonomy(...).to_json())
>>> model = est.fit(docs)              # docs: id, text, labels (null = unlabelled)
>>> model.transform(new_docs)          # + path, leaf, probability columns
>>> model.write().overwrite().save(p); PathEMModel.load(p)

The estimator's Params map one to one onto ``[features]`` / ``[model]`` of
``conf/pcem.toml``; the heavy lifting is :func:`pcem_spark.model.train`.
"""

from __future__ import annotations

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable, MLReadable, MLReader, MLWritable, MLWriter

from .features import DEFAULT_TOKEN_PATTERN, FeatureSettings
from .model import ModelSettings, PathModel, infer_taxonomy, train
from .taxonomy import Taxonomy


class _PathEMParams(Params):
    idCol = Param(Params._dummy(), "idCol", "document id column", TypeConverters.toString)
    textCol = Param(Params._dummy(), "textCol", "document text column", TypeConverters.toString)
    labelsCol = Param(Params._dummy(), "labelsCol", "label path column (array<string>, null = unlabelled)",
                      TypeConverters.toString)
    taxonomy = Param(Params._dummy(), "taxonomy",
                     "taxonomy as JSON {root, children}; empty = inferred from the label paths",
                     TypeConverters.toString)
    method = Param(Params._dummy(), "method", "pcnb | pcem | flat-nb | flat-em | nbmc | emmc | tdnb | tdem | wdnb | wdem", TypeConverters.toString)
    smoothing = Param(Params._dummy(), "smoothing", "Laplace pseudo-count (> 0)", TypeConverters.toFloat)
    maxIter = Param(Params._dummy(), "maxIter", "maximum EM iterations (>= 0)", TypeConverters.toInt)
    tol = Param(Params._dummy(), "tol", "relative log-likelihood change that stops EM", TypeConverters.toFloat)
    blockSize = Param(Params._dummy(), "blockSize", "documents per CSR block", TypeConverters.toInt)
    posteriorFloor = Param(Params._dummy(), "posteriorFloor", "posteriors below this count as 0 (0 = exact)",
                           TypeConverters.toFloat)
    tokenPattern = Param(Params._dummy(), "tokenPattern", "Java regex of a token", TypeConverters.toString)
    minTokenLength = Param(Params._dummy(), "minTokenLength", "shortest token kept", TypeConverters.toInt)
    stopWords = Param(Params._dummy(), "stopWords", "stop-word language or 'none'", TypeConverters.toString)
    minDF = Param(Params._dummy(), "minDF", "min document frequency (count >= 1 or fraction)",
                  TypeConverters.toFloat)
    maxDF = Param(Params._dummy(), "maxDF", "max document frequency (fraction <= 1 or count)",
                  TypeConverters.toFloat)
    vocabSize = Param(Params._dummy(), "vocabSize", "most frequent terms kept (0 = all)", TypeConverters.toInt)
    vocabularyDocs = Param(Params._dummy(), "vocabularyDocs", "'all' or 'labeled'", TypeConverters.toString)
    components = Param(Params._dummy(), "components", "mixture components per leaf (nbmc / emmc)",
                       TypeConverters.toInt)
    supervision = Param(Params._dummy(), "supervision",
                        "labels (labelsCol) | descriptions (weak labels from the descriptions Param) | "
                        "similarities (weak labels from a map<string,double> column 'similarities')",
                        TypeConverters.toString)
    descriptions = Param(Params._dummy(), "descriptions", "JSON object node -> description (supervision = "
                         "descriptions)", TypeConverters.toString)
    weakMode = Param(Params._dummy(), "weakMode", "argmax | soft | path (weak supervision)",
                     TypeConverters.toString)
    minSimilarity = Param(Params._dummy(), "minSimilarity", "no weak label unless each depth's best "
                          "similarity is above this", TypeConverters.toFloat)

    def __init__(self, *args):
        super().__init__(*args)
        fs, ms = FeatureSettings(), ModelSettings()
        self._setDefault(idCol="id", textCol="text", labelsCol="labels", taxonomy="", method=ms.method,
                         smoothing=ms.smoothing, maxIter=ms.max_iter, tol=ms.tol, blockSize=ms.block_size,
                         posteriorFloor=ms.posterior_floor, tokenPattern=DEFAULT_TOKEN_PATTERN, minTokenLength=fs.min_token_length,
                         stopWords=fs.stop_words, minDF=fs.min_df, maxDF=fs.max_df, vocabSize=fs.vocab_size,
                         vocabularyDocs=fs.vocabulary_docs, components=ms.components, supervision="labels",
                         descriptions="", weakMode="argmax", minSimilarity=0.0)

    def feature_settings(self) -> FeatureSettings:
        g = self.getOrDefault
        return FeatureSettings(token_pattern=g(self.tokenPattern), min_token_length=g(self.minTokenLength),
                               stop_words=g(self.stopWords), min_df=g(self.minDF), max_df=g(self.maxDF),
                               vocab_size=g(self.vocabSize), vocabulary_docs=g(self.vocabularyDocs))

    def model_settings(self) -> ModelSettings:
        g = self.getOrDefault
        return ModelSettings(method=g(self.method), smoothing=g(self.smoothing), max_iter=g(self.maxIter),
                             tol=g(self.tol), block_size=g(self.blockSize),
                             posterior_floor=g(self.posteriorFloor), components=g(self.components))


class PathEM(Estimator, _PathEMParams, DefaultParamsReadable, DefaultParamsWritable):
    """Estimator for PCNB / PCEM / flat NB / flat EM (see :mod:`pcem_spark.model`)."""

    @keyword_only
    def __init__(self, *, idCol="id", textCol="text", labelsCol="labels", taxonomy="", method="pcem",
                 smoothing=1.0, maxIter=50, tol=1e-5, blockSize=4096, posteriorFloor=0.0, tokenPattern=DEFAULT_TOKEN_PATTERN,
                 minTokenLength=2, stopWords="english", minDF=3.0, maxDF=0.5, vocabSize=20000,
                 vocabularyDocs="all", components=2, supervision="labels", descriptions="",
                 weakMode="argmax", minSimilarity=0.0):
        super().__init__()
        self._set(**self._input_kwargs)

    def _fit(self, dataset):
        import json

        from pyspark.sql import functions as F
        g = self.getOrDefault
        kind = g(self.supervision)
        if kind not in ("labels", "descriptions", "similarities"):
            raise ValueError(f"PathEM supervision must be labels, descriptions or similarities, got {kind!r}")
        if kind == "labels":
            docs = dataset.select(F.col(g(self.idCol)).cast("string").alias("id"),
                                  F.col(g(self.textCol)).alias("text"), F.col(g(self.labelsCol)).alias("labels"))
            taxonomy = Taxonomy.from_json(g(self.taxonomy)) if g(self.taxonomy) else infer_taxonomy(docs)
            path_model, _ = train(docs, taxonomy, self.feature_settings(), self.model_settings())
        else:
            from .model import train_weak
            from .weak import check_descriptions
            if not g(self.taxonomy):
                raise ValueError("PathEM with weak supervision needs the taxonomy Param (there are no label "
                                 "paths to infer it from)")
            taxonomy = Taxonomy.from_json(g(self.taxonomy))
            cols = [F.col(g(self.idCol)).cast("string").alias("id"), F.col(g(self.textCol)).alias("text")]
            descriptions = None
            if kind == "descriptions":
                try:
                    descriptions = check_descriptions(json.loads(g(self.descriptions) or "null"), taxonomy,
                                                      where="PathEM descriptions Param")
                except json.JSONDecodeError as exc:
                    raise ValueError(f"PathEM descriptions Param is not JSON: {exc}") from None
            else:
                if "similarities" not in dataset.columns:
                    raise ValueError("PathEM supervision='similarities' needs a map<string,double> column "
                                     f"'similarities'; columns are {dataset.columns}")
                cols.append(F.col("similarities"))
            path_model, _ = train_weak(dataset.select(*cols), taxonomy, descriptions, self.feature_settings(),
                                       self.model_settings(), g(self.weakMode), g(self.minSimilarity))
        model = PathEMModel(path_model)
        return self._copyValues(model)


class PathEMModel(Model, _PathEMParams, MLWritable, MLReadable):
    """Fitted :class:`PathEM`; ``transform`` appends ``path``, ``leaf``, ``probability``."""

    def __init__(self, path_model: PathModel = None):
        super().__init__()
        self.path_model = path_model

    def _transform(self, dataset):
        return self.path_model.predict_columns(dataset, passthrough=list(dataset.columns),
                                               text_col=self.getOrDefault(self.textCol))

    def write(self) -> MLWriter:
        return _PathEMModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _PathEMModelReader()


class _PathEMModelWriter(MLWriter):
    def __init__(self, instance: PathEMModel):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        self.instance.path_model.save(path, overwrite=self.shouldOverwrite,
                                      class_name="pcem_spark.ml.PathEMModel")


class _PathEMModelReader(MLReader):
    def load(self, path: str) -> PathEMModel:
        pm = PathModel.load(path)
        model = PathEMModel(pm)
        fs, ms = pm.feature_settings, pm.model_settings
        model._set(taxonomy=pm.taxonomy.to_json(), method=ms.method, smoothing=ms.smoothing,
                   maxIter=ms.max_iter, tol=ms.tol, blockSize=ms.block_size,
                   posteriorFloor=ms.posterior_floor, tokenPattern=fs.token_pattern,
                   minTokenLength=fs.min_token_length, stopWords=fs.stop_words, minDF=fs.min_df,
                   maxDF=fs.max_df, vocabSize=fs.vocab_size, vocabularyDocs=fs.vocabulary_docs,
                   components=ms.components)
        return model
