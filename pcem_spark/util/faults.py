"""Fault injection for tests of retries and exit codes (off unless ``PCEM_INJECT_FAULT`` is set).

``PCEM_INJECT_FAULT=STAGE:MODE:DIR`` makes the executor-side code of
``STAGE`` (``em_pass``: one EM pass over a partition of blocks) raise
:class:`InjectedFault`:

* ``once``   -- the first call in the whole run fails (a marker file in
  ``DIR``, created with O_EXCL, makes it exactly once across workers), so
  Spark's task retry must recover with an identical result;
* ``always`` -- every call fails: a permanent failure that must end the job
  with the runtime-failure exit code.

Executors inherit the variable from the driver in local mode; the tests set it
for the ``pcem`` process they start.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "KILL_ENV", "InjectedFault", "maybe_fail", "maybe_kill"]

ENV = "PCEM_INJECT_FAULT"


class InjectedFault(RuntimeError):
    """Raised by :func:`maybe_fail` when a test asked for it."""


def maybe_fail(stage: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    want, mode, directory = (spec.split(":", 2) + ["", ""])[:3]
    if want != stage:
        return
    if mode == "always":
        raise InjectedFault(f"injected permanent fault in {stage}")
    if mode == "once":
        try:
            fd = os.open(os.path.join(directory or ".", f"fault-{stage}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        raise InjectedFault(f"injected one-time fault in {stage}")


KILL_ENV = "PCEM_KILL_AT"


def maybe_kill(kind: str, point: str) -> None:
    """SIGKILL this process at a write stage when ``PCEM_KILL_AT=KIND:POINT`` asks for it (tests only).

    Points of :func:`pcem_spark.io.outputs.atomic_output`: ``staged`` (content
    written, no marker yet), ``marked`` (marker written, not moved),
    ``old_moved`` (old output moved aside, new not yet in place),
    ``committed`` (new in place, old copy not yet deleted). A real kill, not
    an exception: no ``finally`` runs, exactly as when a scheduler kills the task.
    """
    if os.environ.get(KILL_ENV) == f"{kind}:{point}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
