"""Category names as evidence: a *name document* per path, and whether it helps (``model.names = "auto"``).

The leaf names of most taxonomies are words (``book_flight``, ``SoccerPlayer``,
``comp.sys.ibm.pc.hardware``). Each path gets a name document: the words of
its nodes' names (:func:`pcem_spark.core.names.name_words`) and their
``--descriptions``, counted over the model's vocabulary like any text, and
scaled to ``model.names_weight`` average labelled documents -- one or two more
labelled documents of the path, the weakest evidence a model can be given --
while the path has at most one labelled document of its own, fading as
``1 / n ** model.names_fade`` once it has ``n``, except a short text's worth of
tokens (``model.names_kept_tokens`` per average document, :func:`faded_name_weights`). Name documents
train every fit (the cross-validation's folds keep them in every training set
and never hold one out, :data:`pcem_spark.model.sampled_cv.KEPT_PART`); they are
never scored. A node name with no word in the vocabulary contributes nothing
and is counted (``names_without_vocabulary``).

``"auto"`` decides from the labelled documents, as ``features.stop_words`` does
(:func:`choose_names`): first, at least half of the leaf names must have a
vocabulary word; then, with enough documents that can be held out, a k-fold
naive-Bayes comparison with and without the name documents (on unless they
cost more than one standard error); at one labelled document per
leaf, where no fold can hold one out, on when most leaf names have a vocabulary
word and the names alone rank the labelled documents' true paths higher than
the same names shuffled over the paths do (a permutation test at
:data:`SHUFFLE_P`, :func:`shuffled_name_ranks`). With
names, a leaf keeps evidence when its only labelled document is held out, so
the cross-validation and the calibration can score that document
(:func:`pcem_spark.ml.tuning.stratified_folds`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.names import path_name_text
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.model.stop_words import (
    FOLDS,
    hierarchical_f1,
    naive_bayes_paths,
    naive_bayes_scores,
    scored_path_nodes,
    stratified_folds,
)

__all__ = [
    "NAME_ID_PREFIX",
    "SHUFFLE_P",
    "PERMUTATIONS",
    "MIN_LEAVES_WITH_WORDS",
    "SAMPLE_LIMIT",
    "NameDocuments",
    "is_name_document",
    "name_documents",
    "name_document_rows",
    "faded_name_weights",
    "labelled_per_path",
    "choose_names",
    "shuffled_name_ranks",
    "resolve_names",
]

log = logging.getLogger(__name__)

# Name documents' ids: a prefix no crawled id carries (a NUL), so folds and counts can tell them apart.
NAME_ID_PREFIX = "\u0000pcem-name:"
# At one labelled document per leaf: names are on when the names alone classify the labelled documents
# better than the same names shuffled over the paths do, with this p-value (a permutation test). Weak evidence
# suffices: a name document weighs one document, and misplaced names are what the test rules out.
SHUFFLE_P = 0.25
PERMUTATIONS = 200
# The test's statistic is the true path's rank among the paths under the names alone (not the F1 of the top
# path): with one short document per leaf the top path is rarely right either way, but its rank still moves.
RANK_CHUNK = 512  # documents scored at a time (a chunk x paths block of scores)
MAX_TEST_CELLS = 4e8  # documents x paths x permutations compared, at most (permutations are cut to fit)
# ... and when at least this share of the leaves' own names has a vocabulary word (else they cannot tell leaves apart).
MIN_LEAVES_WITH_WORDS = 0.5
SAMPLE_LIMIT = 5000  # labelled documents the decision reads (a seeded hash sample, as the stop words')


def is_name_document(id_col):
    """A Spark column: whether the row is a name document (by its id)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col(id_col).startswith(NAME_ID_PREFIX), F.lit(False))


@dataclass
class NameDocuments:
    """The name documents of a taxonomy over a vocabulary.

    ``X``: (M, V) CSR term counts, one row per path, each scaled to ``tokens``
    tokens (rows without a vocabulary word are empty); ``texts``: the text of
    each; ``empty_nodes``: the real nodes whose name (and description) has no
    vocabulary word.
    """

    X: sp.csr_matrix
    texts: List[str]
    empty_nodes: List[str]
    tokens: float
    leaves_with_words: float = 1.0  # share of the leaves whose own name (or description) has a vocabulary word

    @property
    def paths_with_words(self) -> np.ndarray:
        return np.flatnonzero(np.diff(self.X.indptr) > 0)

    def summary(self) -> Dict[str, object]:
        return {
            "paths": int(self.X.shape[0]),
            "paths_with_words": int(len(self.paths_with_words)),
            "names_without_vocabulary": len(self.empty_nodes),
            "examples_without_vocabulary": self.empty_nodes[:10],
            "tokens_per_name_document": round(float(self.tokens), 3),
            "leaves_with_words": round(float(self.leaves_with_words), 4),
        }


