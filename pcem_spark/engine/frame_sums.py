"""One EM pass on the DataFrame API alone: no RDD, no broadcast variable, no driver JVM.

What Spark Connect (and shared / serverless compute that offers only DataFrames)
can run. The same partition code as :func:`pcem_spark.engine.sums.sufficient_stats`
(``_pass_partition``: the E-step on row slices of each block, the sums
combined per task), moved by DataFrame operations:

* the blocks are a cached DataFrame of packed CSR rows
  (:func:`pcem_spark.engine.blocks.packed_label_frame`);
* the parameters (:class:`pcem_spark.core.ScoringTables`) travel pickled with
  the ``mapInArrow`` function. Classic PySpark broadcasts a function over
  ``spark.broadcast.UDFCompressionThreshold`` (1 MB) by itself, so each
  executor receives them once per pass, as with a broadcast variable; over
  Spark Connect they go in the plan, so they must fit the server's gRPC
  message limit (``spark.connect.grpc.maxInboundMessageSize``, 128 MiB by
  default): checked before the pass (:func:`check_plan_size`);
* the cached blocks are coalesced to one task per core, and each task yields
  its per-path sum chunks as rows (key, pickled chunk). Dense sums (M x V
  small) come back with ``toArrow`` and are added on the driver; wide
  models' sparse sums come back the same way from up to 4 tasks whose bound
  fits the driver's limit, else they are first summed on the cluster by a
  ``groupBy(key).applyInArrow`` (the ``partitionBy`` and sum of the RDD pass), so
  one row per key comes back. Either way the size is checked against
  ``spark.driver.maxResultSize`` before the pass, like the RDD pass's collect.
"""

from __future__ import annotations

import pickle
from typing import Optional

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.estep import scoring_tables
from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.structure import Structure
from pcem_spark.engine.blocks import block_batches, block_from_row
from pcem_spark.engine.limits import check_result_size
from pcem_spark.engine.shipping import ship_in_plan
from pcem_spark.engine.sums import (
    PassOptions,
    PassSettings,
    _add,
    _assemble,
    _collect_bound,
    _direct,
    _limit_or_inf,
    _Local,
    _pass_partition,
    _sum_by_key,
    _unless_too_large,
    sums_layout,
)

__all__ = ["frame_sufficient_stats"]

_SUM_SCHEMA = "key long, payload binary"
# The largest summed chunk a pass aims at: one result row each, well under a Connect gRPC message.
CHUNK_TARGET_BYTES = 32 << 20


def _sum_partition(batches, tables, static, cfg: PassSettings, vocab_size: int, n_nodes: int):
    """mapInArrow body: the blocks of one task -> its per-path sum chunks as (key, pickled chunk) rows."""
    import pyarrow as pa
    from pyspark import TaskContext

    def blocks():
        for batch in batches:
            for row in batch.to_pylist():
                yield block_from_row(row, vocab_size, n_nodes)

    ctx = TaskContext.get()
    index = ctx.partitionId() if ctx is not None else 0
    keys, payloads = [], []
    for key, value in _pass_partition(index, blocks(), _Local(tables), _Local(static), cfg):
        keys.append(int(key))
        payloads.append(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    if keys:
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.int64()), pa.array(payloads, pa.binary())], names=["key", "payload"]
        )


def _sum_group(table):
    """applyInArrow body: every chunk of one key -> their sum, one row."""
    import pyarrow as pa

    total = None
    for payload in table.column("payload").to_pylist():
        value = pickle.loads(payload)
        total = value if total is None else _add(total, value)
    key = table.column("key")[0].as_py()
    return pa.table(
        {"key": pa.array([key], pa.int64()), "payload": pa.array([pickle.dumps(total, protocol=5)], pa.binary())}
    )


