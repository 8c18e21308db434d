"""Discriminative baselines of the paper's Table 2, trained with Spark MLlib.

All three see only the (weakly) labelled documents, as TF-IDF vectors (IDF
fitted by MLlib on the same training documents as the vocabulary, rows L2
normalised -- the usual input of LibLinear-style text classifiers), and
predict a leaf; the ancestors come from the taxonomy, so every prediction is
a consistent root-to-leaf path.

=============  ================================================================
``lr``         one-vs-rest L2 logistic regression over the leaves (MLlib
               ``OneVsRest(LogisticRegression)``); the paper used LibLinear.
``svm``        one-vs-rest L2 linear SVM (MLlib ``OneVsRest(LinearSVC)``).
``hiercost``   HierCost (Charuvaka & Rangwala, ECML-PKDD 2015): one binary
               cost-sensitive logistic regression per leaf node, where a
               negative example's cost grows with the tree distance between
               its own leaf and the classifier's leaf (the "TrD" costs,
               scaled to (0, 1] by the largest distance; positives cost 1),
               predicting the leaf whose classifier scores highest.
               Costs enter MLlib as ``weightCol``; MLlib divides the
               weighted loss by the sum of the weights, so HierCost's
               effective ``C`` is ``C n / sum(costs)`` (within ~5% of ``C``
               on 20NG, where most negatives cost 1).
=============  ================================================================

Regularisation follows LibLinear's defaults: ``C = 1`` and no bias term.
MLlib's objective is the mean loss plus ``regParam/2 ||w||^2``, so
``regParam = 1 / (C n)`` for ``n`` training documents. Features are not
standardised (TF-IDF already is on one scale, as in LibLinear). No intercept
matters: MLlib leaves the intercept unregularised, and with ~8 documents per
class and ``C = 1`` the weights are small, so class-size differences in the
intercepts decided most predictions (measured on a 2,000-document 20NG
sample at 10% labels: LR micro-F1 39.6 with an intercept, vs SVM 66.0).
The one-vs-rest binary fits are tiny, latency-bound Spark jobs, so they run
``parallelism`` at a time, and stop at ``tol = 1e-4`` (MLlib's default 1e-6
is far stricter than LibLinear's stopping rule and ran most fits to maxIter).
Trained coefficients are pulled to the driver
(L x V, the size of a naive Bayes model) and prediction is one sparse x dense
product per Arrow block, like the generative models.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import List, NamedTuple, Tuple

import numpy as np
from pyspark.ml.classification import LinearSVC, LogisticRegression, OneVsRest
from pyspark.ml.feature import IDF, Normalizer
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.core.decoding import decode
from pcem_spark.core.methods import DISCRIMINATIVE
from pcem_spark.core.similarity import tfidf_rows
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.arrow_io import PredictionLayout, csr_of, predicted_path_batches
from pcem_spark.engine.features import FeatureSettings, featurize
from pcem_spark.errors import InputError
from pcem_spark.model.schema import PREDICTION_SCHEMA, prediction_source

__all__ = ["tree_distance_matrix", "hiercost_costs", "LinearSettings", "LinearWeights", "LinearLeafModel", "fit_linear"]

log = logging.getLogger(__name__)


def tree_distance_matrix(taxonomy: Taxonomy) -> np.ndarray:
    """(M, M) number of edges between the (real) leaves of every two paths."""
    paths = [taxonomy.real_path(j) for j in range(taxonomy.n_paths)]
    M = len(paths)
    dist = np.zeros((M, M))
    for a in range(M):
        for b in range(M):
            common = 0
            for x, y in zip(paths[a], paths[b]):
                if x != y:
                    break
                common += 1
            dist[a, b] = (len(paths[a]) - common) + (len(paths[b]) - common)
    return dist


def hiercost_costs(distance: np.ndarray, target: int) -> np.ndarray:
    """(M,) cost of an example of each path for the binary classifier of path ``target`` (TrD).

    The positive class (``target`` itself) costs 1; a negative costs its tree
    distance to ``target`` divided by the largest distance from ``target``,
    so a sibling's document is a cheaper mistake than a far branch's.
    """
    d = np.asarray(distance[target], dtype=np.float64)
    top = d.max() if d.max() > 0 else 1.0
    cost = d / top
    cost[target] = 1.0
    return cost


class LinearSettings(NamedTuple):
    """How :func:`fit_linear` trains (LibLinear-style regularisation, MLlib optimiser limits)."""

    C: float = 1.0  # inverse regularisation strength: regParam = 1 / (C n)
    max_iter: int = 100
    parallelism: int = 8  # one-vs-rest / per-leaf binary fits run this many at a time
    tol: float = 1e-4


class LinearWeights(NamedTuple):
    """A fitted linear leaf classifier's arrays (L classes, V terms)."""

    idf: np.ndarray  # (V,)
    coefficients: np.ndarray  # (L, V)
    intercepts: np.ndarray  # (L,)
    leaf_paths: np.ndarray  # (L,) path index of each class


