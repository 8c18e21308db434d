"""Content checksums of a version's files: computed when it is marked complete, checked when it is read.

Every file of a committed version (a model, predictions, rejects, a documents
table, an inspection folder) has its SHA-256 in the version's marker
(``checksums``: path relative to the version -> ``"sha256:HEX"``), beside the
manifest of sizes. Why SHA-256, computed by pcem-spark, rather than what a file
system already holds:

* HDFS's ``getFileChecksum`` (MD5 of the MD5s of each block's CRC32C) depends
  on the block size and the bytes per checksum of the cluster that wrote the
  file: a model copied to a cluster with other settings (``distcp`` without
  ``-pb``) would read as damaged; its block-size-independent form
  (``COMPOSITE-CRC``) is a client setting few clusters set. HDFS still checks
  every block's CRC as it reads it, beneath this.
* Object stores' ETags are an MD5 of the content only for single-part uploads
  without KMS encryption; a multipart upload's is an MD5 of the parts' MD5s,
  which depends on the part size of the client that wrote it.
* The local file system's ``.crc`` side files exist only on the local disk.

One content hash means the same thing on every file system and survives any
copy. Its cost: the version's bytes read once more when it is marked, on the
driver for a version of up to :data:`DRIVER_HASH_MAX_BYTES`, else by a Spark
job (``binaryFile`` and ``sha2``: every executor hashes its files). Measured in
docs/BENCHMARKS.md ("Verified outputs").

Reading (:mod:`pcem_spark.io.snapshots`): a model is verified in full on every
load (:func:`verify`); a data output in full when it is at most
``output.verify_max_bytes``, and larger ones by what their readers read
anyway, Parquet's page checksums (written by default and verified with
``parquet.page.verify-checksum.enabled``), with a full check of the files a
failed read names. A mismatch is
:class:`~pcem_spark.io.snapshots.DamagedOutputError` (exit 2) naming the file and
both checksums. A version written before checksums loads with one warning.
"""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Optional, Tuple
from urllib.parse import unquote, urlparse

__all__ = [
    "ALGORITHM",
    "DRIVER_HASH_MAX_BYTES",
    "VERIFY_PAGES",
    "checksums_of",
    "mismatches",
]

log = logging.getLogger(__name__)

ALGORITHM = "sha256"
# A version up to this size is hashed on the driver (one stream per file); a larger one by a Spark job.
DRIVER_HASH_MAX_BYTES = 256 << 20
# binaryFile reads a file whole into one row (an executor's task holds it in memory): larger files are
# hashed on the driver, streamed, one at a time.
_ROW_MAX_BYTES = 256 << 20
# The Parquet reader option that checks every page's CRC as it is read (pages carry one by default).
VERIFY_PAGES = ("parquet.page.verify-checksum.enabled", "true")


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def _path_part(uri: str) -> str:
    """The path of a URI or a path, without scheme and authority (``file:/a/b`` and ``/a/b`` alike)."""
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme else uri


def _by_spark(spark, location: str, relatives: List[str]) -> Dict[str, str]:
    """``{relative: hex}`` of data files hashed by the executors (those it could match back to a name)."""
    from pyspark.sql import functions as F

    paths = [f"{location}/{rel}" for rel in relatives]
    rows = (
        spark.read.format("binaryFile")
        .load(paths)
        .select("path", F.sha2("content", 256).alias("sha"))
        .toArrow()
        .to_pylist()
    )
    base = _path_part(location).rstrip("/") + "/"
    wanted = set(relatives)
    found: Dict[str, str] = {}
    for row in rows:
        # Hadoop names a file by its path as written (a partition folder's %XX escapes kept); a URI would
        # quote them: try both.
        for path in (_path_part(row["path"]), unquote(_path_part(row["path"]))):
            rel = path[len(base) :] if path.startswith(base) else None
            if rel in wanted:
                found[rel] = row["sha"]
                break
    return found


def checksums_of(
    fs, location: str, sizes: Dict[str, int], spark=None, driver_max_bytes: int = DRIVER_HASH_MAX_BYTES
) -> Dict[str, str]:
    """``{relative path: "sha256:HEX"}`` of the files ``sizes`` names under ``location``.

    On the driver (``fs.sha256``) when their total is at most ``driver_max_bytes`` or there is no
    ``spark``; else the data files by a Spark job, the rest (markers, files over a row's limit) on the driver.
    """
    location = location.rstrip("/")
    total = sum(int(s) for s in sizes.values())
    by_spark: Dict[str, str] = {}
    if spark is not None and total > driver_max_bytes:
        data = [rel for rel, size in sizes.items() if not _hidden(rel) and 0 < int(size) <= _ROW_MAX_BYTES]
        if data:
            by_spark = _by_spark(spark, location, data)
    out = {}
    for rel in sorted(sizes):
        digest = by_spark.get(rel) or fs.sha256(f"{location}/{rel}")
        out[rel] = f"{ALGORITHM}:{digest}"
    return out


def mismatches(
    fs, location: str, expected: Dict[str, str], relatives: Optional[Iterable[str]] = None, spark=None, sizes=None
) -> List[Tuple[str, str, str]]:
    """``(relative, expected, found)`` of every file whose content no longer has its recorded checksum
    (``relatives``: only those files; by default every file ``expected`` names)."""
    names = sorted(expected if relatives is None else [r for r in relatives if r in expected])
    if not names:
        return []
    sizes = {rel: (sizes or {}).get(rel, 0) for rel in names}
    found = checksums_of(fs, location, sizes, spark)
    return [(rel, expected[rel], found[rel]) for rel in names if found[rel] != expected[rel]]
