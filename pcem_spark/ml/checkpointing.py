"""A train that survives its driver: what a checkpoint holds, when it is written, and how a rerun resumes.

A default train runs in stages: the stop-word choice, the vocabulary, the
cross-validation, the refit's EM iterations and the calibration. A
:class:`TrainCheckpoint` records each stage's result when it completes, and the
refit's EM state every ``every_iterations`` iterations or ``every_seconds``,
whichever comes first (as an :class:`~pcem_spark.engine.em_checkpoint.EMHook`).
The same command run again with the same inputs and settings finds the
checkpoint, skips the stages done (logging each), and takes EM up at the
iteration saved. Every stage is deterministic for its inputs, so the resumed
model is the uninterrupted one's: the same stop words, vocabulary and choice,
and EM from the saved float64 parameters.

A checkpoint is used only when its **fingerprint** equals this run's: the
input files (sizes and modification times), every setting, the seed and the
checkpoint format. Otherwise the run starts afresh and logs the first
difference. The checkpoint is deleted when the model commits.

A **graceful stop** (:meth:`TrainCheckpoint.request_stop`, from a SIGTERM
handler) makes the next EM iteration's end write a checkpoint and raise
:class:`GracefulStop` (exit 75: retry, and the retry resumes).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Optional

from pcem_spark.engine.em_checkpoint import EMState
from pcem_spark.errors import InputError, TransientError
from pcem_spark.io.checkpoints import CheckpointStore
from pcem_spark.util.constraints import Interval, check_constraints
from pcem_spark.util.faults import reached

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointSettings",
    "GracefulStop",
    "TrainCheckpoint",
    "checkpoint_types",
    "first_difference",
    "fit_checkpoint",
    "pathem_checkpoint",
]

log = logging.getLogger(__name__)

# What a checkpoint's content means; a change of it (or of the stages' values) makes old checkpoints differ.
# 2: the data-only file format (pcem_spark.engine.safe_values) instead of a pickle.
CHECKPOINT_FORMAT = 2


def checkpoint_types() -> tuple:
    """The classes a train's checkpoint may hold (its stages' values and the EM state); a checkpoint file
    naming any other class is refused, so a file planted in the folder is data at worst."""
    from pcem_spark.core.calibration import Calibration, DepthMaps
    from pcem_spark.core.parameters import PathParameters
    from pcem_spark.engine.feature_settings import FeatureSettings
    from pcem_spark.model.settings import ModelSettings

    return (Calibration, DepthMaps, EMState, FeatureSettings, ModelSettings, PathParameters)


@dataclass
class CheckpointSettings:
    """The ``[checkpoint]`` settings of ``pcem train``."""

    enabled: bool = True
    every_iterations: int = 5
    every_seconds: float = 600.0
    stop_grace_seconds: float = 60.0

    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "every_iterations": Interval(int, 1, None),
        "every_seconds": Interval(float, 0, None),
        "stop_grace_seconds": Interval(float, 0, None),
    }

    def validate(self, error=None) -> None:
        check_constraints(self, self.CONSTRAINTS, "checkpoint", error=error or InputError)


class GracefulStop(TransientError):
    """The run was asked to stop (SIGTERM) and did, leaving a checkpoint to resume from: exit 75."""


def first_difference(old: Any, new: Any, where: str = "") -> Optional[str]:
    """The first place where two fingerprints differ, as ``"key.sub: old -> new"``; None when equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            here = f"{where}.{key}" if where else str(key)
            if key not in old:
                return f"{here}: absent before, now {new[key]!r}"
            if key not in new:
                return f"{here}: {old[key]!r} before, absent now"
            found = first_difference(old[key], new[key], here)
            if found:
                return found
        return None
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        for i, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(old) != len(new):
            return f"{where}: {len(old)} entries before, {len(new)} now"
        return None
    return None if old == new else f"{where or 'fingerprint'}: {old!r} before, {new!r} now"


