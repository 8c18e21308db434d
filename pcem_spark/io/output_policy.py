"""How outputs behave when runs overlap: the ``[output]`` settings, one policy per process.

The commands set it from their settings (``--set output.lease_expiry_seconds=600``);
library users call :func:`configure`. Every time is in seconds.

* ``lease_expiry_seconds`` (300): a writer whose lease saw no heartbeat for this
  long is taken for dead, and the next writer takes the output over. A writer on
  the same host whose process is gone is taken over at once. Clocks of the
  machines that write one output must agree to well within this.
* ``heartbeat_seconds`` (30): how often a live writer renews its lease.
* ``wait_seconds`` (0): how long a writer waits for another live writer of the
  same output to finish before it exits 75; 0 = exit at once, so the scheduler
  retries later.
* ``keep_superseded_seconds`` (1800): a replaced version of an output is kept
  this long beside it (``.NAME.pcem-v-RUNID``), so that a reader that pinned it
  can finish; the first writer after that deletes it.
* ``commit_wait_seconds`` (30): how long a reader waits for a writer that is
  between the two renames of its commit (the output missing for a moment)
  before it exits 75.
* ``verify_max_bytes`` (256 MiB): an output (predictions, rejects, documents)
  of up to this size has every file checked against its SHA-256 before it is
  read; a larger one is checked by its Parquet page checksums as it is read
  (:mod:`pcem_spark.io.checksums`). A model is always checked in full.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Dict

from pcem_spark.util.constraints import Interval, check_constraints

__all__ = ["OutputSettings", "configure", "policy"]


@dataclass
class OutputSettings:
    """The ``[output]`` settings (see the module docstring)."""

    lease_expiry_seconds: float = 300.0
    heartbeat_seconds: float = 30.0
    wait_seconds: float = 0.0
    keep_superseded_seconds: float = 1800.0
    commit_wait_seconds: float = 30.0
    verify_max_bytes: int = 256 << 20

    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "lease_expiry_seconds": Interval(float, 0, None, closed="neither"),
        "heartbeat_seconds": Interval(float, 0, None, closed="neither"),
        "wait_seconds": Interval(float, 0, None),
        "keep_superseded_seconds": Interval(float, 0, None),
        "commit_wait_seconds": Interval(float, 0, None),
        "verify_max_bytes": Interval(int, 0, None),
    }

    def validate(self, error=None) -> None:
        from pcem_spark.errors import InputError

        check_constraints(self, self.CONSTRAINTS, "output", error=error or InputError)
        if self.heartbeat_seconds * 2 > self.lease_expiry_seconds:
            raise (error or InputError)(
                f"output.heartbeat_seconds = {self.heartbeat_seconds:g} must be at most half of "
                f"output.lease_expiry_seconds = {self.lease_expiry_seconds:g}: a live writer's lease would expire "
                "between two heartbeats"
            )


_POLICY = OutputSettings()


def policy() -> OutputSettings:
    """The policy in force in this process."""
    return _POLICY


def configure(settings: OutputSettings) -> OutputSettings:
    """Put ``settings`` in force (validated); returns the policy it replaces."""
    global _POLICY
    settings.validate()
    previous, _POLICY = _POLICY, replace(settings)
    return previous
