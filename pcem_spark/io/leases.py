"""One writer per output at a time: a lease beside the output, kept alive by a heartbeat.

A writer of ``NAME`` (a model, predictions, rejects, documents, an inspection)
takes its lease before any work and keeps it to the end of the run. The lease
is a hidden sibling file, ``.NAME.pcem-lease-G``: ``G`` is a generation number
(12 digits) and the file holds the owner as JSON (run id, host, process id and
start time, command, when it was taken). The holder of the highest generation
owns ``NAME`` while its lease is *live*:

* not released: a finished run renames its file ``.NAME.pcem-lease-G.released``
  (which stays until the next writer, so generations only grow);
* its process alive: on the same host, a process that is gone (or a pid now
  used by another process) makes the lease stale at once;
* its heartbeat recent: the holder touches the file every
  ``output.heartbeat_seconds``; a file older than ``output.lease_expiry_seconds``
  is stale (the host crashed, the driver hung, the network split).

Taking it: the next generation, ``G + 1``, is created with an exclusive create
(O_EXCL on local disk, ``create(overwrite=false)`` on HDFS), so of two runs
that race for it exactly one wins, and generations only grow (a stale view can
never take a lease that was given out since). A live holder makes the second
writer fail at once with :class:`OutputBusyError` (exit 75, naming the other
run), or after ``output.wait_seconds``. Creating the lease file is also the
probe that the output's folder can be written: a folder that cannot gives
:class:`~pcem_spark.errors.OutputPathError` (exit 2) before any work, or
:class:`ReadOnlyOutputError` (exit 75) when its volume is mounted read-only.

Before its commit a writer checks that it still holds the lease (a higher
generation means another run took it over after this one's heartbeat stopped):
:class:`LeaseLostError`, exit 75, and nothing of the other run is touched.

Object stores (S3, GCS) have no exclusive create: there the file is created
after a check, then read back after a second; two runs starting within that
second may both believe they hold it. Use HDFS or a local disk for outputs
that several schedulers write, or let one scheduler own each output.

Leases are held per thread: a thread that holds an output's lease (a
command, for its whole run) re-enters it (:func:`hold`); another thread of
the same process is another writer.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from pcem_spark.errors import OutputPathError, TransientError
from pcem_spark.io.output_policy import policy
from pcem_spark.util.faults import reached
from pcem_spark.util.strict_json import loads_strict
from pcem_spark.util.volumes import read_only_message, read_only_mount

__all__ = [
    "LEASE_TAG",
    "OutputBusyError",
    "LeaseLostError",
    "ReadOnlyOutputError",
    "Lease",
    "Holder",
    "acquire",
    "parent_problem",
    "live_holder",
    "hold",
    "held",
    "keep",
    "run",
    "outputs_of",
    "release_all",
]

log = logging.getLogger(__name__)

LEASE_TAG = ".pcem-lease-"
_RELEASED = ".released"
_DIGITS = 12
HOST = socket.gethostname()


class OutputBusyError(TransientError):
    """Another live run is writing the same output: retry later (exit 75)."""


class LeaseLostError(TransientError):
    """This run's lease was taken over (its heartbeat stopped for longer than the expiry): exit 75."""


class ReadOnlyOutputError(TransientError):
    """The output's folder is on a volume mounted read-only: exit 75 (a remount makes the same run pass), and
    named as such, never as a permission problem."""


def _split(path: str) -> Tuple[str, str]:
    path = path.rstrip("/")
    parent, name = path.rsplit("/", 1) if "/" in path else (".", path)
    return parent or "/", name


def _lease_file(path: str, generation: int) -> str:
    parent, name = _split(path)
    return f"{parent}/.{name}{LEASE_TAG}{generation:0{_DIGITS}d}"


def _generations(fs, path: str) -> Tuple[List[int], set]:
    """(sorted generations of ``path``'s lease files, the released ones)."""
    parent, name = _split(path)
    prefix = f".{name}{LEASE_TAG}"
    gens, released = set(), set()
    for entry in fs.list_names(parent):
        if not entry.startswith(prefix):
            continue
        rest = entry[len(prefix) :]
        digits, done = (rest[: -len(_RELEASED)], True) if rest.endswith(_RELEASED) else (rest, False)
        if len(digits) == _DIGITS and digits.isdigit():
            (released if done else gens).add(int(digits))
    return sorted(gens), released


