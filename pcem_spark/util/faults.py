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

Named points (:func:`reached`) mark the steps of the output protocol's writers
and readers (``model:staged``, ``model:read:vocabulary`` ...). A test kills the
process at one (``PCEM_KILL_AT``), or registers a function to run there
(:func:`on_point`): another run's step, interleaved deterministically, with no
sleep.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Dict, List

__all__ = ["ENV", "KILL_ENV", "InjectedFault", "maybe_fail", "maybe_kill", "reached", "on_point"]

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
    reached(f"{kind}:{point}")


_HOOKS: Dict[str, List[Callable[[], None]]] = {}
_HOOKS_LOCK = threading.Lock()


def reached(name: str) -> None:
    """A named step: SIGKILL here if ``PCEM_KILL_AT`` names it, then run the functions registered for it."""
    if os.environ.get(KILL_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if _HOOKS:
        with _HOOKS_LOCK:
            hooks = list(_HOOKS.get(name, ()))
        for hook in hooks:
            hook()


def on_point(name: str, hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook()`` whenever this process reaches the step ``name`` (tests only); returns its remover."""
    with _HOOKS_LOCK:
        _HOOKS.setdefault(name, []).append(hook)

    def remove() -> None:
        with _HOOKS_LOCK:
            hooks = _HOOKS.get(name, [])
            if hook in hooks:
                hooks.remove(hook)
            if not hooks:
                _HOOKS.pop(name, None)

    return remove
