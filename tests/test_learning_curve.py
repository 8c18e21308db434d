"""The family's learning-curve correction (pcem_spark.model.learning_curve), without Spark.

The rule is recomputed here from its definition: the extrapolation term by term and the paired
one-standard-error choice by looping over the families with their fold differences.
"""

import math

import numpy as np
import scipy.sparse as sp

from pcem_spark.engine.blocks import Block
from pcem_spark.model.learning_curve import doublings, extrapolated_scores, halved_parts, paired_choice

KEPT, UNLABELED = -2, -1


def block(n, labelled=True, offset=0):
    X = sp.csr_matrix(np.arange(offset, offset + n, dtype=np.float64).reshape(n, 1) + 1)
    ns = sp.csr_matrix(np.ones((n, 2)) if labelled else np.zeros((n, 2)))
    return Block(X, ns, np.full(n, labelled))


def parts():
    return [(0, block(200)), (1, block(200, offset=200)), (KEPT, block(3)), (UNLABELED, block(50, False))]


def test_halving_keeps_the_held_out_fold_the_kept_and_the_unlabelled_rows_whole():
    out = halved_parts(parts(), 1, seed=7, kept_parts=(KEPT,))
    sizes = {p: b.X.shape[0] for p, b in out}
    assert sizes[1] == 200 and sizes[KEPT] == 3 and sizes[UNLABELED] == 50
    assert 70 <= sizes[0] <= 130  # a seeded half of the training fold
    kept = out[0][1]
    values = kept.X.toarray().ravel()
    assert np.all(np.diff(values) > 0)  # the rows keep their order, and stay whole
    assert kept.node_scores.shape == (sizes[0], 2) and kept.labeled.shape == (sizes[0],)


def test_halving_is_seeded():
    first = halved_parts(parts(), 1, seed=7, kept_parts=(KEPT,))[0][1].X.toarray()
    again = halved_parts(parts(), 1, seed=7, kept_parts=(KEPT,))[0][1].X.toarray()
    other = halved_parts(parts(), 1, seed=8, kept_parts=(KEPT,))[0][1].X.toarray()
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_doublings_count_only_past_the_sample():
    assert doublings(8000, 2000) == 2.0
    assert doublings(2000, 2000) == 0.0
    assert doublings(1500, 2000) == 0.0  # a sample never holds more; no projection backwards
    assert doublings(100, 0) == 0.0


def test_the_projection_is_log_linear_in_the_labels():
    full = np.array([[0.80, 0.82, 0.78], [0.81, 0.80, 0.79]])
    half = np.array([[0.75, 0.80, 0.70], [0.81, 0.81, 0.77]])
    n = math.log2(3.0)
    out = extrapolated_scores(full, half, n)
    for f in range(2):
        for k in range(3):
            assert math.isclose(out[f, k], full[f, k] + n * (full[f, k] - half[f, k]), abs_tol=1e-12)


def reference_choice(scores):
    """The paired rule, from its statement: the most preferred family not clearly beaten by the best."""
    means = [sum(row) / len(row) for row in scores]
    best = max(range(len(means)), key=lambda i: (means[i], -i))
    k = len(scores[0])
    for family in range(len(scores)):
        d = [scores[best][j] - scores[family][j] for j in range(k)]
        mean = sum(d) / k
        std = math.sqrt(sum((x - mean) ** 2 for x in d) / k)
        if mean <= std / math.sqrt(k - 1):
            return family
    raise AssertionError("the best family always qualifies")


def test_the_paired_rule_matches_its_statement_on_random_scores():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n_families, k = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        base = rng.uniform(0.6, 0.9, size=k)  # folds differ much more than families: the paired case
        scores = base[None, :] + rng.normal(0, 0.01, size=(n_families, k))
        assert paired_choice(scores) == reference_choice(scores.tolist())


def test_a_consistent_gain_wins_where_the_unpaired_one_se_rule_would_not():
    """Folds that differ by 0.06 but a family that is 0.007 better on every fold: the fold noise is shared."""
    preferred = np.array([0.80, 0.86, 0.83])
    better = preferred + np.array([0.006, 0.008, 0.007])
    scores = np.vstack([preferred, better])
    assert paired_choice(scores) == 1
    # the grid's unpaired rule (best's std / sqrt(k - 1)) would keep the preferred family
    se = better.std() / math.sqrt(2)
    assert preferred.mean() >= better.mean() - se
