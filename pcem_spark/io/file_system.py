"""The file system of a path as the driver side sees it: the JVM's Hadoop FileSystem, or pyarrow's over Connect.

Classic sessions call Hadoop through the driver's JVM (:class:`HadoopFS`); a
Spark Connect client has no JVM and calls ``pyarrow.fs`` itself
(:class:`ArrowFS`, which says what storage it can reach). Both offer the
methods the atomic outputs and the format detection use.
"""

from __future__ import annotations

from typing import Union

from pcem_spark.engine.session import is_spark_connect
from pcem_spark.io.arrow_fs import ArrowFS, shared_path
from pcem_spark.io.hadoop_fs import OUTPUTS_NEEDS, OUTPUTS_USE, HadoopFS

__all__ = ["file_system", "session_path"]


def file_system(spark, path: str, what: str = OUTPUTS_USE, needs: str = OUTPUTS_NEEDS) -> Union[HadoopFS, ArrowFS]:
    """:class:`HadoopFS` of ``path`` on a classic session, :class:`ArrowFS` over Spark Connect."""
    if is_spark_connect(spark):
        return ArrowFS(path)
    return HadoopFS(spark, path, what, needs)


def session_path(spark, path: str) -> str:
    """``path`` as the session's readers and writers must name it: unchanged on a classic session (the
    driver resolves it); over Connect a relative local path is made absolute against the client's working
    directory, so the server's writer and the client's renames meet on the same directory."""
    return shared_path(path) if is_spark_connect(spark) else path
