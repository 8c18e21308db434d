"""``features.stop_words = "auto"``: keep Spark's English list or not, decided from the labelled documents.

The English list helps topical text a little, but when the class is carried by
function words (question types, intents, negations) it removes exactly the
words that matter (docs/TOKENIZATION.md, "The automatic choice"). So before
the vocabulary is fitted, :func:`resolve_stop_words` runs a cheap
cross-validation of naive Bayes on the labelled documents, once with the list
(``"english"``) and once without (``"none"``), and keeps the list unless
``"none"`` is clearly better.

* **Sample** (Spark, :func:`labelled_sample`): at most :data:`SAMPLE_LIMIT`
  labelled documents, those with the smallest ``xxhash64(id, seed)`` (a
  seeded, deterministic draw; one top-k pass over the documents), tokenised
  on the executors without stop words, their first :data:`TOKENS_PER_DOC`
  tokens collected: a bounded sample, never the corpus.
* **Decision** (pure numpy / scipy, tested without Spark,
  :func:`choose_stop_words`): both vocabularies from the sample with the
  user's ``min_df`` / ``max_df`` / ``vocab_size``; :data:`FOLDS`-fold
  stratified cross-validation of flat naive Bayes over the paths as the
  model fits it (documents scaled to :data:`DOC_LENGTH` tokens, smoothing by
  Dirichlet-multinomial evidence, path prior pseudo-count 1); each fold
  scored by the mean of hierarchical micro and macro F1. ``"none"`` is chosen
  only when its mean paired gain over the folds exceeds both :data:`MARGIN`
  and one standard error of that gain.
* **Fallback** to ``"english"`` (with the reason in the info) when there is
  no labelled document, or fewer than 2 per fold.

The chosen value replaces ``"auto"`` in the settings that the vocabulary, the
model and its saved metadata get, so prediction tokenises the same way and a
loaded model never decides anything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.decoding import decode
from pcem_spark.core.estep import length_normalize, scoring_tables, tables_joint_log_likelihood
from pcem_spark.core.parameters import choose_smoothing, log_path_prior, sparse_log_parameters
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import AUTO_STOP_WORDS, FeatureSettings, document_bounds
from pcem_spark.evaluation.metrics import f1_scores, metric_nodes
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "SAMPLE_LIMIT",
    "TOKENS_PER_DOC",
    "FOLDS",
    "MARGIN",
    "DOC_LENGTH",
    "OPTIONS",
    "LabelledSample",
    "term_counts",
    "vocabulary_columns",
    "stratified_folds",
    "naive_bayes_paths",
    "naive_bayes_scores",
    "hierarchical_f1",
    "scored_path_nodes",
    "cross_validated_f1",
    "decide",
    "choose_stop_words",
    "fallback_stop_words",
    "labelled_sample",
    "resolve_stop_words",
]

log = logging.getLogger(__name__)

# At most this many labelled documents are sampled (the smallest xxhash64(id, seed)).
SAMPLE_LIMIT = 3000
# ... and of each, its first this many tokens (before stop-word removal): <= 3 M strings reach the driver.
TOKENS_PER_DOC = 1000
# Stratified folds of the cross-validation; fewer than 2 labelled documents per fold fall back to the list.
FOLDS = 5
# "none" must beat the list by more than this (mean of micro and macro F1, 0-1 scale) AND one standard
# error of the per-fold gain. On 20NG's topical posts the gain of "none" is about -0.5 .. -1.5 points, on
# the question corpus +20 points or more (docs/TOKENIZATION.md), so 1 point sits far from both.
MARGIN = 0.01
# Documents scaled to this many tokens, as the default model does (ModelSettings.doc_length).
DOC_LENGTH = float(ModelSettings().doc_length)
# The two candidates, in the order they are reported; the first is the default and the fallback.
OPTIONS = ("english", "none")


class LabelledSample(NamedTuple):
    """The labelled documents the decision sees: their tokens (no stop word removed) and path indexes."""

    tokens: List[List[str]]
    path_index: np.ndarray  # int, (n,): index of each document's label path in the taxonomy
    n_unknown: int = 0  # sampled documents whose labels are no path of the taxonomy (left out)


# --------------------------------------------------------------------------- pure: counts and vocabulary
def term_counts(token_lists: Sequence[Sequence[str]]) -> Tuple[sp.csr_matrix, List[str]]:
    """``(n, V)`` term counts of the documents' tokens and the ``V`` terms (sorted)."""
    terms = sorted({t for tokens in token_lists for t in tokens})
    index = {t: j for j, t in enumerate(terms)}
    rows = np.repeat(np.arange(len(token_lists)), [len(tokens) for tokens in token_lists])
    cols = np.fromiter((index[t] for tokens in token_lists for t in tokens), dtype=np.int64, count=len(rows))
    X = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(token_lists), len(terms)))
    X.sum_duplicates()
    return X, terms


