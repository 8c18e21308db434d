"""The client's view of a path's file system, for a Spark Connect session (no driver JVM): ``pyarrow.fs``.

A Spark Connect client has no Hadoop FileSystem to call: the data of an
output is written by the server's DataFrame writer, and what the atomic
outputs do around it on the driver (:mod:`pcem_spark.io.outputs`: renames,
the completion marker, listing siblings, deleting a stale copy) is done here
by the client itself, through ``pyarrow.fs``, on the same storage. So the
client must reach that storage by the same path as the server:

* local paths (``/data/x``, ``file:/data/x``): the same disk or a shared
  mount (a Connect server on this machine, NFS); a relative path is made
  absolute against the client's working directory for both sides
  (:func:`shared_path`);
* ``s3://`` / ``s3a://`` (``pyarrow.fs.S3FileSystem``, credentials from the
  environment as boto and the AWS CLI read them), ``gs://`` (``GcsFileSystem``);
* ``hdfs://`` (``HadoopFileSystem``: libhdfs and a Hadoop install on the
  client, ``CLASSPATH`` set as Hadoop's docs say).

:class:`ArrowFS` has the methods of :class:`pcem_spark.io.hadoop_fs.HadoopFS`
that the outputs and the format detection use, with Python values (strings,
booleans, bytes); :func:`pcem_spark.io.file_system.file_system` picks one by
the session's kind.
"""

from __future__ import annotations

import hashlib
import os
from typing import List, Optional, Tuple

from pcem_spark.engine.storage import local_path, pyarrow_name, resolve

__all__ = ["ArrowFS", "shared_path", "create_local_exclusive", "local_sha256"]

_HASH_CHUNK = 8 << 20


def shared_path(path: str) -> str:
    """``path`` as both a Connect client and its server name it: a relative local path made absolute.

    >>> shared_path("s3a://bucket/out")
    's3a://bucket/out'
    >>> shared_path("/data/model")
    '/data/model'
    """
    if "://" in path or path.startswith("file:"):
        return path
    return os.path.abspath(path)


def local_sha256(path: str) -> str:
    """The SHA-256 (hex) of a local file, streamed in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def create_local_exclusive(path: str, text: str) -> bool:
    """Create the local file ``path`` holding ``text`` with O_EXCL: True if created, False if it existed."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return True


