"""Fitting the calibration of a model's probabilities from out-of-fold predictions.

The temperature (:mod:`pcem_spark.core.calibration`) is fitted on
predictions of labelled documents that the predicting model did not see: the
cross-validation sample the automatic tuning draws (bounded and seeded,
:func:`pcem_spark.ml.tuning.draw_cv_sample`) is split into the same folds,
and each fold is predicted by a fit of the *chosen* settings on the other
folds plus the unlabelled sample. These fits run to the model's own
``max_iter``, not the tuning's shorter ``tune.max_iter``: EM sharpens the
posteriors as it converges, and the map must fit the refit's posteriors, not
those of a fit stopped early. It costs ``tune.folds`` fits on the sample (one
Spark job, one task per fold) whatever the corpus size.

No test label can reach the map: only training documents are sampled, and
only their held-out predictions are kept. The out-of-fold sets come back to
the driver (at most :data:`~pcem_spark.core.calibration.TOP_PATHS` scores per
sampled labelled document), never a document.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.calibration import (
    MAP_KINDS,
    MIN_OUT_OF_FOLD,
    Calibration,
    DepthMaps,
    OutOfFold,
    calibration_report,
    choose_map,
    concat_out_of_fold,
    fit_temperature,
    map_events,
    map_record,
    predicted_node_events,
)
from pcem_spark.core.calibration_spread import mean_precision_error, probability_spread
from pcem_spark.core.path_nodes import path_node_table
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.ml.tuning import LABELS_COL, draw_cv_sample
from pcem_spark.model.sampled_cv import CVSample, run_sampled_cv, with_weight
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "CALIBRATED_METHODS",
    "SPREAD_WARNING",
    "MIN_MAP_OUT_OF_FOLD",
    "MAX_MEAN_SHIFT",
    "fit_calibration",
    "out_of_fold_predictions",
]

log = logging.getLogger(__name__)

# Methods with one component per path, whose probability is Eq. 5's softmax: the ones a temperature calibrates.
CALIBRATED_METHODS = ("pcnb", "pcem", "flat-nb", "flat-em")
# Above this bootstrap spread of the calibrated probabilities, training warns that thresholds are approximate.
SPREAD_WARNING = 0.03
# Fewer out-of-fold documents: the temperature alone, no monotone map (a map has breakpoints to fit).
MIN_MAP_OUT_OF_FOLD = 40
# A map that moves the mean probability of the out-of-fold nodes further than this from their precision is wrong.
MAX_MEAN_SHIFT = 0.1


def fit_calibration(
    feats: DataFrame,
    taxonomy: Taxonomy,
    vocab_size: int,
    settings: ModelSettings,
    tune: Optional[TuneSettings] = None,
    seed: int = 0,
) -> Tuple[Optional[Calibration], Dict[str, object]]:
    """``(calibration or None, summary)`` for a model of ``settings`` trained on ``feats``.

    ``feats``: ``id, features, labels`` rows (null labels = unlabelled),
    best cached. ``settings``: the refit's resolved settings. None (with the
    reason in ``summary["reason"]`` and a warning) when ``settings.calibration``
    is "none", the method is not an Eq. 5 method, or there are too few
    labelled documents for the folds. The calibration is a temperature
    (fitted on the true paths' log-loss) and then a monotone map of node
    marginals to observed precision (isotonic), both on the same out-of-fold
    predictions. The summary records them, what was sampled, and ECE /
    log-loss of the out-of-fold predictions before and after (the map's
    ECE is in sample: it was fitted on those events), and
    ``probability_spread`` (:func:`~pcem_spark.core.calibration_spread.probability_spread`):
    how uncertain the calibrated probabilities are for the number of
    labelled documents, with a warning above :data:`SPREAD_WARNING`.
    """
    tune = tune or TuneSettings()
    if settings.calibration == "none":
        return None, {"method": "none", "reason": "model.calibration = none"}
    if settings.method not in CALIBRATED_METHODS:
        return _uncalibrated(f"{settings.method} decodes by its own rule, not Eq. 5's softmax over paths")
    t0 = time.perf_counter()
    found = out_of_fold_predictions(feats, taxonomy, vocab_size, settings, tune, seed)
    if isinstance(found[0], str):
        return _uncalibrated(*found)
    oof, drawn, n_iter, (n_scored, n_skipped) = found
    counted = {"out_of_fold_scored": n_scored, "out_of_fold_skipped": n_skipped}
    if oof.n < MIN_OUT_OF_FOLD:
        return _uncalibrated(
            f"only {oof.n} out-of-fold documents could be scored ({n_skipped} held out had no labelled document "
            f"of their leaf in training); a calibration needs {MIN_OUT_OF_FOLD}",
            counted,
        )
    temperature = fit_temperature(oof)
    path_nodes = path_node_table(taxonomy.path_node_matrix(sparse=True), taxonomy.is_dummy)
    # Then the node marginals at that temperature -> observed precision, by a monotone map: isotonic
    # or logistic, whichever predicts held-out nodes better (cross-fitted), unless the settings name one.
    forced = settings.calibration.partition("+")[2]
    probability, correct, rows, depth = predicted_node_events(
        oof, path_nodes, temperature, with_rows=True, with_depth=True
    )
    if oof.n < MIN_MAP_OUT_OF_FOLD:
        kind, maps, map_losses = "", {}, {}
        log.warning(
            "calibration: only %d out-of-fold documents could be scored (%d skipped: no labelled document of "
            "their leaf in training): the temperature alone, no map (a map needs %d)",
            oof.n,
            n_skipped,
            MIN_MAP_OUT_OF_FOLD,
        )
    else:
        kind, maps, map_losses = choose_map(
            probability, correct, rows, kinds=(forced,) if forced else MAP_KINDS, depth=depth
        )
    probability_map = maps.get(kind)
    kind, probability_map = _never_collapsed(probability, correct, depth, kind, probability_map)
    spread = probability_spread(oof, path_nodes, kind or None, seed=seed)
    spread_basis = "bootstrap"
    if not kind and mean_precision_error(correct, oof.n) > spread:
        # a temperature alone knows the overall precision only to its binomial error; its bootstrap
        # moves little where the probabilities are small, so it would hide how few documents there are
        spread, spread_basis = mean_precision_error(correct, oof.n), "binomial"
    summary = {
        **counted,
        "method": f"temperature+{kind}" if kind else "temperature",
        # every candidate, fitted on all the out-of-fold nodes (what bench_calibration compares)
        "maps": {k: map_record(m) for k, m in maps.items()},
        "map_held_out_log_loss": {k: round(v, 6) for k, v in map_losses.items()},
        "temperature": round(temperature, 6),
        "map_breakpoints": int(
            0
            if probability_map is None
            else sum(len(m[0]) for m in probability_map.maps)
            if isinstance(probability_map, DepthMaps)
            else len(probability_map[0])
        ),
        "fitted_on": "out-of-fold predictions of the labelled cross-validation sample",
        "folds": tune.folds,
        "sample": drawn.as_dict(),
        "fit_max_iter": settings.max_iter,
        "n_iter": n_iter,
        **calibration_report(oof, path_nodes, temperature, probability_map),
        # how far the calibrated probabilities move when the calibration is refitted on a bootstrap of its documents
        "probability_spread": round(spread, 6),
        "probability_spread_basis": spread_basis,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    log.info(
        "calibration: temperature %.4g and a %d-point %s map from %d out-of-fold predictions (%d skipped); "
        "node-marginal ECE %.4f -> %.4f (temperature) -> %.4f (and the map, in sample), log-loss %.4f -> %.4f (%.1fs)",
        temperature,
        summary["map_breakpoints"],
        kind or "(no)",
        oof.n,
        n_skipped,
        summary["ece_uncalibrated"],
        summary["ece_temperature"],
        summary["ece_calibrated"],
        summary["log_loss_uncalibrated"],
        summary["log_loss_calibrated"],
        summary["seconds"],
    )
    if spread > SPREAD_WARNING:
        log.warning(
            "calibration: fitted on %d labelled documents, the calibrated probabilities are uncertain by about "
            "+-%.3f (%s of those documents), so a threshold P keeps nodes of precision about P +- %.2f "
            "on new documents, and likely more; each 4x more labelled documents halves it",
            oof.n,
            spread,
            "the binomial error of the precision" if spread_basis == "binomial" else "a bootstrap",
            spread,
        )
    return Calibration(temperature, probability_map), summary


def out_of_fold_predictions(
    feats: DataFrame,
    taxonomy: Taxonomy,
    vocab_size: int,
    settings: ModelSettings,
    tune: TuneSettings,
    seed: int = 0,
) -> Union[Tuple[str, Dict[str, int]], Tuple[OutOfFold, CVSample, List[int], Tuple[int, int]]]:
    """``(out-of-fold set, what was sampled, EM iterations per fold, (scored, skipped))``, or why there is
    none: ``(reason, {"out_of_fold_scored": 0, "out_of_fold_skipped": n})``.

    The folds of the seeded cross-validation sample, each predicted by a fit
    of ``settings`` (to its own ``max_iter``) on the other folds and the
    unlabelled sample (EM-lambda rescaled as the tuning does).
    """
    counts = {bool(r[0]): int(r[1]) for r in feats.groupBy(F.col(LABELS_COL).isNull()).count().collect()}
    n_docs = (counts.get(False, 0), counts.get(True, 0))
    if n_docs[0] < max(tune.folds * tune.min_labeled_per_fold, MIN_OUT_OF_FOLD):
        return f"only {n_docs[0]} labelled documents", {"out_of_fold_scored": 0, "out_of_fold_skipped": 0}
    sample, drawn = draw_cv_sample(feats, taxonomy, tune, n_docs, seed)
    try:
        if drawn.n_labeled_sampled < max(tune.folds, MIN_OUT_OF_FOLD):
            return (
                f"the sample drew only {drawn.n_labeled_sampled} labelled documents",
                {"out_of_fold_scored": 0, "out_of_fold_skipped": 0},
            )
        if drawn.n_held_out < MIN_OUT_OF_FOLD:
            return (
                f"only {drawn.n_held_out} of {drawn.n_labeled_sampled} sampled labelled documents can be held out "
                f"(a leaf's only labelled document never is; a calibration needs {MIN_OUT_OF_FOLD})",
                # none was scored: the ones never held out are the skipped ones
                {"out_of_fold_scored": 0, "out_of_fold_skipped": drawn.n_labeled_sampled},
            )
        fit_settings = with_weight(replace(settings, calibration="none"), drawn.unlabeled_scale)
        results = run_sampled_cv(
            sample, taxonomy, vocab_size, [fit_settings], tune.folds, settings.block_size, keep_out_of_fold=True
        )
    finally:
        sample.unpersist()
    oof = concat_out_of_fold([r["out_of_fold"] for r in results[0]])
    scored = (sum(int(r.get("scored", 0)) for r in results[0]), sum(int(r.get("skipped", 0)) for r in results[0]))
    return oof, drawn, [int(r["n_iter"]) for r in results[0]], scored


def _never_collapsed(probability, correct, depth, kind: str, probability_map):
    """``(kind, map)``, or ``("", None)`` (the temperature alone) when the map would move the mean probability
    of the out-of-fold nodes more than :data:`MAX_MEAN_SHIFT` away from their observed precision: a map
    must never push every probability towards 0 (or 1)."""
    if probability_map is None or not len(probability):
        return kind, probability_map
    mapped = float(np.mean(map_events(probability, probability_map, depth)))
    observed = float(np.mean(correct))
    if abs(mapped - observed) <= MAX_MEAN_SHIFT:
        return kind, probability_map
    log.warning(
        "calibration: the %s map would make the mean node probability %.3f where the out-of-fold precision is "
        "%.3f: not used, the temperature alone",
        kind,
        mapped,
        observed,
    )
    return "", None


def _uncalibrated(reason: str, extra: Optional[Dict[str, object]] = None) -> Tuple[None, Dict[str, object]]:
    log.warning("calibration skipped: %s; the model's probabilities are uncalibrated (over-confident)", reason)
    return None, {"method": "none", "reason": reason, **(extra or {})}