def vocabulary_columns(
    X: sp.csr_matrix, terms: Sequence[str], settings: FeatureSettings, drop: Collection[str] = ()
) -> np.ndarray:
    """The columns of ``X`` that :func:`~pcem_spark.engine.features.fit_vocabulary` would keep on these documents.

    Terms in ``drop`` (a stop-word list) are removed first; then the
    document-frequency bounds of ``settings`` (``min_df`` / ``max_df`` read as
    Spark's CountVectorizer reads them, ``max_df = 1`` = no cap) and the
    ``vocab_size`` most frequent terms (ties by term).
    """
    n = X.shape[0]
    dropped = {t.lower() for t in drop}
    keep = np.array([t not in dropped for t in terms], dtype=bool)
    df = np.bincount(X.indices, minlength=X.shape[1])
    least, most = document_bounds(settings, n)
    if settings.max_df == 1.0:
        most = float("inf")
    keep &= (df >= least) & (df <= most)
    cols = np.flatnonzero(keep)
    if 0 < settings.vocab_size < len(cols):
        totals = np.asarray(X[:, cols].sum(axis=0)).ravel()
        cols = cols[np.lexsort((cols, -totals))[: settings.vocab_size]]  # terms are sorted: ties by term
        cols.sort()
    return cols


# --------------------------------------------------------------------------- pure: naive Bayes and its score
def stratified_folds(path_index: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Fold (0 .. k-1) of each document: every path's documents shuffled with ``seed`` and dealt in turn.

    A path's only document gets fold -1: it is never held out (the fewest-labels rule), so every held-out
    document's path has a labelled document in its fold's training set, as a test document's has.

    >>> folds = stratified_folds(np.array([0, 0, 1, 2, 2, 2]), 2)
    >>> int(folds[2]), sorted(folds[:2].tolist()), sorted(folds[3:].tolist())
    (-1, [0, 1], [0, 0, 1])
    """
    y = np.asarray(path_index)
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=np.int64)
    start = 0
    for cls in np.unique(y):
        idx = np.flatnonzero(y == cls)
        if len(idx) == 1:
            fold[idx] = -1
            continue
        idx = idx[rng.permutation(len(idx))]
        fold[idx] = (start + np.arange(len(idx))) % k
        start = (start + len(idx)) % k
    return fold


def naive_bayes_scores(
    X_train: sp.csr_matrix, y_train: np.ndarray, X_test: sp.csr_matrix, n_paths: int, doc_length: float = DOC_LENGTH
) -> np.ndarray:
    """(n_test, n_paths) joint log-likelihoods of the test rows under flat naive Bayes fitted on the training rows.

    As the model's first (labelled) pass fits it: counts of documents longer
    than ``doc_length`` tokens scaled down, word smoothing chosen by the
    Dirichlet-multinomial evidence of the (unscaled) path counts, path prior
    pseudo-count 1.
    """
    Xn = length_normalize(X_train, doc_length)
    y_train = np.asarray(y_train, dtype=np.int64)
    totals = np.bincount(y_train, minlength=n_paths).astype(np.float64)
    if X_train.shape[1] == 0:  # an empty vocabulary: the prior alone decides
        return np.tile(log_path_prior(totals, 1.0), (X_test.shape[0], 1))
    Y = sp.csr_matrix((np.ones(len(y_train)), (y_train, np.arange(len(y_train)))), shape=(n_paths, len(y_train)))
    wc = sp.csr_matrix(Y @ Xn)
    counted, raw = float(Xn.sum()), float(X_train.sum())
    smoothing, _ = choose_smoothing(wc * (raw / counted) if counted > 0 else wc)
    params = sparse_log_parameters(wc, totals, smoothing, None, 1.0)
    return tables_joint_log_likelihood(length_normalize(X_test, doc_length), scoring_tables(params))


def naive_bayes_paths(
    X_train: sp.csr_matrix, y_train: np.ndarray, X_test: sp.csr_matrix, n_paths: int, doc_length: float = DOC_LENGTH
) -> np.ndarray:
    """The most probable path of each test row under :func:`naive_bayes_scores` (ties to the first path)."""
    return decode(naive_bayes_scores(X_train, y_train, X_test, n_paths, doc_length))[0]


def hierarchical_f1(true_paths: np.ndarray, pred_paths: np.ndarray, path_nodes) -> Tuple[float, float]:
    """(micro, macro) F1 over the nodes, as :mod:`pcem_spark.evaluation.metrics` scores a prediction.

    ``path_nodes``: 0/1 (M, C) matrix of each path's scored nodes (the real, non-root ones).
    """
    A = sp.csr_matrix(path_nodes, dtype=np.float64)
    At, Ap = A[np.asarray(true_paths)], A[np.asarray(pred_paths)]
    tp = np.asarray(At.multiply(Ap).sum(axis=0)).ravel()
    fp = np.asarray(Ap.sum(axis=0)).ravel() - tp
    fn = np.asarray(At.sum(axis=0)).ravel() - tp
    f1 = f1_scores(tp, fp, fn)
    return f1["micro_f1"], f1["macro_f1"]


def scored_path_nodes(taxonomy: Taxonomy) -> sp.csr_matrix:
    """0/1 (M, C) matrix: the scored nodes (real, non-root: :func:`metric_nodes`) of each path."""
    cols = [taxonomy.node_index[c] for c in metric_nodes(taxonomy)]
    return sp.csr_matrix(taxonomy.path_node_matrix(sparse=True))[:, cols]


def cross_validated_f1(X: sp.csr_matrix, path_index: np.ndarray, path_nodes, folds: np.ndarray) -> np.ndarray:
    """(k, 2) hierarchical (micro, macro) F1 of naive Bayes on each held-out fold of ``folds`` that holds out
    any document (fold -1: always trained on)."""
    n_paths = path_nodes.shape[0]
    y = np.asarray(path_index)
    out = []
    for f in range(int(folds.max()) + 1):
        test = folds == f
        if not test.any():
            continue
        pred = naive_bayes_paths(X[~test], y[~test], X[test], n_paths)
        out.append(hierarchical_f1(y[test], pred, path_nodes))
    return np.array(out)


def decide(fold_scores: Dict[str, np.ndarray], margin: float = MARGIN) -> Tuple[str, str, Dict[str, float]]:
    """``"none"`` iff its mean per-fold gain over ``"english"`` exceeds ``margin`` and one standard error.

    ``fold_scores``: per option, the per-fold score (the same folds for both).
    Returns the choice, the reason in words and the statistics it rests on.
    """
    gain = np.asarray(fold_scores["none"], dtype=np.float64) - np.asarray(fold_scores["english"], dtype=np.float64)
    mean = float(gain.mean())
    se = float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("inf")
    stats = {"gain_of_none": round(mean, 6), "standard_error": round(se, 6), "margin": margin}
    if mean > margin and mean > se:
        reason = f"without the list is clearly better: {100 * mean:+.2f} points (standard error {100 * se:.2f})"
        return "none", reason, stats
    why = "is not" if mean <= 0 else "is too small" if mean <= margin else "is within one standard error"
    reason = (
        f"the English list kept: the gain without it ({100 * mean:+.2f} points, standard error "
        f"{100 * se:.2f}) {why} (needs > {100 * margin:g} and > 1 standard error)"
    )
    return "english", reason, stats


def choose_stop_words(
    sample: LabelledSample,
    path_nodes,
    stop_list: Collection[str],
    settings: FeatureSettings,
    seed: int = 0,
    folds: int = FOLDS,
) -> dict:
    """The decision on a labelled sample, without Spark: the info dict of :func:`resolve_stop_words`.

    ``path_nodes``: 0/1 (M, C) matrix of each path's scored nodes;
    ``stop_list``: the English list; ``settings``: the vocabulary bounds.
    ``sample`` needs at least ``2 * folds`` documents.
    """
    n = len(sample.tokens)
    if n < 2 * folds:
        raise ValueError(f"{n} labelled documents are too few for {folds} folds (2 per fold at least)")
    X, terms = term_counts(sample.tokens)
    fold = stratified_folds(sample.path_index, folds, seed)
    held_folds = len(np.unique(fold[fold >= 0]))
    if held_folds < 2:
        raise ValueError(
            f"{int((fold >= 0).sum())} of {n} labelled documents can be held out (a path's only document never "
            "is): too few to compare"
        )
    scores, vocab = {}, {}
    for option in OPTIONS:
        cols = vocabulary_columns(X, terms, settings, stop_list if option == "english" else ())
        vocab[option] = int(len(cols))
        scores[option] = cross_validated_f1(X[:, cols], sample.path_index, path_nodes, fold)
    per_fold = {o: scores[o].mean(axis=1) for o in OPTIONS}  # mean of micro and macro F1
    choice, reason, stats = decide(per_fold)

    def summary(o: str) -> dict:
        s = scores[o]
        return {
            "mean": round(float(per_fold[o].mean()), 6),
            "std": round(float(per_fold[o].std(ddof=1)), 6),
            "micro_f1": round(float(s[:, 0].mean()), 6),
            "macro_f1": round(float(s[:, 1].mean()), 6),
            "folds": [round(float(x), 6) for x in per_fold[o]],
            "vocabulary": vocab[o],
        }

    return {
        "choice": choice,
        "reason": reason,
        "metric": "mean of hierarchical micro and macro F1, flat naive Bayes, stratified k-fold",
        "folds": folds,
        "n_sampled": n,
        "n_unknown_labels": int(sample.n_unknown),
        "seed": seed,
        "scores": {o: summary(o) for o in OPTIONS},
        **stats,
    }


def fallback_stop_words(settings: FeatureSettings, reason: str) -> Tuple[FeatureSettings, Optional[dict]]:
    """``"auto"`` resolved to the English list without a decision (no labels to decide on), with ``reason``.

    Settings that are not ``"auto"`` are returned unchanged, with None.
    """
    if settings.stop_words != AUTO_STOP_WORDS:
        return settings, None
    log.info('features.stop_words = "auto": "english" (%s)', reason)
    return replace(settings, stop_words="english"), {"choice": "english", "reason": reason, "fallback": True}


# --------------------------------------------------------------------------- Spark: the sample
def labelled_sample(
    docs, taxonomy: Taxonomy, settings: FeatureSettings, seed: int = 0, limit: int = SAMPLE_LIMIT
) -> LabelledSample:
    """At most ``limit`` labelled documents of ``docs`` (``id, text, labels``), tokenised without stop words.

    The documents with the smallest ``xxhash64(id, seed)`` (ties by id): one
    top-k pass over ``docs``, deterministic for a seed. Tokenised on the
    executors with ``settings`` (stop words aside); each document's first
    :data:`TOKENS_PER_DOC` tokens and its labels reach the driver.
    """
    from pyspark.sql import functions as F

    from pcem_spark.engine.features import tokenize
    from pcem_spark.engine.label_columns import first_label_path

    h = F.xxhash64(F.col("id"), F.lit(int(seed)))
    picked = (
        docs.where(F.col("labels").isNotNull() & (F.size("labels") > 0))
        .select(h.alias("_h"), F.col("id").cast("string").alias("_id"), "text", first_label_path(docs).alias("labels"))
        .orderBy("_h", "_id")
        .limit(int(limit))
    )
    rows = (
        tokenize(picked, replace(settings, stop_words="none"))
        .select("_h", "_id", "labels", F.slice("tokens", 1, TOKENS_PER_DOC).alias("tokens"))
        .collect()
    )  # <= limit rows of <= TOKENS_PER_DOC tokens
    rows.sort(key=lambda r: (r["_h"], r["_id"]))
    lookup = taxonomy.path_lookup()
    tokens, paths, unknown = [], [], 0
    for r in rows:
        j = lookup.get(tuple(r["labels"]))
        if j is None:
            unknown += 1
            continue
        tokens.append(list(r["tokens"] or []))
        paths.append(j)
    return LabelledSample(tokens, np.array(paths, dtype=np.int64), unknown)


def resolve_stop_words(
    docs, taxonomy: Taxonomy, feature_settings: FeatureSettings, seed: int = 0
) -> Tuple[FeatureSettings, Optional[dict]]:
    """Settings with ``stop_words = "auto"`` decided from the labelled rows of ``docs``, and how it was decided.

    ``docs``: validated documents (``id, text, labels``; labels a label path
    or null). Settings whose ``stop_words`` is not ``"auto"`` come back
    unchanged with None. Otherwise ``stop_words`` becomes ``"english"`` or
    ``"none"`` (see the module docstring for the rule) and the info dict says
    why: ``choice``, ``reason``, per option the mean / std of the CV score,
    its micro / macro F1 and vocabulary size (``scores``), ``metric``,
    ``folds``, ``n_sampled``, ``gain_of_none``, ``standard_error``,
    ``margin``, ``seconds`` -- for the model's training summary
    (``training_summary["stop_words"]``). Costs one top-k pass over ``docs``
    and a few seconds on the driver, no EM.
    """
    if feature_settings.stop_words != AUTO_STOP_WORDS:
        return feature_settings, None
    from pyspark.ml.feature import StopWordsRemover

    t0 = time.perf_counter()
    sample = labelled_sample(docs, taxonomy, feature_settings, seed)
    n = len(sample.tokens)
    # The documents that can be held out: not the only one of their path (the fewest-labels rule).
    n_held = int((np.bincount(sample.path_index)[sample.path_index] > 1).sum()) if n else 0
    if n < 2 * FOLDS or n_held < 2 * FOLDS:
        if n == 0:
            what = "no labelled document"
        elif n < 2 * FOLDS:
            what = f"only {n} labelled documents (fewer than 2 per fold)"
        else:
            what = f"only {n_held} of {n} labelled documents can be held out (a leaf's only document never is)"
        settings, info = fallback_stop_words(feature_settings, f"{what}: no cross-validation, the list is kept")
        info.update(n_sampled=n, n_held_out=n_held, folds=FOLDS, seconds=round(time.perf_counter() - t0, 3))
        return settings, info
    info = choose_stop_words(
        sample, scored_path_nodes(taxonomy), StopWordsRemover.loadDefaultStopWords("english"), feature_settings, seed
    )
    info["sample_limit"] = SAMPLE_LIMIT
    info["seconds"] = round(time.perf_counter() - t0, 3)
    scores = info["scores"]
    log.info(
        'features.stop_words = "auto": "%s" (%s; %d-fold naive Bayes on %d labelled documents, mean F1 '
        "english %.2f, none %.2f; %.1fs)",
        info["choice"],
        info["reason"],
        FOLDS,
        n,
        100 * scores["english"]["mean"],
        100 * scores["none"]["mean"],
        info["seconds"],
    )
    return replace(feature_settings, stop_words=info["choice"]), info