def _process_start(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (Linux ``/proc``; None elsewhere or when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _process_alive(pid: int, start: Optional[str]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    if start is None:
        return True
    now_start = _process_start(pid)
    return now_start is None or now_start == start


@dataclass(frozen=True)
class Holder:
    """The run that holds a live lease, as its lease file says."""

    run_id: str
    host: str
    pid: int
    command: str
    heartbeat_age: float  # seconds since its last heartbeat
    generation: int

    def describe(self) -> str:
        what = f" ({self.command})" if self.command else ""
        return (
            f"run {self.run_id}{what} on host {self.host}, process {self.pid}, last heartbeat "
            f"{self.heartbeat_age:.0f}s ago"
        )


def _owner(fs, lease_file: str) -> Optional[dict]:
    try:
        text = fs.read_text(lease_file)
        owner = loads_strict(text, lease_file, allow_nan=True) if text else None
    except (ValueError, OSError):
        return None
    return owner if isinstance(owner, dict) else None


def _state(fs, path: str, generation: int, released: set) -> Tuple[bool, Optional[dict], float, str]:
    """(live, owner, heartbeat age, why not live) of one generation's lease."""
    if generation in released:
        return False, None, 0.0, "released"
    lease_file = _lease_file(path, generation)
    owner = _owner(fs, lease_file)
    mtime = fs.mtime(lease_file)
    if mtime is None:  # deleted while we looked: the next look decides
        return False, owner, 0.0, "gone"
    age = max(time.time() - mtime, 0.0)
    if owner is not None and owner.get("host") == HOST and isinstance(owner.get("pid"), int):
        if not _process_alive(owner["pid"], owner.get("pid_start")):
            return False, owner, age, f"its process {owner['pid']} on this host is gone"
    if age > policy().lease_expiry_seconds:
        return False, owner, age, f"no heartbeat for {age:.0f}s (expiry {policy().lease_expiry_seconds:g}s)"
    return True, owner, age, ""


def live_holder(fs, path: str) -> Optional[Holder]:
    """The run holding a live lease on ``path``, or None."""
    gens, released = _generations(fs, path)
    if not gens or (released and max(released) > gens[-1]):
        return None
    live, owner, age, _ = _state(fs, path, gens[-1], released)
    if not live:
        return None
    owner = owner or {}
    return Holder(
        str(owner.get("run_id", "?")),
        str(owner.get("host", "?")),
        int(owner.get("pid", -1)) if isinstance(owner.get("pid"), int) else -1,
        str(owner.get("command", "")),
        age,
        gens[-1],
    )


class Lease:
    """A lease this process holds on ``path`` (see the module docstring)."""

    def __init__(self, fs, path: str, generation: int, run_id: str):
        self.fs, self.path, self.generation, self.run_id = fs, path, generation, run_id
        self.file = _lease_file(path, generation)
        self.released = False
        self.last_beat = time.monotonic()

    def renew(self) -> None:
        """The heartbeat: touch the lease file."""
        if not self.released:
            self.fs.touch(self.file)
            self.last_beat = time.monotonic()

    def check(self) -> None:
        """Fencing, before a commit: raise :class:`LeaseLostError` unless this is still the newest lease."""
        gens, released = _generations(self.fs, self.path)
        if self.released or self.generation not in gens or max(gens + sorted(released)) != self.generation:
            newer = live_holder(self.fs, self.path)
            raise LeaseLostError(
                f"{self.path}: this run ({self.run_id}) lost its lease on the output"
                + (f" to {newer.describe()}" if newer else "")
                + f": its heartbeat stopped for longer than output.lease_expiry_seconds = "
                f"{policy().lease_expiry_seconds:g}; nothing was committed. Retry"
            )

    def release(self) -> None:
        """Mark the lease released: its file is renamed ``....released`` (it stays: generations only grow)."""
        if self.released:
            return
        self.released = True
        _unregister(self)
        try:
            self.fs.rename(self.file, self.file + _RELEASED)
        except Exception as exc:  # noqa: BLE001 - the JVM may be gone; the lease then expires by itself
            log.debug("could not release the lease %s: %s", self.file, exc)


def _unwritable(path: str, parent: str, exc: BaseException) -> Optional[Exception]:
    """An OutputPathError when ``exc`` says the output's folder cannot be written (permanent), a
    :class:`ReadOnlyOutputError` when it says its volume is read-only (exit 75), else None."""
    text = f"{type(exc).__name__}: {exc}"
    if getattr(exc, "errno", None) == errno.EROFS or any(
        marker in text for marker in ("Read-only file system", "ReadOnlyFileSystem")
    ):
        return ReadOnlyOutputError(read_only_message(path, parent))
    for marker, why in (
        ("PermissionError", "permission denied"),
        ("AccessControlException", "permission denied"),
        ("AccessDeniedException", "permission denied"),
        ("Permission denied", "permission denied"),
        ("ParentNotDirectoryException", "a parent of it is a file"),
        ("NotADirectoryError", "a parent of it is a file"),
        ("Not a directory", "a parent of it is a file"),
        ("FileExistsError", "a parent of it is a file"),
    ):
        if marker in text:
            return OutputPathError(
                f"output {path!r} cannot be written: {why} (creating a file in {parent!r} failed: "
                f"{text.splitlines()[0][:300]}). Choose a folder this job can write"
            )
    return None


def parent_problem(fs, path: str) -> Optional[Exception]:
    """Why the folder of the output ``path`` cannot be written, looked up on the file system (None: no
    reason found). Walks up to the nearest existing ancestor: a file there, or (on local disk) a folder this
    process may not write, is permanent (:class:`~pcem_spark.errors.OutputPathError`); a folder on a volume
    mounted read-only is :class:`ReadOnlyOutputError` (exit 75), not a permission problem."""
    parent, _ = _split(path)
    ancestor = parent
    while True:
        try:
            if fs.exists(ancestor):
                if not fs.is_directory(ancestor):
                    return OutputPathError(
                        f"output {path!r} cannot be written: {ancestor!r} is a file, not a folder. Choose another path"
                    )
                local = fs.local(ancestor)
                mount = read_only_mount(local) if local is not None else None
                if mount is not None:
                    return ReadOnlyOutputError(read_only_message(path, mount))
                if local is not None and not os.access(local, os.W_OK | os.X_OK):
                    return OutputPathError(
                        f"output {path!r} cannot be written: permission denied on {local!r}. Choose a folder "
                        "this job can write"
                    )
                return None
        except Exception:  # noqa: BLE001 - cannot look: no permanent reason known
            return None
        up, _ = _split(ancestor)
        if up == ancestor or not up:
            return None
        ancestor = up


def _ensure_parent(fs, path: str) -> str:
    parent, _ = _split(path)
    try:
        if not fs.exists(parent):
            fs.mkdirs(parent)
    except Exception as exc:  # noqa: BLE001 - classified: permanent (exit 2) or not
        problem = parent_problem(fs, path) or _unwritable(path, parent, exc)
        if problem is None:
            raise
        raise problem from exc
    return parent


def acquire(fs, path: str, run_id: str, command: str = "", wait_seconds: Optional[float] = None) -> Lease:
    """Take the lease on ``path`` for run ``run_id`` (see the module docstring).

    Raises :class:`OutputBusyError` when another live run holds it (after
    ``wait_seconds``, default ``output.wait_seconds``), and
    :class:`~pcem_spark.errors.OutputPathError` when the output's folder cannot be written
    (:class:`ReadOnlyOutputError` when its volume is mounted read-only).
    """
    path = path.rstrip("/")
    parent = _ensure_parent(fs, path)
    wait = policy().wait_seconds if wait_seconds is None else wait_seconds
    deadline = time.monotonic() + wait
    pause = 0.2
    for _ in range(10_000):
        gens, released = _generations(fs, path)
        top = max(gens + sorted(released), default=-1)
        if top >= 0:
            live, owner, age, why = _state(fs, path, top, released)
            if live:
                holder = live_holder(fs, path)
                if holder is None:  # it went while we looked
                    continue
                if time.monotonic() < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                raise OutputBusyError(
                    f"{path} is being written by another run: {holder.describe()}. Exit 75: retry after it "
                    f"finishes (or set output.wait_seconds to wait for it); a run that died is taken over "
                    f"{policy().lease_expiry_seconds:g}s after its last heartbeat"
                )
            if why not in ("released", "gone"):
                log.warning(
                    "%s: taking over the lease of run %s: %s",
                    path,
                    (owner or {}).get("run_id", "?"),
                    why,
                )
        generation = top + 1
        record = {
            "run_id": run_id,
            "host": HOST,
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "command": command,
            "taken_at": time.time(),
            "generation": generation,
        }
        try:
            created = fs.create_exclusive(_lease_file(path, generation), json.dumps(record, sort_keys=True))
        except Exception as exc:  # noqa: BLE001 - classified: permanent (exit 2) or not
            problem = parent_problem(fs, path) or _unwritable(path, parent, exc)
            if problem is None:
                raise
            raise problem from exc
        if not created:
            continue  # another run took this generation first: look again
        if not fs.atomic_create:  # object stores: a check then a write; the last writer won
            time.sleep(1.0)
            if (_owner(fs, _lease_file(path, generation)) or {}).get("run_id") != run_id:
                continue
        reached("lease:taken")
        for old in sorted(set(gens) | released):
            for name in (_lease_file(path, old), _lease_file(path, old) + _RELEASED):
                try:
                    fs.delete(name)
                except Exception:  # noqa: BLE001 - an older generation left behind is harmless
                    pass
        lease = Lease(fs, path, generation, run_id)
        _register(lease)
        return lease
    raise OutputBusyError(f"{path}: could not take the output's lease (too many concurrent attempts); retry")


# ------------------------------------------------------------ held leases and the heartbeat
_LOCAL = threading.local()
_ALL: Dict[int, Lease] = {}
_ALL_LOCK = threading.Lock()
_BEAT: Optional[threading.Thread] = None


def _held_here() -> Dict[str, Lease]:
    if not hasattr(_LOCAL, "held"):
        _LOCAL.held = {}
    return _LOCAL.held


def _key(fs, path: str) -> str:
    try:
        return fs.qualify(path.rstrip("/"))
    except Exception:  # noqa: BLE001 - a path the file system cannot qualify: as given
        return path.rstrip("/")


def _register(lease: Lease) -> None:
    global _BEAT
    with _ALL_LOCK:
        _ALL[id(lease)] = lease
        if _BEAT is None or not _BEAT.is_alive():
            _BEAT = threading.Thread(target=_heartbeat, name="pcem-lease-heartbeat", daemon=True)
            _BEAT.start()


def _unregister(lease: Lease) -> None:
    with _ALL_LOCK:
        _ALL.pop(id(lease), None)


def _heartbeat() -> None:
    while True:
        # Short naps, so that a policy changed meanwhile (a shorter heartbeat) takes effect at once.
        time.sleep(min(policy().heartbeat_seconds, 1.0))
        with _ALL_LOCK:
            leases = list(_ALL.values())
        for lease in leases:
            if time.monotonic() - lease.last_beat < policy().heartbeat_seconds:
                continue
            try:
                lease.renew()
            except Exception as exc:  # noqa: BLE001 - a missed beat; the lease expires only after several
                log.warning("could not renew the lease %s: %s", lease.file, exc)


def held(fs, path: str) -> Optional[Lease]:
    """The lease this thread holds on ``path``, or None."""
    return _held_here().get(_key(fs, path))


@contextmanager
def hold(fs, path: str, run_id: str, command: str = "") -> Iterator[Lease]:
    """Hold the lease on ``path`` for the block: the thread's own if it holds one, else taken and released."""
    key = _key(fs, path)
    mine = _held_here().get(key)
    if mine is not None:
        yield mine
        return
    lease = acquire(fs, path, run_id, command)
    _held_here()[key] = lease
    try:
        yield lease
    finally:
        _held_here().pop(key, None)
        lease.release()


def keep(fs, path: str, run_id: Optional[str] = None, command: Optional[str] = None) -> Lease:
    """Take the lease on ``path`` for the rest of this thread's run (a command's outputs), until
    :func:`release_all`; ``run_id`` / ``command`` default to the thread's :func:`run`."""
    key = _key(fs, path)
    mine = _held_here().get(key)
    if mine is None:
        context = getattr(_LOCAL, "run", None) or ("", "")
        mine = _held_here()[key] = acquire(fs, path, run_id or context[0], command or context[1])
    return mine


@contextmanager
def run(run_id: str, command: str) -> Iterator[None]:
    """A command's run in this thread: leases taken with :func:`keep` name it, and are released at its end.

    An exception that ends the run carries the outputs it held leases on (:func:`outputs_of`): a failure
    that names no file (a full disk) can then say what was being written."""
    _LOCAL.run = (run_id, command)
    try:
        yield
    except BaseException as exc:
        if not outputs_of(exc):
            try:
                setattr(exc, _OUTPUTS, tuple(lease.path for lease in _held_here().values()))
            except (AttributeError, TypeError):  # an exception type that takes no attributes
                pass
        raise
    finally:
        _LOCAL.run = None
        release_all()


_OUTPUTS = "pcem_outputs"


def outputs_of(exc: BaseException) -> Tuple[str, ...]:
    """The outputs a command held leases on when ``exc`` ended its run (:func:`run`); () if none or unknown."""
    value = getattr(exc, _OUTPUTS, ())
    return tuple(value) if isinstance(value, tuple) else ()


def release_all() -> None:
    """Release every lease this thread holds (the end of a command)."""
    held_here = _held_here()
    for key in list(held_here):
        held_here.pop(key).release()
