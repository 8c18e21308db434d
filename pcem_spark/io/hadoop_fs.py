"""The one wrapper of the driver JVM's Hadoop FileSystem: local disk, HDFS, S3A ... alike, as Spark sees them.

Everything in :mod:`pcem_spark.io` that looks at files by path on the driver
-- detecting the documents format, listing WARC inputs, the atomic outputs'
renames and completion markers, qualifying paths to compare them -- goes
through :class:`HadoopFS`, so the py4j plumbing (``sc._jvm``,
``org.apache.hadoop.fs.Path``, the Hadoop configuration) lives here only.

A :class:`HadoopFS` is bound to the file system of the path it is made for
(its scheme and authority); the methods take that path by default, or another
path on the same file system (a string, or a Java ``Path`` from a listing).
It needs a classic Spark session (a Spark Connect client has no driver JVM):
the constructor refuses anything else with an :class:`~pcem_spark.errors.InputError`
naming ``what`` needed it.
"""

from __future__ import annotations

import os
from typing import Iterator, List, Optional, Tuple

from pcem_spark.io.arrow_fs import create_local_exclusive, local_sha256

__all__ = ["HadoopFS", "OUTPUTS_USE", "OUTPUTS_NEEDS", "FILESYSTEM_NEEDS"]

# What needs the file system, for the message when the session has no driver JVM (Spark Connect).
OUTPUTS_USE = "Saving / loading models and writing outputs atomically (pcem_spark.io.outputs)"
OUTPUTS_NEEDS = "the driver JVM's Hadoop FileSystem (rename, completion markers)"
FILESYSTEM_NEEDS = "the driver JVM's Hadoop FileSystem"


