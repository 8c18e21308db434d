"""The Params of :class:`pcem_spark.ml.PathEM` / ``PathEMModel`` and their one mapping onto the settings.

``FEATURE_PARAMS``, ``MODEL_PARAMS`` and ``TUNE_PARAMS`` map each field of
:class:`~pcem_spark.engine.features.FeatureSettings`,
:class:`~pcem_spark.model.settings.ModelSettings` and
:class:`~pcem_spark.ml.tune_settings.TuneSettings` to the PathEM Param that
carries it (``unlabeled_weight`` -> ``unlabeledWeight``). Every conversion
goes through them: :func:`param_values` (settings -> Param values: the Param
defaults, a loaded model's Params, the estimator that cross-validation fits)
and :func:`settings_from_params` (Params -> settings: what a fit trains with).
"""

from __future__ import annotations

from typing import Any, Dict, Type, TypeVar

from pyspark.ml.param import Param, Params, TypeConverters

from pcem_spark.engine.features import FeatureSettings
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import AUTO, ModelSettings

__all__ = ["FEATURE_PARAMS", "MODEL_PARAMS", "TUNE_PARAMS", "param_values", "settings_from_params"]

# Settings field -> PathEM Param name, one table per settings class.
FEATURE_PARAMS: Dict[str, str] = {
    "token_pattern": "tokenPattern",
    "min_token_length": "minTokenLength",
    "stop_words": "stopWords",
    "min_df": "minDF",
    "max_df": "maxDF",
    "vocab_size": "vocabSize",
    "vocabulary_docs": "vocabularyDocs",
    "normalize": "normalize",
    "cjk": "cjk",
    "embedding": "embedding",
    "embedding_model": "embeddingModel",
}
MODEL_PARAMS: Dict[str, str] = {
    "method": "method",
    "smoothing": "smoothing",
    "unlabeled_weight": "unlabeledWeight",
    "path_weight": "pathWeight",
    "doc_length": "docLength",
    "max_iter": "maxIter",
    "tol": "tol",
    "block_size": "blockSize",
    "posterior_floor": "posteriorFloor",
    "posterior_top_k": "posteriorTopK",
    "parameter_dtype": "parameterDtype",
    "components": "components",
    "seed": "seed",
    "calibration": "calibration",
    "names": "names",
    "names_weight": "namesWeight",
    "names_fade": "namesFade",
    "names_kept_tokens": "namesKeptTokens",
    "family": "family",
    "linear_c": "linearC",
    "generative_weight": "generativeWeight",
    "linear_weights": "linearWeights",
    "embedding_weight": "embeddingWeight",
}
TUNE_PARAMS: Dict[str, str] = {
    "folds": "tuneFolds",
    "metric": "tuneMetric",
    "strategy": "tuneStrategy",
    "max_labeled": "tuneMaxLabeled",
    "max_unlabeled": "tuneMaxUnlabeled",
    "max_iter": "tuneMaxIter",
    "max_doc_paths": "tuneMaxDocPaths",
    "max_parameters": "tuneMaxParameters",
}

S = TypeVar("S")


def param_values(settings: Any, table: Dict[str, str]) -> Dict[str, Any]:
    """``{Param name: value}`` of ``settings`` through ``table`` (e.g. ``MODEL_PARAMS``)."""
    return {param: getattr(settings, name) for name, param in table.items()}