class LinearLeafModel:
    """A linear classifier over the leaves: ``score = tfidf(x) @ W.T + b``; prediction = best leaf's path.

    ``probability`` is the softmax of the leaf scores at the best leaf (a
    confidence, not a calibrated probability).
    """

    def __init__(
        self,
        method: str,
        taxonomy: Taxonomy,
        vocabulary: List[str],
        weights: LinearWeights,
        feature_settings: FeatureSettings,
        block_size: int = 4096,
    ):
        self.method = method
        self.taxonomy = taxonomy
        self.vocabulary = list(vocabulary)
        self.idf = np.asarray(weights.idf, dtype=np.float64)
        self.coefficients = np.asarray(weights.coefficients, dtype=np.float64)  # (L, V)
        self.intercepts = np.asarray(weights.intercepts, dtype=np.float64)  # (L,)
        self.leaf_paths = np.asarray(weights.leaf_paths, dtype=np.int64)  # (L,) path index of each class
        self.feature_settings = feature_settings
        self.block_size = block_size

    def transform(
        self, df: DataFrame, id_col: str = "id", text_col: str = "text", labels_col: str = "labels"
    ) -> DataFrame:
        """The predictions table (id, path, leaf, probability, labels, in_taxonomy: null, this model has no
        word distributions), one row per input row."""
        src = prediction_source(df, id_col, text_col, labels_col)
        feats = featurize(src, self.vocabulary, self.feature_settings, features_col="_features")
        real_paths = [self.taxonomy.real_path(int(j)) for j in self.leaf_paths]
        bc = df.sparkSession.sparkContext.broadcast((self.idf, self.coefficients, self.intercepts, real_paths))
        block_size, vocab_size = self.block_size, len(self.vocabulary)
        out_schema = T.StructType(
            [PREDICTION_SCHEMA[c] for c in ("id", "labels", "path", "leaf", "probability", "in_taxonomy")]
        )

        def score(X, idf, W, b):
            # The shared decoder: argmax of the leaf scores and their softmax there.
            return decode(np.asarray(tfidf_rows(X, idf) @ W.T) + b[None, :])

        def predict_batches(batches):
            idf, W, b, paths = bc.value
            layout = PredictionLayout(paths, out_schema.names)
            to_matrix = partial(csr_of, vocab_size=vocab_size)
            return predicted_path_batches(batches, 2, to_matrix, block_size, layout, lambda X: score(X, idf, W, b))

        return (
            feats.select("id", "labels", "_features")
            .mapInArrow(predict_batches, out_schema)
            .select(PREDICTION_SCHEMA.names)
        )