class HadoopFS:
    """The Hadoop FileSystem of ``path``, for any URI Spark can read or write (file, hdfs, s3a, ...).

    ``what`` / ``needs`` name the caller and what it needs, for the error a
    Spark Connect session gets (:func:`pcem_spark.engine.session.require_classic_session`).

    Attributes
    ----------
    path : the Java ``org.apache.hadoop.fs.Path`` of ``path``
    fs   : the Java ``FileSystem`` it lives on
    """

    def __init__(self, spark, path: str, what: str = OUTPUTS_USE, needs: str = OUTPUTS_NEEDS):
        from pcem_spark.engine.session import require_classic_session

        require_classic_session(spark, what, needs)
        sc = spark.sparkContext
        self._jvm = sc._jvm
        self.path = self._jvm.org.apache.hadoop.fs.Path(path)
        self.fs = self.path.getFileSystem(sc._jsc.hadoopConfiguration())

    def p(self, path=None):
        """A Java ``Path``: of ``path`` (a string, or already a Java ``Path``), or this wrapper's own."""
        if path is None:
            return self.path
        if isinstance(path, str):
            return self._jvm.org.apache.hadoop.fs.Path(path)
        return path

    # ------------------------------------------------------------ looking
    def exists(self, path=None) -> bool:
        return bool(self.fs.exists(self.p(path)))

    def status(self, path=None):
        """The Java ``FileStatus`` (raises through py4j when the path does not exist)."""
        return self.fs.getFileStatus(self.p(path))

    def is_directory(self, path=None) -> bool:
        return bool(self.status(path).isDirectory())

    def qualified(self, path=None):
        """The Java ``Path`` made fully qualified (scheme, authority, absolute path): ``makeQualified``."""
        return self.fs.makeQualified(self.p(path))

    def qualify(self, path=None) -> str:
        """:meth:`qualified` as a string, e.g. ``hdfs://nn:8020/data/x`` or ``file:/tmp/x``."""
        return str(self.qualified(path).toString())

    def glob(self, path=None) -> list:
        """The Java ``FileStatus`` of every path the Hadoop glob matches (an empty list for none)."""
        statuses = self.fs.globStatus(self.p(path))
        return list(statuses) if statuses is not None else []

    def files_under(self, path=None) -> Iterator:
        """Every file below a directory, recursively, as Java ``LocatedFileStatus`` (``listFiles``)."""
        it = self.fs.listFiles(self.p(path), True)
        while it.hasNext():
            yield it.next()

    def path_string(self) -> str:
        """This wrapper's path as a string."""
        return str(self.path.toString())

    def files_below(self, path=None) -> List[Tuple[str, str]]:
        """``(file, its path relative to the directory)`` for every file below a directory, recursively.

        Relative paths are compared as URI paths: a listing's scheme / authority
        spelling may differ from the argument's.
        """
        root = self.fs.makeQualified(self.p(path)).toUri().getPath().rstrip("/")
        return [
            (str(s.getPath().toString()), str(s.getPath().toUri().getPath())[len(root) :])
            for s in self.files_under(path)
        ]

    def sizes_below(self, path=None) -> List[Tuple[str, int]]:
        """``(path relative to the directory, size in bytes)`` of every file below it, recursively, sorted.

        On the driver's local disk, listed by Python (no JVM call per file); checksum files
        (``.NAME.crc``), which Hadoop's local file system hides, are left out there too.
        """
        local = self.local(path)
        if local is not None:
            return _local_sizes(local)
        root = self.fs.makeQualified(self.p(path)).toUri().getPath().rstrip("/")
        return sorted(
            (str(s.getPath().toUri().getPath())[len(root) + 1 :], int(s.getLen())) for s in self.files_under(path)
        )

    def local(self, path=None) -> Optional[str]:
        """The local path when ``path`` lives on the driver's local disk (the ``file`` scheme), else None."""
        qualified = self.qualified(path)
        if str(qualified.toUri().getScheme() or "") != "file":
            return None
        return str(qualified.toUri().getPath())

    @property
    def atomic_create(self) -> bool:
        """Whether :meth:`create_exclusive` is atomic here: local disk (O_EXCL) and HDFS (the NameNode) are;
        object stores (S3A, GCS, ABFS) check and then write."""
        return self.local() is not None or str(self.fs.getUri().getScheme()) in ("hdfs", "viewfs")

    def mtime(self, path=None) -> Optional[float]:
        """Last modification, seconds since the epoch (None when the path does not exist)."""
        p = self.p(path)
        if not self.fs.exists(p):
            return None
        return int(self.fs.getFileStatus(p).getModificationTime()) / 1000.0

    def list_names(self, directory=None) -> List[str]:
        """The names of a directory's entries ([] when it does not exist)."""
        d = self.p(directory)
        if not self.fs.exists(d):
            return []
        return [str(s.getPath().getName()) for s in self.fs.listStatus(d)]

    # ----------------------------------------------------------- changing
    def delete(self, path=None) -> None:
        """Delete, recursively; nothing happens when the path does not exist."""
        self.fs.delete(self.p(path), True)

    def rename(self, src, dst) -> None:
        if not self.fs.rename(self.p(src), self.p(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def create_exclusive(self, path, text: str) -> bool:
        """Create a file holding ``text`` unless one exists: True if this call created it.

        O_EXCL on local disk; Hadoop's ``create(overwrite=false)`` elsewhere (atomic
        on HDFS; a check then a write on object stores, see :attr:`atomic_create`).
        """
        local = self.local(path)
        if local is not None:
            return create_local_exclusive(local, text)
        from py4j.protocol import Py4JJavaError

        p = self.p(path)
        try:
            out = self.fs.create(p, False)
        except Py4JJavaError as exc:
            if "FileAlreadyExistsException" in str(exc.java_exception.getClass().getName()) or self.fs.exists(p):
                return False
            raise
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        return True

    def touch(self, path=None) -> None:
        """Set a file's modification time to now (local disk), or write it again (elsewhere: object stores
        keep no settable time)."""
        local = self.local(path)
        if local is not None:
            os.utime(local)
            return
        text = self.read_text(path)
        if text is not None:
            self.write_text(path, text)

    def mkdirs(self, path=None) -> None:
        if not self.fs.mkdirs(self.p(path)):
            raise OSError(f"could not create the directory {path if path is not None else self.path.toString()}")

    # ------------------------------------------------------------ content
    def read_head(self, path=None, n: int = 4) -> bytes:
        """The first ``n`` bytes of a file (zero bytes past its end)."""
        stream = self.fs.open(self.p(path))
        try:
            return bytes(max(stream.read(), 0) for _ in range(n))
        finally:
            stream.close()

    def write_text(self, path, text: str) -> None:
        """Create or replace a file holding ``text`` (UTF-8)."""
        out = self.fs.create(self.p(path), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def write_bytes(self, path, data: bytes) -> None:
        """Create or replace a file holding ``data``: on the driver's local disk by Python itself (py4j would
        copy the bytes through its socket at tens of MB/s), elsewhere through the JVM in chunks of 16 MB."""
        local = self.local(path)
        if local is not None:
            os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
            with open(local, "wb") as fh:
                fh.write(data)
            return
        out = self.fs.create(self.p(path), True)
        try:
            view = memoryview(data)
            for start in range(0, len(view), 1 << 24):
                out.write(bytearray(view[start : start + (1 << 24)]))
        finally:
            out.close()

    def read_bytes(self, path=None) -> Optional[bytes]:
        """A file's bytes, or None when it does not exist (read by Python on the driver's local disk)."""
        local = self.local(path)
        if local is not None:
            try:
                with open(local, "rb") as fh:
                    return fh.read()
            except FileNotFoundError:
                return None
        p = self.p(path)
        if not self.fs.exists(p):
            return None
        stream = self.fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def sha256(self, path=None) -> str:
        """The SHA-256 (hex) of a file's content: hashed by Python on the driver's local disk, elsewhere by the
        JVM as it streams the file (commons-codec, on Spark's class path: no byte crosses py4j)."""
        local = self.local(path)
        if local is not None:
            return local_sha256(local)
        stream = self.fs.open(self.p(path))
        try:
            return str(self._jvm.org.apache.commons.codec.digest.DigestUtils.sha256Hex(stream))
        finally:
            stream.close()

    def read_text(self, path=None) -> Optional[str]:
        """A file's text (UTF-8; lines joined by ``\\n``), or None when it does not exist."""
        p = self.p(path)
        if not self.fs.exists(p):
            return None
        stream = self.fs.open(p)
        try:
            reader = self._jvm.java.io.BufferedReader(self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(line)
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()


def _local_sizes(root: str) -> List[Tuple[str, int]]:
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            if name.startswith(".") and name.endswith(".crc"):
                continue
            full = os.path.join(directory, name)
            found.append((os.path.relpath(full, root), os.path.getsize(full)))
    return sorted(found)