def _counts(tokens: List[List[str]], vocabulary: List[str]) -> sp.csr_matrix:
    index = {t: i for i, t in enumerate(vocabulary)}
    rows, cols = [], []
    for r, toks in enumerate(tokens):
        for t in toks:
            i = index.get(t)
            if i is not None:
                rows.append(r)
                cols.append(i)
    data = np.ones(len(rows))
    return sp.csr_matrix((data, (rows, cols)), shape=(len(tokens), len(vocabulary)))


def name_documents(
    spark,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings,
    descriptions: Optional[Mapping[str, str]] = None,
    tokens: float = 10.0,
) -> NameDocuments:
    """The name documents of every path of ``taxonomy`` (see the module docstring), tokenised by the model's
    own featuriser (one small Spark job over the node and path texts; never documents)."""
    from pcem_spark.engine.features import tokenize

    nodes = sorted(taxonomy.real_nodes)
    paths = [taxonomy.real_path(j) for j in range(taxonomy.n_paths)]
    texts = [path_name_text(p, descriptions) for p in paths]
    node_texts = [path_name_text([n], descriptions) for n in nodes]
    df = spark.createDataFrame(
        [(i, t) for i, t in enumerate(texts + node_texts)], "i int, text string"
    )  # at most (paths + nodes) rows: the taxonomy's size, not the corpus's
    rows = sorted(tokenize(df, feature_settings, "text").select("i", "tokens").collect(), key=lambda r: r["i"])
    toks = [list(r["tokens"] or []) for r in rows]
    X = _counts(toks[: len(paths)], vocabulary)
    node_X = _counts(toks[len(paths) :], vocabulary)
    empty_nodes = [n for n, k in zip(nodes, np.diff(node_X.indptr)) if k == 0]
    totals = np.asarray(X.sum(axis=1)).ravel()
    scale = np.where(totals > 0, tokens / np.maximum(totals, 1e-12), 0.0)
    X = sp.csr_matrix(sp.diags(scale) @ X)
    X.sum_duplicates()  # sorted, unique column indices per row, as a SparseVector needs
    leaves = [n for n in nodes if n in set(taxonomy.leaves)]
    empty = set(empty_nodes)
    covered = sum(n not in empty for n in leaves) / max(len(leaves), 1)
    return NameDocuments(X, texts, empty_nodes, float(tokens), covered)


def faded_name_weights(labelled: np.ndarray, fade: float, tokens: float = 1.0, kept_tokens: float = 0.0) -> np.ndarray:
    """``(paths,)`` factor on each path's name document, of ``tokens`` tokens, for ``labelled`` documents per path.

    A name is a prior guess at a path's words. Its document weighs
    ``names_weight`` average labelled documents (``tokens``) while the path has
    at most one of its own, and its tokens beyond ``kept_tokens`` fade as
    ``1 / max(1, n) ** fade`` once the path has ``n``::

        factor = (min(tokens, kept) + max(tokens - kept, 0) / max(1, n) ** fade) / tokens

    Why: a fixed weight already shrinks as a share of the path's evidence
    (``w / (n + w)``), but it puts the tokens of ``w`` whole documents on a few
    name words. On posts of hundreds of words that biases paths with several
    labelled documents (20NG at 1%, about 8 per leaf: -0.27 / -0.36 micro /
    macro F1 with the fixed weight, 3 seeds); on five-word subject lines the
    same weight is worth +2.2 / +3.1 there. With ``kept_tokens`` a short text's
    length, subject lines keep the whole weight at every label count (fading
    them too cost 0.65 / 0.81 at 1% and 0.99 / 1.02 at 10%) while 20NG's names
    go from -0.27 / -0.36 to +0.76 / +0.89 (docs/RESULTS.md, "The category
    names at every label count"). ``fade = 0`` keeps the fixed weight.

    ``labelled``: ``(paths,)`` counts; ``tokens``: the name document's tokens
    (``names_weight`` x the average labelled document's); ``kept_tokens``:
    those that never fade (``names_weight`` x ``model.names_kept_tokens``).
    """
    n = np.maximum(np.asarray(labelled, dtype=np.float64), 1.0)
    tokens = float(tokens)
    if tokens <= 0:
        return np.ones_like(n)
    kept = min(tokens, max(float(kept_tokens), 0.0))
    return (kept + (tokens - kept) * n ** -float(fade)) / tokens


