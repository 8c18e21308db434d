"""Why EM stopped short of its tolerance, and what to do about it: read off the log-likelihood's history."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["relative_changes", "not_converged_advice"]


def relative_changes(loglik_history: Sequence[float]) -> np.ndarray:
    """``|L_t - L_{t-1}| / |L_{t-1}|`` of consecutive log-likelihoods (EM's stopping statistic)."""
    ll = np.asarray(loglik_history, dtype=np.float64)
    if len(ll) < 2:
        return np.zeros(0)
    return np.abs(np.diff(ll)) / np.maximum(np.abs(ll[:-1]), 1e-300)


def not_converged_advice(loglik_history: Sequence[float], tol: float, max_iter: int, truncated: bool) -> str:
    """What the history says when EM hit ``max_iter`` before a relative change below ``tol``.

    A change that shrinks geometrically gives the iterations still needed
    (EM's linear convergence: a slow rate means a flat likelihood, where the
    paths rarely change any more); one that does not shrink, with decreases of
    the log-likelihood, is truncated posteriors oscillating near the optimum.

    >>> ll = [-100.0 * (1 + 0.5 * 0.8**t) for t in range(30)]
    >>> not_converged_advice(ll, 1e-5, 30, truncated=False)[:88]
    'the last relative change was 0.00019, shrinking x0.80 per iteration: about 14 more itera'
    """
    rel = relative_changes(loglik_history)
    if len(rel) == 0:
        return f"raise model.max_iter (now {max_iter})"
    if tol <= 0:
        # tol 0 asks for every iteration: there is nothing to reach, only a budget that was spent.
        return f"model.tol is 0, so EM runs all model.max_iter = {max_iter} iterations by request"
    last = float(rel[-1])
    ll = np.asarray(loglik_history, dtype=np.float64)
    decreases = int((np.diff(ll) < -1e-9 * np.abs(ll[:-1])).sum())
    tail = rel[-5:]
    tail = tail[tail > 0]
    rate = float(np.exp(np.mean(np.diff(np.log(tail))))) if len(tail) >= 3 else float("nan")
    if np.isfinite(rate) and rate < 0.99 and last > 0:
        more = int(math.ceil(math.log(tol / last) / math.log(rate)))
        return (
            f"the last relative change was {last:.2g}, shrinking x{rate:.2f} per iteration: about {more} more "
            f"iterations would reach tol (set model.max_iter = {max_iter + more}); this close to the optimum few "
            f"predicted paths still change, and model.tol = {last * 1.5:.1g} would stop here"
        )
    why = (
        f"the log-likelihood fell {decreases} times: truncated posteriors (model.posterior_top_k) make EM "
        "oscillate near its optimum; model.posterior_top_k = 0 (exact) converges, at more cost per iteration"
        if truncated and decreases
        else "the change is not shrinking: EM is still moving documents between paths"
    )
    return f"the last relative change was {last:.2g} ({why}); raise model.tol to {last * 1.5:.1g} or model.max_iter"
