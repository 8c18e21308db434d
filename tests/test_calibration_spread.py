"""How uncertain a calibration fitted on few labelled documents is: the bootstrap spread.

Synthetic out-of-fold sets where the truth is known: joint log-likelihoods
``s`` times too sharp, true paths drawn from ``softmax(jll / s)``, so the
calibrated probability of a node is its marginal under that softmax. The
spread must track the real error of a calibration fitted on n documents,
shrink as 1 / sqrt(n), and read the same calibrated marginals prediction
reports (checked against a dense numpy computation).
"""

import numpy as np
import pytest
from test_predict_evaluate import TAX  # noqa: E402 (the four-topic taxonomy)

from pcem_spark.core.calibration import (
    DepthMaps,
    apply_map,
    fit_map,
    fit_temperature,
    logistic_map,
    out_of_fold,
    predicted_node_events,
)
from pcem_spark.core.calibration_spread import calibrated_node_matrix, probability_spread
from pcem_spark.core.path_nodes import node_marginals, path_node_table

FLAT = np.arange(12).reshape(12, 1)  # 12 paths of one node each


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _sharp(n, seed, M=12, scale=4.0):
    """(jll, true, calibrated posteriors): jll ``scale`` times too sharp, true paths drawn from the posteriors."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, M)) * 1.5
    p = _softmax(z)
    true = (p.cumsum(axis=1) > rng.random(n)[:, None]).argmax(axis=1)
    return scale * z, true, p


def _fitted(oof, kind):
    t = fit_temperature(oof)
    prob, correct, depth = predicted_node_events(oof, FLAT, t, with_depth=True)
    return t, fit_map(kind, prob, correct.astype(float), depth)


def test_the_spread_tracks_the_real_error_of_a_calibration_fitted_on_n_documents():
    fresh_jll, _, fresh_p = _sharp(4000, seed=99)
    fresh = out_of_fold(fresh_jll, fresh_p.argmax(axis=1), k=12)
    truth = fresh_p.max(axis=1)  # the predicted path's calibrated probability
    spreads, errors = [], []
    for rep in range(6):
        jll, true, _ = _sharp(80, seed=rep)
        oof = out_of_fold(jll, true, k=12)
        spreads.append(probability_spread(oof, FLAT, "logistic", draws=20, seed=rep))
        t, m = _fitted(oof, "logistic")
        got = calibrated_node_matrix(fresh, FLAT, t, m)[:, 0]
        errors.append(np.mean(np.abs(got - truth)))
    # a lower bound of the same size: it misses only how far the fit is off, not how noisy it is
    assert 0.4 * np.mean(errors) < np.mean(spreads) < 1.5 * np.mean(errors)
    assert np.mean(errors) > 0.02  # 80 documents: the error is real, not a rounding


def test_the_spread_shrinks_as_one_over_the_square_root_of_the_documents():
    small = [probability_spread(out_of_fold(*_sharp(100, seed=s)[:2], k=12), FLAT, "logistic", seed=s) for s in (1, 2)]
    large = [probability_spread(out_of_fold(*_sharp(1600, seed=s)[:2], k=12), FLAT, "logistic", seed=s) for s in (1, 2)]
    ratio = np.mean(large) / np.mean(small)
    assert 0.12 < ratio < 0.45  # 1 / sqrt(16) = 0.25
    # seeded: the same number again
    oof = out_of_fold(*_sharp(100, seed=1)[:2], k=12)
    assert probability_spread(oof, FLAT, "logistic", seed=1) == small[0]


def test_a_large_set_is_subsampled_and_scaled():
    oof = out_of_fold(*_sharp(1600, seed=4)[:2], k=12)
    full = probability_spread(oof, FLAT, "logistic", draws=20, max_documents=1600)
    sub = probability_spread(oof, FLAT, "logistic", draws=20, max_documents=400)
    assert sub == pytest.approx(full, rel=0.35)  # a quarter of the documents, scaled by 1/2
    assert probability_spread(out_of_fold(*_sharp(1, seed=0)[:2], k=12), FLAT, "logistic") == 0.0


def test_calibrated_node_matrix_is_the_dense_mapped_marginals_capped_at_the_parent():
    M = TAX.n_paths
    rng = np.random.default_rng(5)
    jll = rng.normal(size=(40, M)) * 3
    true = rng.integers(M, size=40)
    pn = TAX.path_node_matrix(sparse=True)
    nodes = path_node_table(pn, TAX.is_dummy)
    # depth 0 mapped up, depth 1 mapped down: the cap at the parent must act on some rows
    up = logistic_map(np.linspace(0.05, 0.95, 40), (np.linspace(0.05, 0.95, 40) > 0.3).astype(float))
    down = (np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.2, 0.9]))
    mapping = DepthMaps((up, down))
    got = calibrated_node_matrix(out_of_fold(jll, true), nodes, 2.0, mapping)
    marg = node_marginals(_softmax(jll / 2.0), pn)
    best = jll.argmax(axis=1)
    want = np.full((40, nodes.shape[1]), np.nan)
    for i in range(40):
        parent = np.inf
        for d in range(nodes.shape[1]):
            node = nodes[best[i], d]
            if node < 0:
                break
            value = apply_map(np.array([marg[i, node]]), mapping.at(d))[0]
            parent = min(parent, value)
            want[i, d] = parent
    np.testing.assert_allclose(got, want, atol=1e-12)
    # without a map: the marginals themselves
    raw = calibrated_node_matrix(out_of_fold(jll, true), nodes, 2.0, None)
    assert np.nanmax(np.abs(raw[:, 0] - marg[np.arange(40), nodes[best, 0]])) < 1e-12
