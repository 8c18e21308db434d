"""Training, the fitted model, its persistence and prediction.

Methods (all on the same engine, differing only in how labels become path
scores):

=========  ===================================================================
``pcnb``   path cost-sensitive naive Bayes: path scores by Eq. 2, Eqs. 3-5
``pcem``   PCNB initialisation + EM over the unlabelled documents (Alg. 1)
``flat-nb`` multinomial NB with one component per leaf, one-hot leaf counts
``flat-em`` its EM version (Nigam et al. 2000)
=========  ===================================================================

and the generative baselines of the paper's Table 2 (``nbmc``/``emmc``,
``tdnb``/``tdem``, ``wdnb``/``wdem``), described in :mod:`pcem_spark.methods`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional, Tuple

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import engine, pathnb
from .methods import EM_METHODS, GENERATIVE, MethodSpec, method_spec
from .features import FeatureSettings, featurize, fit_vocabulary
from .limits import check_result_size
from .session import require_classic_session
from .taxonomy import Taxonomy, TaxonomyError
from .errors import InputError

log = logging.getLogger(__name__)

# 2: parameters stored sparse (log_base + log_ratio, pathnb.PathParameters); 1: dense log_theta rows.
FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
METHODS = GENERATIVE

PREDICTION_SCHEMA = T.StructType([
    T.StructField("id", T.StringType(), False),
    T.StructField("path", T.ArrayType(T.StringType(), False), False),
    T.StructField("leaf", T.StringType(), False),
    T.StructField("probability", T.DoubleType(), False),
    T.StructField("labels", T.ArrayType(T.StringType(), True), True),
])

# Columns added by abstaining (min_probability > 0) and top-k (top_k > 0) predictions.
PATH_PROBABILITY_FIELD = T.StructField("path_probability", T.DoubleType(), False)
TOP_PATHS_FIELD = T.StructField("top_paths", T.ArrayType(T.StructType([
    T.StructField("path", T.ArrayType(T.StringType(), False), False),
    T.StructField("probability", T.DoubleType(), False)]), False), False)


def check_prediction_options(min_probability: float, top_k: int, names=("min_probability", "top_k")) -> None:
    """Refuse a ``min_probability`` outside [0, 1] or a ``top_k`` that is not an integer >= 0 (ValueError
    naming ``names``, e.g. the CLI's flags)."""
    p_name, k_name = names
    if isinstance(min_probability, bool) or not isinstance(min_probability, (int, float)) \
            or not 0.0 <= float(min_probability) <= 1.0:
        raise InputError(f"{p_name} must be a number in [0, 1] (0 = always the full path), got {min_probability!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise InputError(f"{k_name} must be an integer >= 0 (0 = no top-k column), got {top_k!r}")


def prediction_schema(min_probability: float = 0.0, top_k: int = 0) -> T.StructType:
    """The predictions table's schema: :data:`PREDICTION_SCHEMA` (the default), ``leaf`` nullable and a
    ``path_probability`` column with ``min_probability`` > 0, a ``top_paths`` column with ``top_k`` > 0."""
    fields = [T.StructField(f.name, f.dataType, f.nullable or (f.name == "leaf" and min_probability > 0))
              for f in PREDICTION_SCHEMA.fields]
    if min_probability > 0:
        fields.append(PATH_PROBABILITY_FIELD)
    if top_k > 0:
        fields.append(TOP_PATHS_FIELD)
    return T.StructType(fields)


def abstention_counts(pred: DataFrame, taxonomy: Taxonomy, path_col: str = "path") -> Dict[str, int]:
    """How many predicted paths reach a leaf (``full_path``), stop above one (``partial_path``) or are
    empty (``no_path``): one aggregation, three numbers reach the driver."""
    size = F.size(F.col(path_col))
    at_leaf = F.coalesce(F.try_element_at(F.col(path_col), F.lit(-1)).isin(sorted(set(taxonomy.leaves))),
                         F.lit(False))
    row = pred.select(
        F.sum(F.when((size > 0) & at_leaf, 1).otherwise(0)).alias("full_path"),
        F.sum(F.when((size > 0) & ~at_leaf, 1).otherwise(0)).alias("partial_path"),
        F.sum(F.when(size == 0, 1).otherwise(0)).alias("no_path")).first()
    return {k: int(row[k] or 0) for k in ("full_path", "partial_path", "no_path")}


AUTO = "auto"


def _number_or_auto(name: str, value, low: float, high: float, low_open: bool = False):
    """Validate a setting that is a number in [low, high] (or (low, high]) or the string "auto"."""
    if isinstance(value, str):
        if value != AUTO:
            raise InputError(f"model.{name} must be a number or \"auto\", got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"model.{name} must be a number or \"auto\", got {value!r}")
    if (value <= low if low_open else value < low) or value > high:
        bound = (f"> {low:g}" if high == float("inf") else
                 f"in {'(' if low_open else '['}{low:g}, {high:g}]")
        raise InputError(f"model.{name} must be {bound} or \"auto\", got {value}")


@dataclass
class ModelSettings:
    method: str = "pcem"
    # Word pseudo-count: "auto" = Dirichlet-multinomial evidence of the labelled
    # counts over pathnb.DEFAULT_SMOOTHING_GRID; a number = Laplace/Lidstone (the paper: 1).
    smoothing: object = AUTO
    # EM-lambda: weight of the unlabelled documents in the M-step (1 = the paper,
    # 0 = naive Bayes); "auto" = cross-validated on the labelled documents ([tune]).
    unlabeled_weight: object = AUTO
    # Share of a labelled document for the other paths through its ancestors
    # (1 = Eq. 2, 0 = flat); "auto" = cross-validated ([tune]). PCNB / PCEM only.
    path_weight: object = AUTO
    # Documents longer than this many tokens count as this long (0 = raw counts, the paper):
    # tempers naive Bayes' over-confident posteriors on long documents (pathnb.length_normalize).
    doc_length: float = 100.0
    max_iter: int = 50
    tol: float = 1e-5          # relative change of the log-likelihood
    block_size: int = 4096     # documents per CSR block
    posterior_floor: float = 0.0  # posteriors below this count as 0 (0 = exact Eq. 5)
    # Keep each unlabelled document's k most probable paths in the E-step (0 = all, exact;
    # tdem / wdem, whose posteriors are per node or per depth, always run exact):
    # the per-path sums then stay sparse with thousands of paths (pathnb.truncate_posteriors).
    # 5 measured on 20NG 1%, 5 seeds: +0.01 / +0.02 micro-F1 vs exact (3: -0.09 with the
    # paper's settings, 1: -0.4 to -1.0); docs/BENCHMARKS.md "Truncated posteriors".
    posterior_top_k: int = 5
    parameter_dtype: str = "float64"  # "float32" halves broadcast and per-path sums (large M x V)
    components: int = 2        # mixture components per leaf (nbmc / emmc only)
    seed: int = 0              # random initial split of those components (nbmc / emmc only)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"model.method must be one of {METHODS}, got {self.method!r}")
        _number_or_auto("smoothing", self.smoothing, 0.0, float("inf"), low_open=True)
        _number_or_auto("unlabeled_weight", self.unlabeled_weight, 0.0, 1.0)
        _number_or_auto("path_weight", self.path_weight, 0.0, 1.0)
        if isinstance(self.doc_length, bool) or not isinstance(self.doc_length, (int, float)) or self.doc_length < 0:
            raise InputError(f"model.doc_length must be a number >= 0 (0 = raw counts), got {self.doc_length!r}")
        if self.max_iter < 0:
            raise InputError(f"model.max_iter must be >= 0, got {self.max_iter}")
        if self.tol < 0:
            raise InputError(f"model.tol must be >= 0, got {self.tol}")
        if self.parameter_dtype not in ("float64", "float32"):
            raise InputError(f"model.parameter_dtype must be 'float64' or 'float32', got {self.parameter_dtype!r}")
        if not 0 <= self.posterior_floor < 1:
            raise InputError(f"model.posterior_floor must be in [0, 1), got {self.posterior_floor}")
        if isinstance(self.posterior_top_k, bool) or not isinstance(self.posterior_top_k, int) \
                or self.posterior_top_k < 0:
            raise InputError(f"model.posterior_top_k must be an integer >= 0 (0 = every path), "
                             f"got {self.posterior_top_k!r}")
        if self.block_size < 1:
            raise InputError(f"model.block_size must be >= 1, got {self.block_size}")
        if self.components < 1:
            raise InputError(f"model.components must be >= 1, got {self.components}")
        if self.posterior_floor > 0 and self.method in PER_NODE_POSTERIOR_METHODS:
            # Their responsibilities are per-node / per-depth distributions, not one per document.
            raise InputError(f"model.posterior_floor must be 0 for {self.method} (it applies to methods with "
                             "one posterior distribution per document)")

    @property
    def effective_top_k(self) -> int:
        """``posterior_top_k`` where it applies; 0 (exact) for the per-node / per-depth methods."""
        return 0 if self.method in PER_NODE_POSTERIOR_METHODS else int(self.posterior_top_k)

    def auto_params(self) -> List[str]:
        """The settings left to cross-validation ("auto") that matter for this method."""
        out = []
        if self.unlabeled_weight == AUTO and self.method in EM_METHODS:
            out.append("unlabeled_weight")
        if self.path_weight == AUTO and self.method in ("pcnb", "pcem"):
            out.append("path_weight")
        return out

    def resolved(self, **values) -> "ModelSettings":
        """A copy with ``values`` set and every remaining cross-validated "auto" at the paper's value (1)."""
        out = replace(self, **values)
        for name in ("unlabeled_weight", "path_weight"):
            if getattr(out, name) == AUTO:
                setattr(out, name, 1.0)
        return out


# Methods whose E-step responsibilities are per-node / per-depth distributions.
PER_NODE_POSTERIOR_METHODS = ("tdem", "wdem")

# The paper as written: Laplace smoothing, lambda = gamma = 1, raw counts, the exact E-step of Algorithm 1.
PAPER_MODEL_SETTINGS = dict(smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, doc_length=0.0, posterior_top_k=0)


def score_matrix(taxonomy: Taxonomy, method: str, components: int = 2, path_weight: float = 1.0) -> np.ndarray:
    """(R, K) node -> component score matrix: Eq. 2 for PC methods, leaf indicator for flat ones."""
    return method_spec(taxonomy, method, components, path_weight).score_matrix


def _weight(value) -> float:
    """A path / unlabelled weight as a number ("auto" not yet resolved counts as the paper's 1)."""
    return 1.0 if value == AUTO else float(value)


def vector_size(df: DataFrame, features_col: str) -> Optional[int]:
    """Length of the vectors in ``features_col`` from the column's ML metadata (None if absent)."""
    meta = df.schema[features_col].metadata.get("ml_attr", {})
    n = meta.get("num_attrs")
    if n is None and meta.get("attrs"):
        n = sum(len(v) for v in meta["attrs"].values())
    return None if n is None else int(n)


def check_vector_size(df: DataFrame, features_col: str, expected: int) -> None:
    """Refuse a features column whose ML metadata says another vector length than the model's vocabulary."""
    n = vector_size(df, features_col)
    if n is not None and n != expected:
        raise InputError(f"features column {features_col!r} holds vectors of length {n}, the model's vocabulary "
                         f"has {expected} terms: featurise with the same CountVectorizer model")


def check_label_paths(df: DataFrame, taxonomy: Taxonomy, labels_col: str = "labels",
                      max_errors: int = 10) -> None:
    """Raise a :class:`TaxonomyError` naming label paths that are not paths of the tree (pcem_spark.checks).

    Only the distinct wrong label paths (with one example id and a count)
    reach the driver, never the documents.
    """
    from .checks import require_known_label_paths
    require_known_label_paths(df, taxonomy, labels_col, max_listed=max_errors)


def infer_taxonomy(df: DataFrame, labels_col: str = "labels", max_paths: int = 100000) -> Taxonomy:
    """The tree implied by the distinct label paths of ``df`` (only those reach the driver)."""
    paths = [r[0] for r in df.where(F.col(labels_col).isNotNull()).select(labels_col).distinct()
             .limit(max_paths + 1).collect()]
    if len(paths) > max_paths:
        raise TaxonomyError(f"more than {max_paths:,} distinct label paths: pass the taxonomy as a file")
    tax = Taxonomy.from_label_paths(paths)
    log.info("taxonomy inferred from %d distinct label paths: %r", len(paths), tax)
    return tax


def prediction_source(df: DataFrame, id_col: str = "id", text_col: str = "text",
                      labels_col: str = "labels") -> DataFrame:
    """``id`` (string), ``text`` and ``labels`` (null when ``df`` has no labels column) of a table to predict."""
    labels = F.col(labels_col) if labels_col in df.columns else F.lit(None).cast("array<string>")
    return df.select(F.col(id_col).cast("string").alias("id"), F.col(text_col).alias("text"),
                     labels.alias("labels"))


class PathModel:
    """A fitted PCNB / PCEM / flat NB / flat EM model.

    Attributes
    ----------
    taxonomy : Taxonomy
    vocabulary : list of str, length V
    params : :class:`pcem_spark.pathnb.PathParameters` -- ``log_prior`` (R,)
        and the word distributions in sparse form; R = M paths for PCNB/PCEM
        and flat methods, the baselines' components otherwise
        (:mod:`pcem_spark.methods`). ``log_prior`` / ``log_theta`` read them
        (``log_theta`` densifies: O(R x V)).
    feature_settings, model_settings : the settings it was trained with
    """

    def __init__(self, taxonomy: Taxonomy, vocabulary: List[str], log_prior: Optional[np.ndarray],
                 log_theta, feature_settings: FeatureSettings, model_settings: ModelSettings,
                 training_summary: Optional[dict] = None):
        """``log_theta``: a :class:`~pcem_spark.pathnb.PathParameters` (then ``log_prior`` may be None)
        or a dense (R, V) array with its ``log_prior``."""
        self.spec: MethodSpec = method_spec(taxonomy, model_settings.method, model_settings.components,
                                            _weight(model_settings.path_weight))
        if isinstance(log_theta, pathnb.PathParameters):
            params = log_theta
        else:
            params = pathnb.PathParameters.from_log_theta(log_prior, np.asarray(log_theta, dtype=np.float64))
        if params.shape != (self.spec.n_components, len(vocabulary)) or params.log_prior.shape != (params.shape[0],):
            raise ValueError(f"parameters have shape {params.shape} with {params.log_prior.shape[0]} priors, "
                             f"expected ({self.spec.n_components}, {len(vocabulary)}) for {model_settings.method}")
        self.taxonomy = taxonomy
        self.vocabulary = list(vocabulary)
        self.params = params
        self.feature_settings = feature_settings
        self.model_settings = model_settings
        self.training_summary = training_summary or {}
        # Set when the model was fitted on a term-count vector column (PathEM featuresCol):
        # it then predicts from that column, and ``vocabulary`` names its indices.
        self.features_col: Optional[str] = None

    @property
    def log_prior(self) -> np.ndarray:
        return self.params.log_prior

    @property
    def log_theta(self) -> np.ndarray:
        """Dense (R, V) log theta: O(R x V) -- small models, tests and inspection only."""
        return self.params.log_theta()

    # ------------------------------------------------------------- predict
    def transform(self, df: DataFrame, id_col: str = "id", text_col: str = "text",
                  labels_col: str = "labels", min_probability: float = 0.0, top_k: int = 0) -> DataFrame:
        """The predictions table: one row per input row with id, path, leaf, probability, labels.

        A document with no known word gets the prior-only prediction.
        ``min_probability`` > 0 abstains: ``path`` stops at the deepest node
        of the predicted path whose marginal probability is >= it (possibly
        empty), ``leaf`` is its last node (null when empty) and a
        ``path_probability`` column (that node's marginal; 1 for an empty
        path) is added; ``top_k`` > 0 adds ``top_paths``, the k most probable
        paths with their probabilities. Defaults: today's table exactly
        (:data:`PREDICTION_SCHEMA`); see :func:`prediction_schema`.
        """
        check_prediction_options(min_probability, top_k)
        src = prediction_source(df, id_col, text_col, labels_col)
        return self.predict_columns(src, passthrough=["id", "labels"], min_probability=min_probability,
                                    top_k=top_k).select(prediction_schema(min_probability, top_k).names)

    def predict_columns(self, df: DataFrame, passthrough: List[str], text_col: str = "text",
                        prefix: str = "", features_col: Optional[str] = None, min_probability: float = 0.0,
                        top_k: int = 0) -> DataFrame:
        """``passthrough`` columns of ``df`` plus ``path``, ``leaf``, ``probability``.

        ``min_probability`` / ``top_k``: abstaining and top-k paths, as
        :meth:`transform` (then also ``path_probability`` / ``top_paths``).
        Top-down and win-driven models score the top-k paths and node
        marginals by :func:`pcem_spark.pathnb.path_posteriors` (products of
        their node probabilities), while ``path`` stays their decoded path.

        The posterior is computed per CSR block of ``block_size`` rows; rows
        are never dropped or reordered within a partition. With
        ``features_col`` the documents are already term-count vectors over
        this model's vocabulary (e.g. a Spark ML ``CountVectorizer`` stage)
        and ``text_col`` is not read.
        """
        require_classic_session(df, "PathModel.transform / predict_columns",
                                "a broadcast variable of the model's parameters (SparkContext.broadcast)")
        spark = df.sparkSession
        check_prediction_options(min_probability, top_k)
        out_fields = [df.schema[c] for c in passthrough] + [
            T.StructField(prefix + f.name, f.dataType, f.nullable)
            for f in prediction_schema(min_probability, top_k).fields if f.name != "id" and f.name != "labels"]
        if features_col is not None:
            if features_col not in df.columns:
                raise InputError(f"features column {features_col!r} not found; columns are {df.columns}")
            check_vector_size(df, features_col, len(self.vocabulary))
            feats = df.withColumn("_pcem_features", F.col(features_col))
        else:
            feats = featurize(df, self.vocabulary, self.feature_settings, text_col=text_col,
                              features_col="_pcem_features")
        real_paths = [self.taxonomy.real_path(j) for j in range(self.taxonomy.n_paths)]
        # The sparse parameters at the model's parameter dtype (float32 halves the broadcast).
        tables = pathnb.scoring_tables(self.params, self.model_settings.parameter_dtype)
        bc = spark.sparkContext.broadcast((tables, real_paths, self.spec.structure))
        del tables
        doc_length = float(self.model_settings.doc_length)
        block_size = self.model_settings.block_size
        vocab_size = len(self.vocabulary)
        n_keep = len(passthrough)
        names = [f.name for f in out_fields]

        if min_probability > 0 or top_k > 0:
            path_node = self.taxonomy.path_node_matrix(sparse=True)
            bc_paths = spark.sparkContext.broadcast(
                (path_node, pathnb.path_node_table(path_node, self.taxonomy.is_dummy), list(self.taxonomy.nodes)))

            def predict_batches(batches):
                # As below, plus each block's path posteriors -> kept prefix / top-k paths (pathnb).
                tables, paths, structure = bc.value
                path_node, path_nodes, node_names = bc_paths.value
                return engine.predicted_path_batches(
                    batches, n_keep, vocab_size, block_size, paths, names,
                    lambda X: pathnb.predict_path_details(X, structure, doc_length, tables, path_node, path_nodes,
                                                          min_probability, top_k),
                    node_names=node_names, path_nodes=path_nodes, min_probability=min_probability, top_k=top_k)

            return feats.select(*passthrough, "_pcem_features").mapInArrow(predict_batches,
                                                                            T.StructType(out_fields))

        def predict_batches(batches):
            # Arrow in, Arrow out: one sparse x dense product per block, no per-row Python.
            tables, paths, structure = bc.value
            return engine.predicted_path_batches(
                batches, n_keep, vocab_size, block_size, paths, names,
                lambda X: pathnb.predict_paths(X, None, None, structure, doc_length, tables=tables))

        return feats.select(*passthrough, "_pcem_features").mapInArrow(predict_batches, T.StructType(out_fields))

    # ----------------------------------------------------------- persistence
    def save(self, path: str, overwrite: bool = False, class_name: str = "pcem_spark.model.PathModel") -> None:
        """Write the model directory (works on any Hadoop filesystem).

        Layout: ``metadata/`` one JSON line (format version, taxonomy,
        settings, summary); ``vocabulary/`` Parquet (index, term);
        ``parameters/`` Parquet, one row per path / component: index,
        log_prior, log_base and the non-zero ``log_ratio`` entries as int32
        term indices and float64 values (bytes); see
        :class:`pcem_spark.pathnb.PathParameters`.
        """
        from .outputs import atomic_output
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("PathModel.save needs an active SparkSession")
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
            "training_summary": self.training_summary,
        }
        # Built in a temporary sibling and moved into place with its completion
        # marker (pcem_spark.outputs): a killed save never leaves new metadata
        # beside old parameters, and load() refuses a directory without it.
        with atomic_output(spark, path, "model", overwrite=overwrite) as staged:
            spark.createDataFrame([(json.dumps(meta),)], "value string").coalesce(1) \
                .write.text(f"{staged.tmp}/metadata")
            spark.createDataFrame(list(enumerate(self.vocabulary)), "index int, term string") \
                .write.parquet(f"{staged.tmp}/vocabulary")
            # Sparse rows as little-endian bytes: a Python list per row would cost
            # ~30 bytes per float on the driver; the parameters are O(nnz), never R x V.
            P = self.params
            ratio = P.log_ratio
            rows = [(j, float(P.log_prior[j]), float(P.log_base[j]),
                     ratio.indices[ratio.indptr[j]:ratio.indptr[j + 1]].astype("<i4").tobytes(),
                     ratio.data[ratio.indptr[j]:ratio.indptr[j + 1]].astype("<f8").tobytes())
                    for j in range(P.shape[0])]
            spark.createDataFrame(rows, "path_index int, log_prior double, log_base double, "
                                        "term_indices binary, log_ratio binary") \
                .write.parquet(f"{staged.tmp}/parameters")
            staged.info.update({"n_paths": int(P.shape[0]), "vocab_size": len(self.vocabulary),
                                "nnz_parameters": int(ratio.nnz)})

    @classmethod
    def load(cls, path: str) -> "PathModel":
        """Read a model directory written by :meth:`save`; refuse an incomplete or corrupt one (ValueError)."""
        from .outputs import require_complete
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("PathModel.load needs an active SparkSession")
        require_complete(spark, path, "model")
        meta_rows = spark.read.text(f"{path}/metadata").collect()
        try:
            meta = json.loads(meta_rows[0]["value"])
            version = meta.get("format_version")
        except (IndexError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}/metadata: not a pcem-spark model metadata line ({type(exc).__name__}: "
                             f"{exc}); the model directory is damaged, retrain it") from None
        if version not in READABLE_FORMAT_VERSIONS:
            raise InputError(f"{path}: model format version {version}, this pcem-spark reads "
                             f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
        try:
            taxonomy = Taxonomy(meta["taxonomy"]["children"], root=meta["taxonomy"]["root"])
            vocab_rows = spark.read.parquet(f"{path}/vocabulary").orderBy("index").collect()
            vocabulary = [r["term"] for r in vocab_rows]
            params = _read_parameters(spark, path, version, len(vocabulary))
            # Models written before unlabeled_weight / path_weight existed were trained with the paper's 1.
            model_settings = ModelSettings(**meta["model_settings"]).resolved()
            feature_settings = _feature_settings_of(meta["feature_settings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: damaged model ({type(exc).__name__}: {exc}); retrain it") from None
        if params.shape[1] != len(vocabulary) or len(vocabulary) != meta.get("vocab_size", len(vocabulary)):
            raise InputError(f"{path}: damaged model: parameters are {params.shape[0]} x {params.shape[1]}, "
                             f"the vocabulary has {len(vocabulary)} terms and the metadata says "
                             f"{meta.get('vocab_size')}; retrain it")
        try:
            model = cls(taxonomy, vocabulary, None, params, feature_settings,
                        model_settings, meta.get("training_summary"))
        except ValueError as exc:
            raise InputError(f"{path}: damaged model ({exc}); retrain it") from None
        model.features_col = meta.get("features_col")
        return model


def _read_parameters(spark: SparkSession, path: str, version: int, vocab_size: int) -> pathnb.PathParameters:
    """The ``parameters/`` table of a model directory as sparse parameters (either format version)."""
    import scipy.sparse as sp
    table = spark.read.parquet(f"{path}/parameters")
    n_rows = table.count()
    if version == 1:
        # Format 1 stored dense log theta rows.
        check_result_size(spark.sparkContext, n_rows * vocab_size * 8.0,
                          f"{path}: the model's parameters ({n_rows:,} rows x {vocab_size:,} terms)")
        rows = table.orderBy("path_index").collect()
        log_theta = np.vstack([np.frombuffer(r["log_theta"], dtype="<f8") for r in rows])
        return pathnb.PathParameters.from_log_theta(np.array([r["log_prior"] for r in rows]), log_theta)
    size = table.select(F.sum(F.length("term_indices") + F.length("log_ratio"))).first()[0] or 0
    check_result_size(spark.sparkContext, float(size) + n_rows * 32.0,
                      f"{path}: the model's parameters ({n_rows:,} rows, {size:,} bytes of non-zero entries)")
    rows = table.orderBy("path_index").collect()
    if [r["path_index"] for r in rows] != list(range(len(rows))):
        raise InputError("parameter rows are not numbered 0..R-1")
    indices = [np.frombuffer(r["term_indices"], dtype="<i4") for r in rows]
    values = [np.frombuffer(r["log_ratio"], dtype="<f8") for r in rows]
    if any(len(i) != len(v) for i, v in zip(indices, values)) or \
            any(len(i) and (i.min() < 0 or i.max() >= vocab_size) for i in indices):
        raise InputError("parameter rows have mismatched or out-of-vocabulary term indices")
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in indices])]).astype(np.int64)
    ratio = sp.csr_matrix((np.concatenate(values) if values else np.zeros(0),
                           np.concatenate(indices) if indices else np.zeros(0, np.int32), indptr),
                          shape=(len(rows), vocab_size))
    return pathnb.PathParameters(np.array([r["log_prior"] for r in rows]),
                                 np.array([r["log_base"] for r in rows]), ratio)


