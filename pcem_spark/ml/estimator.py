"""pyspark.ml Estimator / Model pair, so PCEM drops into a ``Pipeline``.

>>> est = PathEM(method="pcem", maxIter=30, taxonomy=Taxonomy(...).to_json())
>>> model = est.fit(docs)              # docs: id, text, labels (null = unlabelled)
>>> model.transform(new_docs)          # + path, leaf, probability columns
>>> model.write().overwrite().save(p); PathEMModel.load(p)

or after Spark ML's own featurisation, tuned by Spark ML's own tuner::

    Pipeline(stages=[RegexTokenizer(...), StopWordsRemover(...), CountVectorizer(outputCol="tf"),
                     PathEM(featuresCol="tf", taxonomy=..., unlabeledWeight=1.0, pathWeight=1.0)])
    CrossValidator(estimator=pipeline, estimatorParamMaps=ParamGridBuilder()...,
                   evaluator=HierarchicalF1Evaluator(metricName="macroF1"))

The estimator's Params map one to one onto ``[features]`` / ``[model]`` of
``conf/pcem.toml``; the heavy lifting is :func:`pcem_spark.model.train`.
"""

from __future__ import annotations

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable, MLReadable, MLReader, MLWritable, MLWriter

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import RDD_NEEDS, blocks_from_labels, cache_blocks
from pcem_spark.engine.features import DEFAULT_TOKEN_PATTERN, FeatureSettings
from pcem_spark.engine.session import require_classic_session
from pcem_spark.errors import InputError
from pcem_spark.ml import training
from pcem_spark.ml.tuning import TuneSettings
from pcem_spark.model.labels import infer_taxonomy
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import AUTO, ModelSettings


def _number_or_auto(value):
    """Param converter: a float, or the string "auto" (chosen from the data when fitting)."""
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return AUTO
        try:
            return float(value)
        except ValueError:
            raise TypeError(f"expected a number or 'auto', got {value!r}") from None
    return TypeConverters.toFloat(value)


