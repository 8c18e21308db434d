"""Fitting one method on packed blocks: the method's mixture structure, the EM engine's settings, a PathModel.

:func:`fit_blocks` is where every fit ends -- ``pcem train``, ``PathEM``, cross-validation
folds, the experiment runner -- once the documents are packed into cached CSR blocks.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import List, Tuple

import numpy as np

from pcem_spark.core.methods import MethodSpec, method_spec
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine import passes
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.engine.passes import EMSettings, FitResult
from pcem_spark.errors import InputError
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

__all__ = ["score_matrix", "em_settings", "fit_blocks"]

log = logging.getLogger(__name__)


def score_matrix(taxonomy: Taxonomy, method: str, components: int = 2, path_weight: float = 1.0) -> np.ndarray:
    """(R, K) node -> component score matrix: Eq. 2 for PC methods, leaf indicator for flat ones."""
    return method_spec(taxonomy, method, components, path_weight).score_matrix


def em_settings(model_settings: ModelSettings, spec: MethodSpec, prior_smoothing=None) -> EMSettings:
    """The engine's :class:`EMSettings` of a (resolved) ``model_settings`` and its method's ``spec``.

    ``prior_smoothing``: the path prior's pseudo-count (a warm start's; None = the smoothing).
    """
    return EMSettings(
        em=spec.em,
        smoothing=model_settings.smoothing,
        max_iter=model_settings.max_iter,
        tol=model_settings.tol,
        label=model_settings.method.upper(),
        posterior_floor=model_settings.posterior_floor,
        dtype=model_settings.parameter_dtype,
        seed=model_settings.seed,
        top_k=model_settings.effective_top_k,
        unlabeled_weight=float(model_settings.unlabeled_weight),
        doc_length=float(model_settings.doc_length),
        prior_smoothing=prior_smoothing,
    )


def fit_blocks(
    blocks,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    warm_start=None,
) -> Tuple[PathModel, FitResult]:
    """Fit one method on already packed (and cached) blocks of the training documents.

    ``warm_start`` (:class:`pcem_spark.model.warm.WarmStart`): EM starts from that
    model's parameters; its values fill the settings left at "auto".
    """
    model_settings.validate()
    init_params = prior_smoothing = warm_info = None
    if warm_start is not None:
        model_settings, prior_smoothing, init_params, warm_info = warm_start.prepare(
            taxonomy, vocabulary, model_settings
        )
    if model_settings.auto_params():
        raise InputError(
            f'{model_settings.method}: {", ".join(model_settings.auto_params())} = "auto" is chosen '
            "by cross-validation on the documents (pcem_spark.ml.tuning.resolve_auto / "
            "model.train), not on packed blocks; pass numbers here"
        )
    model_settings = model_settings.resolved()
    log.info(
        "%s: vocabulary of %d terms, %d paths, taxonomy depth %d",
        model_settings.method,
        len(vocabulary),
        taxonomy.n_paths,
        taxonomy.depth,
    )
    if taxonomy.n_paths == 1:  # every fit comes through here: train, train_weak, PathEM, the experiment
        log.warning(
            "the taxonomy has one leaf, %r: every document will get this path, %s, whatever its text "
            "(a classifier needs at least two leaves; is the taxonomy file or the labels column the "
            "right one?)",
            taxonomy.leaves[0],
            taxonomy.real_path(0),
        )
    spec = method_spec(taxonomy, model_settings.method, model_settings.components, model_settings.path_weight)
    if model_settings.family != "generative":  # what the regression's fit would refuse, before EM runs
        from pcem_spark.model.linear_family import check_linear_family

        check_linear_family(blocks, taxonomy, len(vocabulary), model_settings)
    result = passes.fit(
        blocks,
        spec.score_matrix,
        len(vocabulary),
        em_settings(model_settings, spec, prior_smoothing),
        structure=spec.structure,
        init_params=init_params,
    )
    summary = {
        "n_labeled": result.n_labeled,
        "n_unlabeled": result.n_unlabeled,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "loglik_history": result.loglik_history,
        "iter_seconds": result.iter_seconds,
        "smoothing": result.smoothing,
        "prior_smoothing": result.prior_smoothing,
    }
    if warm_info is not None:  # pcem_spark.model.warm: where EM started
        summary["init_model"] = warm_info["path"]
        summary["warm_start"] = warm_info
    if result.smoothing_evidence is not None:
        summary["smoothing_evidence"] = result.smoothing_evidence
    if result.path_mass is not None:  # per path / component, for pcem inspect
        summary["path_mass_labeled"] = [round(float(x), 6) for x in result.path_mass_labeled]
        summary["path_mass"] = [round(float(x), 6) for x in result.path_mass]
    model = PathModel(
        taxonomy,
        vocabulary,
        None,
        result.params,
        feature_settings,
        replace(model_settings, smoothing=result.smoothing),
        summary,
    )
    if model_settings.family == "vmf":
        # The von Mises-Fisher mixture of the document vectors, by EM after the words' (model.vmf_family).
        from pcem_spark.core.estep import scoring_tables
        from pcem_spark.model.vmf_family import fit_vmf_blocks

        tables = scoring_tables(result.params, model_settings.parameter_dtype)
        model.linear, summary["vmf"] = fit_vmf_blocks(blocks, taxonomy, len(vocabulary), model_settings, tables)
        log.info(
            "vmf family: a von Mises-Fisher mixture of %d-value vectors over %d paths, kappa %.4g "
            "(%d EM iterations, %.1f s)",
            summary["vmf"]["embedding_dim"],
            taxonomy.n_paths,
            summary["vmf"]["kappa"],
            summary["vmf"]["n_iter"],
            summary["vmf"]["seconds"],
        )
    elif model_settings.family != "generative":
        # The combined / discriminative family: the softmax regression over paths, on the same blocks.
        from pcem_spark.model.linear_family import fit_linear_blocks

        model.linear, summary["linear"] = fit_linear_blocks(blocks, taxonomy, len(vocabulary), model_settings)
        log.info(
            "%s family: softmax regression over %d paths on %d labelled documents, C %g, generative weight %g "
            "(%d L-BFGS iterations, %.1f s)",
            model_settings.family,
            taxonomy.n_paths,
            summary["linear"]["n_labeled"],
            model_settings.linear_c,
            summary["linear"]["generative_weight"],
            summary["linear"]["n_iter"],
            summary["linear"]["seconds"],
        )
    return model, result
