"""Read-only values for the executors: a broadcast variable in classic mode, the function's closure over Connect.

Spark Connect has no ``SparkContext.broadcast``. A value captured by a
``mapInArrow`` function travels pickled in the plan instead, so over Connect
:func:`ship` wraps it (:class:`Shipped`, read the same way, ``.value``) after
checking it fits the server's gRPC message limit. In classic mode it stays a
broadcast variable: sent once per executor, whatever the function.
"""

from __future__ import annotations

import pickle

from pcem_spark.engine.limits import ResultSizeError

__all__ = ["CONNECT_PLAN_LIMIT", "Shipped", "check_plan_size", "ship"]

# Spark Connect's default spark.connect.grpc.maxInboundMessageSize: a plan (with the functions pickled in it)
# larger than this is refused by the server.
CONNECT_PLAN_LIMIT = 128 << 20


class Shipped:
    """A value sent with the function that reads it (``.value``, as a broadcast variable)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def unpersist(self) -> None:
        """Nothing to free (the broadcast variable's method, so callers need not tell them apart)."""


def check_plan_size(spark, n_bytes: int, what: str) -> None:
    """Refuse, before the job, values a Spark Connect server would not accept in a plan."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return  # classic PySpark broadcasts a large function itself
    try:
        raw = spark.conf.get("spark.connect.grpc.maxInboundMessageSize", None)
    except Exception:  # noqa: BLE001 - a static server setting the client may not read
        raw = None
    limit = int(raw) if raw and str(raw).isdigit() else CONNECT_PLAN_LIMIT
    if n_bytes + (1 << 20) > limit:
        raise ResultSizeError(
            f"{what} pickle to {n_bytes / 2**20:.1f} MiB, more than a Spark Connect plan may carry "
            f"(spark.connect.grpc.maxInboundMessageSize = {limit / 2**20:.0f} MiB): raise it on the server, or "
            "shrink the model (features.max_vocab, model.parameter_dtype=float32)"
        )


def ship(spark, value, what: str = "the model's parameters"):
    """``value`` for the executors: ``spark.sparkContext.broadcast(value)`` in classic mode, else :class:`Shipped`."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return spark.sparkContext.broadcast(value)
    check_plan_size(spark, len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)), what)
    return Shipped(value)