class _PathEMParams(Params):
    idCol = Param(Params._dummy(), "idCol", "document id column", TypeConverters.toString)
    textCol = Param(Params._dummy(), "textCol", "document text column", TypeConverters.toString)
    featuresCol = Param(
        Params._dummy(),
        "featuresCol",
        "term-count vectors (e.g. a CountVectorizer stage's output); empty = tokenise textCol "
        "with this estimator's own feature Params",
        TypeConverters.toString,
    )
    labelsCol = Param(
        Params._dummy(), "labelsCol", "label path column (array<string>, null = unlabelled)", TypeConverters.toString
    )
    taxonomy = Param(
        Params._dummy(),
        "taxonomy",
        "taxonomy as JSON {root, children}; empty = inferred from the label paths",
        TypeConverters.toString,
    )
    method = Param(
        Params._dummy(),
        "method",
        "pcnb | pcem | flat-nb | flat-em | nbmc | emmc | tdnb | tdem | wdnb | wdem",
        TypeConverters.toString,
    )
    smoothing = Param(
        Params._dummy(),
        "smoothing",
        "word pseudo-count (> 0), or 'auto': the largest Dirichlet-multinomial evidence of the labelled counts",
        _number_or_auto,
    )
    unlabeledWeight = Param(
        Params._dummy(),
        "unlabeledWeight",
        "EM-lambda: weight of unlabelled documents in "
        "the M-step, in [0, 1] (1 = the paper, 0 = naive Bayes), or 'auto' (cross-validated)",
        _number_or_auto,
    )
    pathWeight = Param(
        Params._dummy(),
        "pathWeight",
        "share of a labelled document for the other paths through "
        "its ancestors, in [0, 1] (1 = Eq. 2, 0 = flat), or 'auto' (cross-validated)",
        _number_or_auto,
    )
    docLength = Param(
        Params._dummy(),
        "docLength",
        "documents longer than this many tokens count as this long (0 = raw counts, the paper)",
        TypeConverters.toFloat,
    )
    maxIter = Param(Params._dummy(), "maxIter", "maximum EM iterations (>= 0)", TypeConverters.toInt)
    tol = Param(Params._dummy(), "tol", "relative log-likelihood change that stops EM", TypeConverters.toFloat)
    blockSize = Param(Params._dummy(), "blockSize", "documents per CSR block", TypeConverters.toInt)
    posteriorFloor = Param(
        Params._dummy(), "posteriorFloor", "posteriors below this count as 0 (0 = exact)", TypeConverters.toFloat
    )
    posteriorTopK = Param(
        Params._dummy(),
        "posteriorTopK",
        "keep each unlabelled document's k most probable "
        "paths in the E-step (0 = all, exact); keeps the per-path sums sparse",
        TypeConverters.toInt,
    )
    parameterDtype = Param(
        Params._dummy(), "parameterDtype", "float64 | float32 (broadcast and per-path sums)", TypeConverters.toString
    )
    seed = Param(
        Params._dummy(), "seed", "random seed (multi-component start, cross-validation folds)", TypeConverters.toInt
    )
    unlabeledTable = Param(
        Params._dummy(),
        "unlabeledTable",
        "name of a table / temporary view whose rows are added to every fit as unlabelled "
        "documents (same feature / text column; cross-validation keeps them in every "
        "fold's training set); empty = none",
        TypeConverters.toString,
    )
    tokenPattern = Param(Params._dummy(), "tokenPattern", "Java regex of a token", TypeConverters.toString)
    minTokenLength = Param(Params._dummy(), "minTokenLength", "shortest token kept", TypeConverters.toInt)
    stopWords = Param(Params._dummy(), "stopWords", "stop-word language or 'none'", TypeConverters.toString)
    minDF = Param(Params._dummy(), "minDF", "min document frequency (count >= 1 or fraction)", TypeConverters.toFloat)
    maxDF = Param(Params._dummy(), "maxDF", "max document frequency (fraction <= 1 or count)", TypeConverters.toFloat)
    vocabSize = Param(Params._dummy(), "vocabSize", "most frequent terms kept (0 = all)", TypeConverters.toInt)
    vocabularyDocs = Param(Params._dummy(), "vocabularyDocs", "'all' or 'labeled'", TypeConverters.toString)
    normalize = Param(
        Params._dummy(),
        "normalize",
        "Unicode normalisation before tokenising: 'nfkc' or 'none'",
        TypeConverters.toString,
    )
    cjk = Param(
        Params._dummy(),
        "cjk",
        "Chinese / Japanese / Korean text: 'chars' (one token per character), "
        "'bigrams' (overlapping character bigrams) or 'none' (a run of such characters is one token)",
        TypeConverters.toString,
    )
    components = Param(Params._dummy(), "components", "mixture components per leaf (nbmc / emmc)", TypeConverters.toInt)
    supervision = Param(
        Params._dummy(),
        "supervision",
        "labels (labelsCol) | descriptions (weak labels from the descriptions Param) | "
        "similarities (weak labels from a map<string,double> column 'similarities')",
        TypeConverters.toString,
    )
    descriptions = Param(
        Params._dummy(),
        "descriptions",
        "JSON object node -> description (supervision = descriptions)",
        TypeConverters.toString,
    )
    weakMode = Param(Params._dummy(), "weakMode", "argmax | soft | path (weak supervision)", TypeConverters.toString)
    minSimilarity = Param(
        Params._dummy(),
        "minSimilarity",
        "no weak label unless each depth's best similarity is above this",
        TypeConverters.toFloat,
    )
    tuneFolds = Param(
        Params._dummy(),
        "tuneFolds",
        "folds of the cross-validation that resolves 'auto' unlabeledWeight / pathWeight",
        TypeConverters.toInt,
    )
    tuneMetric = Param(
        Params._dummy(),
        "tuneMetric",
        "microF1 | macroF1 | meanF1 (that cross-validation's metric)",
        TypeConverters.toString,
    )
    initModel = Param(
        Params._dummy(),
        "initModel",
        "warm start: a saved PathModel / PathEMModel directory whose "
        "parameters EM starts from (same taxonomy and method; terms mapped by name; Params left at "
        "'auto' take its values); empty = start from naive Bayes",
        TypeConverters.toString,
    )
    minProbability = Param(
        Params._dummy(),
        "minProbability",
        "transform: stop each predicted path at its deepest "
        "node whose marginal probability is >= this, in [0, 1] (0 = the full path); adds "
        "path_probability",
        TypeConverters.toFloat,
    )
    topK = Param(
        Params._dummy(),
        "topK",
        "transform: add top_paths, the k most probable paths with their probabilities (0 = no such column)",
        TypeConverters.toInt,
    )

    def __init__(self, *args):
        super().__init__(*args)
        fs, ms, ts = FeatureSettings(), ModelSettings(), TuneSettings()
        self._setDefault(
            idCol="id",
            textCol="text",
            featuresCol="",
            labelsCol="labels",
            taxonomy="",
            method=ms.method,
            smoothing=ms.smoothing,
            unlabeledWeight=ms.unlabeled_weight,
            pathWeight=ms.path_weight,
            docLength=ms.doc_length,
            maxIter=ms.max_iter,
            tol=ms.tol,
            blockSize=ms.block_size,
            posteriorFloor=ms.posterior_floor,
            posteriorTopK=ms.posterior_top_k,
            parameterDtype=ms.parameter_dtype,
            seed=ms.seed,
            unlabeledTable="",
            tokenPattern=DEFAULT_TOKEN_PATTERN,
            minTokenLength=fs.min_token_length,
            stopWords=fs.stop_words,
            minDF=fs.min_df,
            maxDF=fs.max_df,
            vocabSize=fs.vocab_size,
            vocabularyDocs=fs.vocabulary_docs,
            normalize=fs.normalize,
            cjk=fs.cjk,
            components=ms.components,
            supervision="labels",
            descriptions="",
            weakMode="argmax",
            minSimilarity=0.0,
            tuneFolds=ts.folds,
            tuneMetric=ts.metric,
            minProbability=0.0,
            topK=0,
            initModel="",
        )

    def feature_settings(self) -> FeatureSettings:
        g = self.getOrDefault
        return FeatureSettings(
            token_pattern=g(self.tokenPattern),
            min_token_length=g(self.minTokenLength),
            stop_words=g(self.stopWords),
            min_df=g(self.minDF),
            max_df=g(self.maxDF),
            vocab_size=g(self.vocabSize),
            vocabulary_docs=g(self.vocabularyDocs),
            normalize=g(self.normalize),
            cjk=g(self.cjk),
        )

    def model_settings(self) -> ModelSettings:
        g = self.getOrDefault
        return ModelSettings(
            method=g(self.method),
            smoothing=g(self.smoothing),
            unlabeled_weight=g(self.unlabeledWeight),
            path_weight=g(self.pathWeight),
            doc_length=g(self.docLength),
            max_iter=g(self.maxIter),
            tol=g(self.tol),
            block_size=g(self.blockSize),
            posterior_floor=g(self.posteriorFloor),
            posterior_top_k=g(self.posteriorTopK),
            parameter_dtype=g(self.parameterDtype),
            components=g(self.components),
            seed=g(self.seed),
        )

    def tune_settings(self) -> TuneSettings:
        g = self.getOrDefault
        return TuneSettings(folds=g(self.tuneFolds), metric=g(self.tuneMetric))

    def _set_from_model(self, pm: PathModel) -> None:
        fs, ms = pm.feature_settings, pm.model_settings
        self._set(
            taxonomy=pm.taxonomy.to_json(),
            method=ms.method,
            smoothing=ms.smoothing,
            unlabeledWeight=ms.unlabeled_weight,
            pathWeight=ms.path_weight,
            docLength=ms.doc_length,
            maxIter=ms.max_iter,
            tol=ms.tol,
            blockSize=ms.block_size,
            posteriorFloor=ms.posterior_floor,
            posteriorTopK=ms.posterior_top_k,
            parameterDtype=ms.parameter_dtype,
            seed=ms.seed,
            tokenPattern=fs.token_pattern,
            minTokenLength=fs.min_token_length,
            stopWords=fs.stop_words,
            minDF=fs.min_df,
            maxDF=fs.max_df,
            vocabSize=fs.vocab_size,
            vocabularyDocs=fs.vocabulary_docs,
            normalize=fs.normalize,
            cjk=fs.cjk,
            components=ms.components,
        )
        if pm.features_col:
            self._set(featuresCol=pm.features_col)