def _feature_settings_of(d: dict) -> FeatureSettings:
    """FeatureSettings of saved metadata; keys a newer version added map to the behaviour of the old one."""
    return FeatureSettings.from_dict(d)

def train(docs: DataFrame, taxonomy: Taxonomy, feature_settings: FeatureSettings,
          model_settings: ModelSettings, vocabulary: Optional[List[str]] = None,
          featurized: Optional[DataFrame] = None, tune=None, seed: Optional[int] = None,
          extra_grid: Optional[Dict[str, list]] = None, init_model=None,
          retune_auto: bool = False) -> Tuple[PathModel, engine.FitResult]:
    """Fit a model on a validated documents DataFrame (``id, text, labels``).

    ``vocabulary``/``featurized`` let several methods share one featurisation
    (the experiment runner); by default the vocabulary is fitted on ``docs``.
    Settings left at ``"auto"`` (unlabelled weight, path weight) and any
    ``extra_grid`` (``pcem train --tune``) are chosen by cross-validation on
    the labelled documents (:func:`pcem_spark.tuning.resolve_auto`, settings
    ``tune``); the chosen values and CV scores go into the training summary.

    ``init_model`` (a model directory or a :class:`pcem_spark.warm.WarmStart`):
    EM starts from that model's parameters (:mod:`pcem_spark.warm`); settings
    left at "auto" take its values, unless ``retune_auto`` (``pcem train
    --tune``) cross-validates the weights again, each fit warm-started.
    """
    require_classic_session(docs, "model.train", engine.RDD_NEEDS)
    model_settings.validate()
    feature_settings.validate()
    if featurized is None:
        check_label_paths(docs, taxonomy)
        from .checks import label_coverage, warn_label_coverage
        warn_label_coverage(label_coverage(docs, taxonomy), taxonomy)
        if vocabulary is None:
            vocabulary = fit_vocabulary(docs, feature_settings)
        featurized = featurize(docs.select("id", "text", "labels"), vocabulary, feature_settings)
    from .warm import CROSS_VALIDATED_SETTINGS, as_warm_start
    warm = as_warm_start(init_model)
    if warm is not None:
        warm.check(taxonomy, model_settings)
        if not retune_auto:  # the weights left at "auto" are the previous model's, not cross-validated again
            model_settings, _ = warm.inherit(model_settings, CROSS_VALIDATED_SETTINGS)
    info = None
    if model_settings.auto_params() or extra_grid:
        from .tuning import resolve_auto
        featurized = featurized.cache()
        try:
            model_settings, info, tuned = resolve_auto(
                featurized, taxonomy, vocabulary, feature_settings, model_settings, tune,
                seed=model_settings.seed if seed is None else seed, extra_grid=extra_grid,
                init_model=None if warm is None else warm.path)
        except BaseException:
            featurized.unpersist()
            raise
        if tuned is not None:
            featurized.unpersist()
            summary = tuned.training_summary
            result = engine.FitResult(tuned.params, n_iter=summary.get("n_iter", 0),
                                      converged=summary.get("converged", False),
                                      loglik_history=summary.get("loglik_history", []),
                                      iter_seconds=summary.get("iter_seconds", []),
                                      n_labeled=summary.get("n_labeled", 0),
                                      n_unlabeled=summary.get("n_unlabeled", 0),
                                      smoothing=summary.get("smoothing", 1.0))
            return tuned, result
    blocks = engine.cache_blocks(engine.blocks_from_labels(
        featurized, taxonomy.path_lookup(), taxonomy.path_node_matrix(sparse=True), len(vocabulary),
        model_settings.block_size))
    try:
        model, result = fit_blocks(blocks, taxonomy, vocabulary, feature_settings, model_settings,
                                   warm_start=warm)
        if info is not None:
            model.training_summary["tuning"] = info
        return model, result
    finally:
        blocks.unpersist()
        if info is not None:
            featurized.unpersist()