class TrainCheckpoint:
    """The checkpoint of one train: the stages done and the refit's EM state, in ``store``.

    Parameters
    ----------
    store : a :class:`~pcem_spark.io.checkpoints.CheckpointStore`.
    fingerprint : a JSON-like dict of everything the result depends on.
    resume : False (``--no-resume``): ignore any checkpoint there (it is replaced by this run's).
    every_iterations, every_seconds : an EM checkpoint after this many iterations or this much time
        since the last one, whichever comes first (the last iteration is always written).
    """

    def __init__(
        self,
        store: CheckpointStore,
        fingerprint: Dict[str, Any],
        resume: bool = True,
        every_iterations: int = 5,
        every_seconds: float = 600.0,
    ):
        if every_iterations < 1:
            raise ValueError(f"checkpoint every_iterations must be >= 1, got {every_iterations}")
        self.store = store
        store.types = checkpoint_types()  # what a train's checkpoint may hold is this module's to say
        self.fingerprint = fingerprint
        self.every_iterations = int(every_iterations)
        self.every_seconds = float(every_seconds)
        self.stages: Dict[str, Any] = {}
        self.em: Optional[EMState] = None
        self.resumed_from: Optional[str] = None  # what the log said: for the training summary
        self.write_seconds: list = []
        self._stop = threading.Event()
        self._last_saved = (0, time.monotonic())
        self._load(resume)

    # ------------------------------------------------------------ loading
    def _load(self, resume: bool) -> None:
        where = self.store.directory
        if not resume:
            log.info("checkpoint: --no-resume: starting afresh (any checkpoint in %s is replaced)", where)
            return
        found = self.store.read()
        if found is None:
            log.info("checkpoint: none in %s; starting afresh", where)
            return
        if not isinstance(found, dict) or found.get("format") != CHECKPOINT_FORMAT:
            log.warning("checkpoint: %s holds another format; starting afresh", where)
            return
        difference = first_difference(found.get("fingerprint"), self.fingerprint)
        if difference:
            log.warning("checkpoint: %s is of another run (%s); starting afresh", where, difference)
            return
        self.stages = dict(found.get("stages") or {})
        self.em = found.get("em")
        if self.em is not None:  # the cadence counts from the iteration saved
            self._last_saved = (self.em.iteration, time.monotonic())
        done = ", ".join(self.stages) or "no stage"
        em = f"; EM after iteration {self.em.iteration}" if self.em is not None else ""
        self.resumed_from = f"{done}{em}"
        log.info("checkpoint: resuming from %s: %s done%s", where, done, em)

    # ------------------------------------------------------------ writing
    def _save(self) -> None:
        t0 = time.perf_counter()
        try:
            self.store.write(
                {"format": CHECKPOINT_FORMAT, "fingerprint": self.fingerprint, "stages": self.stages, "em": self.em}
            )
        except TypeError as exc:
            # A stage's value of a kind the data-only format does not hold: a bug of pcem-spark, which must not
            # cost the train itself (it goes on, this write skipped; a rerun resumes from the last one written).
            log.error("checkpoint: not written, a value cannot be stored as data (%s); please report it", exc)
        self.write_seconds.append(time.perf_counter() - t0)

    def stage(self, name: str, compute: Callable[[], Any]) -> Any:
        """The result of stage ``name``: from the checkpoint when an earlier run completed it (logged), else
        ``compute()``, recorded before it is returned."""
        if name in self.stages:
            log.info("checkpoint: skipping %s (completed by an earlier run)", name)
            return self.stages[name]
        reached(f"checkpoint:{name}:start")
        value = compute()
        self.stages[name] = value
        self._save()
        log.info("checkpoint: %s completed and written (%.2fs)", name, self.write_seconds[-1])
        reached(f"checkpoint:{name}:done")
        if self._stop.is_set():
            raise GracefulStop(
                f"stopped on request after the {name} stage; the checkpoint in {self.store.directory} "
                "resumes it: run the same command again"
            )
        return value

    # ------------------------------------------------------------ EM (EMHook)
    def resume_state(self) -> Optional[EMState]:
        return self.em

    def iteration_done(self, state: EMState) -> None:
        reached(f"checkpoint:em:{state.iteration}:start")
        last_iteration, last_time = self._last_saved
        due = (
            state.finished
            or self._stop.is_set()
            or state.iteration - last_iteration >= self.every_iterations
            or time.monotonic() - last_time >= self.every_seconds
        )
        if due:
            self.em = state
            self._save()
            self._last_saved = (state.iteration, time.monotonic())
            log.info(
                "checkpoint: EM iteration %d written (%.2fs)%s",
                state.iteration,
                self.write_seconds[-1],
                " (EM finished)" if state.finished else "",
            )
        reached(f"checkpoint:em:{state.iteration}:done")
        if self._stop.is_set() and not state.finished:
            raise GracefulStop(
                f"stopped on request after EM iteration {state.iteration}; the checkpoint in "
                f"{self.store.directory} resumes it: run the same command again"
            )

    # ------------------------------------------------------------ ending
    def request_stop(self) -> None:
        """Ask the run to stop at the end of the current EM iteration (thread- and signal-safe)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def committed(self) -> None:
        """The model is committed: the checkpoint has served its purpose."""
        self.store.delete()
        log.info("checkpoint: %s deleted (the model is committed)", self.store.directory)

    def summary(self) -> Dict[str, Any]:
        """For the training summary: where from, and what the checkpoints cost."""
        return {
            "directory": self.store.directory,
            "resumed_from": self.resumed_from,
            "writes": len(self.write_seconds),
            "write_seconds": round(sum(self.write_seconds), 3),
        }


def fit_checkpoint(dataset, params: Dict[str, Any], directory: str, every_iterations: int = 5) -> TrainCheckpoint:
    """The checkpoint of a ``PathEM.fit`` on ``dataset`` with ``params`` (name -> value), in ``directory``.

    Its folder is named by a hash of the fingerprint (the Params, the files the dataset reads with their
    sizes and modification times, the dataset's semantic plan hash): the same fit finds it again; another
    fit (a fold of a CrossValidator, another dataset) never shares it.
    """
    import hashlib
    import json

    from pcem_spark.io.checkpoints import CHECKPOINT_TAG, CheckpointStore, input_fingerprint
    from pcem_spark.io.file_system import file_system
    from pcem_spark.util.redaction import redact

    spark = dataset.sparkSession
    fingerprint = {
        "checkpoint_format": CHECKPOINT_FORMAT,
        # stored in the checkpoint: the Params (an initModel URL) and the files' paths without their credentials
        "params": redact({k: params[k] for k in sorted(params)}, keys=False),
        "inputs": redact({f: input_fingerprint(spark, f) for f in sorted(dataset.inputFiles())}, keys=False),
        "plan": int(dataset.semanticHash()),
    }
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    path = f"{directory.rstrip('/')}/pathem-{digest}{CHECKPOINT_TAG}"
    store = CheckpointStore(file_system(spark, path), path)
    return TrainCheckpoint(store, fingerprint, every_iterations=every_iterations)


def pathem_checkpoint(estimator, dataset) -> Optional[TrainCheckpoint]:
    """The checkpoint of ``estimator.fit(dataset)`` (a :class:`pcem_spark.ml.PathEM`) in its ``checkpointDir``
    or the SparkContext's checkpoint directory (MLlib's convention: ``sc.setCheckpointDir``); None when
    neither is set."""
    from pcem_spark.engine.session import is_spark_connect

    directory = estimator.getOrDefault(estimator.checkpointDir)
    if not directory and not is_spark_connect(dataset.sparkSession):
        directory = dataset.sparkSession.sparkContext.getCheckpointDir() or ""
    if not directory:
        return None
    values = {p.name: v for p, v in estimator.extractParamMap().items() if p.name != "checkpointDir"}
    return fit_checkpoint(dataset, values, directory, estimator.getOrDefault(estimator.checkpointInterval))
