"""The cross-validation grid: its points, each point's record, and the one chosen.

Pure functions on lists of settings and scores (no Spark): which grid points a
family's scores ignore (:func:`without_ignored`), a point's record in the
training summary (:func:`grid_row`), the preference order of the configured
lists (:func:`preference`) and the one-standard-error choice
(:func:`select_grid_point`).
"""

from __future__ import annotations

import itertools
import math
from typing import Dict, List, Optional

import numpy as np

from pcem_spark.errors import InputError
from pcem_spark.ml.tune_settings import SELECTIONS, TuneSettings
from pcem_spark.model.sampled_cv import fold_metric

__all__ = [
    "select_grid_point",
    "preference",
    "names_only_choice",
    "one_se_among",
    "NAMES_ONLY_FAMILY",
    "grid_points",
    "grid_row",
    "fold_scores",
    "without_ignored",
    "paired_choice",
    "family_representatives",
    "family_choice",
]


def select_grid_point(
    scores: List[float], stds: List[float], preference: List[int], n_folds: int, selection: str = TuneSettings.selection
) -> int:
    """Index of the chosen grid point.

    ``scores``/``stds``: mean and (population) standard deviation over the
    folds of each grid point's CV metric (larger is better), as
    CrossValidatorModel's ``avgMetrics``/``stdMetrics``. ``preference``: a
    rank per grid point, lower = preferred. ``"best"`` returns the argmax
    (ties: lowest index); ``"one_se"`` returns the most preferred point whose
    score is at least the best score minus the best point's standard error
    ``std / sqrt(n_folds - 1)``; ``"one_se_pooled"`` the same with ``std`` the
    root mean square of every point's (each point's spread over 3 folds is
    itself a noisy estimate of the folds' spread).
    """
    if selection not in SELECTIONS:
        raise InputError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    if selection == "best":
        return best
    spread = stds[best] if selection == "one_se" else _pooled_spread(scores, stds, stds[best])
    se = spread / math.sqrt(max(n_folds - 1, 1))
    within = [i for i in range(len(scores)) if scores[i] >= scores[best] - se]
    return min(within, key=lambda i: (preference[i], -scores[i], i))


def _pooled_spread(scores: List[float], stds: List[float], fallback: float) -> float:
    """Root mean square of the finite fold spreads of the points that scored (a point with no scored fold records
    score 0 and spread 0, which says nothing of the folds); ``fallback`` when none did."""
    spreads = [s for s, score in zip(stds, scores) if score > 0 and math.isfinite(s)]
    return math.sqrt(float(np.mean(np.square(spreads)))) if spreads else fallback


def preference(grid_rows: List[dict], grid_spec: Dict[str, list]) -> List[int]:
    """Rank of each grid point: by the sum of its values' positions in their lists, then lexicographically."""
    keys = [tuple(values.index(row[k]) for k, values in grid_spec.items()) for row in grid_rows]
    order = sorted(range(len(keys)), key=lambda i: (sum(keys[i]), keys[i]))
    rank = [0] * len(keys)
    for r, i in enumerate(order):
        rank[i] = r
    return rank


def grid_points(grid_spec: Dict[str, list]) -> List[dict]:
    """Every grid point, in ParamGridBuilder's order (itertools.product over the keys as added)."""
    keys = list(grid_spec)
    return [dict(zip(keys, values)) for values in itertools.product(*grid_spec.values())]


def fold_scores(per_fold: List[Dict[str, object]], metric: str) -> List[Optional[float]]:
    """Each fold's metric, None for a fold with no scorable held-out document (it says nothing)."""
    return [
        fold_metric(np.array(r["tp"]), np.array(r["fp"]), np.array(r["fn"]), metric) if r.get("scored", 1) else None
        for r in per_fold
    ]


def grid_row(point: dict, per_fold: List[Dict[str, object]], metric: str) -> dict:
    """The training summary's record of one grid point: its mean and std over the scored folds, and each fold's."""
    scores = [x for x in fold_scores(per_fold, metric) if x is not None]
    return {
        **point,
        "cv_score": float(np.mean(scores)) if scores else 0.0,
        "cv_std": float(np.std(scores)) if scores else 0.0,
        "fold_scores": [round(x, 6) for x in scores],
        "scored": [int(r.get("scored", 0)) for r in per_fold],
        "skipped": [int(r.get("skipped", 0)) for r in per_fold],
        "n_iter": [int(r["n_iter"]) for r in per_fold],
        "fit_seconds": round(float(sum(r["seconds"] for r in per_fold)), 3),
    }


# What a family's scores ignore: grid points that differ only in these are one point (the first value stands).
_IGNORED_BY_FAMILY = {
    "generative": ("generative_weight", "embedding_weight"),
    "discriminative": ("unlabeled_weight", "path_weight", "generative_weight"),
    "vmf": ("generative_weight", "embedding_weight"),
}


def without_ignored(points: List[dict], grid_spec: Dict[str, list], family: str) -> List[dict]:
    """``points`` without those that repeat another for their family: a generative point scores the same at
    any beta, a discriminative one (beta 0) at any EM-lambda, path weight or beta."""
    kept = []
    for point in points:
        ignored = _IGNORED_BY_FAMILY.get(point.get("family", family), ())
        if any(key in point and grid_spec[key].index(point[key]) != 0 for key in ignored):
            continue
        kept.append(point)
    return kept


