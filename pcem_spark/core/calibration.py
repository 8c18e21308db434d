"""Calibrated path posteriors: one temperature for the joint log-likelihoods, fitted out of fold.

Eq. 5's posterior ``softmax_j(jll_j)`` is over-confident: naive Bayes counts
every word as independent evidence, and EM sharpens it further, so nearly all
the mass sits on the argmax path even where it is wrong. Temperature scaling
divides the joint log-likelihoods by one scalar ``T`` before the softmax,

    P_T(p_j | x) = exp(jll_j / T) / sum_i exp(jll_i / T),

fitted by minimising the log-loss of the true paths of documents the model
did not see (out-of-fold predictions of the labelled documents). It is
monotone, so the argmax path never changes; node marginals, top-k paths and
``min_probability`` prefixes follow from ``P_T``.

An out-of-fold set keeps the :data:`TOP_PATHS` best paths of each document
and always its true path, so it stays small whatever the number of paths.
With at most that many paths (20NG, most taxonomies) the fit is exact; with
more it leaves the other paths out of the softmax's normaliser, which is
negligible while their joint log-likelihoods stay many times T below the
best, and biases T upwards (flatter) when T is large enough to reach them.

Calibration error is measured on the events a threshold acts on: every real
node of each document's predicted path, with its marginal probability, is
correct when the node is on the true path (:func:`predicted_node_events`).
Pure numpy; the Spark side only gathers the out-of-fold sets.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "Calibration",
    "TOP_PATHS",
    "MIN_OUT_OF_FOLD",
    "map_events",
    "TEMPERATURE_BOUNDS",
    "OutOfFold",
    "out_of_fold",
    "concat_out_of_fold",
    "scaled_posteriors",
    "true_path_log_loss",
    "fit_temperature",
    "isotonic_map",
    "logistic_map",
    "MAP_KINDS",
    "DepthMaps",
    "depth_logistic_maps",
    "fit_map",
    "choose_map",
    "apply_map",
    "map_paths",
    "map_nodes",
    "path_depths",
    "map_record",
    "map_from_record",
    "paths_at_least",
    "predicted_node_events",
    "expected_calibration_error",
    "reliability_bins",
    "calibration_report",
]

TOP_PATHS = 256  # paths kept per out-of-fold document (its true path always among them)
MIN_OUT_OF_FOLD = 20  # fewer out-of-fold documents: no temperature is fitted (uncalibrated, with a warning)
TEMPERATURE_BOUNDS = (1e-2, 1e4)  # the search range of T


class DepthMaps(NamedTuple):
    """One monotone map per node depth (``maps[d]``: breakpoints ``(x, y)`` for nodes at depth ``d + 1``; the
    last one serves deeper nodes), and for prediction the depth index of each path's deepest real node.

    ``path_depth`` (int ndarray (M,)) is not saved: the model fills it from its taxonomy
    (:func:`path_depths`) before predicting, so a path's probability goes through its leaf's map.
    """

    maps: Tuple[Tuple[np.ndarray, np.ndarray], ...]
    path_depth: Optional[np.ndarray] = None

    def at(self, depth: int) -> Tuple[np.ndarray, np.ndarray]:
        return self.maps[min(int(depth), len(self.maps) - 1)]


def map_record(mapping) -> Dict[str, object]:
    """A probability map as JSON: ``{"x", "y"}`` breakpoints, or ``{"depths": [{"x", "y"}, ...]}``."""
    if isinstance(mapping, DepthMaps):
        return {"depths": [map_record(m) for m in mapping.maps]}
    return {"x": [float(v) for v in mapping[0]], "y": [float(v) for v in mapping[1]]}


def map_from_record(record: Dict[str, object]):
    """The inverse of :func:`map_record`; ValueError when it is not one."""
    if "depths" in record:
        maps = tuple(map_from_record(m) for m in record["depths"])
        if not maps:
            raise ValueError("the depth maps are empty")
        return DepthMaps(maps)
    x, y = np.asarray(record["x"], dtype=np.float64), np.asarray(record["y"], dtype=np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("the probability map has a non-finite breakpoint")
    if x.shape != y.shape or x.ndim != 1 or not len(x) or (np.diff(x) <= 0).any() or (np.diff(y) < 0).any():
        raise ValueError("the probability map is not increasing breakpoints")
    if ((y < 0) | (y > 1)).any():
        raise ValueError("the probability map leaves [0, 1]")
    return x, y


class Calibration(NamedTuple):
    """A model's calibration: ``temperature`` for the joint log-likelihoods, then ``probability_map``.

    ``probability_map``: ``(x, y)`` breakpoints of :func:`isotonic_map` or
    :func:`logistic_map`, or a :class:`DepthMaps` (None = identity).
    """

    temperature: float
    probability_map: Optional[object] = None

    def as_record(self) -> Dict[str, object]:
        """JSON-able (the model's metadata)."""
        record: Dict[str, object] = {"method": "temperature", "temperature": float(self.temperature)}
        if self.probability_map is not None:
            record["method"] = "temperature+map"
            record["map"] = map_record(self.probability_map)
        return record

    @classmethod
    def from_record(cls, record: Dict[str, object]) -> "Calibration":
        """The inverse of :meth:`as_record`; ValueError when it is not one."""
        temperature = float(record["temperature"])
        if not (temperature > 0 and np.isfinite(temperature)):
            raise ValueError(f"temperature {temperature}")
        mapping = record.get("map")
        return cls(temperature) if mapping is None else cls(temperature, map_from_record(mapping))


class OutOfFold(NamedTuple):
    """Out-of-fold predictions of labelled documents: the best paths' scores and the true path.

    scores : float64 (n, K), joint log-likelihoods of the K kept paths (-inf pads rows with fewer)
    paths : int64 (n, K), their path indices (-1 pads)
    true : int64 (n,), the column of each row's true path in ``paths``
    """

    scores: np.ndarray
    paths: np.ndarray
    true: np.ndarray

    @property
    def n(self) -> int:
        return int(self.scores.shape[0])


def out_of_fold(jll: np.ndarray, true_path: np.ndarray, k: int = TOP_PATHS) -> OutOfFold:
    """The :class:`OutOfFold` rows of one block: its ``k`` best paths plus the true one.

    Parameters
    ----------
    jll : ndarray (n, M), joint log-likelihoods (length-normalised documents)
    true_path : int ndarray (n,), index of each row's true path
    k : int, paths kept per row (``min(k, M)``); the true path replaces the
        k-th when it is not among the best

    Examples
    --------
    >>> import numpy as np
    >>> oof = out_of_fold(np.array([[0.0, -1.0, -9.0], [-2.0, 0.0, -5.0]]), np.array([2, 1]), k=2)
    >>> oof.paths.tolist(), oof.true.tolist()
    ([[0, 2], [1, 0]], [1, 0])
    """
    jll = np.asarray(jll, dtype=np.float64)
    true_path = np.asarray(true_path, dtype=np.int64)
    n, M = jll.shape
    k = max(1, min(int(k), M))
    if k < M:
        paths = np.argpartition(-jll, k - 1, axis=1)[:, :k]
    else:
        paths = np.tile(np.arange(M, dtype=np.int64), (n, 1))
    rows = np.arange(n)
    order = np.argsort(-jll[rows[:, None], paths], axis=1, kind="stable")
    paths = np.take_along_axis(paths, order, axis=1).astype(np.int64)
    missing = ~(paths == true_path[:, None]).any(axis=1)
    paths[missing, k - 1] = true_path[missing]
    true = np.argmax(paths == true_path[:, None], axis=1).astype(np.int64)
    return OutOfFold(jll[rows[:, None], paths], paths, true)


def concat_out_of_fold(parts: Sequence[OutOfFold]) -> OutOfFold:
    """One :class:`OutOfFold` of several (rows with fewer kept paths are padded with -inf / -1)."""
    parts = [p for p in parts if p.n]
    if not parts:
        return OutOfFold(np.zeros((0, 1)), np.zeros((0, 1), dtype=np.int64), np.zeros(0, dtype=np.int64))
    k = max(p.scores.shape[1] for p in parts)

    def pad(a, value):
        return np.pad(a, ((0, 0), (0, k - a.shape[1])), constant_values=value)

    return OutOfFold(
        np.vstack([pad(p.scores, -np.inf) for p in parts]),
        np.vstack([pad(p.paths, -1) for p in parts]),
        np.concatenate([p.true for p in parts]),
    )


def scaled_posteriors(scores: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row softmax of ``scores / temperature`` (n, K); ``-inf`` entries get 0."""
    z = np.asarray(scores, dtype=np.float64) / float(temperature)
    z = z - z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def true_path_log_loss(oof: OutOfFold, temperature: float = 1.0) -> float:
    """Mean ``-log P_T(true path | x)`` over the rows (natural log)."""
    if oof.n == 0:
        return float("nan")
    z = oof.scores / float(temperature)
    top = z.max(axis=1)
    log_norm = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return float(np.mean(log_norm - z[np.arange(oof.n), oof.true]))


def fit_temperature(oof: OutOfFold, bounds: Tuple[float, float] = TEMPERATURE_BOUNDS) -> float:
    """The ``T`` in ``bounds`` minimising :func:`true_path_log_loss` (a bounded search over log T).

    The loss is convex in ``1 / T`` (a log-sum-exp of linear functions minus
    a linear one), so the search finds its one minimum.
    """
    from scipy.optimize import minimize_scalar

    if oof.n == 0:
        raise ValueError("fit_temperature needs at least one out-of-fold row")
    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    found = minimize_scalar(
        lambda log_t: true_path_log_loss(oof, float(np.exp(log_t))),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-4},
    )
    return float(np.exp(found.x))


def isotonic_map(probability: np.ndarray, correct: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The non-decreasing map of probabilities to observed precision that fits best (pool adjacent violators).

    Returns breakpoints ``(x, y)`` from (0, 0) to (1, 1): :func:`apply_map`
    interpolates between them, so the map is monotone -- a node's mapped
    probability never exceeds its parent's -- and continuous.

    >>> x, y = isotonic_map(np.array([0.1, 0.2, 0.6, 0.9]), np.array([0, 1, 0, 1]))
    >>> x.tolist(), y.tolist()
    ([0.0, 0.1, 0.4, 0.9, 1.0], [0.0, 0.0, 0.5, 1.0, 1.0])
    """
    # Equal probabilities (ties, e.g. many marginals of exactly 1) are one point first.
    values, inverse = np.unique(np.asarray(probability, dtype=np.float64), return_inverse=True)
    hits = np.bincount(inverse, weights=np.asarray(correct, dtype=np.float64), minlength=len(values))
    counts = np.bincount(inverse, minlength=len(values)).astype(np.float64)
    # Blocks of (sum of correct, weight, weighted mean probability), merged while one's precision
    # is not below the next one's.
    sums, weights, xs = [], [], []
    for h, w, x in zip(hits, counts, values):
        sums.append(h)
        weights.append(w)
        xs.append(x)
        while len(sums) > 1 and sums[-2] / weights[-2] >= sums[-1] / weights[-1]:
            s, w2, x2 = sums.pop(), weights.pop(), xs.pop()
            xs[-1] = (xs[-1] * weights[-1] + x2 * w2) / (weights[-1] + w2)
            sums[-1] += s
            weights[-1] += w2
    x, y = np.array(xs), np.array(sums) / np.array(weights)
    # Pinned at (0, 0) and (1, 1): a path the model gives no chance is never right, and the map is fitted on
    # predicted paths' nodes (mostly likely ones), so it must not raise every unlikely path to its lowest
    # precision (top_paths of hundreds of paths would sum far above 1).
    if x[0] > 0:
        x, y = np.concatenate([[0.0], x]), np.concatenate([[0.0], y])
    if x[-1] < 1:
        x, y = np.concatenate([x, [1.0]]), np.concatenate([y, [1.0]])
    return x, y


# The monotone maps a calibration can end with (ModelSettings.calibration "temperature+<kind>").
MAP_KINDS = ("isotonic", "logistic", "logistic-depth")
MIN_DEPTH_EVENTS = 40  # fewer events at a depth: its map is the pooled logistic one

_LOGIT_CLIP = 1e-7  # probabilities are read at most this close to 0 or 1 (a logit of about +-16.1)
_LOGIT_GRID = 1.0 / (1.0 + np.exp(-np.linspace(-16.1, 16.1, 129)))  # dense near 0 and 1, where marginals pile up


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _LOGIT_CLIP, 1.0 - _LOGIT_CLIP)
    return np.log(p) - np.log1p(-p)


def logistic_map(probability: np.ndarray, correct: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The map ``logit(y) = a logit(x) + b`` (Platt scaling of the logit) fitted by maximum likelihood, as breakpoints.

    Two parameters instead of one step per block of :func:`isotonic_map`: smooth,
    and steadier on a few hundred events. ``a`` is kept positive (monotone) and
    a small ridge pulls ``(a, b)`` toward the identity ``(1, 0)``, so
    saturated marginals (all near 1) cannot send the fit off. The breakpoints
    (a grid dense near 0 and 1, up to the clip at which probabilities are
    read) start at (0, 0) like :func:`isotonic_map`'s and end at the fitted
    value of 1, so :func:`apply_map` reads both alike.

    >>> x, y = logistic_map(np.array([0.2, 0.4, 0.6, 0.8, 0.9, 0.95]), np.array([0, 1, 0, 1, 1, 1]))
    >>> bool(np.all(np.diff(y) >= 0)), float(x[0]), float(y[0]), float(x[-1])
    (True, 0.0, 0.0, 1.0)
    """
    from scipy.optimize import minimize

    z = _logit(probability)
    t = np.asarray(correct, dtype=np.float64)
    ridge = 1e-3 * max(len(z), 1) ** 0.5

    def loss(ab):
        s = ab[0] * z + ab[1]
        # -log-likelihood of t under sigmoid(s), stable for large |s|: log(1 + e^s) - t s
        nll = np.sum(np.logaddexp(0.0, s) - t * s)
        q = 0.5 * (1.0 + np.tanh(0.5 * s))
        grad = np.array([np.sum((q - t) * z), np.sum(q - t)])
        return nll + 0.5 * ridge * ((ab[0] - 1.0) ** 2 + ab[1] ** 2), grad + ridge * (ab - np.array([1.0, 0.0]))

    fit = minimize(loss, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B", bounds=[(1e-3, None), (None, None)])
    a, b = fit.x
    x = np.concatenate([[0.0], _LOGIT_GRID, [1.0]])
    inner = 0.5 * (1.0 + np.tanh(0.5 * (a * _logit(x[1:]) + b)))
    return x, np.maximum.accumulate(np.concatenate([[0.0], inner]))


def depth_logistic_maps(probability: np.ndarray, correct: np.ndarray, depth: np.ndarray) -> DepthMaps:
    """A :func:`logistic_map` per node depth (``depth``: 0-based, one per event).

    Nodes of different depths are calibrated differently by one temperature:
    a level-1 node's marginal sums over many paths, a leaf's is one path's
    posterior. A depth with fewer than :data:`MIN_DEPTH_EVENTS` events gets
    the map fitted on all events.
    """
    depth = np.asarray(depth, dtype=np.int64)
    pooled = None
    maps = []
    for d in range(int(depth.max(initial=0)) + 1):
        at = depth == d
        if at.sum() >= MIN_DEPTH_EVENTS:
            maps.append(logistic_map(probability[at], correct[at]))
        else:
            pooled = pooled if pooled is not None else logistic_map(probability, correct)
            maps.append(pooled)
    return DepthMaps(tuple(maps))


def fit_map(kind: str, probability: np.ndarray, correct: np.ndarray, depth: np.ndarray):
    """The map of ``kind`` (one of :data:`MAP_KINDS`) fitted on events (``depth``: 0-based, one per event)."""
    if kind == "isotonic":
        return isotonic_map(probability, correct)
    if kind == "logistic-depth":
        return depth_logistic_maps(probability, correct, depth)
    return logistic_map(probability, correct)


def map_events(probability: np.ndarray, mapping, depth: np.ndarray) -> np.ndarray:
    """``probability`` of events at ``depth`` through ``mapping`` (one map, or one per depth)."""
    if not isinstance(mapping, DepthMaps):
        return apply_map(probability, mapping)
    out = np.empty_like(np.asarray(probability, dtype=np.float64))
    for d in np.unique(depth):
        at = depth == d
        out[at] = apply_map(probability[at], mapping.at(d))
    return out


def choose_map(
    probability: np.ndarray,
    correct: np.ndarray,
    row: np.ndarray,
    kinds: Sequence[str] = MAP_KINDS,
    depth: Optional[np.ndarray] = None,
) -> Tuple[str, Dict[str, object], Dict[str, float]]:
    """``(kind, maps, held-out log-loss per kind)``: the map of ``kinds`` that predicts held-out events best.

    Cross-fitted on two halves of the documents (``row``: each event's
    document; even / odd rows, so a document's nodes stay together): each
    kind is fitted on one half and scored (log-loss) on the other, both
    ways. Every kind is then fitted on every event (``maps[kind]``); the
    model uses that of the chosen kind. ``depth``: each event's node depth
    (0-based; None = all at depth 0), read by "logistic-depth".
    """
    probability = np.asarray(probability, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    depth = np.zeros(len(probability), dtype=np.int64) if depth is None else np.asarray(depth, dtype=np.int64)
    half = (np.asarray(row) % 2).astype(bool)
    losses = {}
    for kind in kinds:
        loss = 0.0
        for fit_on in (half, ~half):
            if not fit_on.any() or fit_on.all():
                loss = np.inf if len(kinds) > 1 else 0.0
                break
            fitted = fit_map(kind, probability[fit_on], correct[fit_on], depth[fit_on])
            q = np.clip(map_events(probability[~fit_on], fitted, depth[~fit_on]), 1e-6, 1 - 1e-6)
            t = correct[~fit_on]
            loss -= float(np.sum(t * np.log(q) + (1 - t) * np.log(1 - q)))
        losses[kind] = loss / max(len(probability), 1)
    kind = min(kinds, key=lambda k: (losses[k], kinds.index(k)))
    return kind, {k: fit_map(k, probability, correct, depth) for k in kinds}, losses


def apply_map(probability: np.ndarray, probability_map) -> np.ndarray:
    """``probability`` through a map of :func:`isotonic_map` (None: unchanged); NaN stays NaN."""
    if probability_map is None:
        return probability
    x, y = probability_map
    out = np.interp(np.asarray(probability, dtype=np.float64), x, y)
    return np.where(np.isnan(probability), np.nan, np.clip(out, 0.0, 1.0))


def path_depths(path_nodes: np.ndarray) -> np.ndarray:
    """(M,) depth index (0-based) of each path's deepest real node (``path_nodes``: -1 at dummies)."""
    real = np.asarray(path_nodes) >= 0
    return (real.shape[1] - 1 - np.argmax(real[:, ::-1], axis=1)).astype(np.int64)


def map_paths(probability: np.ndarray, mapping, paths: np.ndarray) -> np.ndarray:
    """Path probabilities (any shape, ``paths`` their path indices) through ``mapping``: one map, or per
    :class:`DepthMaps` the map of each path's leaf depth (``mapping.path_depth``)."""
    if not isinstance(mapping, DepthMaps):
        return apply_map(probability, mapping)
    depth = mapping.path_depth[np.maximum(np.asarray(paths), 0)]
    out = np.empty_like(np.asarray(probability, dtype=np.float64))
    for d in np.unique(depth):
        at = depth == d
        out[at] = apply_map(np.asarray(probability)[at], mapping.at(d))
    return out


def map_nodes(probability: np.ndarray, mapping) -> np.ndarray:
    """Node marginals along paths, (n, D) with column ``d`` at depth ``d``, through ``mapping``.

    With :class:`DepthMaps` each column gets its depth's map, and then a
    running minimum along the path: a node is on the true path only if its
    parent is, so its probability never exceeds its parent's (one shared
    monotone map keeps that by itself).
    """
    if not isinstance(mapping, DepthMaps):
        return apply_map(probability, mapping)
    probability = np.asarray(probability, dtype=np.float64)
    out = np.column_stack([apply_map(probability[:, d], mapping.at(d)) for d in range(probability.shape[1])])
    return np.minimum.accumulate(out, axis=1) if out.size else out


def paths_at_least(probability: float, n_paths: int, probability_map=None) -> int:
    """How many paths can have a (mapped) probability >= ``probability``: the top-k that holds them all.

    The unmapped posteriors sum to 1, so at most ``1 / r`` of them reach r,
    the smallest posterior the map takes to ``probability`` or more (with
    :class:`DepthMaps`, the smallest over the depths' maps).

    >>> paths_at_least(0.3, 1000), paths_at_least(0.3, 2), paths_at_least(0.0, 50)
    (3, 2, 50)
    """
    if probability <= 0:
        return int(n_paths)
    if isinstance(probability_map, DepthMaps):
        return max(paths_at_least(probability, n_paths, m) for m in probability_map.maps)
    r = float(probability)
    if probability_map is not None:
        x, y = probability_map
        reach = np.flatnonzero(np.asarray(y) >= probability)
        if not reach.size:
            return 1  # no probability maps that high: only the predicted path
        i = int(reach[0])
        # the map is linear between breakpoints: where it crosses ``probability``
        r = float(x[0]) if i == 0 else float(np.interp(probability, [y[i - 1], y[i]], [x[i - 1], x[i]]))
    return int(min(n_paths, max(1, np.floor(1.0 / max(r, 1e-12)))))


def predicted_node_events(
    oof: OutOfFold, path_nodes: np.ndarray, temperature: float = 1.0, with_rows: bool = False, with_depth: bool = False
) -> Tuple[np.ndarray, ...]:
    """Marginal probability and correctness of every real node on each row's predicted path.

    The predicted path is the row's best scored path (column 0 of
    :func:`out_of_fold`'s rows: they are sorted); a node's marginal is the
    ``P_T`` mass of the kept paths through it; it is correct when the true
    path passes through it.

    Parameters
    ----------
    oof : OutOfFold
    path_nodes : int ndarray (M, D), -1 at dummies (``core.path_node_table``)
    temperature : float > 0

    Returns
    -------
    probability : ndarray (events,), correct : bool ndarray (events,)
    (and with ``with_rows`` the row of each event, int ndarray (events,);
    with ``with_depth`` then each event's depth index, int ndarray (events,))
    """
    post = scaled_posteriors(oof.scores, temperature)
    best = oof.paths[:, 0]
    rows = np.arange(oof.n)
    true = oof.paths[rows, oof.true]
    cand = np.where(oof.paths[:, :, None] >= 0, path_nodes[np.maximum(oof.paths, 0)], -2)  # (n, K, D)
    probs, correct, which, depths = [], [], [], []
    for d in range(path_nodes.shape[1]):
        node = path_nodes[best, d]
        real = node >= 0
        marginal = (post * (cand[:, :, d] == node[:, None])).sum(axis=1)
        probs.append(np.clip(marginal[real], 0.0, 1.0))
        correct.append((path_nodes[true, d] == node)[real])
        which.append(rows[real])
        depths.append(np.full(int(real.sum()), d, dtype=np.int64))
    out = (np.concatenate(probs), np.concatenate(correct))
    if with_rows:
        out += (np.concatenate(which),)
    if with_depth:
        out += (np.concatenate(depths),)
    return out


def reliability_bins(probability: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> Dict[str, list]:
    """Equal-width bins of predicted probability: count, mean probability and share correct per bin.

    A probability of exactly 1 falls in the last bin. Empty bins have
    count 0 and NaN means.
    """
    probability = np.asarray(probability, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.searchsorted(edges, probability, side="right") - 1, 0, n_bins - 1)
    count = np.bincount(which, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(which, weights=probability, minlength=n_bins) / count
        precision = np.bincount(which, weights=correct, minlength=n_bins) / count
    return {
        "lower": edges[:-1].tolist(),
        "upper": edges[1:].tolist(),
        "count": count.tolist(),
        "mean_probability": mean_p.tolist(),
        "precision": precision.tolist(),
    }


def expected_calibration_error(probability: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> float:
    """ECE: the count-weighted mean over bins of ``|mean probability - share correct|``.

    >>> expected_calibration_error(np.array([0.9, 0.9, 0.2, 0.2]), np.array([1, 0, 0, 0]))
    0.3
    """
    bins = reliability_bins(probability, correct, n_bins)
    count = np.asarray(bins["count"], dtype=np.float64)
    if count.sum() == 0:
        return float("nan")
    gap = np.abs(np.nan_to_num(np.asarray(bins["mean_probability"]) - np.asarray(bins["precision"])))
    return float(round((count * gap).sum() / count.sum(), 12))


def calibration_report(
    oof: OutOfFold, path_nodes: np.ndarray, temperature: float, probability_map=None
) -> Dict[str, float]:
    """ECE of predicted-path node marginals and true-path log-loss: uncalibrated (T = 1), at ``temperature``,
    and through ``probability_map`` too (``ece_calibrated``)."""
    before = predicted_node_events(oof, path_nodes, 1.0)
    after = predicted_node_events(oof, path_nodes, temperature, with_depth=True)
    return {
        "documents": oof.n,
        "node_events": int(before[0].size),
        "ece_uncalibrated": round(expected_calibration_error(*before), 6),
        "ece_temperature": round(expected_calibration_error(after[0], after[1]), 6),
        "ece_calibrated": round(
            expected_calibration_error(map_events(after[0], probability_map, after[2]), after[1]), 6
        ),
        "log_loss_uncalibrated": round(true_path_log_loss(oof, 1.0), 6),
        "log_loss_calibrated": round(true_path_log_loss(oof, temperature), 6),
    }
