"""Read-only values for the executors: a broadcast variable in classic mode; over Connect the plan, or a file.

Spark Connect has no ``SparkContext.broadcast``. A value captured by a
``mapInArrow`` function travels pickled in the plan instead, so over Connect
:func:`ship` wraps it (:class:`Shipped`, read the same way, ``.value``) when
it is small enough for the server's gRPC message limit. A larger value (a
wide model's parameters: 1,000 leaves x 2^18 terms) is written once by the
client to a staging directory on storage the executors read
(:class:`StagedFile`: ``PCEM_STAGING_DIR``, or what the command set with
:func:`set_staging_dir`, e.g. beside its output), and each Python worker
process reads it at most once (a per-process cache). In classic mode a value
stays a broadcast variable: sent once per executor, whatever the function.

A staged file is data, never code: it is written in the data-only format of
:mod:`pcem_spark.engine.safe_values` (only the classes of :func:`staged_types`
can be rebuilt from it), and its SHA-256 travels in the plan with the
:class:`StagedFile`, so an executor refuses a file that anyone replaced or
damaged on the shared staging storage before it decodes a byte of it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import uuid
from typing import Optional

from pcem_spark.engine.limits import ResultSizeError

__all__ = [
    "CONNECT_PLAN_LIMIT",
    "INLINE_LIMIT",
    "STAGING_ENV",
    "Shipped",
    "StagedFile",
    "StagedValueError",
    "check_plan_size",
    "plan_limit",
    "set_staging_dir",
    "staging_dir",
    "ship",
    "ship_in_plan",
    "staged_types",
]

# Spark Connect's default spark.connect.grpc.maxInboundMessageSize: a plan (with the functions pickled in it)
# larger than this is refused by the server.
CONNECT_PLAN_LIMIT = 128 << 20
# Over Connect, values pickled larger than this go through a staged file when a staging directory is known:
# every pass sends its plan again, and a plan near the limit is slow to build, send and parse.
INLINE_LIMIT = 16 << 20
STAGING_ENV = "PCEM_STAGING_DIR"
_staging_dir: Optional[str] = None


class Shipped:
    """A value sent with the function that reads it (``.value``, as a broadcast variable)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def unpersist(self) -> None:
        """Nothing to free (the broadcast variable's method, so callers need not tell them apart)."""


class StagedValueError(RuntimeError):
    """A staged file is not the value the client wrote (replaced or damaged on the staging storage)."""


def staged_types() -> tuple:
    """The classes a staged value may hold (what :func:`ship` is called with over Spark Connect)."""
    from pcem_spark.core.beam import BeamLevel, BeamScorer, BeamTables
    from pcem_spark.core.calibration import Calibration, DepthMaps
    from pcem_spark.core.estep import ScoringTables
    from pcem_spark.core.logistic import LinearTables
    from pcem_spark.core.parameters import PathParameters
    from pcem_spark.core.structure import Structure
    from pcem_spark.engine.feature_settings import FeatureSettings
    from pcem_spark.engine.python_tokens import TextFeaturizer

    return (
        BeamLevel,
        BeamScorer,
        BeamTables,
        Calibration,
        DepthMaps,
        FeatureSettings,
        LinearTables,
        PathParameters,
        ScoringTables,
        Structure,
        TextFeaturizer,
    )


