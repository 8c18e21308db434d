"""The fitted model (:class:`PathModel`): its persistence and prediction.

Methods (all on the same engine, differing only in how labels become path
scores):

=========  ===================================================================
``pcnb``   path cost-sensitive naive Bayes: path scores by Eq. 2, Eqs. 3-5
``pcem``   PCNB initialisation + EM over the unlabelled documents (Alg. 1)
``flat-nb`` multinomial NB with one component per leaf, one-hot leaf counts
``flat-em`` its EM version (Nigam et al. 2000)
=========  ===================================================================

and the generative baselines of the paper's Table 2 (``nbmc``/``emmc``,
``tdnb``/``tdem``, ``wdnb``/``wdem``), described in :mod:`pcem_spark.core.methods`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from functools import partial
from typing import List, Optional, Sequence

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.core.beam import beam_width, check_beam
from pcem_spark.core.calibration import DepthMaps, path_depths
from pcem_spark.core.decoding import predict_path_details, predict_paths
from pcem_spark.core.estep import scoring_tables
from pcem_spark.core.logistic import with_vectors
from pcem_spark.core.methods import MethodSpec, method_spec
from pcem_spark.core.multi_path import ranked_for_multi_path, with_membership
from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.path_nodes import path_node_table
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.arrow_io import PredictionLayout, PredictionOptions, csr_of, predicted_path_batches
from pcem_spark.engine.blocks import EMBEDDING_COL
from pcem_spark.engine.features import FeatureSettings, featurize
from pcem_spark.engine.python_tokens import TOKENIZERS, TextFeaturizer, supports
from pcem_spark.engine.shipping import ship
from pcem_spark.errors import InputError
from pcem_spark.model.beam_prediction import beam_batches
from pcem_spark.model.in_taxonomy import in_taxonomy_of_blocks, resolve_min_in_taxonomy
from pcem_spark.model.labels import check_vector_size
from pcem_spark.model.model_files import (
    CORPUS_KEY,
    FORMAT_VERSION,
    LINEAR_PART,
    MODEL_PARTS,
    READABLE_FORMAT_VERSIONS,
    calibration_of,
    calibration_record,
    read_model_parts,
    write_model_tables,
)
from pcem_spark.model.schema import (
    OutputOptions,
    check_multi_path,
    check_output_columns,
    check_prediction_options,
    prediction_source,
)
from pcem_spark.model.settings import ModelSettings, _weight
from pcem_spark.model.typicality import typicality_of_blocks
from pcem_spark.model.vectors import check_not_kept, prediction_vectors, vector_column

__all__ = ["FORMAT_VERSION", "READABLE_FORMAT_VERSIONS", "PathModel"]

log = logging.getLogger(__name__)


# 2: parameters stored sparse (log_base + log_ratio, PathParameters); 1: dense log_theta rows.
def _session(what: str) -> SparkSession:
    """The thread's active SparkSession, else the process's default one (a save from a worker thread)."""
    try:
        return SparkSession.active()
    except Exception:  # noqa: BLE001 - pyspark's "no active or default session"
        raise RuntimeError(f"PathModel.{what} needs an active SparkSession") from None


def _bound(tables, X, E):
    """The scoring tables with a block's document vectors bound (a model fitted without them: unchanged)."""
    return tables._replace(linear=with_vectors(tables.linear, E, X.shape[0]))


