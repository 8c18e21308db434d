"""Where an EM run can be taken up again: its state after an iteration, and the hook that keeps it.

:func:`pcem_spark.engine.passes.fit` asks the hook active in this context
(:func:`active_hook`, set by :func:`em_hook` around one fit) for a state to
resume from, and hands it the state after every iteration. Only the fit the
caller wraps is checkpointed (``pcem train``'s refit over every document):
the cross-validation's and calibration's fits run in their own threads or
outside the scope, and see no hook.

The hook is a protocol so that the engine does not know where checkpoints go
(:class:`pcem_spark.ml.checkpointing.TrainCheckpoint` writes them).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Protocol

import numpy as np

from pcem_spark.core.parameters import PathParameters

__all__ = ["EMState", "EMHook", "em_hook", "active_hook"]


@dataclass
class EMState:
    """EM after ``iteration`` iterations: what the next iteration starts from, and the run so far.

    ``params``: the M-step's parameters of iteration ``iteration`` (the next E-step's input);
    ``loglik_history`` / ``iter_seconds``: one entry per iteration done; ``finished``: EM stopped
    (converged or ``max_iter``), ``params`` are the result.
    """

    iteration: int
    params: PathParameters
    loglik_history: List[float] = field(default_factory=list)
    iter_seconds: List[float] = field(default_factory=list)
    converged: bool = False
    finished: bool = False
    loglik_decreases: int = 0
    path_mass: Optional[np.ndarray] = None


class EMHook(Protocol):
    def resume_state(self) -> Optional[EMState]:
        """The state to go on from (None: start at iteration 1)."""

    def iteration_done(self, state: EMState) -> None:
        """Called after every iteration (``state.finished`` on the last); may write a checkpoint, or raise to
        stop the run (a graceful stop)."""


_ACTIVE: contextvars.ContextVar[Optional[EMHook]] = contextvars.ContextVar("pcem_em_hook", default=None)


def active_hook() -> Optional[EMHook]:
    """The hook of the fit running in this context, or None."""
    return _ACTIVE.get()


@contextmanager
def em_hook(hook: Optional[EMHook]) -> Iterator[None]:
    """Make ``hook`` the active one for the fits run inside the block (None: no hook)."""
    token = _ACTIVE.set(hook)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