def fit_linear(
    train: DataFrame,
    method: str,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings: FeatureSettings,
    settings: LinearSettings = LinearSettings(),
    block_size: int = 4096,
) -> Tuple[LinearLeafModel, int]:
    """Fit ``lr``, ``svm`` or ``hiercost`` on labelled rows.

    Parameters
    ----------
    train : DataFrame with ``features`` (term-count SparseVector over
        ``vocabulary``) and ``path_index`` (int, the document's (weak) leaf
        path; rows with null are ignored).
    settings : :class:`LinearSettings` -- C, max_iter, parallelism, tol
    block_size : rows per prediction block of the returned model

    Returns the model and the number of training documents.
    """
    C, max_iter, parallelism, tol = settings
    if method not in DISCRIMINATIVE:
        raise InputError(f"unknown discriminative method {method!r}; known: {DISCRIMINATIVE}")
    # Cached: IDF fitting and the training matrix below would each rerun the
    # tokenisation / weak-labelling plan that produced ``train``.
    lab = train.where(F.col("path_index").isNotNull()).select("features", "path_index").cache()
    idf_model = IDF(inputCol="features", outputCol="tfidf").fit(lab)
    idf = idf_model.idf.toArray()
    # The same L2-normalised TF-IDF the predictor computes per block.
    data = (
        Normalizer(inputCol="tfidf", outputCol="x", p=2.0)
        .transform(idf_model.transform(lab))
        .select("x", F.col("path_index").cast("double").alias("label"))
    )
    # Class counts only (L rows reach the driver).
    counts = {int(r["path_index"]): r["count"] for r in lab.groupBy("path_index").count().collect()}
    n = sum(counts.values())
    # Every optimiser iteration is a Spark job over these rows: a few labelled
    # documents in many partitions would make each job's task overhead the
    # whole cost, so use about one partition per 50k documents.
    data = data.coalesce(max(1, min(data.rdd.getNumPartitions(), n // 50000 + 1))).cache()
    data.count()
    lab.unpersist()
    if n == 0:
        raise InputError(f"{method}: no labelled document to train on")
    classes = sorted(counts)
    reg = 1.0 / (C * n)
    V = len(vocabulary)
    try:
        if len(classes) == 1:
            # One class seen: every document gets it (MLlib refuses a 1-class fit).
            W, b = np.zeros((1, V)), np.zeros(1)
        elif method in ("lr", "svm"):
            # Re-index so classes are 0..L-1 (OneVsRest fits one model per label value).
            remap = {c: i for i, c in enumerate(classes)}
            mapping = F.create_map(*[x for c, i in remap.items() for x in (F.lit(float(c)), F.lit(float(i)))])
            d2 = data.select("x", mapping[F.col("label")].alias("label"))
            common = dict(
                featuresCol="x", regParam=reg, maxIter=max_iter, standardization=False, fitIntercept=False, tol=tol
            )
            base = LogisticRegression(**common) if method == "lr" else LinearSVC(**common)
            ovr = OneVsRest(classifier=base, featuresCol="x", parallelism=parallelism).fit(d2)
            W = np.vstack([m.coefficients.toArray() for m in ovr.models])
            b = np.array([m.intercept for m in ovr.models])
        else:
            dist = tree_distance_matrix(taxonomy)
            W, b = np.zeros((len(classes), V)), np.zeros(len(classes))

            def fit_leaf(i: int) -> None:
                c = classes[i]
                costs = hiercost_costs(dist, c)
                cost = F.create_map(
                    *[x for j in range(taxonomy.n_paths) for x in (F.lit(float(j)), F.lit(float(costs[j])))]
                )
                d2 = data.select(
                    "x", (F.col("label") == float(c)).cast("double").alias("y"), cost[F.col("label")].alias("w")
                )
                m = LogisticRegression(
                    featuresCol="x",
                    labelCol="y",
                    weightCol="w",
                    regParam=reg,
                    maxIter=max_iter,
                    standardization=False,
                    fitIntercept=False,
                    tol=tol,
                ).fit(d2)
                W[i], b[i] = m.coefficients.toArray(), m.intercept

            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
                list(pool.map(fit_leaf, range(len(classes))))
    finally:
        data.unpersist()
    log.info("%s: %d classes from %d labelled documents (regParam %.3g)", method, len(classes), n, reg)
    weights = LinearWeights(idf, W, b, np.array(classes))
    return LinearLeafModel(method, taxonomy, vocabulary, weights, feature_settings, block_size), n