class PathModel:
    """A fitted PCNB / PCEM / flat NB / flat EM model.

    Usually built by training (:func:`pcem_spark.ml.train`, ``PathEM.fit``)
    or read with :meth:`load`; ``transform`` predicts, ``save`` persists.

    Parameters
    ----------
    taxonomy : Taxonomy
        The class tree; its M paths are the classes.
    vocabulary : list of str, length V
        The term of each column of the word distributions.
    log_prior : ndarray, shape (R,), or None
        ``log P(component)``; None when ``log_theta`` is a :class:`PathParameters`.
    log_theta : ndarray, shape (R, V), or PathParameters
        ``log P(w_t | component)``, dense or in sparse form.
    feature_settings : FeatureSettings
        How text is tokenised and counted (what it was trained with).
    model_settings : ModelSettings
        The method and the settings it was trained with; R follows from them.
    training_summary : dict, optional
        What training reports (kept in the saved metadata).

    Attributes
    ----------
    taxonomy : Taxonomy
    vocabulary : list of str, length V
    params : :class:`pcem_spark.core.PathParameters` -- ``log_prior`` (R,)
        and the word distributions in sparse form; R = M paths for PCNB/PCEM
        and flat methods, the baselines' components otherwise
        (:mod:`pcem_spark.core.methods`). ``log_prior`` / ``log_theta`` read them
        (``log_theta`` densifies: O(R x V)).
    feature_settings, model_settings : the settings it was trained with
    temperature, probability_map : the calibration of its probabilities
        (:mod:`pcem_spark.core.calibration`): Eq. 5's joint log-likelihoods are
        divided by ``temperature`` before every softmax, then every reported
        probability (``probability``, node marginals, ``top_paths``) goes
        through the monotone ``probability_map`` ((x, y) breakpoints); the
        paths never change. None = uncalibrated (set by training,
        :func:`pcem_spark.ml.calibrating.fit_calibration`).

    Examples
    --------
    A PCNB model over three paths and three terms, from its parameters:

    >>> import numpy as np
    >>> from pcem_spark.core.taxonomy import Taxonomy
    >>> from pcem_spark.engine.features import FeatureSettings
    >>> from pcem_spark.model.settings import ModelSettings
    >>> taxonomy = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos"]})
    >>> taxonomy.paths
    [('rec', 'autos'), ('sci', 'med'), ('sci', 'space')]
    >>> log_prior = np.log(np.full(3, 1 / 3))
    >>> log_theta = np.log(np.array([[0.1, 0.1, 0.8], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1]]))  # (M, V)
    >>> model = PathModel(
    ...     taxonomy, ["rocket", "doctor", "car"], log_prior, log_theta,
    ...     FeatureSettings(stop_words="english"),
    ...     ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0),
    ... )
    >>> model.params.shape
    (3, 3)
    >>> docs = spark.createDataFrame([("a", "rocket rocket car"), ("b", "doctor")], "id string, text string")
    >>> predictions = model.transform(docs)
    >>> predictions.columns
    ['id', 'path', 'leaf', 'probability', 'labels', 'in_taxonomy']
    >>> [(row.id, row.path, round(row.probability, 3)) for row in predictions.orderBy("id").collect()]
    [('a', ['sci', 'space'], 0.877), ('b', ['sci', 'med'], 0.8)]
    """

    def __init__(
        self,
        taxonomy: Taxonomy,
        vocabulary: List[str],
        log_prior: Optional[np.ndarray],
        log_theta,
        feature_settings: FeatureSettings,
        model_settings: ModelSettings,
        training_summary: Optional[dict] = None,
    ):
        """``log_theta``: a :class:`~pcem_spark.core.PathParameters` (then ``log_prior`` may be None)
        or a dense (R, V) array with its ``log_prior``."""
        self.spec: MethodSpec = method_spec(
            taxonomy, model_settings.method, model_settings.components, _weight(model_settings.path_weight)
        )
        if isinstance(log_theta, PathParameters):
            params = log_theta
        else:
            params = PathParameters.from_log_theta(log_prior, np.asarray(log_theta, dtype=np.float64))
        if params.shape != (self.spec.n_components, len(vocabulary)) or params.log_prior.shape != (params.shape[0],):
            raise ValueError(
                f"parameters have shape {params.shape} with {params.log_prior.shape[0]} priors, "
                f"expected ({self.spec.n_components}, {len(vocabulary)}) for {model_settings.method}"
            )
        self.taxonomy = taxonomy
        self.vocabulary = list(vocabulary)
        # How prediction tokenises text: "python" (in the scoring task) or "spark" (Spark ML); text_featurizer()
        self.tokenizer = "python"
        self.params = params
        self.feature_settings = feature_settings
        self.model_settings = model_settings
        self.training_summary = training_summary or {}
        # Set when the model was fitted on a term-count vector column (PathEM featuresCol):
        # it then predicts from that column, and ``vocabulary`` names its indices.
        self.features_col: Optional[str] = None
        self.temperature: Optional[float] = None
        self.probability_map = None
        # The combined / discriminative family's softmax regression (core.logistic.LinearTables; None: generative)
        self.linear = None
        # The run id of the saved version it was loaded from (None: not loaded)
        self.version: Optional[str] = None
        self.corpus = None  # the training corpus's counts (core.in_taxonomy.CorpusCounts), None: no in_taxonomy

    @property
    def log_prior(self) -> np.ndarray:
        return self.params.log_prior

    @property
    def log_theta(self) -> np.ndarray:
        """Dense (R, V) log theta: O(R x V) -- small models, tests and inspection only."""
        return self.params.log_theta()

    # ------------------------------------------------------------- predict
    def transform(
        self,
        df: DataFrame,
        min_probability: float = 0.0,
        top_k: int = 0,
        beam="auto",
        keep_columns: Sequence[str] = (),
        node_probabilities: bool = False,
        input_cols: Sequence[str] = ("id", "text", "labels"),
        multi_path: float = 0.0,
    ) -> DataFrame:
        """The predictions table: one row per input row with id, path, leaf, probability, labels, in_taxonomy
        (:mod:`pcem_spark.core.in_taxonomy`; a verdict on it: :meth:`transform_outputs`).

        A document with no known word gets the prior-only prediction.
        ``min_probability`` > 0 abstains: ``path`` stops at the deepest node
        of the predicted path whose marginal probability is >= it (possibly
        empty), ``leaf`` is its last node (null when empty) and a
        ``path_probability`` column (that node's marginal; 1 for an empty
        path) is added; ``top_k`` > 0 adds ``top_paths``, the k most probable
        paths with their probabilities. Defaults: today's table exactly
        (:data:`PREDICTION_SCHEMA`); see :func:`prediction_schema`.

        ``beam``: 0 decodes the exact argmax of Eq. 5 over every path; N > 0
        a beam search of width N down the tree (:meth:`beam_width`,
        :mod:`pcem_spark.core.beam`: probabilities, top paths and marginals
        are then renormalised over the paths the beam scored); ``"auto"``
        (the default) is exact up to :data:`~pcem_spark.core.BEAM_AUTO_PATHS`
        paths and a beam of :data:`~pcem_spark.core.BEAM_AUTO_WIDTH` above.

        ``keep_columns``: columns of ``df`` copied into the predictions,
        after the others (no join: they travel with the rows); a name the
        predictions already have is refused (InputError).
        ``node_probabilities``: add ``node_probabilities``, the (calibrated)
        marginal probability of each node of ``path``, root first.
        ``input_cols``: the names of ``df``'s id, text and labels columns
        (labels may be absent: then null). ``multi_path`` P > 0: add
        ``paths``, every path whose (calibrated) probability is >= P, the
        predicted path first (always there).
        """
        outputs = OutputOptions(min_probability, top_k, node_probabilities, multi_path)
        return self.transform_outputs(df, outputs, beam, keep_columns, input_cols)

    def transform_outputs(
        self,
        df: DataFrame,
        outputs: OutputOptions,
        beam="auto",
        keep_columns: Sequence[str] = (),
        input_cols: Sequence[str] = ("id", "text", "labels"),
    ) -> DataFrame:
        """:meth:`transform` with its outputs as one :class:`~pcem_spark.model.schema.OutputOptions`.

        It also offers ``outputs.typicality``: a ``typicality`` column, -KL
        (nats) of the document's known words from its predicted path's word
        distribution (:mod:`pcem_spark.core.density`; null with no known
        word), what ``pcem suggest-labels`` weights its scores by; and
        ``outputs.fingerprint``: a ``bag_fingerprint`` column, a hash of the
        document's bag of known words (:mod:`pcem_spark.core.fingerprints`;
        null with no known word), equal for documents the model reads as the
        same, what ``pcem suggest-labels`` counts once.
        """
        id_col, text_col, labels_col = input_cols
        # outputs.min_in_taxonomy: a number, "suggested" (the training summary's) or "none"; below it a document
        # gets an empty path and a null leaf (refused for a model without the score)
        outputs = outputs._replace(min_in_taxonomy=resolve_min_in_taxonomy(outputs.min_in_taxonomy, self))
        min_probability, top_k, _, multi_path = outputs[:4]
        check_prediction_options(min_probability, top_k)
        check_beam(beam)
        check_output_columns(keep_columns, "", min_probability, top_k, names=("keep_columns", "partition_by"))
        for column in keep_columns:
            if column not in df.columns:
                raise InputError(f"keep_columns: column {column!r} not found; columns are {df.columns}")
        vectors = vector_column(self)
        extra = [prediction_vectors(df, vectors)] if vectors else []
        check_not_kept(vectors, keep_columns, "keep_columns")
        src = prediction_source(df, id_col, text_col, labels_col, keep_columns, extra)
        check_multi_path(multi_path)
        return self.predict_columns(
            src, passthrough=["id", "labels", *keep_columns], outputs=outputs, beam=beam
        ).select(*outputs.schema().names, *keep_columns)

    def text_featurizer(self) -> Optional[TextFeaturizer]:
        """The Python tokenizer prediction uses for text, or None for Spark ML's (:attr:`tokenizer`).

        ``tokenizer = "python"`` (the default) tokenises in the scoring task
        (:mod:`pcem_spark.engine.python_tokens`: the same counts as Spark ML's
        ``RegexTokenizer`` + ``CountVectorizerModel``, at several times the
        speed) when the model's token pattern is the default one;
        ``"spark"``, or any other pattern, featurises with Spark ML.
        """
        if self.tokenizer not in TOKENIZERS:
            raise InputError(f"tokenizer = {self.tokenizer!r}: expected one of {list(TOKENIZERS)}")
        if self.tokenizer != "python" or not supports(self.feature_settings):
            return None
        cached = getattr(self, "_text_featurizer", None)
        if cached is None or cached[0] is not self.vocabulary:
            from pyspark.ml.feature import StopWordsRemover

            language = self.feature_settings.stop_words.lower()
            stop_words = [] if language == "none" else StopWordsRemover.loadDefaultStopWords(language)
            self._text_featurizer = cached = (
                self.vocabulary,
                TextFeaturizer(self.vocabulary, self.feature_settings, stop_words),
            )
        return cached[1]

    @property
    def effective_temperature(self) -> float:
        """The temperature prediction divides Eq. 5's joint log-likelihoods by: :attr:`temperature`, 1 if None.

        The baselines whose rule is not Eq. 5 (one component per path) are
        never calibrated: 1.
        """
        if self.temperature is None or self.spec.structure is not None:
            return 1.0
        return float(self.temperature)

    @property
    def effective_probability_map(self):
        """The map prediction's probabilities go through (:attr:`probability_map`; None for the baselines);
        per-depth maps get each path's leaf depth from the taxonomy."""
        mapping = None if self.temperature is None or self.spec.structure is not None else self.probability_map
        if not isinstance(mapping, DepthMaps):
            return mapping
        table = path_node_table(self.taxonomy.path_node_matrix(sparse=True), self.taxonomy.is_dummy)
        return mapping._replace(path_depth=path_depths(table))

    def beam_width(self, beam="auto", name: str = "beam") -> int:
        """The beam width prediction with ``beam`` uses for this model (0 = the exact argmax).

        ``"auto"`` resolves by the number of paths
        (:func:`pcem_spark.core.beam_width`), and to 0 for the methods whose
        components are not one per path (nbmc/emmc, tdnb/tdem, wdnb/wdem: they
        decode by their own rule); an explicit width > 0 for those is refused
        (InputError naming ``name``).
        """
        check_beam(beam, name)
        if self.spec.structure is not None:
            if beam != "auto" and beam > 0:
                raise InputError(
                    f"{name} = {beam}: a beam search decodes models with one component per path (pcnb, pcem, "
                    f"flat-nb, flat-em); {self.model_settings.method} decodes by its own rule (use {name} = 0)"
                )
            return 0
        if self.linear is not None:
            # The pooled scores are exact per path; the beam's level-by-level tables hold the generative part only.
            if beam != "auto" and beam > 0:
                raise InputError(
                    f"{name} = {beam}: a {self.model_settings.family}-family model decodes by the exact argmax "
                    f"over its paths (use {name} = 0)"
                )
            return 0
        return beam_width(beam, self.taxonomy.n_paths)

    def predict_columns(
        self,
        df: DataFrame,
        passthrough: List[str],
        text_col: str = "text",
        prefix: str = "",
        features_col: Optional[str] = None,
        outputs: OutputOptions = OutputOptions(),
        beam="auto",
    ) -> DataFrame:
        """``passthrough`` columns of ``df`` plus ``path``, ``leaf``, ``probability``.

        ``outputs``: abstaining, top-k paths and node probabilities, as
        :meth:`transform` (then also ``path_probability`` / ``top_paths`` /
        ``node_probabilities``).
        Top-down and win-driven models score the top-k paths and node
        marginals by :func:`pcem_spark.core.path_posteriors` (products of
        their node probabilities), while ``path`` stays their decoded path.
        ``beam``: the decoder, as :meth:`transform` (:meth:`beam_width`).

        The posterior is computed per CSR block of ``block_size`` rows; rows
        are never dropped or reordered within a partition. With
        ``features_col`` the documents are already term-count vectors over
        this model's vocabulary (e.g. a Spark ML ``CountVectorizer`` stage)
        and ``text_col`` is not read.
        """
        spark = df.sparkSession
        min_probability, top_k, node_probabilities, multi_path = outputs[:4]
        typical = typicality_of_blocks(spark, self) if outputs.typicality else None
        check_prediction_options(min_probability, top_k)
        check_multi_path(multi_path)
        width = self.beam_width(beam)
        # The exact decoder scores every path: in_taxonomy reads each row's path log-likelihood off them.
        scorer = in_taxonomy_of_blocks(spark, self, outputs.min_in_taxonomy, from_scores=width == 0)
        verdict, path_ll = outputs.min_in_taxonomy, width == 0 and scorer is not None
        # The decoders' top-k holds every path a multi-path row can name (top_paths shows the first top_k).
        ranked = top_k
        if multi_path > 0:
            ranked = ranked_for_multi_path(multi_path, self.taxonomy.n_paths, top_k)
        out_fields = [df.schema[c] for c in passthrough] + [
            T.StructField(prefix + f.name, f.dataType, f.nullable)
            for f in outputs.schema().fields
            if f.name != "id" and f.name != "labels"
        ]
        if features_col is not None:
            if features_col not in df.columns:
                raise InputError(f"features column {features_col!r} not found; columns are {df.columns}")
            check_vector_size(df, features_col, len(self.vocabulary))
            feats = df.withColumn("_pcem_features", F.col(features_col))
            to_matrix = partial(csr_of, vocab_size=len(self.vocabulary))
        elif self.text_featurizer() is not None:
            # The scoring task tokenises the text (engine.python_tokens); the vocabulary goes once per executor.
            feats = df.withColumn("_pcem_features", F.col(text_col))
            featurizer = ship(spark, self.text_featurizer())

            def to_matrix(texts):  # with the in_taxonomy score, each row's unknown tokens too (the same pass)
                return featurizer.value.matrix_and_unknown(texts, unknown=scorer is not None)

        else:
            feats = featurize(
                df, self.vocabulary, self.feature_settings, text_col=text_col, features_col="_pcem_features"
            )
            to_matrix = partial(csr_of, vocab_size=len(self.vocabulary))
        real_paths = [self.taxonomy.real_path(j) for j in range(self.taxonomy.n_paths)]
        doc_length = float(self.model_settings.doc_length)
        temperature = self.effective_temperature
        block_size = self.model_settings.block_size
        n_keep = len(passthrough)
        names = [f.name for f in out_fields]
        # A model fitted with vectors reads them from the column after the documents' (engine.arrow_io).
        model_vectors, vectors = vector_column(self), []
        if model_vectors is not None:  # under its own name: the passthrough columns may hold the input's
            found = F.col(EMBEDDING_COL) if EMBEDDING_COL in feats.columns else prediction_vectors(feats, model_vectors)
            vectors = [found.alias("_pcem_vectors")]
        feats = feats.select(*passthrough, "_pcem_features", *vectors)
        if width > 0:
            options = PredictionOptions(
                min_probability, top_k, width, node_probabilities, multi_path, ranked, outputs.fingerprint, verdict
            )
            batching = (n_keep, to_matrix, block_size, names)
            body = beam_batches(self, spark, real_paths, options, batching, doc_length, (typical, scorer))
            return feats.mapInArrow(body, T.StructType(out_fields))
        # The sparse parameters at the model's parameter dtype (float32 halves the broadcast).
        tables = scoring_tables(self.params, self.model_settings.parameter_dtype)._replace(
            temperature=temperature, probability_map=self.effective_probability_map, linear=self.linear
        )
        bc = ship(spark, (tables, real_paths, self.spec.structure))
        del tables

        if min_probability > 0 or ranked > 0 or node_probabilities:
            path_node = self.taxonomy.path_node_matrix(sparse=True)
            bc_paths = ship(spark, (path_node_table(path_node, self.taxonomy.is_dummy), list(self.taxonomy.nodes)))

            by_membership = multi_path > 0 and self.spec.structure is None

            def members(out, X, tables):
                # --multi-path of a one-component-per-path model: every path's membership (core.multi_path).
                return with_membership(out, X, tables, doc_length) if by_membership else out

            def predict_batches(batches):
                # As below, plus each block's path posteriors -> kept prefix / top-k paths / node marginals.
                tables, paths, structure = bc.value
                path_nodes, node_names = bc_paths.value
                return predicted_path_batches(
                    batches,
                    n_keep,
                    to_matrix,
                    block_size,
                    PredictionLayout(paths, names, node_names, path_nodes),
                    lambda X, E=None: members(
                        predict_path_details(
                            X,
                            structure,
                            doc_length,
                            _bound(tables, X, E),
                            path_nodes,
                            min_probability,
                            ranked,
                            node_probabilities,
                        ),
                        X,
                        _bound(tables, X, E),
                    ),
                    PredictionOptions(
                        min_probability, top_k, 0, node_probabilities, multi_path, ranked, outputs.fingerprint, verdict
                    ),
                    (typical, scorer),
                )

            return feats.mapInArrow(predict_batches, T.StructType(out_fields))

        def predict_batches(batches):
            # Arrow in, Arrow out: one sparse x dense product per block, no per-row Python.
            tables, paths, structure = bc.value
            return predicted_path_batches(
                batches,
                n_keep,
                to_matrix,
                block_size,
                PredictionLayout(paths, names),
                lambda X, E=None: predict_paths(
                    X, None, None, structure, doc_length, tables=_bound(tables, X, E), path_log_likelihood=path_ll
                ),
                PredictionOptions(fingerprint=outputs.fingerprint, min_in_taxonomy=verdict),
                (typical, scorer),
            )

        return feats.mapInArrow(predict_batches, T.StructType(out_fields))

    # ----------------------------------------------------------- persistence
    def save(self, path: str, overwrite: bool = False, class_name: str = "pcem_spark.model.PathModel") -> None:
        """Write the model directory (works on any Hadoop filesystem).

        Layout: ``metadata/`` one JSON line (format version, taxonomy,
        settings, summary); ``vocabulary/`` Parquet (index, term);
        ``parameters/`` Parquet, one row per path / component: index,
        log_prior, log_base and the non-zero ``log_ratio`` entries as int32
        term indices and float64 values (bytes); see
        :class:`pcem_spark.core.PathParameters`.
        """
        from pcem_spark.io.file_system import session_path
        from pcem_spark.io.outputs import atomic_output
        from pcem_spark.util.redaction import redact

        spark = _session("save")
        meta = {
            "format_version": FORMAT_VERSION,
            # pyspark.ml's PipelineModel reader loads a stage by this class name.
            "class": class_name,
            "taxonomy": json.loads(self.taxonomy.to_json()),
            "feature_settings": asdict(self.feature_settings),
            "model_settings": asdict(self.model_settings),
            "n_paths": self.taxonomy.n_paths,
            "vocab_size": len(self.vocabulary),
            "features_col": self.features_col,
            "calibration": calibration_record(self.temperature, self.probability_map),
            LINEAR_PART: self.linear is not None,
            # its inputs' paths and the checkpoint's folder may hold credentials (the settings are plain values)
            "training_summary": redact(self.training_summary),
            # the in_taxonomy score's corpus totals (its term counts are the vocabulary table's corpus_count)
            CORPUS_KEY: None if self.corpus is None else self.corpus.totals(),
        }
        # Built in a temporary sibling and moved into place with its completion
        # marker (pcem_spark.io.outputs): a killed save never leaves new metadata
        # beside old parameters, and load() refuses a directory without it.
        # (over Spark Connect, a relative local path is the client's: made absolute for the server too)
        # Every part must hold data before the marker is written: a model is never marked without its metadata.
        parts = MODEL_PARTS + ((LINEAR_PART,) if self.linear is not None else ())
        with atomic_output(spark, session_path(spark, path), "model", overwrite=overwrite, parts=parts) as staged:
            write_model_tables(spark, staged.tmp, meta, self)
            P = self.params
            staged.info.update(
                {"n_paths": int(P.shape[0]), "vocab_size": len(self.vocabulary), "nnz_parameters": int(P.log_ratio.nnz)}
            )

    @classmethod
    def load(cls, path: str) -> "PathModel":
        """Read a model directory written by :meth:`save`; refuse an incomplete or corrupt one (ValueError).

        One version is read, whatever a concurrent ``save`` does to ``path``: its
        metadata, vocabulary and parameters all come from the version the
        marker named when the read began (:func:`pcem_spark.io.snapshots.read_pinned`).
        """
        from pcem_spark.io.file_system import file_system, session_path
        from pcem_spark.io.snapshots import read_pinned

        spark = _session("load")
        path = session_path(spark, path)
        return read_pinned(file_system(spark, path), path, "model", lambda snap: cls._read(spark, snap), spark)

    @classmethod
    def _read(cls, spark: SparkSession, snap) -> "PathModel":
        """The model of one pinned version (:class:`pcem_spark.io.snapshots.Snapshot`)."""
        parts = read_model_parts(spark, snap)
        try:
            model = cls(
                parts.taxonomy,
                parts.vocabulary,
                None,
                parts.params,
                parts.feature_settings,
                parts.model_settings,
                parts.meta.get("training_summary"),
            )
        except ValueError as exc:
            raise InputError(f"{snap.path}: damaged model ({exc}); retrain it") from None
        model.features_col = parts.meta.get("features_col")
        model.linear = parts.linear
        model.corpus = parts.corpus
        model.version = snap.run_id
        calibration = calibration_of(snap.path, parts.meta, parts.format_version)
        if calibration is not None:
            model.temperature, model.probability_map = calibration
        return model