def settings_from_params(params: Params, cls: Type[S], table: Dict[str, str]) -> S:
    """A ``cls`` (a settings dataclass) whose fields are the values (or defaults) of ``params``' Params in ``table``."""
    return cls(**{name: params.getOrDefault(param) for name, param in table.items()})


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
    calibration = Param(
        Params._dummy(),
        "calibration",
        "'temperature' (probabilities calibrated on out-of-fold predictions; paths unchanged) or 'none'",
        TypeConverters.toString,
    )
    names = Param(
        Params._dummy(),
        "names",
        "category names as evidence: 'auto' (decided from the labelled documents), 'on' (each path's node "
        "names and descriptions as one more labelled document of it) or 'off'",
        TypeConverters.toString,
    )
    namesWeight = Param(
        Params._dummy(),
        "namesWeight",
        "how many average labelled documents each name document weighs (model.names) when its path has one "
        "labelled document",
        TypeConverters.toFloat,
    )
    namesFade = Param(
        Params._dummy(),
        "namesFade",
        "how a name document's weight fades with its path's labelled documents n: namesWeight / n ** namesFade "
        "(0 = fixed)",
        TypeConverters.toFloat,
    )
    namesKeptTokens = Param(
        Params._dummy(),
        "namesKeptTokens",
        "tokens of each name document's average labelled documents that never fade (namesFade)",
        TypeConverters.toFloat,
    )
    family = Param(
        Params._dummy(),
        "family",
        "model family: 'generative' (PCNB / PCEM alone), 'combined' (pooled with a softmax regression over "
        "paths on sublinear tf-idf), 'discriminative' (the softmax regression alone) or 'vmf' (a von Mises-Fisher "
        "mixture of the document vectors beside the words' generative model)",
        TypeConverters.toString,
    )
    linearC = Param(
        Params._dummy(),
        "linearC",
        "the softmax regression's inverse L2 strength (scikit-learn's C; family combined / discriminative)",
        TypeConverters.toFloat,
    )
    generativeWeight = Param(
        Params._dummy(),
        "generativeWeight",
        "weight of the generative log path posterior in the combined family's scores (>= 0), or 'auto' "
        "(cross-validated)",
        _number_or_auto,
    )
    linearWeights = Param(
        Params._dummy(),
        "linearWeights",
        "the softmax regression's free weights: 'dense' (paths x terms), 'observed' (the (path, term) "
        "pairs seen in a labelled document) or 'auto' (dense up to 2^23 cells)",
        TypeConverters.toString,
    )
    embeddingWeight = Param(
        Params._dummy(),
        "embeddingWeight",
        "the scale of the document vectors beside the softmax regression's tf-idf rows (>= 0; 0 = words alone), "
        "or 'auto' (cross-validated when the documents have vectors)",
        _number_or_auto,
    )
    embedding = Param(
        Params._dummy(),
        "embedding",
        "the documents' vector column: 'auto' (a column named 'embedding' when there is one), 'none', or a name",
        TypeConverters.toString,
    )
    embeddingModel = Param(
        Params._dummy(),
        "embeddingModel",
        "the name of the encoder that made the vectors (recorded in the model; checked at predict when set)",
        TypeConverters.toString,
    )
    unlabeledTable = Param(
        Params._dummy(),
        "unlabeledTable",
        "name of a table / temporary view whose rows are added to every fit as unlabelled "
        "documents (same feature / text column; cross-validation keeps them in every "
        "fold's training set); empty = none",
        TypeConverters.toString,
    )
    labeledTable = Param(
        Params._dummy(),
        "labeledTable",
        "name of a table / temporary view whose labelled rows are added to every fit (same feature and labels "
        "columns) and never scored: cross-validation's documents that no fold may hold out, each the only one "
        "of its leaf; empty = none",
        TypeConverters.toString,
    )
    tokenPattern = Param(Params._dummy(), "tokenPattern", "Java regex of a token", TypeConverters.toString)
    minTokenLength = Param(Params._dummy(), "minTokenLength", "shortest token kept", TypeConverters.toInt)
    stopWords = Param(
        Params._dummy(),
        "stopWords",
        "'auto' (the English list or none, chosen by a naive-Bayes CV on the labelled documents), "
        "a stop-word language or 'none'",
        TypeConverters.toString,
    )
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
    tuneStrategy = Param(
        Params._dummy(),
        "tuneStrategy",
        "sampled | exhaustive: that cross-validation on a bounded seeded sample (each fit one task, "
        "EM-lambda rescaled) or Spark ML's CrossValidator over every document",
        TypeConverters.toString,
    )
    tuneMaxLabeled = Param(
        Params._dummy(),
        "tuneMaxLabeled",
        "sampled cross-validation: at most about this many labelled documents",
        TypeConverters.toInt,
    )
    tuneMaxUnlabeled = Param(
        Params._dummy(),
        "tuneMaxUnlabeled",
        "sampled cross-validation: at most about this many unlabelled documents",
        TypeConverters.toInt,
    )
    tuneMaxDocPaths = Param(
        Params._dummy(),
        "tuneMaxDocPaths",
        "sampled cross-validation: each kind of document at most this many (document, path) pairs (wide taxonomies "
        "sample fewer documents, at least 1,000)",
        TypeConverters.toInt,
    )
    tuneMaxParameters = Param(
        Params._dummy(),
        "tuneMaxParameters",
        "automatic tuning: leave path_weight > 0 out of the grid when it would make more than this many "
        "non-zero word parameters (estimated from the labelled documents; 0 = no bound)",
        TypeConverters.toInt,
    )
    tuneMaxIter = Param(
        Params._dummy(),
        "tuneMaxIter",
        "sampled cross-validation: EM iterations of each fit (0 = maxIter); the refit runs to convergence",
        TypeConverters.toInt,
    )
    initModel = Param(
        Params._dummy(),
        "initModel",
        "warm start: a saved PathModel / PathEMModel directory whose "
        "parameters EM starts from (same taxonomy and method; terms mapped by name; Params left at "
        "'auto' take its values); empty = start from naive Bayes",
        TypeConverters.toString,
    )
    checkpointDir = Param(
        Params._dummy(),
        "checkpointDir",
        "fit: keep a checkpoint of the fit in this folder (its stages, EM every checkpointInterval iterations), "
        "and resume from it when the same fit (Params, input files, plan) runs again; empty = the SparkContext's "
        "checkpoint directory (SparkContext.setCheckpointDir), if any; deleted when the fit returns",
        TypeConverters.toString,
    )
    checkpointInterval = Param(
        Params._dummy(),
        "checkpointInterval",
        "fit: EM iterations between two checkpoints (>= 1)",
        TypeConverters.toInt,
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
        self._setDefault(
            idCol="id",
            textCol="text",
            featuresCol="",
            labelsCol="labels",
            taxonomy="",
            unlabeledTable="",
            labeledTable="",
            supervision="labels",
            descriptions="",
            weakMode="argmax",
            minSimilarity=0.0,
            minProbability=0.0,
            topK=0,
            initModel="",
            checkpointDir="",
            checkpointInterval=5,
            **param_values(FeatureSettings(), FEATURE_PARAMS),
            **param_values(ModelSettings(), MODEL_PARAMS),
            **param_values(TuneSettings(), TUNE_PARAMS),
        )

    def feature_settings(self) -> FeatureSettings:
        return settings_from_params(self, FeatureSettings, FEATURE_PARAMS)

    def model_settings(self) -> ModelSettings:
        return settings_from_params(self, ModelSettings, MODEL_PARAMS)

    def tune_settings(self) -> TuneSettings:
        return settings_from_params(self, TuneSettings, TUNE_PARAMS)

    def _set_from_model(self, pm: PathModel) -> None:
        self._set(
            taxonomy=pm.taxonomy.to_json(),
            **param_values(pm.model_settings, MODEL_PARAMS),
            **param_values(pm.feature_settings, FEATURE_PARAMS),
        )
        if pm.features_col:
            self._set(featuresCol=pm.features_col)