# Params that change neither the documents nor their packing: fitMultiple packs a
# fold's blocks once and fits every grid point that differs only in these.
_SHARED_BLOCK_PARAMS = (
    "method",
    "smoothing",
    "unlabeledWeight",
    "pathWeight",
    "docLength",
    "maxIter",
    "tol",
    "posteriorFloor",
    "posteriorTopK",
    "parameterDtype",
    "seed",
    "components",
    "minProbability",
    "topK",
)


class _FitMultipleOnBlocks:
    """Thread-safe iterator of (index, model) over param maps that share one packing of the data."""

    def __init__(self, fit_one, n_models: int, release):
        import threading

        self.fit_one, self.n, self.release = fit_one, n_models, release
        self.lock = threading.Lock()
        self.counter = 0
        self.done = 0

    def __iter__(self):
        return self

    def __next__(self):
        with self.lock:
            index = self.counter
            if index >= self.n:
                raise StopIteration("No models remaining.")
            self.counter += 1
        try:
            return index, self.fit_one(index)
        finally:
            with self.lock:
                self.done += 1
                if self.done == self.n:
                    self.release()

    def next(self):
        return self.__next__()


class PathEM(Estimator, _PathEMParams, DefaultParamsReadable, DefaultParamsWritable):
    """Estimator for PCNB / PCEM and the generative baselines (see :mod:`pcem_spark.model`).

    Input: ``textCol`` (tokenised with the feature Params) or ``featuresCol``
    (term-count vectors from Spark ML's own ``RegexTokenizer`` ->
    ``StopWordsRemover`` -> ``CountVectorizer``), plus ``labelsCol``.
    ``smoothing`` / ``unlabeledWeight`` / ``pathWeight`` default to
    ``"auto"``: the first is chosen by evidence inside the fit, the other two
    by a stratified cross-validation on the labelled rows
    (:func:`pcem_spark.tuning.resolve_auto`). Give numbers to skip that, e.g.
    inside your own ``CrossValidator``.
    """

    @keyword_only
    def __init__(
        self,
        *,
        idCol="id",
        textCol="text",
        featuresCol="",
        labelsCol="labels",
        taxonomy="",
        method="pcem",
        smoothing=AUTO,
        unlabeledWeight=AUTO,
        pathWeight=AUTO,
        docLength=100.0,
        maxIter=50,
        tol=1e-5,
        blockSize=4096,
        posteriorFloor=0.0,
        posteriorTopK=5,
        parameterDtype="float64",
        seed=0,
        unlabeledTable="",
        tokenPattern=DEFAULT_TOKEN_PATTERN,
        minTokenLength=2,
        stopWords="english",
        minDF=3.0,
        maxDF=0.5,
        vocabSize=20000,
        vocabularyDocs="all",
        normalize="nfkc",
        cjk="chars",
        components=2,
        supervision="labels",
        descriptions="",
        weakMode="argmax",
        minSimilarity=0.0,
        tuneFolds=3,
        tuneMetric="meanF1",
        minProbability=0.0,
        topK=0,
        initModel="",
    ):
        super().__init__()
        self._set(**self._input_kwargs)

    # -------------------------------------------------------------- features mode
    def _feature_docs(self, dataset):
        """``id, features, labels`` of the dataset plus the unlabelled table; and V and the term names."""
        from pyspark.sql import functions as F

        from pcem_spark.model.labels import vector_size

        g = self.getOrDefault
        fcol, lcol, icol = g(self.featuresCol), g(self.labelsCol), g(self.idCol)
        for c in (fcol, lcol):
            if c not in dataset.columns:
                raise InputError(f"PathEM: column {c!r} not found; columns are {dataset.columns}")
        ids = F.col(icol).cast("string") if icol in dataset.columns else F.monotonically_increasing_id().cast("string")
        docs = dataset.select(ids.alias("id"), F.col(fcol).alias("features"), F.col(lcol).alias("labels"))
        if g(self.unlabeledTable):
            extra = dataset.sparkSession.table(g(self.unlabeledTable))
            if fcol not in extra.columns:
                raise InputError(f"PathEM: unlabeledTable {g(self.unlabeledTable)!r} has no column {fcol!r}")
            ids = F.col(icol).cast("string") if icol in extra.columns else F.lit(None).cast("string")
            docs = docs.unionByName(
                extra.select(
                    ids.alias("id"), F.col(fcol).alias("features"), F.lit(None).cast("array<string>").alias("labels")
                )
            )
        size = vector_size(dataset, fcol)
        if size is None:
            first = dataset.select(fcol).where(F.col(fcol).isNotNull()).first()
            if first is None:
                raise InputError("PathEM: no documents to fit")
            size = int(first[0].size)
        meta = dataset.schema[fcol].metadata.get("ml_attr", {}).get("attrs", {})
        names = [a.get("name") for kind in meta.values() for a in kind]
        vocabulary = names if len(names) == size and all(names) else [f"#{i}" for i in range(size)]
        return docs, vocabulary

    def _warm_start(self):
        """The ``initModel`` read (:class:`pcem_spark.warm.WarmStart`), or None when it is empty."""
        from pcem_spark.model.warm import as_warm_start

        path = self.getOrDefault(self.initModel) or None
        cached = getattr(self, "_warm_cache", None)
        if path is None or cached is None or cached.path != path:
            cached = as_warm_start(path)  # read once per estimator (taxonomy, then the fit)
            self._warm_cache = cached
        return as_warm_start(cached)  # a fresh copy: what one fit inherits stays with that fit

    def _taxonomy_of(self, docs):
        g = self.getOrDefault
        if not g(self.taxonomy) and g(self.initModel):
            # A warm start needs the init model's tree; the new batch may lack labels of some leaves (or all).
            return self._warm_start().model.taxonomy
        return Taxonomy.from_json(g(self.taxonomy)) if g(self.taxonomy) else infer_taxonomy(docs)

    def _fit_features(self, dataset):
        """Fit on term-count vectors (``featuresCol``): the same training as ``pcem train``."""
        from pcem_spark.model.labels import check_label_paths

        g = self.getOrDefault
        docs, vocabulary = self._feature_docs(dataset)
        taxonomy = self._taxonomy_of(docs)
        check_label_paths(docs, taxonomy)
        pm, _ = training.train(
            docs,
            taxonomy,
            self.feature_settings(),
            self.model_settings(),
            vocabulary=vocabulary,
            featurized=docs,
            tune=self.tune_settings(),
            seed=g(self.seed),
            init_model=self._warm_start(),
            estimator_class=type(self),
        )
        pm.features_col = g(self.featuresCol) or None
        return pm

    def fitMultiple(self, dataset, paramMaps):
        """Fit every param map; those that differ only in model Params share one packing of the data.

        Called by CrossValidator / TrainValidationSplit once per fold: the
        fold's documents are packed into CSR blocks once, not once per grid
        point. Falls back to pyspark's one-fit-per-map otherwise.
        """
        from pcem_spark.model.fitting import fit_blocks
        from pcem_spark.model.labels import check_label_paths

        require_classic_session(dataset, "PathEM.fitMultiple", RDD_NEEDS)
        shareable = bool(self.getOrDefault(self.featuresCol)) and all(
            p.name in _SHARED_BLOCK_PARAMS for pm in paramMaps for p in pm
        )
        if not shareable or self.getOrDefault(self.supervision) != "labels":
            return super().fitMultiple(dataset, paramMaps)
        docs, vocabulary = self._feature_docs(dataset)
        taxonomy = self._taxonomy_of(docs)
        check_label_paths(docs, taxonomy)
        warm = self._warm_start()  # read once for every grid point of the fold
        from pcem_spark.model.warm import as_warm_start

        blocks = cache_blocks(
            blocks_from_labels(
                docs,
                taxonomy.path_lookup(),
                taxonomy.path_node_matrix(sparse=True),
                len(vocabulary),
                self.getOrDefault(self.blockSize),
            )
        )

        def fit_one(index):
            est = self.copy(paramMaps[index])
            ms = est.model_settings()
            if ms.auto_params() and warm is None:
                raise InputError(
                    f"PathEM.fitMultiple: {', '.join(ms.auto_params())} is 'auto' in a grid point; "
                    "give numbers when tuning with your own grid"
                )
            pm, _ = fit_blocks(
                blocks,
                taxonomy,
                vocabulary,
                est.feature_settings(),
                ms,
                warm_start=None if warm is None else as_warm_start(warm),
            )
            pm.features_col = est.getOrDefault(est.featuresCol)
            return est._copyValues(PathEMModel(pm))

        return _FitMultipleOnBlocks(fit_one, len(paramMaps), blocks.unpersist)

    def _fit(self, dataset):
        import json

        from pyspark.sql import functions as F

        # Before any Spark job: the vocabulary and label checks would run for minutes first.
        require_classic_session(dataset, "PathEM.fit", RDD_NEEDS)
        g = self.getOrDefault
        kind = g(self.supervision)
        if kind not in ("labels", "descriptions", "similarities"):
            raise InputError(f"PathEM supervision must be labels, descriptions or similarities, got {kind!r}")
        if g(self.featuresCol):
            if kind != "labels":
                raise InputError(
                    "PathEM: featuresCol works with supervision='labels'; weak supervision tokenises textCol itself"
                )
            return self._copyValues(PathEMModel(self._fit_features(dataset)))
        if kind == "labels":
            docs = dataset.select(
                F.col(g(self.idCol)).cast("string").alias("id"),
                F.col(g(self.textCol)).alias("text"),
                F.col(g(self.labelsCol)).alias("labels"),
            )
            if g(self.unlabeledTable):
                extra = dataset.sparkSession.table(g(self.unlabeledTable))
                docs = docs.unionByName(
                    extra.select(
                        F.col(g(self.idCol)).cast("string").alias("id"),
                        F.col(g(self.textCol)).alias("text"),
                        F.lit(None).cast("array<string>").alias("labels"),
                    )
                )
            taxonomy = self._taxonomy_of(docs)
            path_model, _ = training.train(
                docs,
                taxonomy,
                self.feature_settings(),
                self.model_settings(),
                tune=self.tune_settings(),
                init_model=self._warm_start(),
                estimator_class=type(self),
            )
        else:
            from pcem_spark.io.descriptions import check_descriptions

            if not g(self.taxonomy):
                raise InputError(
                    "PathEM with weak supervision needs the taxonomy Param (there are no label paths to infer it from)"
                )
            taxonomy = Taxonomy.from_json(g(self.taxonomy))
            cols = [F.col(g(self.idCol)).cast("string").alias("id"), F.col(g(self.textCol)).alias("text")]
            descriptions = None
            if kind == "descriptions":
                try:
                    descriptions = check_descriptions(
                        json.loads(g(self.descriptions) or "null"), taxonomy, where="PathEM descriptions Param"
                    )
                except json.JSONDecodeError as exc:
                    raise InputError(f"PathEM descriptions Param is not JSON: {exc}") from None
            else:
                if "similarities" not in dataset.columns:
                    raise InputError(
                        "PathEM supervision='similarities' needs a map<string,double> column "
                        f"'similarities'; columns are {dataset.columns}"
                    )
                cols.append(F.col("similarities"))
            warm = self._warm_start()
            ms = self.model_settings() if warm is not None else self.model_settings().resolved()
            path_model, _ = training.train_weak(
                dataset.select(*cols),
                taxonomy,
                descriptions,
                self.feature_settings(),
                ms,
                g(self.weakMode),
                g(self.minSimilarity),
                warm_start=warm,
            )
        model = PathEMModel(path_model)
        return self._copyValues(model)


