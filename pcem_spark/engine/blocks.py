"""Packing a partition's documents into CSR blocks, cached once for all EM passes.

Each slice of at most ``block_size`` rows of an Arrow batch becomes one
:class:`Block` (term counts, node scores, labelled mask); the blocks are
cached and read by every pass of :mod:`pcem_spark.engine`: as an RDD of
:class:`Block` on a classic session, as a DataFrame of packed rows
(:data:`BLOCK_ROW`) over Spark Connect, which has no RDDs
(:func:`label_blocks` / :func:`node_score_blocks` choose by the session).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp
from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame

from pcem_spark.core.taxonomy import PATH_KEY_SEP
from pcem_spark.engine.arrow_io import (
    arrow_blocks,
    node_score_rows,
    sparse_vector_arrays,
    vector_rows,
    weak_score_rows,
)
from pcem_spark.engine.limits import byte_size
from pcem_spark.engine.session import is_spark_connect, require_classic_session

__all__ = [
    "RDD_NEEDS",
    "BLOCK_ROW",
    "EMBEDDING_COL",
    "Block",
    "block_from_row",
    "packed_label_frame",
    "blocks_from_labels",
    "blocks_from_node_scores",
    "packed_node_score_frame",
    "label_blocks",
    "node_score_blocks",
    "cache_blocks",
    "packed_blocks",
    "BLOCK_BATCH_BYTES",
    "block_batches",
]

# What the EM passes use that a Spark Connect session lacks (pcem_spark.engine.session.require_classic_session).
RDD_NEEDS = "the RDD API (packed blocks cached as an RDD, log theta broadcast to mapPartitions, partitionBy)"


def _compact(values: np.ndarray) -> np.ndarray:
    """The smallest dtype that holds ``values`` exactly (term counts fit in uint8/uint16)."""
    if values.size and np.all(values >= 0) and np.all(values == np.floor(values)):
        top = values.max()
        for dtype in (np.uint8, np.uint16):
            if top <= np.iinfo(dtype).max:
                return values.astype(dtype)
    return values


class Block:
    """A partition's documents as matrices.

    X : csr_matrix (n, V) term counts; node_scores : csr_matrix (n, K) of
    ``S_i(c)``; labeled : bool (n,) -- rows with any supervision; E : (n, D)
    float32 document vectors (``features.embedding``), or None without them.

    Pickled compactly (counts as uint8/uint16 when exact, term ids as uint16 up to 2^16 terms, else int32;
    vectors as float32): cached blocks cross from the JVM to Python every EM iteration, and the
    bytes moved are the main cost of an iteration after the math.
    """

    __slots__ = ("X", "node_scores", "labeled", "E")

    def __init__(self, X: sp.csr_matrix, node_scores: sp.csr_matrix, labeled: np.ndarray, E=None):
        self.X = X
        self.node_scores = node_scores
        self.labeled = labeled
        self.E = E

    def rows(self, rows: np.ndarray) -> "Block":
        """The block of ``rows`` (indices) of this one, vectors included."""
        E = None if self.E is None else self.E[rows]
        return Block(self.X[rows], self.node_scores[rows], self.labeled[rows], E)

    def __getstate__(self):
        X = self.X
        return (
            X.shape,
            X.indptr,
            # uint16 term ids when the vocabulary allows (2^16 terms): 2 of the ~5 bytes per non-zero
            X.indices.astype(np.uint16 if X.shape[1] <= _UINT16_TERMS else np.int32, copy=False),
            _compact(X.data),
            self.node_scores,
            self.labeled,
            self.E,
        )

    def __setstate__(self, state):
        shape, indptr, indices, data, node_scores, labeled = state[:6]
        indices = indices.astype(np.int32, copy=False)  # scipy's index type (uint16 on the wire)
        self.X = sp.csr_matrix((data.astype(np.float64, copy=False), indices, indptr), shape=shape)
        self.node_scores = node_scores
        self.labeled = labeled
        self.E = state[6] if len(state) > 6 else None


_UINT16_TERMS = 1 << 16

# One packed block as a DataFrame row (packed_label_frame; block_from_row reads it back). ``emb``: the rows'
# document vectors as float32 bytes, row after row (null without vectors).
BLOCK_ROW = (
    "n int, indptr binary, indices binary, data binary, ns_indptr binary, ns_indices binary, ns_data binary, emb binary"
)
_BLOCK_FIELDS = ("n", "indptr", "indices", "data", "ns_indptr", "ns_indices", "ns_data", "emb")

# The column of document vectors in a featurised DataFrame (array<float>): packed beside the counts when present.
EMBEDDING_COL = "embedding"


def _pack_arrow_partition(batches, supervision, block_size: int):
    """mapInArrow body: each slice of <= block_size rows becomes one row of CSR bytes (and, when the batches
    have a third column, the rows' document vectors as float32 bytes)."""
    import pyarrow as pa

    for b in arrow_blocks(batches, block_size):
        E = vector_rows(b.column(2)) if b.num_columns > 2 else None
        indptr, indices, data = sparse_vector_arrays(b.column(0))
        # Counts as uint8 / uint16 when exact: a cached DataFrame of blocks is read by every EM pass, and the
        # bytes moved to Python are the main cost after the math (block_from_row tells the width by the size).
        data = _compact(np.asarray(data))
        if len(indices) and indices.max() < _UINT16_TERMS:
            indices = indices.astype(np.uint16)  # as Block's pickle: block_from_row tells the width by the size
        ns_indptr, ns_indices, ns_data = supervision(b.column(1))
        cols = [pa.array([b.num_rows], pa.int32())] + [
            pa.array([a.tobytes()], pa.binary()) for a in (indptr, indices, data, ns_indptr, ns_indices, ns_data)
        ]
        cols.append(pa.array([None if E is None else E.tobytes()], pa.binary()))
        yield pa.RecordBatch.from_arrays(cols, names=list(_BLOCK_FIELDS))


def block_from_row(row, vocab_size: int, n_nodes: int) -> Block:
    """A :class:`Block` from a :data:`BLOCK_ROW` row (a Row, a tuple, or a dict of its fields)."""
    if isinstance(row, dict):
        row = [row.get(name) for name in _BLOCK_FIELDS]
    return _block_from_row(row, vocab_size, n_nodes)


_COMPACT_DTYPES = {1: np.uint8, 2: np.uint16, 8: np.float64}  # a block's counts by their bytes per entry
_INDEX_DTYPES = {2: np.uint16, 4: np.int32}  # its term ids


def _block_from_row(row, vocab_size: int, n_nodes: int) -> Block:
    n = row[0]
    indptr, ns_indptr, ns_indices, ns_data = (
        np.frombuffer(row[i], dtype=t) for i, t in zip((1, 4, 5, 6), (np.int64, np.int64, np.int32, np.float64))
    )
    # Term ids (uint16 or int32) and counts (uint8, uint16 or float64) are told apart by bytes per non-zero.
    nnz = int(indptr[-1]) if len(indptr) else 0
    index_width = len(row[2]) // nnz if nnz else 4
    indices = np.frombuffer(row[2], dtype=_INDEX_DTYPES[index_width]).astype(np.int32, copy=False)
    width = len(row[3]) // nnz if nnz else 8
    data = np.frombuffer(row[3], dtype=_COMPACT_DTYPES[width]).astype(np.float64)
    X = sp.csr_matrix((data, indices, indptr), shape=(n, vocab_size))
    ns = sp.csr_matrix((ns_data, ns_indices, ns_indptr), shape=(n, n_nodes))
    E = None
    if len(row) > 7 and row[7] is not None:
        E = np.frombuffer(row[7], dtype=np.float32).reshape(n, -1) if n else np.zeros((0, 0), np.float32)
    return Block(X, ns, np.diff(ns_indptr) > 0, E)


def packed_label_frame(
    df: DataFrame,
    path_lookup: Dict[Tuple[str, ...], int],
    path_node: np.ndarray,
    block_size: int = 4096,
    features_col: str = "features",
    labels_col: str = "labels",
) -> DataFrame:
    """DataFrame of :data:`BLOCK_ROW` rows: ``df``'s documents packed into CSR blocks with true label paths.

    DataFrame API only (``mapInArrow``), so it also runs over Spark Connect;
    :func:`blocks_from_labels` turns it into an RDD of :class:`Block`.
    ``labels`` must already be validated against the taxonomy (see
    :func:`pcem_spark.model.labels.check_label_paths`); null labels = unlabelled.
    The node scores of a labelled row are the nodes of its (padded) path, or
    of its ``k`` paths at ``1/k`` each (:func:`pcem_spark.engine.arrow_io.node_score_rows`).
    """
    n_paths = path_node.shape[0]
    keys = [None] * n_paths
    for labels, j in path_lookup.items():
        keys[j] = PATH_KEY_SEP.join(labels)
    # Node ids of each path, in column (= depth) order; path_node may be dense or sparse.
    pn = sp.csr_matrix(path_node)
    pn.eliminate_zeros()
    pn.sort_indices()
    path_nodes = pn.indices.reshape(n_paths, -1).astype(np.int32)

    def pack(batches):
        return _pack_arrow_partition(batches, lambda col: node_score_rows(col, keys, path_nodes), block_size)

    columns = [features_col, labels_col] + ([EMBEDDING_COL] if EMBEDDING_COL in df.columns else [])
    return df.select(*columns).mapInArrow(pack, BLOCK_ROW)


def blocks_from_labels(
    df: DataFrame,
    path_lookup: Dict[Tuple[str, ...], int],
    path_node: np.ndarray,
    vocab_size: int,
    block_size: int = 4096,
    features_col: str = "features",
    labels_col: str = "labels",
) -> RDD:
    """RDD of :class:`Block` from a featurised DataFrame with true label paths (:func:`packed_label_frame`).

    Rows go to Python as Arrow batches and are packed with numpy only; each
    block crosses back as one row of bytes.
    """
    require_classic_session(df, "engine.blocks_from_labels", RDD_NEEDS)
    n_nodes = path_node.shape[1]
    packed = packed_label_frame(df, path_lookup, path_node, block_size, features_col, labels_col)
    return packed.rdd.map(lambda row: _block_from_row(row, vocab_size, n_nodes))


def packed_node_score_frame(
    df: DataFrame, block_size: int = 4096, features_col: str = "features", scores_col: str = "node_scores"
) -> DataFrame:
    """DataFrame of :data:`BLOCK_ROW` rows from weak supervision (DataFrame API only, so also over Connect):
    ``node_scores`` is array<double> of the taxonomy's K node columns (``Taxonomy.nodes`` order) or null
    for an unlabelled row."""

    def pack(batches):
        return _pack_arrow_partition(batches, weak_score_rows, block_size)

    return df.select(features_col, scores_col).mapInArrow(pack, BLOCK_ROW)


def blocks_from_node_scores(
    df: DataFrame,
    n_nodes: int,
    vocab_size: int,
    block_size: int = 4096,
    features_col: str = "features",
    scores_col: str = "node_scores",
) -> RDD:
    """RDD of :class:`Block` of :func:`packed_node_score_frame`'s rows."""
    require_classic_session(df, "engine.blocks_from_node_scores", RDD_NEEDS)
    packed = packed_node_score_frame(df, block_size, features_col, scores_col)
    return packed.rdd.map(lambda row: _block_from_row(row, vocab_size, n_nodes))


def label_blocks(
    df: DataFrame,
    path_lookup: Dict[Tuple[str, ...], int],
    path_node: np.ndarray,
    vocab_size: int,
    block_size: int = 4096,
) -> Union[RDD, DataFrame]:
    """The blocks of labelled (and unlabelled) documents in the session's engine's form.

    Classic session: :func:`blocks_from_labels` (an RDD of :class:`Block`,
    the faster pass at scale: docs/BENCHMARKS.md). Spark Connect: the packed
    DataFrame of :func:`packed_label_frame`, which every pass of
    :func:`pcem_spark.engine.passes.fit` reads with the DataFrame API alone.
    Either goes into :func:`packed_blocks`.
    """
    if is_spark_connect(df):
        return packed_label_frame(df, path_lookup, path_node, block_size)
    return blocks_from_labels(df, path_lookup, path_node, vocab_size, block_size)


def node_score_blocks(df: DataFrame, n_nodes: int, vocab_size: int, block_size: int = 4096) -> Union[RDD, DataFrame]:
    """:func:`label_blocks` for weak supervision's node scores (:func:`blocks_from_node_scores`)."""
    if is_spark_connect(df):
        return packed_node_score_frame(df, block_size)
    return blocks_from_node_scores(df, n_nodes, vocab_size, block_size)


def cache_blocks(blocks, level: StorageLevel = StorageLevel.MEMORY_AND_DISK):
    """Persist the packed blocks, an RDD or a DataFrame (they are read once per EM iteration)."""
    return blocks.persist(level)


@contextmanager
def packed_blocks(blocks, level: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> Iterator:
    """Packed blocks, persisted for the ``with`` body and unpersisted when it ends, however it ends.

    The one way to hold blocks across EM passes::

        with packed_blocks(label_blocks(df, lookup, path_node, V, block_size)) as blocks:
            fit_blocks(blocks, ...)
    """
    cached = cache_blocks(blocks, level)
    try:
        yield cached
    finally:
        cached.unpersist()


# The Arrow batches a pass over packed blocks reads: a few blocks each. Spark's default batch (64 MB) holds some 60
# blocks of 4,096 documents, which the JVM converts before the task's Python worker starts on the first; with 4 MB
# batches the worker computes while the JVM converts the next. A stream of 963k 20NG documents in 292 cached blocks
# took 0.85 s at 64 MB and 0.44 s at 4 MB (the RDD pass's stream: 0.50-0.68 s); docs/BENCHMARKS.md.
BLOCK_BATCH_BYTES = 4 << 20
_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"


@contextmanager
def block_batches(spark, max_bytes: Optional[int] = None) -> Iterator[None]:
    """Arrow batches of at most ``max_bytes`` (default :data:`BLOCK_BATCH_BYTES`) for the jobs of the ``with``
    body (a pass over packed blocks).

    Sets ``spark.sql.execution.arrow.maxBytesPerBatch`` on the session (classic or Connect) for the body and
    puts it back as it was after it, however it ends (unset again when it was unset); a smaller value already
    in force is kept. A block larger than ``max_bytes`` still goes whole, in a batch of its own. Only a speed
    setting: a session that refuses it keeps its batches, and the pass runs. Other jobs of the same session
    running in the meantime (other threads) get the smaller batches too: their batch sizes change, never
    their results.
    """
    max_bytes = BLOCK_BATCH_BYTES if max_bytes is None else int(max_bytes)
    if not 0 < max_bytes < (1 << 31) - 1:
        raise ValueError(f"max_bytes={max_bytes}: Spark takes an Arrow batch size above 0 and below 2^31 - 1")
    try:
        explicit = spark.conf.get(_BATCH_BYTES, None)  # None when nobody set it
        # In force: the explicit value, or Spark's default (64 MB).
        changed = byte_size(spark.conf.get(_BATCH_BYTES)) > max_bytes
        if changed:
            spark.conf.set(_BATCH_BYTES, str(max_bytes))
    except Exception:  # noqa: BLE001 - a Spark that does not know or refuses the setting: its batches as they are
        changed = False
    if not changed:
        yield
        return
    try:
        yield
    except BaseException:
        _restore(spark, explicit, quiet=True)  # the body's error is the one to report
        raise
    _restore(spark, explicit, quiet=False)


def _restore(spark, explicit: Optional[str], quiet: bool) -> None:
    """Put :data:`_BATCH_BYTES` back: ``explicit`` as it was set, or unset (``None``)."""
    try:
        if explicit is None:
            spark.conf.unset(_BATCH_BYTES)
        else:
            spark.conf.set(_BATCH_BYTES, explicit)
    except Exception:  # noqa: BLE001 - e.g. a lost Connect channel while the body's own error propagates
        if not quiet:
            raise
