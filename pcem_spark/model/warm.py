"""Warm starts: EM on today's batch from yesterday's model (``pcem train --init-model``, PathEM ``initModel``).

A daily job that retrains on a new batch need not start EM from the naive
Bayes estimate of the (few) labelled documents: it can start from the last
model. What that means here:

* the previous model's expected counts are moved onto the new batch's
  vocabulary by term name (:func:`pcem_spark.core.warm_start_parameters`):
  terms it lacks are dropped, new terms start from the smoothing prior;
* the first E-step uses those parameters instead of the naive Bayes ones; the
  new batch's labelled documents enter every M-step as usual, the previous
  batch's documents do not -- the result is a model of the new batch, started
  where the old model was (fewer iterations, the same optimum basin);
* a batch without any labelled document is allowed (EM over its unlabelled
  documents from the previous model);
* settings left at ``"auto"`` (``smoothing``, ``unlabeled_weight``,
  ``path_weight``) take the previous model's resolved values instead of being
  chosen again (``pcem train --tune`` cross-validates the weights again);
  numbers given explicitly win.

The previous model must be a complete model directory (``PathModel.save`` or
a saved ``PathEMModel``) of the same taxonomy and method (and components).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from pcem_spark.core.methods import method_spec
from pcem_spark.core.parameters import PathParameters, PreviousFit, term_mapping, warm_start_parameters
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.errors import InputError
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import AUTO, ModelSettings
from pcem_spark.model.vectors import vector_column

__all__ = ["INHERITED_SETTINGS", "CROSS_VALIDATED_SETTINGS", "WarmStartError", "WarmStart", "as_warm_start"]

log = logging.getLogger(__name__)

# Settings a warm start takes from the previous model when they are "auto".
INHERITED_SETTINGS = (
    "smoothing",
    "unlabeled_weight",
    "path_weight",
    "family",
    "generative_weight",
    "embedding_weight",
)
# Of those, the ones `pcem train --tune` chooses again by cross-validation.
CROSS_VALIDATED_SETTINGS = ("unlabeled_weight", "path_weight", "family", "generative_weight", "embedding_weight")


class WarmStartError(InputError):
    """The init model cannot start this fit (missing, incomplete, other taxonomy or method)."""


@dataclass
class WarmStart:
    """A previous model to start EM from, and where it was read."""

    path: str
    model: PathModel
    # Settings taken from the previous model so far ({name: value}), for the training summary.
    inherited: Dict[str, object] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "WarmStart":
        """Read the model directory at ``path``; a missing or incomplete one is a :class:`WarmStartError`."""
        if not path:
            raise WarmStartError("init model: empty path")
        try:
            model = PathModel.load(path)
        except (FileNotFoundError, ValueError) as exc:
            raise WarmStartError(f"init model {path}: {exc}") from None
        return cls(path, model)

    # ----------------------------------------------------------- what it was trained with
    @property
    def smoothing(self) -> float:
        return float(self.model.model_settings.smoothing)

    @property
    def prior_smoothing(self) -> float:
        """The path prior's pseudo-count the previous fit used (recorded; else the engine's rule)."""
        summary = self.model.training_summary or {}
        if summary.get("prior_smoothing") is not None:
            return float(summary["prior_smoothing"])
        # engine.fit: "auto" smoothing (evidence recorded) keeps Laplace's 1 for the prior, a number is used for both.
        return 1.0 if summary.get("smoothing_evidence") else self.smoothing

    @property
    def path_mass(self) -> Optional[np.ndarray]:
        """The path masses the previous prior was computed from (training summary), or None."""
        mass = (self.model.training_summary or {}).get("path_mass")
        if mass is None or len(mass) != self.model.params.shape[0]:
            return None
        return np.asarray(mass, dtype=np.float64)

    # ----------------------------------------------------------- checks
    def check(self, taxonomy: Taxonomy, model_settings: ModelSettings, where: str = "init model") -> None:
        """Refuse (:class:`WarmStartError`) a previous model that cannot start this fit."""
        prev = self.model.model_settings
        if prev.method != model_settings.method:
            raise WarmStartError(
                f"{where} {self.path} was trained with method {prev.method!r}, this fit is "
                f"{model_settings.method!r}: a warm start needs the same method"
            )
        spec = method_spec(taxonomy, model_settings.method, model_settings.components)
        if spec.em == "off":
            raise WarmStartError(
                f"{where} {self.path}: method {model_settings.method!r} is naive Bayes in one "
                "pass; a warm start needs an EM method (pcem, flat-em, emmc, tdem, wdem)"
            )
        if model_settings.method in ("nbmc", "emmc") and prev.components != model_settings.components:
            raise WarmStartError(
                f"{where} {self.path} has {prev.components} components per leaf, this fit "
                f"{model_settings.components} (model.components): a warm start needs the same"
            )
        mine, theirs = taxonomy.path_keys(), self.model.taxonomy.path_keys()
        if mine != theirs:
            only_new = sorted(set(mine) - set(theirs))
            only_old = sorted(set(theirs) - set(mine))
            detail = (
                f"paths only in this fit's taxonomy: {only_new[:5]}{' ...' if len(only_new) > 5 else ''}; "
                f"only in the init model's: {only_old[:5]}{' ...' if len(only_old) > 5 else ''}"
                if only_new or only_old
                else "the same paths in another order"
            )
            raise WarmStartError(
                f"{where} {self.path} has a taxonomy of {len(theirs)} paths, this fit's "
                f"taxonomy {taxonomy!r} has {len(mine)}; they differ ({detail}): a warm start "
                "needs the same taxonomy"
            )
        if spec.n_components != self.model.params.shape[0]:
            raise WarmStartError(
                f"{where} {self.path} has {self.model.params.shape[0]} components, this fit {spec.n_components}"
            )

    # ----------------------------------------------------------- settings
    def inherit(
        self, model_settings: ModelSettings, names: Sequence[str] = INHERITED_SETTINGS
    ) -> Tuple[ModelSettings, Dict[str, object]]:
        """``model_settings`` with each of ``names`` that is "auto" set to the previous model's value.

        Returns the new settings and ``{name: value}`` of what was inherited
        (also added to :attr:`inherited`).
        """
        prev = self.model.model_settings
        taken = {
            name: getattr(prev, name)
            for name in names
            if getattr(model_settings, name) == AUTO and getattr(prev, name) != AUTO
        }
        # beta weighs the combined family's generative posterior: kept only from a combined fit for a combined one
        if prev.family != "combined" or taken.get("family", model_settings.family) not in ("combined", AUTO):
            taken.pop("generative_weight", None)
        # the vectors' scale means something only to a model that read vectors (a words-only model records the
        # fallback, which would otherwise fix the scale of a first fit with vectors)
        if vector_column(self.model) is None or prev.family not in ("combined", "discriminative"):
            taken.pop("embedding_weight", None)  # (a vmf model has vectors and no regression to scale them in)
        if taken:
            log.info(
                'warm start: %s from the init model %s (settings left at "auto" are not chosen again)',
                ", ".join(f"{k} {v}" for k, v in taken.items()),
                self.path,
            )
        self.inherited.update(taken)
        return replace(model_settings, **taken), taken

    # ----------------------------------------------------------- parameters
    def parameters(
        self, vocabulary: List[str], groups: Optional[np.ndarray], smoothing: float, prior_smoothing: Optional[float]
    ) -> PathParameters:
        """The previous parameters on ``vocabulary`` (by term name) at ``smoothing`` -- (R, len(vocabulary))."""
        previous = PreviousFit(
            self.model.params, self.model.vocabulary, self.smoothing, self.prior_smoothing, self.path_mass
        )
        return warm_start_parameters(previous, vocabulary, smoothing, groups, prior_smoothing)

    def vocabulary_overlap(self, vocabulary: List[str]) -> Dict[str, int]:
        """Terms of the new vocabulary that the previous one had (kept), lacks (new), and previous terms dropped."""
        target = term_mapping(self.model.vocabulary, vocabulary)
        kept = int((target >= 0).sum())
        return {"terms_kept": kept, "terms_dropped": int(len(target) - kept), "terms_new": int(len(vocabulary) - kept)}

    def prepare(
        self, taxonomy: Taxonomy, vocabulary: List[str], model_settings: ModelSettings
    ) -> Tuple[ModelSettings, Optional[float], PathParameters, Dict[str, object]]:
        """Everything :func:`pcem_spark.model.fit_blocks` needs for a warm fit.

        Checks the previous model against this fit, inherits the settings left
        at "auto", builds the start parameters. Returns ``(settings with
        numbers, prior smoothing for engine.fit, init params (R, V), summary)``
        where ``summary`` goes into the training summary as ``warm_start``.
        """
        self.check(taxonomy, model_settings)
        settings, taken = self.inherit(model_settings)
        settings = settings.resolved()
        # An inherited smoothing keeps the previous prior pseudo-count too (1 when it was chosen by evidence).
        prior_smoothing = self.prior_smoothing if "smoothing" in self.inherited else None
        spec = method_spec(taxonomy, settings.method, settings.components, float(settings.path_weight))
        groups = None if spec.structure is None else spec.structure.groups
        smoothing = float(settings.smoothing)
        params = self.parameters(vocabulary, groups, smoothing, prior_smoothing)
        overlap = self.vocabulary_overlap(vocabulary)
        prev_summary = self.model.training_summary or {}
        summary = {
            "path": self.path,
            **overlap,
            "inherited": dict(self.inherited),
            "previous_vocab_size": len(self.model.vocabulary),
            "previous_smoothing": self.smoothing,
            "previous_prior_smoothing": self.prior_smoothing,
            "previous_n_iter": prev_summary.get("n_iter"),
            "previous_n_labeled": prev_summary.get("n_labeled"),
            "previous_n_unlabeled": prev_summary.get("n_unlabeled"),
            "path_mass_recorded": self.path_mass is not None,
        }
        log.info(
            "warm start from %s: %d terms kept, %d dropped (not in this batch's vocabulary), %d new (start "
            "from the smoothing prior); previous model: %s labelled + %s unlabelled documents, %s EM "
            "iterations",
            self.path,
            overlap["terms_kept"],
            overlap["terms_dropped"],
            overlap["terms_new"],
            prev_summary.get("n_labeled"),
            prev_summary.get("n_unlabeled"),
            prev_summary.get("n_iter"),
        )
        return settings, prior_smoothing, params, summary


def as_warm_start(init_model) -> Optional[WarmStart]:
    """A :class:`WarmStart` for one fit: from a path (loaded), a WarmStart (a copy with nothing inherited
    yet; the model is shared) or None / "" (None)."""
    if init_model is None:
        return None
    if isinstance(init_model, WarmStart):
        return replace(init_model, inherited={})
    if isinstance(init_model, str):
        return WarmStart.load(init_model) if init_model else None
    raise TypeError(f"init_model must be a path or a WarmStart, got {type(init_model).__name__}")