def labelled_per_path(coverage: Mapping[str, int], taxonomy: Taxonomy) -> np.ndarray:
    """``(paths,)`` labelled documents per path of ``taxonomy``, from the labelled documents per leaf that
    training already counts (:func:`pcem_spark.model.label_checks.label_coverage`): a path's count is its leaf's."""
    return np.array([int(coverage.get(taxonomy.real_path(j)[-1], 0)) for j in range(taxonomy.n_paths)], dtype=np.int64)


def name_document_rows(names: NameDocuments, taxonomy: Taxonomy, several_paths: bool) -> List[tuple]:
    """``(id, features, labels)`` rows of the name documents with words (``several_paths``: labels as a
    list of paths, the shape of a corpus whose documents may be in several categories)."""
    from pyspark.ml.linalg import SparseVector

    out = []
    for j in names.paths_with_words:
        row = names.X.getrow(j)
        vec = SparseVector(names.X.shape[1], row.indices.tolist(), row.data.tolist())
        path = list(taxonomy.real_path(int(j)))
        out.append((f"{NAME_ID_PREFIX}{int(j)}", vec, [path] if several_paths else path))
    return out


# --------------------------------------------------------------------------- the decision (numpy, no Spark)
def choose_names(
    X: sp.csr_matrix, path_index: np.ndarray, names: NameDocuments, path_nodes, seed: int = 0, folds: int = FOLDS
) -> Dict[str, object]:
    """``{"choice": "on" | "off", "reason", ...}`` from labelled documents (``X`` term counts, their paths).

    See the module docstring for the rule.
    """
    y = np.asarray(path_index, dtype=np.int64)
    n_paths = names.X.shape[0]
    with_words = names.paths_with_words
    if len(with_words) == 0:
        return {"choice": "off", "reason": "no name has a word of the vocabulary", "rule": "none"}
    name_X, name_y = names.X[with_words], with_words
    n_held = int((np.bincount(y, minlength=n_paths)[y] > 1).sum()) if len(y) else 0
    if names.leaves_with_words < MIN_LEAVES_WITH_WORDS:
        return {
            "choice": "off",
            "reason": f"{100 * names.leaves_with_words:.0f}% of the leaf names have a word of the vocabulary "
            f"(at least {100 * MIN_LEAVES_WITH_WORDS:.0f}% needed to tell leaves apart by name)",
            "rule": "names alone against shuffled names" if n_held < 2 * folds else "cross-validation",
            "held_out": n_held,
        }
    if n_held >= 2 * folds:
        fold = stratified_folds(y, folds, seed)
        gains, off_scores, on_scores = [], [], []
        for f in range(int(fold.max()) + 1):
            test = fold == f
            if not test.any():
                continue
            train = ~test
            off = np.mean(hierarchical_f1(y[test], naive_bayes_paths(X[train], y[train], X[test], n_paths), path_nodes))
            on_pred = naive_bayes_paths(
                sp.vstack([X[train], name_X]).tocsr(), np.concatenate([y[train], name_y]), X[test], n_paths
            )
            on = np.mean(hierarchical_f1(y[test], on_pred, path_nodes))
            off_scores.append(off)
            on_scores.append(on)
            gains.append(on - off)
        gain = np.asarray(gains)
        mean = float(gain.mean())
        se = float(gain.std(ddof=1) / math.sqrt(len(gain))) if len(gain) > 1 else float("inf")
        # A name is one weak pseudo-document per path: cheap evidence whose weight fades as labels grow. So it
        # stays on unless the folds show it clearly hurts (a loss beyond one standard error). Requiring a clear
        # gain instead turned names off at two labels per leaf, where the folds are too small to show one
        # (subjects, seed 0: +0.28 +- 1.44 in the folds, and 27.2 micro-F1 off against 34.4 on).
        choice = "off" if mean < 0 and -mean > se else "on"
        reason = (
            f"{len(gain)}-fold naive Bayes on {len(y)} labelled documents: the names "
            f"{'add' if mean >= 0 else 'cost'} {100 * abs(mean):.2f} points (standard error {100 * se:.2f}); "
            + ("on (off needs a loss over one standard error)" if choice == "on" else "off: they clearly cost")
        )
        return {
            "choice": choice,
            "reason": reason,
            "rule": "cross-validation",
            "gain": round(mean, 6),
            "standard_error": round(se, 6),
            "mean_f1_off": round(float(np.mean(off_scores)), 6),
            "mean_f1_on": round(float(np.mean(on_scores)), 6),
            "held_out": n_held,
        }
    # One labelled document per leaf (or nearly): no fold can hold one out without the names. Names can tell
    # leaves apart only if the leaves' own names have words; and they help only if they point at the right
    # paths: the names alone, as a classifier of the labelled documents, against the same names shuffled
    # over the paths (a permutation test of the name-path assignment, with partial credit for the right top).
    actual, shuffled = shuffled_name_ranks(X, y, name_X, name_y, n_paths, seed)
    p_value = float((1 + (shuffled >= actual).sum()) / (1 + len(shuffled)))
    choice = "on" if p_value < SHUFFLE_P else "off"
    reason = (
        f"{n_held} of {len(y)} labelled documents can be held out, too few to cross-validate; by the names alone "
        f"their true path outranks {100 * actual:.1f}% of the others, by the same names shuffled over the paths "
        f"{100 * shuffled.mean():.1f}% (p = {p_value:.2g}; on needs p < {SHUFFLE_P:g})"
    )
    return {
        "choice": choice,
        "reason": reason,
        "rule": "names alone against shuffled names",
        "rank_names": round(actual, 6),
        "rank_shuffled": round(float(shuffled.mean()), 6),
        "p_value": p_value,
        "permutations": int(len(shuffled)),
        "documents": int(len(y)),
        "held_out": n_held,
    }


