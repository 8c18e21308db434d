"""Two storage failures named as such: a volume mounted read-only (``EROFS``) and a full disk (``ENOSPC``).

Neither is a permission problem, and both pass once the volume is remounted
or cleaned, so the command exits 75 (see :mod:`pcem_spark.cli.failures`).
:func:`read_only_mount` looks at a local path's volume (the nearest existing
folder at or above it), for the errors that do not say why a folder could
not be made (Hadoop's bare ``Mkdirs failed to create PATH``, a folder this
process may not write); the two ``*_message`` functions word the error.
"""

from __future__ import annotations

import os
import re
from typing import List, Optional, Sequence, Tuple

__all__ = ["READ_ONLY", "DISK_FULL", "read_only_mount", "storage_error_in", "read_only_message", "disk_full_message"]

# The OS's own words for the two errno values (strerror), which Python's OSError, Java's FileSystemException /
# FileNotFoundException / IOException and a Spark worker's traceback all carry: the JVM has no class for either.
READ_ONLY = "Read-only file system"  # EROFS
DISK_FULL = "No space left on device"  # ENOSPC
_CLASSES = {"ReadOnlyFileSystemException": READ_ONLY, "DiskOutOfSpaceException": DISK_FULL}
_PATH = r"((?:/|[A-Za-z][\w+.-]*:/)[^\n']*?)"  # a path or a URI, on one line


def _local(path: str) -> Optional[str]:
    """``path`` as a local path (``file:`` URIs included); None for another file system (hdfs://, s3a:// ...)."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    elif "://" in path:
        return None
    return os.path.abspath(path) if path else None


def read_only_mount(path: str) -> Optional[str]:
    """The nearest existing folder at or above the local ``path`` when its volume is mounted read-only, else
    None (also for a path of another file system, or one that cannot be looked at)."""
    local = _local(path)
    if local is None:
        return None
    while True:
        try:
            flags = os.statvfs(local).f_flag
        except (FileNotFoundError, NotADirectoryError):
            pass  # not there (yet): its volume is its nearest existing parent's
        except OSError:
            return None
        else:
            return local if flags & os.ST_RDONLY else None
        parent = os.path.dirname(local)
        if parent == local:
            return None
        local = parent


def read_only_message(path: Optional[str], mount: Optional[str] = None) -> str:
    """``read-only file system: PATH (...)``: what to tell the user of a write refused by a read-only volume."""
    where = f": {path}" if path else ""
    on = f" holding {mount}" if mount and mount != path else ""
    return (
        f"read-only file system{where} (the volume{on} is mounted read-only, so nothing can be written there; "
        "retry once it is mounted read-write, or write elsewhere)"
    )


def disk_full_message(paths: Sequence[str], what: str = "") -> str:
    """``disk full: PATH (no space left on device)``, naming ``paths`` (or, with none, ``what`` was written)."""
    where = f": {', '.join(paths)}" if paths else ""
    note = f"; {what}" if what else ""
    return f"disk full{where} (no space left on device{note}): free space on that volume, then retry"


def storage_error_in(text: str) -> Optional[Tuple[str, List[str]]]:
    """(:data:`READ_ONLY` or :data:`DISK_FULL`, the paths the error names) when the text of a failure (a Java
    stack trace, a worker's traceback) says a volume is read-only or full, else None.

    The paths are taken from the forms the error comes in: Python's ``[Errno 28] ...: 'PATH'``, pyarrow's
    ``... file 'PATH'. Detail: [errno 28] ...``, Java's ``PATH (No space left on device)``
    (``FileNotFoundException``) and ``PATH: Read-only file system`` (``FileSystemException``), and Spark's
    ``Task failed while writing rows to PATH``.
    """
    kind = next((k for k in (READ_ONLY, DISK_FULL) if k in text), None)
    kind = kind or next((k for name, k in _CLASSES.items() if name in text), None)
    if kind is None:
        return None
    words = re.escape(kind)
    patterns = (
        rf"\[Errno \d+\] {words}: '([^']+)'",
        rf"(?:file|directory) '([^']+)'\. Detail: \[errno \d+\] {words}",
        rf"(?<=: ){_PATH} \({words}\)",
        rf"(?<=: ){_PATH}: {words}",
        r"Task failed while writing rows to (\S+?)\.?(?:\s|$)",
    )
    paths: List[str] = []
    for pattern in patterns:
        for found in re.findall(pattern, text, flags=re.MULTILINE):
            if found not in paths:
                paths.append(found)
    return kind, paths