def train_weak(docs: DataFrame, taxonomy: Taxonomy, descriptions: Optional[Dict[str, str]],
               feature_settings: FeatureSettings, model_settings: ModelSettings, weak_mode: str = "argmax",
               min_similarity: float = 0.0, weak_col: Optional[str] = None,
               warm_start=None) -> Tuple[PathModel, engine.FitResult]:
    """Fit on weak labels from label descriptions (the dataless setting).

    Every document (or, with ``weak_col``, those where that boolean column is
    true) gets node scores from its cosine similarity to the descriptions --
    or, with ``descriptions=None``, from its precomputed ``similarities`` map;
    documents without a confident weak label stay unlabelled. True labels in
    ``docs`` are ignored.
    """
    from .weak import weak_label, weak_label_from_similarities
    require_classic_session(docs, "model.train_weak", engine.RDD_NEEDS)
    model_settings.validate()
    feature_settings.validate()
    cols = ["id", "text"] + ([] if descriptions else ["similarities"]) + ([weak_col] if weak_col else [])
    vocabulary = fit_vocabulary(docs.select("id", "text", F.lit(None).cast("array<string>").alias("labels")),
                                replace(feature_settings, vocabulary_docs="all"))
    feats = featurize(docs.select(*cols), vocabulary, feature_settings)
    if descriptions:
        weak = weak_label(feats, vocabulary, feature_settings, taxonomy, descriptions, weak_mode,
                          min_similarity, model_settings.block_size)
    else:
        weak = weak_label_from_similarities(feats, taxonomy, weak_mode, min_similarity, model_settings.block_size)
    if weak_col:
        weak = weak.withColumn("node_scores", F.when(F.col(weak_col), F.col("node_scores")))
    blocks = engine.cache_blocks(engine.blocks_from_node_scores(
        weak, taxonomy.n_nodes, len(vocabulary), model_settings.block_size))
    try:
        return fit_blocks(blocks, taxonomy, vocabulary, feature_settings, model_settings, warm_start=warm_start)
    finally:
        blocks.unpersist()