class PathEMModel(Model, _PathEMParams, MLWritable, MLReadable):
    """Fitted :class:`PathEM`; ``transform`` appends ``path``, ``leaf``, ``probability``.

    ``minProbability`` > 0 (abstaining) also appends ``path_probability``,
    ``topK`` > 0 ``top_paths`` (:meth:`pcem_spark.model.PathModel.transform`).
    They are prediction settings: not saved with the model (a loaded model
    starts at 0 / 0; ``setMinProbability`` / ``setTopK``).
    """

    def __init__(self, path_model: PathModel = None):
        super().__init__()
        self.path_model = path_model

    def setMinProbability(self, value: float) -> "PathEMModel":
        """Abstain below this marginal probability in :meth:`transform` (see ``minProbability``)."""
        return self._set(minProbability=value)

    def setTopK(self, value: int) -> "PathEMModel":
        """Add the ``value`` most probable paths in :meth:`transform` (see ``topK``)."""
        return self._set(topK=value)

    def _transform(self, dataset):
        fcol = self.getOrDefault(self.featuresCol) or None
        return self.path_model.predict_columns(
            dataset,
            passthrough=list(dataset.columns),
            text_col=self.getOrDefault(self.textCol),
            features_col=fcol,
            min_probability=self.getOrDefault(self.minProbability),
            top_k=self.getOrDefault(self.topK),
        )

    def write(self) -> MLWriter:
        return _PathEMModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _PathEMModelReader()