def frame_sufficient_stats(
    frame: DataFrame,
    params: Optional[PathParameters],
    score_matrix: np.ndarray,
    vocab_size: int,
    n_nodes: int,
    options: PassOptions = PassOptions(),
    *,
    structure: Optional[Structure] = None,
    stats: Optional[dict] = None,
):
    """:func:`pcem_spark.engine.sums.sufficient_stats` over a DataFrame of packed blocks (module docstring).

    ``frame``: :data:`pcem_spark.engine.blocks.BLOCK_ROW` rows (cache it: every
    pass reads it); ``n_nodes``: the taxonomy's node columns of its node
    scores. Returns ``(word_counts (M, V), path_totals (M,), loglik, n_lab,
    n_unlab)`` as the RDD pass does, to the order of floating-point additions.
    """
    spark = frame.sparkSession
    n_paths = score_matrix.shape[0]
    dtype = options.dtype
    sparse_sums, dense_bytes, what = sums_layout(n_paths, vocab_size, dtype)
    if not sparse_sums:
        check_result_size(spark, dense_bytes, what)
    n_chunks = max(1, min(n_paths, 4 * _default_parallelism(spark)))
    cfg = PassSettings(n_paths, vocab_size, options, sparse_sums, n_chunks)
    term_counts = (stats or {}).get("term_counts")
    bound = _collect_bound(cfg, term_counts, dense_bytes)
    if sparse_sums and bound > n_chunks * CHUNK_TARGET_BYTES:
        # One summed chunk is one result row, and a row must fit one gRPC message of the Connect client
        # (128 MiB by default): more, smaller chunks for wide models (the sums do not change).
        n_chunks = min(n_paths, int(np.ceil(bound / CHUNK_TARGET_BYTES)))
        cfg = PassSettings(n_paths, vocab_size, options, sparse_sums, n_chunks)
    tables = None if params is None else scoring_tables(params, dtype)
    static = (score_matrix, structure)
    # In the plan, or (large, over Connect with a staging directory) a file each Python worker reads once.
    shipped = ship_in_plan(spark, (tables, static), f"the parameters of {n_paths:,} paths x {vocab_size:,} terms")
    if stats is not None:
        stats["broadcast_bytes"] = getattr(shipped, "n_bytes", None) or len(
            pickle.dumps((tables, static), protocol=pickle.HIGHEST_PROTOCOL)
        )
    del tables

    def body(batches):
        tables, static = shipped.value
        return _sum_partition(batches, tables, static, cfg, vocab_size, n_nodes)

    # One task per core (coalesce keeps the cached blocks where they are), so each task combines the sums
    # of every block it reads, as the RDD pass does.
    n_tasks = _default_parallelism(spark)
    partial = frame.coalesce(n_tasks).mapInArrow(body, _SUM_SCHEMA)
    # A few tasks' sparse sums whose bound fits the driver's limit come back unsummed, as in the RDD pass.
    all_tasks = _collect_bound(cfg, term_counts, dense_bytes, n_tasks)
    direct = sparse_sums and _direct(spark, True, n_tasks, all_tasks)
    try:
        with block_batches(spark):
            # A task's chunk holds a subset of the summed chunk's cells (sums of non-negative weights), so
            # each row stays within the size the chunks were cut for.
            table = _unless_too_large(partial.toArrow) if direct else None  # task row chunks, never documents
            if table is None:
                table = _collect_sums(partial, spark, sparse_sums, bound, n_tasks * dense_bytes, what)
    finally:
        shipped.unpersist()
    payloads = table.column("payload").to_pylist()
    records = _sum_by_key((key, pickle.loads(p)) for key, p in zip(table.column("key").to_pylist(), payloads))
    if stats is not None:
        stats["collected_bytes"] = int(sum(len(p) for p in payloads))
    return _assemble(records, n_paths, vocab_size, sparse_sums, stats)


def _collect_sums(partial: DataFrame, spark, sparse_sums: bool, bound: float, dense_bytes: float, what: str):
    """The tasks' sum rows as one Arrow table on the driver, their size checked against its limit first.

    ``bound``: the sparse sums' size bound; ``dense_bytes``: every task's dense sums; ``what``: the sums as an
    error names them.
    """
    try:
        if sparse_sums:
            # Wide models: the tasks' sums are summed on the cluster (the partitionBy and sum of the RDD pass),
            # one row per row chunk reaches the driver.
            partial = partial.groupBy("key").applyInArrow(_sum_group, _SUM_SCHEMA)
            if bound * 1.1 + (1 << 20) > _limit_or_inf(spark):
                # The bound says it might not fit (e.g. the first pass, before the term count is known): size the
                # summed rows exactly first, as the RDD pass does; the cached rows are then collected.
                partial = partial.cache()
                exact = partial.agg(F.sum(F.length("payload"))).first()[0] or 0
                check_result_size(spark, float(exact), what)
        else:
            # Dense sums are small (M x (V+1) per task): summed on the driver, no extra stage.
            check_result_size(spark, dense_bytes, what)
        return partial.toArrow()  # summed row chunks: O(tasks x nnz(sums) + M), never documents
    finally:
        partial.unpersist()  # also when the size check refuses the cached rows


def _default_parallelism(spark) -> int:
    """Tasks of a pass: the cluster's cores in classic mode; over Connect (a client cannot ask for them)
    ``spark.default.parallelism`` when set, else 8."""
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark):
        return max(1, spark.sparkContext.defaultParallelism)
    try:
        raw = spark.conf.get("spark.default.parallelism", None)
    except Exception:  # noqa: BLE001 - not readable from this session
        raw = None
    return int(raw) if raw and str(raw).isdigit() else 8
