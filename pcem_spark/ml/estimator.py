"""pyspark.ml Estimator / Model pair, so PCEM drops into a ``Pipeline``::

    est = PathEM(method="pcem", maxIter=30, taxonomy=taxonomy.to_json())
    model = est.fit(docs)              # docs: id, text, labels (null = unlabelled)
    model.transform(new_docs)          # + path, leaf, probability, in_taxonomy columns
    model.write().overwrite().save(p); PathEMModel.load(p)

(:class:`PathEM` and :class:`PathEMModel` have examples that run), or after
Spark ML's own featurisation, tuned by Spark ML's own tuner::

    Pipeline(stages=[RegexTokenizer(...), StopWordsRemover(...), CountVectorizer(outputCol="tf"),
                     PathEM(featuresCol="tf", taxonomy=..., unlabeledWeight=1.0, pathWeight=1.0)])
    CrossValidator(estimator=pipeline, estimatorParamMaps=ParamGridBuilder()...,
                   evaluator=HierarchicalF1Evaluator(metricName="macroF1"))

The estimator's Params (:mod:`pcem_spark.ml.params`, one table per settings
class) map one to one onto ``[features]`` / ``[model]`` / ``[tune]`` of
``pcem_spark/conf/defaults.toml``; the heavy lifting is :func:`pcem_spark.ml.training.train`.
"""

from __future__ import annotations

from contextlib import ExitStack

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable, MLReadable, MLReader, MLWritable, MLWriter

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import label_blocks, packed_blocks
from pcem_spark.engine.features import DEFAULT_TOKEN_PATTERN
from pcem_spark.errors import InputError
from pcem_spark.io.embeddings import vectors_of
from pcem_spark.ml import training
from pcem_spark.ml.checkpointing import pathem_checkpoint
from pcem_spark.ml.params import MODEL_PARAMS, _PathEMParams
from pcem_spark.ml.persistence import PathEMModelReader, PathEMModelWriter, PathEMReader
from pcem_spark.model.labels import infer_taxonomy
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.schema import OutputOptions
from pcem_spark.model.settings import AUTO
from pcem_spark.util.strict_json import loads_strict

__all__ = ["PathEM", "PathEMModel", "train"]