class ArrowFS:
    """The ``pyarrow.fs`` file system of ``path``, with :class:`~pcem_spark.io.hadoop_fs.HadoopFS`'s methods.

    Paths given to the methods are strings on the same file system, spelled
    as the caller spells them (``s3a://bucket/x`` or ``/tmp/x``); results that
    are paths come back in that spelling too.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self.fs, _, self._bucket = resolve(path)
        except OSError as exc:
            raise OSError(
                f"{exc}; over Spark Connect the atomic outputs rename and mark directories from the client, "
                "so it needs access to the same storage as the server (docs/CLUSTER.md)"
            ) from None
        # The caller's spelling of the store (e.g. "s3a://bucket"), to give listed paths back in it.
        self._prefix = "" if local_path(path) is not None else path[: path.index("://") + 3] + path.split("/")[2]

    def _p(self, path: Optional[str] = None) -> str:
        return pyarrow_name(self.path if path is None else path)  # naming only: no new connection per call

    def _spelled(self, inner: str) -> str:
        """A pyarrow path back in the caller's spelling."""
        if not self._prefix:
            return inner
        return f"{self._prefix}{inner[len(self._bucket) :]}" if self._bucket else f"{self._prefix}{inner}"

    def _info(self, path: Optional[str] = None):
        return self.fs.get_file_info(self._p(path))

    # ------------------------------------------------------------ looking
    def exists(self, path: Optional[str] = None) -> bool:
        import pyarrow.fs as pafs

        return self._info(path).type != pafs.FileType.NotFound

    def is_directory(self, path: Optional[str] = None) -> bool:
        import pyarrow.fs as pafs

        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"{path if path is not None else self.path} does not exist")
        return info.type == pafs.FileType.Directory

    def qualify(self, path: Optional[str] = None) -> str:
        """Scheme, authority and absolute path (``file:/tmp/x`` for local paths), as HadoopFS spells them."""
        path = self.path if path is None else path
        local = local_path(path)
        return "file:" + os.path.realpath(local) if local is not None else path.rstrip("/")

    def path_string(self) -> str:
        """This wrapper's path, fully spelled (a HadoopFS's ``path.toString()``)."""
        return self.path

    def files_below(self, path: Optional[str] = None) -> List[Tuple[str, str]]:
        """``(file, its path relative to the directory)`` for every file below a directory, recursively."""
        import pyarrow.fs as pafs

        root = self._p(path).rstrip("/")
        infos = self.fs.get_file_info(pafs.FileSelector(root, recursive=True))
        return [
            (self._spelled(info.path), info.path[len(root) :])
            for info in sorted(infos, key=lambda i: i.path)
            if info.type == pafs.FileType.File
        ]

    def sizes_below(self, path: Optional[str] = None) -> List[Tuple[str, int]]:
        """``(path relative to the directory, size in bytes)`` of every file below it, recursively, sorted."""
        import pyarrow.fs as pafs

        root = self._p(path).rstrip("/")
        infos = self.fs.get_file_info(pafs.FileSelector(root, recursive=True))
        return sorted((i.path[len(root) + 1 :], int(i.size)) for i in infos if i.type == pafs.FileType.File)

    def local(self, path: Optional[str] = None) -> Optional[str]:
        """The local path when ``path`` is on this machine's disk, else None."""
        return local_path(self.path if path is None else path)

    @property
    def atomic_create(self) -> bool:
        """Whether :meth:`create_exclusive` is atomic here: on local disk (O_EXCL) only."""
        return self.local() is not None

    def mtime(self, path: Optional[str] = None) -> Optional[float]:
        """Last modification, seconds since the epoch (None when the path does not exist or has no time)."""
        import pyarrow.fs as pafs

        info = self._info(path)
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            return None
        return info.mtime.timestamp()

    def list_names(self, directory: Optional[str] = None) -> List[str]:
        """The names of a directory's entries ([] when it does not exist)."""
        import pyarrow.fs as pafs

        if not self.exists(directory):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self._p(directory), recursive=False))
        return [info.base_name for info in infos]

    # ----------------------------------------------------------- changing
    def delete(self, path: Optional[str] = None) -> None:
        """Delete, recursively; nothing happens when the path does not exist."""
        import pyarrow.fs as pafs

        info = self._info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self._p(path))
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(self._p(path))

    def rename(self, src: str, dst: str) -> None:
        """``os.rename`` on local disk and HDFS (atomic for a directory); on object stores (S3, GCS), where
        pyarrow moves no directory, a copy of every file -- those whose name starts with "_" (the completion
        marker, Spark's ``_SUCCESS``) last, so a half-copied directory never carries one -- then a delete
        of the source."""
        if self.exists(dst):
            raise OSError(f"could not rename {src} to {dst}: the target exists")
        if not (self._bucket and self.is_directory(src)):
            self.fs.move(self._p(src), self._p(dst))
            return
        source, target = self._p(src).rstrip("/"), self._p(dst).rstrip("/")
        files = self.files_below(src)
        for _, relative in sorted(files, key=lambda f: f[1].rsplit("/", 1)[-1].startswith("_")):
            self.fs.create_dir((target + relative).rsplit("/", 1)[0], recursive=True)
            self.fs.copy_file(source + relative, target + relative)
        self.fs.delete_dir(source)

    def create_exclusive(self, path: str, text: str) -> bool:
        """Create a file holding ``text`` unless one exists: True if this call created it (O_EXCL on local
        disk; elsewhere a check, then a write: see :attr:`atomic_create`)."""
        local = self.local(path)
        if local is not None:
            return create_local_exclusive(local, text)
        if self.exists(path):
            return False
        self.write_text(path, text)
        return True

    def touch(self, path: Optional[str] = None) -> None:
        """Set a file's modification time to now (local disk), or write it again (elsewhere)."""
        local = self.local(path)
        if local is not None:
            os.utime(local)
            return
        text = self.read_text(path)
        if text is not None:
            self.write_text(path, text)

    def mkdirs(self, path: Optional[str] = None) -> None:
        self.fs.create_dir(self._p(path), recursive=True)

    # ------------------------------------------------------------ content
    def read_head(self, path: Optional[str] = None, n: int = 4) -> bytes:
        """The first ``n`` bytes of a file (zero bytes past its end, as HadoopFS reads them)."""
        with self.fs.open_input_stream(self._p(path)) as stream:
            head = stream.read(n)
        return bytes(head) + bytes(max(n - len(head), 0))

    def write_text(self, path: str, text: str) -> None:
        """Create or replace a file holding ``text`` (UTF-8)."""
        with self.fs.open_output_stream(self._p(path)) as out:
            out.write(text.encode("utf-8"))

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a file holding ``data``."""
        with self.fs.open_output_stream(self._p(path)) as out:
            out.write(data)

    def read_bytes(self, path: Optional[str] = None) -> Optional[bytes]:
        """A file's bytes, or None when it does not exist."""
        if not self.exists(path):
            return None
        with self.fs.open_input_stream(self._p(path)) as stream:
            return bytes(stream.read())

    def sha256(self, path: Optional[str] = None) -> str:
        """The SHA-256 (hex) of a file's content, streamed in chunks."""
        digest = hashlib.sha256()
        with self.fs.open_input_stream(self._p(path)) as stream:
            while chunk := stream.read(_HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def read_text(self, path: Optional[str] = None) -> Optional[str]:
        """A file's text (UTF-8; lines joined by ``\\n``), or None when it does not exist."""
        if not self.exists(path):
            return None
        with self.fs.open_input_stream(self._p(path)) as stream:
            return "\n".join(stream.read().decode("utf-8").splitlines())