class StagedFile:
    """A value written to a file by the client, read by each Python worker process at most once (``.value``).

    The file holds the value as data (:mod:`pcem_spark.engine.safe_values`);
    ``sha256`` (in the plan, with this object) is checked before it is decoded.
    The workers keep the last two values they read (the current EM pass's
    and the previous one's), so a long fit does not pile parameters up in them.
    """

    __slots__ = ("uri", "n_bytes", "sha256")
    _cache: dict = {}

    def __init__(self, uri: str, n_bytes: int, sha256: str = ""):
        self.uri = uri
        self.n_bytes = n_bytes
        self.sha256 = sha256

    @property
    def value(self):
        cache = StagedFile._cache
        if self.uri not in cache:
            from pcem_spark.engine import safe_values
            from pcem_spark.engine.storage import resolve

            fs, inner, _ = resolve(self.uri)
            with fs.open_input_stream(inner) as stream:
                data = stream.read()
            found = hashlib.sha256(data).hexdigest()
            if found != self.sha256:
                raise StagedValueError(
                    f"{self.uri}: the staged value's SHA-256 is {found}, the client wrote {self.sha256} "
                    f"({len(data):,} bytes read, {self.n_bytes:,} written): the file was replaced or damaged on "
                    "the staging storage; keep PCEM_STAGING_DIR writable by this job's user only"
                )
            value = safe_values.loads(data, staged_types())
            while len(cache) >= 2:
                cache.pop(next(iter(cache)))
            cache[self.uri] = value
        return cache[self.uri]

    def unpersist(self) -> None:
        """Delete the file (the client calls it once the job that reads it is done)."""
        from pcem_spark.engine.storage import resolve

        try:
            fs, inner, _ = resolve(self.uri)
            fs.delete_file(inner)
        except OSError:  # already gone, or the storage went away: nothing to keep either way
            pass


def set_staging_dir(path: Optional[str]) -> None:
    """Where :func:`ship` stages large values over Connect (``PCEM_STAGING_DIR`` wins); None to forget it."""
    global _staging_dir
    _staging_dir = path


def staging_dir() -> Optional[str]:
    """``PCEM_STAGING_DIR``, else what :func:`set_staging_dir` set, else None."""
    return os.environ.get(STAGING_ENV) or _staging_dir


def plan_limit(spark) -> int:
    """The largest plan a Spark Connect server accepts (``spark.connect.grpc.maxInboundMessageSize``)."""
    try:
        raw = spark.conf.get("spark.connect.grpc.maxInboundMessageSize", None)
    except Exception:  # noqa: BLE001 - a static server setting the client may not read
        raw = None
    return int(raw) if raw and str(raw).isdigit() else CONNECT_PLAN_LIMIT


def check_plan_size(spark, n_bytes: int, what: str) -> None:
    """Refuse, before the job, values a Spark Connect server would not accept in a plan."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return  # classic PySpark broadcasts a large function itself
    limit = plan_limit(spark)
    if n_bytes + (1 << 20) > limit:
        raise ResultSizeError(
            f"{what} pickle to {n_bytes / 2**20:.1f} MiB, more than a Spark Connect plan may carry "
            f"(spark.connect.grpc.maxInboundMessageSize = {limit / 2**20:.0f} MiB): set {STAGING_ENV} to a "
            "directory the client writes and the executors read (shared disk, HDFS, an object store) so they "
            "travel as a file, raise the limit on the server, or shrink the model (features.max_vocab, "
            "model.parameter_dtype=float32)"
        )


def ship_in_plan(spark, value, what: str):
    """Over Connect: :class:`Shipped` (in the plan) when small, else a :class:`StagedFile` when a staging
    directory is known; in classic mode :class:`Shipped` too (PySpark broadcasts a large function itself).
    Read with ``.value`` on the executors; ``.unpersist()`` when the job is done."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return Shipped(value)
    # The size the plan would carry (Spark Connect pickles a function and what it captures into the plan).
    n_bytes = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    where = staging_dir()
    if n_bytes <= INLINE_LIMIT or not where:
        check_plan_size(spark, n_bytes, what)
        return Shipped(value)
    from pcem_spark.engine import safe_values
    from pcem_spark.engine.storage import resolve

    data = safe_values.dumps(value, staged_types())
    uri = f"{where.rstrip('/')}/pcem-shipped-{uuid.uuid4().hex}.npz"
    fs, inner, _ = resolve(uri)
    fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(inner) as out:
        out.write(data)
    return StagedFile(uri, len(data), hashlib.sha256(data).hexdigest())


def ship(spark, value, what: str = "the model's parameters"):
    """``value`` for the executors: ``spark.sparkContext.broadcast(value)`` in classic mode, else
    :func:`ship_in_plan`'s (in the plan, or a staged file)."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return spark.sparkContext.broadcast(value)
    return ship_in_plan(spark, value, what)