def _weight_summary(
    weight: float, fade: float, kept_tokens: float, factor: np.ndarray, names: NameDocuments
) -> Dict[str, object]:
    """The training summary's account of the name documents' weights, in average labelled documents (before the
    ``model.doc_length`` cut that a name document, like any document, then gets)."""
    used = factor[names.paths_with_words] * weight
    if not len(used):
        used = np.zeros(1)
    return {
        "weight": weight,
        "fade": fade,
        "kept_tokens": kept_tokens,
        "weight_min": round(float(used.min()), 6),
        "weight_median": round(float(np.median(used)), 6),
        "weight_max": round(float(used.max()), 6),
    }


def shuffled_name_ranks(
    X: sp.csr_matrix, y: np.ndarray, name_X: sp.csr_matrix, name_y: np.ndarray, n_paths: int, seed: int = 0
) -> Tuple[float, np.ndarray]:
    """``(mean rank, mean ranks under shuffles)``: how far the names alone rank each labelled document's true path.

    A document's rank is the share of the other paths its true path outscores
    (ties count half) under naive Bayes fitted on the name documents alone
    (``name_X`` rows, of paths ``name_y``), 0.5 for names that say nothing.
    Shuffling the names over the named paths permutes the score columns of
    those paths, so each row keeps its multiset of scores and a shuffled rank
    is the rank of another column's score within the same sorted row.

    Parameters
    ----------
    X : (n, V) term counts of the labelled documents; y : (n,) their path indices
    name_X : (m, V) name documents; name_y : (m,) their distinct path indices
    """
    n = X.shape[0]
    if n == 0 or n_paths < 2:
        return 0.5, np.full(1, 0.5)
    rng = np.random.default_rng(seed)
    n_perm = int(max(20, min(PERMUTATIONS, MAX_TEST_CELLS // max(1, n * n_paths))))
    # sigma[k, p]: the path whose name path p carries in shuffle k (identity for paths without a name)
    sigma = np.tile(np.arange(n_paths), (n_perm, 1))
    for k in range(n_perm):
        sigma[k, name_y] = name_y[rng.permutation(len(name_y))]
    actual = np.zeros(n)
    shuffled = np.zeros((n_perm, n))
    for start in range(0, n, RANK_CHUNK):
        rows = slice(start, min(n, start + RANK_CHUNK))
        scores = naive_bayes_scores(name_X, name_y, X[rows], n_paths)
        ordered = np.sort(scores, axis=1)
        index = np.arange(scores.shape[0])
        actual[rows] = _ranks(ordered, scores[index, y[rows]])
        for k in range(n_perm):
            shuffled[k, rows] = _ranks(ordered, scores[index, sigma[k, y[rows]]])
    return float(actual.mean()), shuffled.mean(axis=1)


def _ranks(ordered: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per row of ``ordered`` (sorted scores of every path), the share of the other paths below ``value`` (a score
    of that row), ties counting half."""
    below = (ordered < value[:, None]).sum(axis=1)
    equal = (ordered == value[:, None]).sum(axis=1) - 1  # the path itself is one of the equal scores
    return (below + 0.5 * equal) / (ordered.shape[1] - 1)


def _labelled_sample(featurized, taxonomy: Taxonomy, vocab_size: int, seed: int) -> Tuple[sp.csr_matrix, np.ndarray]:
    """(X, path index) of at most :data:`SAMPLE_LIMIT` labelled rows of ``featurized`` (first path of each)."""
    from pyspark.sql import functions as F

    from pcem_spark.engine.arrow_io import csr_of
    from pcem_spark.engine.label_columns import first_label_path
    from pcem_spark.model.sampled_cv import sample_rows

    labelled = featurized.where(F.col("labels").isNotNull() & ~is_name_document("id"))
    n = labelled.count()
    if n == 0:
        return sp.csr_matrix((0, vocab_size)), np.zeros(0, dtype=np.int64)
    picked = sample_rows(labelled, n, SAMPLE_LIMIT, seed).select(
        "features", first_label_path(labelled, "labels").alias("path")
    )
    table = picked.toArrow()
    lookup = taxonomy.path_lookup()
    paths = [lookup.get(tuple(p)) for p in table.column("path").to_pylist()]
    keep = np.array([p is not None for p in paths], dtype=bool)
    X = csr_of(table.column("features").combine_chunks(), vocab_size)
    return X[keep], np.array([p for p in paths if p is not None], dtype=np.int64)


def resolve_names(
    featurized,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings,
    model_settings,
    descriptions: Optional[Mapping[str, str]] = None,
    seed: int = 0,
    coverage: Optional[Mapping[str, int]] = None,
):
    """``(name documents' DataFrame or None, info)`` for ``model_settings.names`` over ``featurized``.

    ``coverage``: labelled documents per leaf (:func:`pcem_spark.model.label_checks.label_coverage`), counted
    over ``featurized`` when not given; the names fade with them.

    ``model_settings``: its ``names``, ``names_weight``, ``names_fade``,
    ``names_kept_tokens`` and ``doc_length`` are read. ``featurized``:
    ``id, features, labels`` of the training documents. The
    name documents, when used, are to be added to it as labelled rows; ``info``
    (the training summary's ``names``) says what was decided and why, and how
    many names have no vocabulary word.
    """
    setting, weight, fade = model_settings.names, model_settings.names_weight, model_settings.names_fade
    doc_length = model_settings.doc_length
    if setting == "off":
        return None, {"setting": "off", "choice": "off", "reason": "model.names = off"}
    t0 = time.perf_counter()
    spark = featurized.sparkSession
    X, y = _labelled_sample(featurized, taxonomy, len(vocabulary), seed)
    # One labelled document's worth: the mean length of the labelled documents, as the model counts them.
    lengths = np.asarray(X.sum(axis=1)).ravel()
    tokens = float(np.mean(np.minimum(lengths, doc_length) if doc_length > 0 else lengths)) if len(lengths) else 10.0
    names = name_documents(spark, taxonomy, vocabulary, feature_settings, descriptions, weight * max(tokens, 1.0))
    if coverage is None:
        from pcem_spark.model.label_checks import label_coverage

        coverage = label_coverage(featurized.where(~is_name_document("id")), taxonomy)
    labelled = labelled_per_path(coverage, taxonomy)
    kept = model_settings.names_kept_tokens
    factor = faded_name_weights(labelled, fade, names.tokens, weight * kept)
    scaled = names.X.copy()  # rows scaled in place: the sorted column indices a SparseVector needs are kept
    scaled.data *= np.repeat(factor, np.diff(scaled.indptr))
    names = replace(names, X=scaled)  # what is decided on is what is used
    info: Dict[str, object] = {"setting": setting, **names.summary()}
    info.update(_weight_summary(weight, fade, kept, factor, names))
    if setting == "on":
        info.update(choice="on", reason="model.names = on")
    elif len(y) == 0:
        info.update(choice="on", reason="no labelled document to decide on: the names are all there is")
    else:
        info.update(choose_names(X, y, names, scored_path_nodes(taxonomy), seed))
    info["seconds"] = round(time.perf_counter() - t0, 3)
    log.info(
        'model.names = "%s": %s (%s; %d of %d paths have a name word in the vocabulary, %d node names none)',
        setting,
        info["choice"],
        info["reason"],
        info["paths_with_words"],
        info["paths"],
        info["names_without_vocabulary"],
    )
    if info["choice"] != "on" or not len(names.paths_with_words):
        return None, info
    several = "array<array" in featurized.schema["labels"].dataType.simpleString()
    rows = name_document_rows(names, taxonomy, several)
    docs = spark.createDataFrame(rows, featurized.select("id", "features", "labels").schema)
    return docs, info