def paired_choice(scores: np.ndarray) -> int:
    """Row of ``scores`` (F families x k folds, the most preferred family first) that the paired rule keeps.

    The family with the highest mean is the best; the kept one is the most
    preferred family whose mean trails the best's by at most the standard
    error of their per-fold differences, ``std(d) / sqrt(k - 1)`` (population
    std, as :func:`select_grid_point`). The folds hold out the same documents
    for every family, so the paired differences are far less noisy than
    either family's scores: a gain on every fold counts even when the folds
    differ by more than the gain.

    >>> paired_choice(np.array([[0.80, 0.86, 0.83], [0.806, 0.868, 0.837]]))  # +0.007 on every fold
    1
    >>> paired_choice(np.array([[0.80, 0.82, 0.81], [0.83, 0.80, 0.82]]))  # +0.007 on average, noisy
    0
    """
    scores = np.asarray(scores, dtype=np.float64)
    means = scores.mean(axis=1)
    best = int(np.argmax(means))  # ties: the most preferred
    k = scores.shape[1]
    for family in range(best + 1):
        d = scores[best] - scores[family]
        if d.mean() <= d.std() / math.sqrt(max(k - 1, 1)):
            return family
    return best


# The keys that set a grid point's EM fit (model.sampled_cv.em_key's share of the grid): points of two families that
# agree on these share each fold's EM, so their fold-by-fold difference is the regression's effect alone.
_EM_KEYS = ("unlabeled_weight", "path_weight")


def one_se_among(grid_rows: List[dict], indices: List[int], ranks: List[int], tune) -> int:
    """The index (of ``indices``, into ``grid_rows``) that ``tune.selection`` keeps among those grid points."""
    sub = select_grid_point(
        [grid_rows[i]["cv_score"] for i in indices],
        [grid_rows[i]["cv_std"] for i in indices],
        [ranks[i] for i in indices],
        tune.folds,
        tune.selection,
    )
    return indices[sub]


def family_representatives(grid_rows: List[dict], grid_spec: Dict[str, list], tune) -> List[int]:
    """One grid point per family of ``tune.families``' order: the anchor, then each other family at the anchor's EM.

    The anchor is the most preferred family's own one-SE point. Another family
    is represented by its one-SE point among those that share the anchor's EM
    settings (unlabeled_weight, path_weight), or among all its points when none
    does (the discriminative family, which runs no EM). Sharing the EM, a
    combined point differs from the generative anchor on every fold by the
    regression's contribution only: the pairs compare what the family adds,
    not two EM settings' noise as well.
    """
    ranks = preference(grid_rows, grid_spec)

    def one_se(indices: List[int]) -> int:
        return one_se_among(grid_rows, indices, ranks, tune)

    reps: List[int] = []
    for family in dict.fromkeys(grid_spec.get("family", [])):
        own = [i for i, row in enumerate(grid_rows) if row["family"] == family]
        if not own:
            continue
        if reps:
            anchor = grid_rows[reps[0]]
            same_em = [i for i in own if all(grid_rows[i].get(k) == anchor.get(k) for k in _EM_KEYS if k in anchor)]
            own = same_em or own
        reps.append(one_se(own))
    return reps


def family_choice(grid_rows: List[dict], point_folds: List[List[Optional[float]]], grid_spec: Dict[str, list], tune):
    """``(pick, record)``: the grid point of the family kept by :func:`paired_choice`, or ``(None, None)``.

    ``point_folds[i]``: grid point i's score on each fold (:func:`fold_scores`; None: not scored).
    The families are represented by :func:`family_representatives` and compared
    fold by fold, in ``tune.families``' order of preference. None when fewer than
    two families were scored on every fold (the grid's own one-SE choice then stands).
    """
    reps = family_representatives(grid_rows, grid_spec, tune)
    folds = [point_folds[i] for i in reps]
    if len(reps) < 2 or any(x is None for row in folds for x in row):
        return None, None
    kept = paired_choice(np.array(folds))
    record = {
        "rule": "paired one-SE; each family at the most preferred family's EM settings",
        "chosen": grid_rows[reps[kept]]["family"],
        "families": [
            {"family": grid_rows[i]["family"], "point": i, "cv_score": round(float(np.mean(f)), 6)}
            for i, f in zip(reps, folds)
        ],
    }
    return reps[kept], record


# The family kept when the documents have vectors and most held-out documents are their leaf's only labelled one.
# A fold then trains that leaf on its category name alone, a regime the final model (with the document) is not
# in, and there the combined family's word posterior wins the folds while losing the test: hierarchical micro-F1
# at one label per leaf with e5-small vectors, combined -> discriminative, 30.00 -> 70.50 on a 20 Newsgroups
# sample and 33.10 -> 36.25 on subject lines (docs/RESULTS.md, "Document vectors beside the words").
NAMES_ONLY_FAMILY = "discriminative"


def names_only_choice(grid_rows: List[dict], grid_spec: Dict[str, list], tune, n_alone: int, n_held_out: int):
    """``(pick, record)``: the one-SE point of :data:`NAMES_ONLY_FAMILY` among ``grid_rows``, or ``(None, None)``
    when the grid has none. ``n_alone`` of the ``n_held_out`` held-out documents were their leaf's only one."""
    own = [i for i, row in enumerate(grid_rows) if row.get("family") == NAMES_ONLY_FAMILY]
    if not own:
        return None, None
    pick = one_se_among(grid_rows, own, preference(grid_rows, grid_spec), tune)
    record = {
        "rule": (
            "document vectors, and most held-out documents are their leaf's only labelled one (the folds train "
            f"those leaves on their names alone): the {NAMES_ONLY_FAMILY} family"
        ),
        "chosen": NAMES_ONLY_FAMILY,
        "alone_held_out": int(n_alone),
        "held_out": int(n_held_out),
    }
    return pick, record
