"""A storage URI as ``pyarrow.fs`` names it: the one place that maps Spark's path spellings to pyarrow's.

Used where Python, not the JVM, reads or writes files that Spark also sees:
the Spark Connect client's atomic outputs (:mod:`pcem_spark.io.arrow_fs`) and
the parameters a Connect pass stages for its Python workers
(:mod:`pcem_spark.engine.shipping`).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple
from urllib.parse import urlparse

__all__ = ["local_path", "pyarrow_name", "resolve"]

# Hadoop's spellings of the object stores pyarrow knows under another scheme.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def local_path(path: str) -> Optional[str]:
    """The local path of ``path`` (``/x``, ``file:/x``, ``file:///x``, relative), or None for another file system.

    >>> local_path("file:///tmp/x"), local_path("s3a://b/k")
    ('/tmp/x', None)
    """
    if path.startswith("file:"):
        return "/" + path[len("file:") :].lstrip("/")
    if "://" not in path:
        return os.path.abspath(path)
    return None


def pyarrow_name(path: str) -> str:
    """What ``pyarrow.fs`` calls ``path`` on its file system (``bucket/key`` on object stores, ``/path``
    elsewhere), without connecting to it.

    >>> pyarrow_name("s3a://bucket/out/x"), pyarrow_name("hdfs://nn:8020/data"), pyarrow_name("file:/tmp/x")
    ('bucket/out/x', '/data', '/tmp/x')
    """
    local = local_path(path)
    if local is not None:
        return local
    url = urlparse(path)
    bucket = url.netloc if _SCHEME_ALIASES.get(url.scheme, url.scheme) in ("s3", "gs") else ""
    return f"{bucket}{url.path}" if bucket else (url.path or "/")


def resolve(path: str) -> Tuple[object, str, str]:
    """``(pyarrow FileSystem, its name for path, bucket prefix)`` of ``path``.

    The bucket prefix is ``"bucket"`` for object stores (pyarrow names their
    objects ``bucket/key``) and ``""`` otherwise. OSError, naming the scheme,
    when pyarrow cannot reach that file system from this process.
    """
    import pyarrow.fs as pafs

    local = local_path(path)
    if local is not None:
        return pafs.LocalFileSystem(), local, ""
    url = urlparse(path)
    scheme = _SCHEME_ALIASES.get(url.scheme, url.scheme)
    try:
        fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{url.netloc}{url.path or '/'}")
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for an unknown or unreachable store
        raise OSError(
            f"{path}: this process cannot reach the file system of {url.scheme}:// through pyarrow.fs "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return fs, pyarrow_name(path), url.netloc if scheme in ("s3", "gs") else ""
