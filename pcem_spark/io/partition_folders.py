"""The folders a partitioned output is written to: Spark's escaping of a value, and the longest name allowed.

``--partition-by COL`` writes the rows of each value to ``COL=VALUE/``, with
the characters a path cannot hold escaped as ``%XX`` (Spark's
``ExternalCatalogUtils.escapePathName``). A folder name longer than
:data:`FOLDER_NAME_BYTES` is refused by local file systems and HDFS, after
every document was read; :func:`check_partition_folders` (values known up
front, such as the level-1 node names) and :func:`escaped_bytes` (a Spark
expression, for values counted in a pass over the documents) find it first.
"""

from __future__ import annotations

from typing import Iterable, Optional

from pcem_spark.errors import InputError

__all__ = ["FOLDER_NAME_BYTES", "partition_folder", "check_partition_folders", "escaped_bytes"]

# Spark's escaping of a partition value in a folder name (ExternalCatalogUtils.escapePathName): each of
# these characters becomes %XX.
_ESCAPED = set(chr(c) for c in range(1, 32)) | set("\"#%'*/:=?\\\x7f{[]^")
_ESCAPED_REGEX = "[\\x01-\\x1f\"#%'*/:=?\\\\\\x7f{\\[\\]^]"
FOLDER_NAME_BYTES = 255  # the longest folder name local file systems and HDFS accept (NAME_MAX)


def partition_folder(column: str, value: Optional[str]) -> str:
    """The folder Spark writes the rows of ``column = value`` to (``__HIVE_DEFAULT_PARTITION__`` for null / "").

    >>> partition_folder("level1", "comp/sys")
    'level1=comp%2Fsys'
    """

    def escape(text: str) -> str:
        return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)

    return f"{escape(column)}={escape(value) if value else '__HIVE_DEFAULT_PARTITION__'}"


def check_partition_folders(column: str, values: Iterable[str], name: str) -> None:
    """Refuse values whose partition folder name would be longer than a folder name may be (InputError)."""
    for value in values:
        folder = partition_folder(column, value)
        if len(folder.encode("utf-8")) > FOLDER_NAME_BYTES:
            raise InputError(
                f"{name} = {column!r}: the value {value[:60]!r}... would be written to a folder named "
                f"{len(folder.encode('utf-8'))} bytes long, over the {FOLDER_NAME_BYTES} a folder name may have; "
                "partition by another column, or shorten the names"
            )


def escaped_bytes(value):
    """Bytes of ``value`` once escaped into a partition folder name (the Spark expression of
    :func:`partition_folder`'s length, for the value part): each escaped character takes 3 bytes, not 1."""
    from pyspark.sql import functions as F

    n_escaped = F.length(value) - F.length(F.regexp_replace(value, _ESCAPED_REGEX, ""))
    return F.octet_length(value) + 2 * n_escaped