class _PathEMModelWriter(MLWriter):
    def __init__(self, instance: PathEMModel):
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        # MLWriter.save deletes an existing path before saveImpl; PathModel.save replaces it atomically
        # instead (pcem_spark.outputs), so the old model survives a killed save.
        self.saveImpl(path)

    def saveImpl(self, path: str) -> None:
        self.instance.path_model.save(path, overwrite=self.shouldOverwrite, class_name="pcem_spark.ml.PathEMModel")


class _PathEMModelReader(MLReader):
    def load(self, path: str) -> PathEMModel:
        pm = PathModel.load(path)
        model = PathEMModel(pm)
        model._set_from_model(pm)
        return model


# Saved metadata and pickles name the public path (pcem_spark.ml.PathEM), as they did before the
# package layout: models saved by any release load with any later one.
PathEM.__module__ = PathEMModel.__module__ = "pcem_spark.ml"


def train(docs, taxonomy, feature_settings, model_settings, **options):
    """Fit a model on a documents DataFrame: what ``pcem train`` runs.

    :func:`pcem_spark.ml.training.train` with :class:`PathEM` as the
    estimator that cross-validation fits for the settings left at "auto";
    ``options`` are that function's keyword arguments. Returns
    ``(PathModel, FitResult)``.
    """
    return training.train(docs, taxonomy, feature_settings, model_settings, estimator_class=PathEM, **options)
