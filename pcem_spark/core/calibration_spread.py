"""How far a calibration fitted on few labelled documents can be trusted: a bootstrap of its documents.

A calibration map says "nodes of probability p are right p of the time",
and it learns that from the out-of-fold predictions of the labelled
documents. With n of them, the share right at p is itself known only to
about ``sqrt(p (1 - p) / n)``: 58 labelled documents cannot pin a
threshold's precision closer than about +-0.05, however the map is shaped.

:func:`probability_spread` measures that for the model at hand: it refits
the temperature and the chosen map on bootstrap resamples of the
out-of-fold documents and reports how far the refitted calibrations move
the calibrated probabilities of the out-of-fold nodes (the mean absolute
change, averaged over the resamples). It is a lower bound on the error a
user should expect on new documents: it sees the noise of the labelled
sample, not the difference between the cross-validation fits and the
final model. It shrinks as ``1 / sqrt(n)``.

Pure numpy; it reads the out-of-fold set the calibration was fitted on.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pcem_spark.core.calibration import (
    OutOfFold,
    fit_map,
    fit_temperature,
    map_nodes,
    predicted_node_events,
)

__all__ = [
    "SPREAD_DRAWS",
    "SPREAD_MAX_DOCUMENTS",
    "calibrated_node_matrix",
    "probability_spread",
    "mean_precision_error",
]

SPREAD_DRAWS = 30  # bootstrap resamples: the spread's own relative error is about 1 / sqrt(2 * draws)
# Larger out-of-fold sets are subsampled to m documents and the spread scaled by sqrt(m / n): the rate of the
# logistic maps; an isotonic map's error shrinks more slowly (n ** -1/3), so there the scaled spread errs low.
SPREAD_MAX_DOCUMENTS = 2000


def _rows(oof: OutOfFold, index: np.ndarray) -> OutOfFold:
    return OutOfFold(oof.scores[index], oof.paths[index], oof.true[index])


def calibrated_node_matrix(oof: OutOfFold, path_nodes: np.ndarray, temperature: float, mapping) -> np.ndarray:
    """(n, D) calibrated marginals of each row's predicted-path nodes (NaN past a short path's last real node).

    What prediction reports for them: the marginals at ``temperature``
    through ``mapping`` (:func:`~pcem_spark.core.calibration.map_nodes`, so
    with one map per depth a child never exceeds its parent).
    """
    probability, _, rows, depth = predicted_node_events(oof, path_nodes, temperature, with_rows=True, with_depth=True)
    nodes = np.full((oof.n, path_nodes.shape[1]), np.nan)
    nodes[rows, depth] = probability
    return nodes if mapping is None else map_nodes(nodes, mapping)


def _fit(oof: OutOfFold, path_nodes: np.ndarray, kind: Optional[str]):
    temperature = fit_temperature(oof)
    if not kind:  # the temperature alone
        return temperature, None
    probability, correct, depth = predicted_node_events(oof, path_nodes, temperature, with_depth=True)
    return temperature, fit_map(kind, probability, correct.astype(np.float64), depth)


def probability_spread(
    oof: OutOfFold,
    path_nodes: np.ndarray,
    kind: Optional[str],
    draws: int = SPREAD_DRAWS,
    seed: int = 0,
    max_documents: int = SPREAD_MAX_DOCUMENTS,
) -> float:
    """Mean absolute change of the calibrated node probabilities when the calibration is refitted on a
    bootstrap resample of its ``oof`` documents (temperature, then a map of ``kind``).

    Parameters
    ----------
    oof : OutOfFold, the out-of-fold set the calibration was fitted on (n rows)
    path_nodes : int ndarray (M, D), -1 at dummies (``core.path_node_table``)
    kind : str, one of :data:`~pcem_spark.core.calibration.MAP_KINDS`, or None: the temperature alone
    draws : int, bootstrap resamples (seeded by ``seed``)
    max_documents : int, above this many rows the bootstrap runs on a seeded
        subsample of m rows and the result is scaled by ``sqrt(m / n)``

    Returns
    -------
    float >= 0 (0.0 for fewer than 2 rows)
    """
    if oof.n < 2:
        return 0.0
    rng = np.random.default_rng(seed)
    scale = 1.0
    if oof.n > max_documents:
        scale = float(np.sqrt(max_documents / oof.n))
        oof = _rows(oof, np.sort(rng.choice(oof.n, max_documents, replace=False)))
    temperature, mapping = _fit(oof, path_nodes, kind)
    fitted = calibrated_node_matrix(oof, path_nodes, temperature, mapping)
    real = ~np.isnan(fitted)
    changes = []
    for _ in range(int(draws)):
        t, m = _fit(_rows(oof, rng.integers(0, oof.n, oof.n)), path_nodes, kind)
        refitted = calibrated_node_matrix(oof, path_nodes, t, m)
        changes.append(float(np.mean(np.abs(refitted[real] - fitted[real]))))
    return float(np.mean(changes)) * scale


def mean_precision_error(correct: np.ndarray, n_documents: int) -> float:
    """``sqrt(p (1 - p) / n)``: the standard error of the out-of-fold precision ``p = mean(correct)`` of
    ``n_documents`` documents.

    A temperature alone (too few documents for a map) is one number fitted to
    match that precision on average, so the calibrated probabilities as a
    whole are known no better than this. The bootstrap of the temperature
    misses it (it moves little where every probability is small), which is
    why the calibration reports the larger of the two there.

    >>> round(mean_precision_error(np.array([1, 0, 0, 0] * 5), 20), 4)
    0.0968
    """
    if n_documents < 1 or not len(correct):
        return 0.0
    p = float(np.mean(correct))
    return float(np.sqrt(p * (1.0 - p) / n_documents))
