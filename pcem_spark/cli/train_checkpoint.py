"""``pcem train``'s checkpoint: where it lives, the run's fingerprint, and the graceful stop on SIGTERM.

The train itself records and skips stages (:mod:`pcem_spark.ml.checkpointing`);
this module binds that to the command: the checkpoint directory of ``--model``
(``--checkpoint-dir``), the fingerprint of this command's inputs and
settings, and a SIGTERM handler (what Airflow and Kubernetes send on a
timeout) that stops the run at the end of the current stage or EM iteration,
with a checkpoint, and exits 75. If that end does not come within
``checkpoint.stop_grace_seconds``, the running Spark jobs are cancelled; if
the process is still there ``_HARD_STOP_SECONDS`` later, it exits 75 at once.
The checkpoint then is the last one written.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

from pcem_spark.io.checkpoints import input_fingerprint
from pcem_spark.ml.checkpointing import CHECKPOINT_FORMAT, GracefulStop, TrainCheckpoint
from pcem_spark.util.redaction import redact

__all__ = ["train_fingerprint", "open_train_checkpoint", "graceful_stop", "HARD_STOP_SECONDS"]

log = logging.getLogger(__name__)

# After the grace and the jobs' cancellation: the longest a stop waits before the process exits 75 itself.
HARD_STOP_SECONDS = 30.0
EXIT_TRANSIENT = 75

# Flags that do not change what the train computes (where it writes, how it reports, resume or not).
_NOT_FINGERPRINTED = frozenset(
    {"overwrite", "no_resume", "checkpoint_dir", "rejects", "model", "config", "overrides", "remote", "log_level"}
)
# Settings that do not change the result: where and how Spark runs, the output protocol, the checkpoints.
_SECTIONS = ("features", "model", "tune", "supervision")
_INPUT_FLAGS = (
    ("--docs", "docs"),
    ("--labels", "labels"),
    ("--taxonomy", "taxonomy"),
    ("--descriptions", "descriptions"),
    ("--node-embeddings", "node_embeddings"),
    ("--init-model", "init_model"),
)


def _plain(value: Any) -> Any:
    """A setting's value as JSON-like data (dataclasses, tuples and sets made dicts and lists)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def train_fingerprint(spark, args, settings) -> Dict[str, Any]:
    """Everything a train's result depends on: its input files, settings, flags and seed, and the format."""
    # The version's one home is pcem_spark.__version__ (loaded before any of its modules; see cli.parser).
    version = sys.modules["pcem_spark"].__version__
    inputs = {
        flag: input_fingerprint(spark, getattr(args, name)) for flag, name in _INPUT_FLAGS if getattr(args, name, None)
    }
    flags = {k: _plain(v) for k, v in sorted(vars(args).items()) if k not in _NOT_FINGERPRINTED and not callable(v)}
    # Stored in the checkpoint: its paths' credentials redacted; every setting and flag kept (keys=False).
    return redact(
        {
            "checkpoint_format": CHECKPOINT_FORMAT,
            "pcem_spark": version,
            "inputs": inputs,
            "flags": flags,
            "settings": {section: _plain(getattr(settings, section)) for section in _SECTIONS},
        },
        keys=False,
    )


def open_train_checkpoint(spark, args, settings) -> Optional[TrainCheckpoint]:
    """The checkpoint of this ``pcem train`` (read, and checked against its fingerprint), or None when
    ``[checkpoint] enabled = false``."""
    from pcem_spark.io.checkpoints import CheckpointStore, checkpoint_dir_for
    from pcem_spark.io.file_system import file_system, session_path

    cfg = settings.checkpoint
    if not cfg.enabled:
        log.info("checkpoint: off ([checkpoint] enabled = false): a rerun starts from the beginning")
        return None
    directory = checkpoint_dir_for(session_path(spark, args.model), args.checkpoint_dir)
    store = CheckpointStore(file_system(spark, directory), directory)
    return TrainCheckpoint(
        store,
        train_fingerprint(spark, args, settings),
        resume=not args.no_resume,
        every_iterations=cfg.every_iterations,
        every_seconds=cfg.every_seconds,
    )


def _cancel_jobs(spark) -> None:
    try:
        from pcem_spark.engine.session import is_spark_connect

        if is_spark_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
    except Exception as exc:  # the session may be going away: the hard stop still comes
        log.warning("SIGTERM: could not cancel the running Spark jobs (%s)", exc)


@contextmanager
def graceful_stop(checkpoint: Optional[TrainCheckpoint], spark, grace_seconds: float) -> Iterator[None]:
    """Inside the block, SIGTERM stops the train gracefully (see the module docstring) and exits 75.

    Only in the main thread (Python's rule for signal handlers) and with a checkpoint; elsewhere SIGTERM
    keeps its default.
    """
    if checkpoint is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    timers: List[threading.Timer] = []

    def hard_stop():
        log.error("SIGTERM: the run did not stop in time; exiting %d (the last checkpoint stays)", EXIT_TRANSIENT)
        logging.shutdown()
        os._exit(EXIT_TRANSIENT)

    def cancel():
        log.warning("SIGTERM: %.0fs passed; cancelling the running Spark jobs", grace_seconds)
        _cancel_jobs(spark)
        timers.append(threading.Timer(HARD_STOP_SECONDS, hard_stop))
        timers[-1].daemon = True
        timers[-1].start()

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        log.warning(
            "SIGTERM: stopping at the end of the current stage or EM iteration (at most %.0fs, then its Spark "
            "jobs are cancelled), with a checkpoint; exit %d",
            grace_seconds,
            EXIT_TRANSIENT,
        )
        checkpoint.request_stop()
        timers.append(threading.Timer(grace_seconds, cancel))
        timers[-1].daemon = True
        timers[-1].start()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except GracefulStop:
        raise
    except BaseException as exc:
        if checkpoint.stop_requested:  # what the cancellation broke: a stop, not a failure
            raise GracefulStop(
                f"stopped on SIGTERM during a stage ({type(exc).__name__}); the last checkpoint in "
                f"{checkpoint.store.directory} resumes the run: run the same command again"
            ) from exc
        raise
    finally:
        for timer in timers:
            timer.cancel()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