def fit_blocks(blocks, taxonomy: Taxonomy, vocabulary: List[str], feature_settings: FeatureSettings,
               model_settings: ModelSettings, warm_start=None) -> Tuple[PathModel, engine.FitResult]:
    """Fit one method on already packed (and cached) blocks of the training documents.

    ``warm_start`` (:class:`pcem_spark.warm.WarmStart`): EM starts from that
    model's parameters; its values fill the settings left at "auto".
    """
    model_settings.validate()
    init_params = prior_smoothing = warm_info = None
    if warm_start is not None:
        model_settings, prior_smoothing, init_params, warm_info = warm_start.prepare(taxonomy, vocabulary,
                                                                                     model_settings)
    if model_settings.auto_params():
        raise InputError(f"{model_settings.method}: {', '.join(model_settings.auto_params())} = \"auto\" is chosen "
                         "by cross-validation on the documents (pcem_spark.tuning.resolve_auto / "
                         "model.train), not on packed blocks; pass numbers here")
    model_settings = model_settings.resolved()
    log.info("%s: vocabulary of %d terms, %d paths, taxonomy depth %d",
             model_settings.method, len(vocabulary), taxonomy.n_paths, taxonomy.depth)
    if taxonomy.n_paths == 1:  # every fit comes through here: train, train_weak, PathEM, the experiment
        log.warning("the taxonomy has one leaf, %r: every document will get this path, %s, whatever its text "
                    "(a classifier needs at least two leaves; is the taxonomy file or the labels column the "
                    "right one?)", taxonomy.leaves[0], taxonomy.real_path(0))
    spec = method_spec(taxonomy, model_settings.method, model_settings.components, model_settings.path_weight)
    result = engine.fit(blocks, spec.score_matrix, len(vocabulary),
                        em=spec.em, smoothing=model_settings.smoothing,
                        max_iter=model_settings.max_iter, tol=model_settings.tol,
                        label=model_settings.method.upper(), posterior_floor=model_settings.posterior_floor,
                        dtype=model_settings.parameter_dtype, structure=spec.structure,
                        seed=model_settings.seed, top_k=model_settings.effective_top_k,
                        unlabeled_weight=float(model_settings.unlabeled_weight),
                        doc_length=float(model_settings.doc_length), prior_smoothing=prior_smoothing,
                        init_params=init_params)
    summary = {"n_labeled": result.n_labeled, "n_unlabeled": result.n_unlabeled, "n_iter": result.n_iter,
               "converged": result.converged, "loglik_history": result.loglik_history,
               "iter_seconds": result.iter_seconds, "smoothing": result.smoothing,
               "prior_smoothing": result.prior_smoothing}
    if warm_info is not None:  # pcem_spark.warm: where EM started
        summary["init_model"] = warm_info["path"]
        summary["warm_start"] = warm_info
    if result.smoothing_evidence is not None:
        summary["smoothing_evidence"] = result.smoothing_evidence
    if result.path_mass is not None:  # per path / component, for pcem inspect
        summary["path_mass_labeled"] = [round(float(x), 6) for x in result.path_mass_labeled]
        summary["path_mass"] = [round(float(x), 6) for x in result.path_mass]
    model = PathModel(taxonomy, vocabulary, None, result.params,
                      feature_settings, replace(model_settings, smoothing=result.smoothing), summary)
    return model, result