# Params that change neither the documents nor their packing: fitMultiple packs a
# fold's blocks once and fits every grid point that differs only in these.
_SHARED_BLOCK_PARAMS = tuple(p for p in MODEL_PARAMS.values() if p != "blockSize") + ("minProbability", "topK")


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
    """Estimator for PCNB / PCEM and the generative baselines (see :mod:`pcem_spark.core.methods`).

    Input: ``textCol`` (tokenised with the feature Params) or ``featuresCol``
    (term-count vectors from Spark ML's own ``RegexTokenizer`` ->
    ``StopWordsRemover`` -> ``CountVectorizer``), plus ``labelsCol``.
    ``smoothing`` / ``unlabeledWeight`` / ``pathWeight`` default to
    ``"auto"``: the first is chosen by evidence inside the fit, the other two
    by a stratified cross-validation on the labelled rows
    (:func:`pcem_spark.ml.tuning.resolve_auto`). Give numbers to skip that, e.g.
    inside your own ``CrossValidator``.

    All arguments are keyword-only Params (``explainParams()`` lists every
    one); they map one to one onto ``[features]`` / ``[model]`` / ``[tune]``
    of ``pcem_spark/conf/defaults.toml``. The main ones:

    Parameters
    ----------
    idCol, textCol, labelsCol : str
        The document id (default ``"id"``), its text (``"text"``) and its
        label path, ``array<string>`` from level 1 to a leaf, null for an
        unlabelled document (``"labels"``).
    featuresCol : str
        A term-count vector column to use instead of tokenising ``textCol``
        (default ``""``: tokenise).
    taxonomy : str
        ``Taxonomy.to_json()``; ``""`` infers the tree from the label paths.
    method : str
        ``pcnb | pcem | flat-nb | flat-em | nbmc | emmc | tdnb | tdem | wdnb | wdem`` (default ``"pcem"``).
    smoothing : float > 0 or "auto"
        Word pseudo-count (the paper: 1).
    unlabeledWeight, pathWeight : float in [0, 1] or "auto"
        Weight of the unlabelled documents in the M-step, and share of a
        labelled document for the other paths through its ancestors (both 1
        in the paper).
    maxIter, tol : int, float
        EM iterations at most, and the relative log-likelihood change that stops EM.
    minDF, maxDF, vocabSize, stopWords, tokenPattern : the vocabulary (text input only)
        Defaults suit corpora of thousands of documents; a tiny corpus needs
        ``minDF=1.0, maxDF=1.0``.
    minProbability, topK : float, int
        Prediction settings handed to the fitted :class:`PathEMModel`.

    Notes
    -----
    ``fit(dataset)`` returns a :class:`PathEMModel`. The fitted word
    distributions have shape (R, V): R components (the M paths for PCNB /
    PCEM and the flat methods) over the V vocabulary terms
    (``model.path_model.params``).

    Examples
    --------
    Three labelled and three unlabelled documents, numbers instead of
    ``"auto"`` (no cross-validation) and a vocabulary of every term:

    >>> from pcem_spark.core.taxonomy import Taxonomy
    >>> taxonomy = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos"]})
    >>> docs = spark.createDataFrame(
    ...     [
    ...         ("d1", "rocket orbit launch", ["sci", "space"]),
    ...         ("d2", "doctor patient clinic", ["sci", "med"]),
    ...         ("d3", "engine wheels car", ["rec", "autos"]),
    ...         ("d4", "orbit rocket moon", None),
    ...         ("d5", "clinic doctor medicine", None),
    ...         ("d6", "car engine road", None),
    ...     ],
    ...     "id string, text string, labels array<string>",
    ... )
    >>> est = PathEM(
    ...     taxonomy=taxonomy.to_json(), method="pcem", maxIter=3,
    ...     smoothing=1.0, unlabeledWeight=1.0, pathWeight=1.0, minDF=1.0, maxDF=1.0,
    ... )
    >>> model = est.fit(docs)
    >>> model.path_model.params.shape  # (R paths, V terms)
    (3, 12)
    >>> out = model.transform(docs)
    >>> out.columns
    ['id', 'text', 'labels', 'path', 'leaf', 'probability', 'in_taxonomy']
    >>> [(row.id, row.leaf) for row in out.orderBy("id").collect()]
    [('d1', 'space'), ('d2', 'med'), ('d3', 'autos'), ('d4', 'space'), ('d5', 'med'), ('d6', 'autos')]
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
        calibration="temperature",
        names="auto",
        namesWeight=2.0,
        namesFade=1.0,
        namesKeptTokens=10.0,
        family="generative",
        linearC=10.0,
        generativeWeight=0.3,
        linearWeights="auto",
        embeddingWeight=1.0,
        embedding="auto",
        embeddingModel="",
        unlabeledTable="",
        labeledTable="",
        tokenPattern=DEFAULT_TOKEN_PATTERN,
        minTokenLength=2,
        stopWords="auto",
        minDF=2.0,
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
        tuneStrategy="sampled",
        tuneMaxLabeled=5000,
        tuneMaxUnlabeled=20000,
        tuneMaxIter=8,
        tuneMaxDocPaths=2_000_000,
        tuneMaxParameters=250_000_000,
        minProbability=0.0,
        topK=0,
        initModel="",
        checkpointDir="",
        checkpointInterval=5,
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
        vec = g(self.embedding)
        docs = dataset.select(
            ids.alias("id"), F.col(fcol).alias("features"), F.col(lcol).alias("labels"), *vectors_of(dataset, vec)
        )
        if g(self.unlabeledTable):
            extra = dataset.sparkSession.table(g(self.unlabeledTable))
            if fcol not in extra.columns:
                raise InputError(f"PathEM: unlabeledTable {g(self.unlabeledTable)!r} has no column {fcol!r}")
            ids = F.col(icol).cast("string") if icol in extra.columns else F.lit(None).cast("string")
            docs = docs.unionByName(
                extra.select(
                    ids.alias("id"),
                    F.col(fcol).alias("features"),
                    F.lit(None).cast(docs.schema["labels"].dataType).alias("labels"),  # one path or several
                    *vectors_of(extra, vec),
                ),
                allowMissingColumns=True,
            )
        if g(self.labeledTable):
            kept = dataset.sparkSession.table(g(self.labeledTable))
            ids = F.col(icol).cast("string") if icol in kept.columns else F.lit(None).cast("string")
            cols = [ids.alias("id"), F.col(fcol).alias("features"), F.col(lcol).alias("labels"), *vectors_of(kept, vec)]
            docs = docs.unionByName(kept.select(*cols), allowMissingColumns=True)
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

    @classmethod
    def read(cls) -> MLReader:
        """The reader of a saved PathEM: it checks that the folder names this class before building anything."""
        return PathEMReader(cls)

    def _warm_start(self):
        """The ``initModel`` read (:class:`pcem_spark.model.warm.WarmStart`), or None when it is empty."""
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
        return Taxonomy.from_json(t, "PathEM taxonomy Param") if (t := g(self.taxonomy)) else infer_taxonomy(docs)

    def _fit_features(self, dataset):
        """Fit on term-count vectors (``featuresCol``): the same training as ``pcem train``."""
        from pcem_spark.model.labels import check_label_paths

        g = self.getOrDefault
        docs, vocabulary = self._feature_docs(dataset)
        taxonomy = self._taxonomy_of(docs)
        check_label_paths(docs, taxonomy)
        options = training.TrainOptions(
            vocabulary=vocabulary,
            featurized=docs,
            tune=self.tune_settings(),
            seed=g(self.seed),
            init_model=self._warm_start(),
            estimator_class=type(self),
        )
        pm, _ = training.train(docs, taxonomy, self.feature_settings(), self.model_settings(), options)
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

        shareable = (
            bool(paramMaps)
            and bool(self.getOrDefault(self.featuresCol))
            and all(p.name in _SHARED_BLOCK_PARAMS for pm in paramMaps for p in pm)
        )
        if not shareable or self.getOrDefault(self.supervision) != "labels":
            return super().fitMultiple(dataset, paramMaps)
        docs, vocabulary = self._feature_docs(dataset)
        taxonomy = self._taxonomy_of(docs)
        check_label_paths(docs, taxonomy)
        warm = self._warm_start()  # read once for every grid point of the fold
        from pcem_spark.model.warm import as_warm_start

        # The blocks outlive this call: the iterator releases them once every grid point is fitted.
        release = ExitStack()
        blocks = release.enter_context(
            packed_blocks(
                label_blocks(
                    docs,
                    taxonomy.path_lookup(),
                    taxonomy.path_node_matrix(sparse=True),
                    len(vocabulary),
                    self.getOrDefault(self.blockSize),
                )
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

        return _FitMultipleOnBlocks(fit_one, len(paramMaps), release.close)

    def _fit(self, dataset):
        import json

        from pyspark.sql import functions as F

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
                *vectors_of(dataset, g(self.embedding)),
            )
            if g(self.unlabeledTable):
                extra = dataset.sparkSession.table(g(self.unlabeledTable))
                docs = docs.unionByName(
                    extra.select(
                        F.col(g(self.idCol)).cast("string").alias("id"),
                        F.col(g(self.textCol)).alias("text"),
                        F.lit(None).cast(docs.schema["labels"].dataType).alias("labels"),  # one path or several
                    )
                )
            taxonomy = self._taxonomy_of(docs)
            checkpoint = pathem_checkpoint(self, dataset)  # None without a checkpoint directory
            options = training.TrainOptions(
                tune=self.tune_settings(),
                init_model=self._warm_start(),
                estimator_class=type(self),
                checkpoint=checkpoint,
            )
            path_model, _ = training.train(docs, taxonomy, self.feature_settings(), self.model_settings(), options)
            if checkpoint is not None:
                checkpoint.committed()
        else:
            from pcem_spark.io.descriptions import check_descriptions

            if not g(self.taxonomy):
                raise InputError(
                    "PathEM with weak supervision needs the taxonomy Param (there are no label paths to infer it from)"
                )
            taxonomy = Taxonomy.from_json(g(self.taxonomy), "PathEM taxonomy Param")
            cols = [F.col(g(self.idCol)).cast("string").alias("id"), F.col(g(self.textCol)).alias("text")]
            descriptions = None
            if kind == "descriptions":
                where, text = "PathEM descriptions Param", g(self.descriptions) or "null"
                try:
                    descriptions = check_descriptions(loads_strict(text, where), taxonomy, where)
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
    ``topK`` > 0 ``top_paths`` (:meth:`pcem_spark.model.PathModel.transform`);
    ``beam`` chooses the decoder (0 = the exact argmax, N = a beam search of
    width N down the tree, ``"auto"``: exact up to
    :data:`pcem_spark.core.BEAM_AUTO_PATHS` paths), ``tokenizer`` where text
    is tokenised (``"python"``, the default, or ``"spark"``:
    :meth:`pcem_spark.model.PathModel.text_featurizer`). They are prediction
    settings: not saved with the model (a loaded model starts at 0 / 0 /
    ``"auto"`` / ``"python"``; ``setMinProbability`` / ``setTopK`` /
    ``setBeam`` / ``setTokenizer``).

    Parameters
    ----------
    path_model : PathModel
        The fitted model (``PathEM.fit`` builds it; ``PathEMModel.load`` reads it).

    Attributes
    ----------
    path_model : PathModel
        Taxonomy, vocabulary (V terms) and parameters: ``log_prior`` (R,) and
        the word distributions (R, V) in sparse form.

    Notes
    -----
    ``transform(dataset)`` keeps every column of ``dataset`` and appends
    ``path`` (``array<string>``, level 1 to the leaf), ``leaf`` (string) and
    ``probability`` (double, the path's posterior), one row per input row.
    ``write().save(path)`` / ``PathEMModel.load(path)`` persist it, also as a
    stage of a saved ``PipelineModel``.

    Examples
    --------
    >>> import os, tempfile
    >>> from pcem_spark.core.taxonomy import Taxonomy
    >>> taxonomy = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos"]})
    >>> docs = spark.createDataFrame(
    ...     [("d1", "rocket orbit launch", ["sci", "space"]), ("d2", "doctor patient clinic", ["sci", "med"]),
    ...      ("d3", "engine wheels car", ["rec", "autos"]), ("d4", "orbit rocket moon", None)],
    ...     "id string, text string, labels array<string>",
    ... )
    >>> model = PathEM(
    ...     taxonomy=taxonomy.to_json(), method="pcnb", smoothing=1.0, unlabeledWeight=1.0, pathWeight=1.0,
    ...     minDF=1.0, maxDF=1.0,
    ... ).fit(docs)
    >>> out = model.setTopK(2).transform(docs.where("id = 'd4'"))
    >>> row = out.select("leaf", "top_paths").first()
    >>> row.leaf, len(row.top_paths)
    ('space', 2)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     model.write().overwrite().save(os.path.join(tmp, "model"))
    ...     loaded = PathEMModel.load(os.path.join(tmp, "model"))
    >>> loaded.getOrDefault("method"), loaded.getOrDefault("topK")
    ('pcnb', 0)
    """

    beam = Param(
        Params._dummy(),
        "beam",
        'transform: 0 = the exact argmax over every path, N = a beam search of width N down the tree, "auto" = '
        "exact up to pcem_spark.core.BEAM_AUTO_PATHS paths and a beam of BEAM_AUTO_WIDTH above",
        lambda v: v if isinstance(v, (str, bool)) or not float(v).is_integer() else int(v),  # checked by transform
    )

    tokenizer = Param(
        Params._dummy(),
        "tokenizer",
        'transform: where text is tokenised, "python" (in the scoring task, the same term counts as Spark ML) or '
        '"spark" (Spark ML\'s RegexTokenizer + CountVectorizerModel)',
        TypeConverters.toString,
    )

    def __init__(self, path_model: PathModel = None):
        super().__init__()
        self._setDefault(beam="auto", tokenizer="python")
        self.path_model = path_model

    def setTokenizer(self, value: str) -> "PathEMModel":
        """Tokenise text for :meth:`transform` in Python ("python") or with Spark ML ("spark")."""
        return self._set(tokenizer=value)

    def setBeam(self, value) -> "PathEMModel":
        """Decode :meth:`transform` by a beam of this width (0 = exact, ``"auto"``; see ``beam``)."""
        return self._set(beam=value)

    def setMinProbability(self, value: float) -> "PathEMModel":
        """Abstain below this marginal probability in :meth:`transform` (see ``minProbability``)."""
        return self._set(minProbability=value)

    def setTopK(self, value: int) -> "PathEMModel":
        """Add the ``value`` most probable paths in :meth:`transform` (see ``topK``)."""
        return self._set(topK=value)

    def _transform(self, dataset):
        fcol = self.getOrDefault(self.featuresCol) or None
        self.path_model.tokenizer = self.getOrDefault(self.tokenizer)
        return self.path_model.predict_columns(
            dataset,
            passthrough=list(dataset.columns),
            text_col=self.getOrDefault(self.textCol),
            features_col=fcol,
            outputs=OutputOptions(self.getOrDefault(self.minProbability), self.getOrDefault(self.topK)),
            beam=self.getOrDefault(self.beam),
        )

    def write(self) -> MLWriter:
        return PathEMModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return PathEMModelReader(cls)


# Saved metadata and pickles name the public path (pcem_spark.ml.PathEM), as they did before the
# package layout: models saved by any release load with any later one.
PathEM.__module__ = PathEMModel.__module__ = "pcem_spark.ml"


def train(docs, taxonomy, feature_settings, model_settings, **options):
    """Fit a model on a documents DataFrame: what ``pcem train`` runs.

    :func:`pcem_spark.ml.training.train` with :class:`PathEM` as the
    estimator that cross-validation fits for the settings left at "auto";
    ``options`` are the fields of :class:`pcem_spark.ml.training.TrainOptions`
    (``vocabulary``, ``featurized``, ``tune``, ``seed``, ``extra_grid``,
    ``init_model``, ``retune_auto``, ``descriptions``). Returns ``(PathModel, FitResult)``.
    """
    run = training.TrainOptions(estimator_class=PathEM, **options)
    return training.train(docs, taxonomy, feature_settings, model_settings, run)
