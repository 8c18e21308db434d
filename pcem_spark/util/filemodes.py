"""Permissions of the local files and folders pcem-spark writes: what ``open()`` / ``mkdir`` would give.

``tempfile.mkstemp`` creates its file with mode 0o600 and ``tempfile.mkdtemp``
its folder with 0o700, whatever the umask; a file written to a temporary name
and then renamed into place (:func:`pcem_spark.io.outputs.atomic_write_bytes`)
would keep that mode, so a task running as another user (a scheduler's
reader, a web server) could not read ``metrics.json``. The helpers here give
the mode a plain ``open(path, "w")`` / ``os.mkdir`` would have:
``0o666 & ~umask`` for files and ``0o777 & ~umask`` for folders. A file that
replaces an existing one gets that mode too, not the old file's (the umask of
the run that writes it decides, as for a new file).
"""

from __future__ import annotations

import os
import threading

__all__ = ["current_umask", "file_mode", "dir_mode"]

_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where possible.

    Linux >= 4.7 shows it in ``/proc/self/status`` (``Umask:``). Elsewhere it is
    read by setting a temporary umask and restoring it at once; the temporary
    value is the restrictive 0o077, so a file another thread creates in that
    instant is private rather than world-writable.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    with _LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask & 0o777


def file_mode() -> int:
    """Mode of a new regular file under the current umask (``0o666 & ~umask``)."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """Mode of a new folder under the current umask (``0o777 & ~umask``)."""
    return 0o777 & ~current_umask()
