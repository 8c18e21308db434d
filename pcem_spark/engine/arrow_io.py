"""Arrow adapters: Spark's Arrow batches <-> scipy CSR matrices, with numpy only.

Spark sends a column of ml SparseVectors to Python as Arrow structs; these
functions turn them (and the label / node-score columns) into CSR arrays
without a Python object per row, and turn predictions back into Arrow
batches. No Spark imports: the functions run inside ``mapInArrow`` bodies.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.fingerprints import bag_fingerprints
from pcem_spark.core.taxonomy import PATH_KEY_SEP

__all__ = [
    "sparse_vector_arrays",
    "arrow_blocks",
    "csr_of",
    "vector_rows",
    "PredictionLayout",
    "PredictionOptions",
    "predicted_path_batches",
    "emptied_path",
    "nulled",
    "prefix_path_arrays",
    "top_paths_array",
    "node_probability_array",
    "multi_paths_array",
    "label_path_index",
    "node_score_rows",
    "weak_score_rows",
]


def sparse_vector_arrays(vectors) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices, data)`` of an Arrow column of ml SparseVectors.

    Spark sends a VectorUDT column to Arrow as its SQL struct
    ``{type, size, indices, values}``; the list offsets are the CSR row
    pointers, so no Python object is made per row.
    """
    import pyarrow.compute as pc

    kinds = np.asarray(pc.struct_field(vectors, "type").to_numpy(zero_copy_only=False))
    if kinds.size and kinds.max() != 0:
        raise ValueError("expected sparse term-count vectors, got dense vectors")
    idx = pc.struct_field(vectors, "indices")
    vals = pc.struct_field(vectors, "values")
    offsets = np.asarray(idx.offsets, dtype=np.int64)
    indptr = offsets - offsets[0]
    indices = np.asarray(idx.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    data = np.asarray(vals.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    return indptr, indices, data


def arrow_blocks(batches, block_size: int):
    """Slices of at most ``block_size`` rows of each Arrow batch (a block = one matrix product)."""
    for batch in batches:
        for start in range(0, batch.num_rows, block_size):
            yield batch.slice(start, block_size)


def csr_of(vectors, vocab_size: int) -> sp.csr_matrix:
    """(n, V) CSR matrix of an Arrow column of ml SparseVectors."""
    indptr, indices, data = sparse_vector_arrays(vectors)
    return sp.csr_matrix((data, indices, indptr), shape=(len(vectors), vocab_size))


def vector_rows(column) -> Optional[np.ndarray]:
    """(n, D) float32 of an Arrow list<float> column of equal-length vectors (checked when read), or None
    when the column is absent or no row has one. A null row (a category-name document, which has no vector)
    is zeros."""
    if column is None:
        return None
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(column)
    if n == 0:
        return None
    lengths = column.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    dim = int(lengths.max())
    if dim == 0:
        return None  # no row has a vector (a block of category-name documents)
    out = np.zeros((n, dim), np.float32)
    present = lengths > 0
    if present.any():
        values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        if not np.all(lengths[present] == dim):
            raise ValueError(f"document vectors of several lengths in one block: {sorted(set(lengths.tolist()))}")
        out[present] = values.reshape(-1, dim)
    return out


class PredictionLayout(NamedTuple):
    """What :func:`predicted_path_batches` names: the label paths, the output columns, the nodes."""

    paths: Sequence[Sequence[str]]  # the M real label paths (root-side first)
    names: Sequence[str]  # output column names
    node_names: Optional[Sequence[str]] = None  # (K,) node names (needed with min_probability > 0)
    path_nodes: Optional[np.ndarray] = None  # (M, D) node indices of each path, -1 at dummies (likewise)


class PredictionOptions(NamedTuple):
    """Extra prediction outputs (a probability-cut path prefix, the k most probable paths) and the decoder."""

    min_probability: float = 0.0  # > 0: keep a path's prefix down to its deepest node this probable
    top_k: int = 0  # > 0: a top_paths column of the k most probable paths
    beam: int = 0  # the width of the beam ``predict`` decodes with (0 = exact): its top_paths may be shorter
    node_probabilities: bool = False  # a node_probabilities column: the marginal of each node of ``path``
    multi_path: float = 0.0  # > 0: a paths column, the paths whose membership is at least this (of the top-k)
    ranked: int = 0  # how many paths the decoder ranks: >= top_k, and enough for multi_path
    fingerprint: bool = False  # a last fingerprint column: each document's bag of known words hashed
    min_in_taxonomy: float = float("-inf")  # a row whose in_taxonomy is below it gets an empty path, a null leaf


def predicted_path_batches(
    batches,
    n_keep: int,
    to_matrix,
    block_size: int,
    layout: PredictionLayout,
    predict,
    options: PredictionOptions = PredictionOptions(),
    scores=(None, None),
):
    """mapInArrow body shared by every model's prediction: Arrow in, Arrow out.

    Each batch has ``n_keep`` passthrough columns, then the documents (and, for a model fitted with
    document vectors, their vectors, given to ``predict(X, E)`` as (n, D) float32: :func:`vector_rows`):
    ``to_matrix(column)`` makes a block of them a CSR (n, V) term-count matrix
    (``functools.partial(csr_of, vocab_size=V)`` for ml SparseVectors,
    :meth:`pcem_spark.engine.python_tokens.TextFeaturizer.matrix` for text).
    Per block of ``block_size`` rows, ``predict(X)`` returns ``(best, prob)``: an index into ``layout.paths`` (real
    label paths) and a score per row. Yields the passthrough columns plus
    path, leaf and probability (named ``layout.names``); rows are never
    dropped or reordered.

    With ``options.min_probability`` > 0 or ``options.top_k`` > 0,
    ``predict(X)`` returns a :class:`pcem_spark.core.PathPredictions`.
    ``min_probability`` > 0: ``path`` is the kept prefix of the predicted path
    (``layout.node_names`` (K,) and ``layout.path_nodes`` (M, D), -1 at
    dummies, name its nodes), ``leaf`` its last node (null for an empty path),
    and a ``path_probability`` column follows the passthrough and prediction
    columns; ``top_k`` > 0: then a ``top_paths`` column (:func:`top_paths_array`);
    ``node_probabilities``: then a ``node_probabilities`` column, the
    marginal of each node of ``path`` (:func:`node_probability_array`). With
    ``options.beam`` > 0 ``predict`` is a beam decoder
    (:func:`pcem_spark.core.beam_path_details`): a row's ``top_paths`` then
    holds the at most k paths the beam scored (``top_index`` -1 pads the rest).
    ``scores`` is ``(typicality, in_taxonomy)``, each None or a function of a block:
    ``typicality(X, best)`` (n,) adds a last ``typicality`` column, NaN as null
    (:func:`pcem_spark.core.density.path_typicality`); ``options.fingerprint`` then a ``bag_fingerprint``
    column (:func:`pcem_spark.core.fingerprints.bag_fingerprints`, null for a row with no known word).
    ``in_taxonomy(X, unknown, best, path_ll)`` (n,) adds an ``in_taxonomy`` column after ``probability``
    (``path_ll``: ``predict``'s ``path_log_likelihood`` when it gives one, else None)
    (:func:`pcem_spark.core.in_taxonomy.in_taxonomy_scores`; ``to_matrix`` then returns ``(X, unknown)``, the
    rows' unknown tokens, or None for none counted); with ``options.min_in_taxonomy`` a row below it is out of
    the taxonomy: empty ``path``, null ``leaf`` (its other columns are kept).
    Everything is built per block from offsets and ``take``: no Python object per row.
    """
    import pyarrow as pa

    typicality, in_taxonomy = scores if isinstance(scores, tuple) else (scores, None)
    paths, names, node_names, path_nodes = layout
    min_probability, top_k = options.min_probability, options.top_k
    path_arr = pa.array(paths, pa.list_(pa.string()))
    leaf_arr = pa.array([p[-1] for p in paths], pa.string())
    node_arr = None if node_names is None else pa.array(list(node_names), pa.string())
    for b in arrow_blocks(batches, block_size):
        X, unknown = to_matrix(b.column(n_keep)), None
        if isinstance(X, tuple):
            X, unknown = X
        # A model fitted with document vectors reads them from the column after the documents'.
        out = predict(X) if b.num_columns <= n_keep + 1 else predict(X, vector_rows(b.column(n_keep + 1)))
        best, prob = out[0], out[1]
        take = pa.array(best, pa.int64())
        if min_probability > 0:
            path_col, leaf_col = prefix_path_arrays(node_arr, path_nodes, best, out.kept)
        else:
            path_col, leaf_col = path_arr.take(take), leaf_arr.take(take)
        cols = [b.column(i) for i in range(n_keep)] + [path_col, leaf_col, pa.array(prob, pa.float64())]
        if in_taxonomy is not None:
            # the decoder's own reading of each row's path log-likelihood when it gives one (else looked up)
            score = in_taxonomy(X, unknown, best, getattr(out, "path_log_likelihood", None))
            if options.min_in_taxonomy > -np.inf:
                out_of = score < options.min_in_taxonomy
                cols[n_keep], cols[n_keep + 1] = emptied_path(path_col, out_of), nulled(leaf_col, out_of)
            cols.append(pa.array(score, pa.float64()))
        else:
            cols.append(pa.nulls(b.num_rows, pa.float64()))
        if min_probability > 0:
            cols.append(pa.array(out.kept_probability, pa.float64()))
        if top_k > 0:
            cols.append(top_paths_array(path_arr, out.top_index[:, :top_k], out.top_probability[:, :top_k]))
        if options.node_probabilities:
            cols.append(node_probability_array(out.node_probability, out.kept))
        if options.multi_path > 0:
            # The paths' membership probabilities when the model gives them (core.multi_path), else posteriors.
            member = out.member_probability if out.member_probability is not None else out.top_probability
            cols.append(multi_paths_array(path_arr, best, out.top_index, member, options.multi_path))
        if typicality is not None:
            values = typicality(X, best)
            cols.append(pa.array(values, pa.float64(), mask=np.isnan(values)))
        if options.fingerprint:
            values, empty = bag_fingerprints(X)
            cols.append(pa.array(values, pa.int64(), mask=empty))
        yield pa.RecordBatch.from_arrays(cols, names=names)


def emptied_path(paths, empty: np.ndarray):
    """Arrow ``list<string>`` ``paths`` with the rows where ``empty`` (n,) bool holds made empty lists."""
    import pyarrow as pa

    paths = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    offsets = np.asarray(paths.offsets, dtype=np.int64)
    lengths = np.where(empty, 0, np.diff(offsets))
    keep = np.repeat(~np.asarray(empty, dtype=bool), np.diff(offsets))
    values = paths.flatten().filter(pa.array(keep)) if len(keep) else paths.flatten()
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(new_offsets, pa.int32()), values)


def nulled(column, null: np.ndarray):
    """Arrow ``column`` with the rows where ``null`` (n,) bool holds set to null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pa.array(np.asarray(null, dtype=bool)), pa.scalar(None, column.type), column)


def multi_paths_array(path_arr, best: np.ndarray, top_index: np.ndarray, top_probability: np.ndarray, p: float):
    """Arrow ``list<list<string>>``: each row's predicted path, then every other path of its top-k >= ``p``.

    ``top_index`` / ``top_probability`` (n, k), most probable first (-1 pads
    a beam's shorter rows); ``k`` must hold every path >= ``p``
    (:func:`pcem_spark.core.calibration.paths_at_least`).
    """
    import pyarrow as pa

    best = np.asarray(best, dtype=np.int64)
    index = np.asarray(top_index, dtype=np.int64)
    more = (index >= 0) & (np.asarray(top_probability) >= p) & (index != best[:, None])
    picked = np.concatenate([best[:, None], np.where(more, index, -1)], axis=1)
    keep = picked >= 0
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    values = path_arr.take(pa.array(picked[keep], pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def node_probability_array(node_probability: np.ndarray, kept: Optional[np.ndarray] = None):
    """Arrow ``list<double>``: each row's node marginals along its path (NaN = a dummy: not a node of the path).

    ``node_probability`` (n, D), root first; ``kept`` (n,) or None: only the
    first ``kept[i]`` (the abstained prefix) are the row's.
    """
    import pyarrow as pa

    real = ~np.isnan(node_probability)
    if kept is not None:
        real &= np.arange(node_probability.shape[1])[None, :] < np.asarray(kept, dtype=np.int64)[:, None]
    offsets = np.concatenate([[0], np.cumsum(real.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(node_probability[real], pa.float64()))


def prefix_path_arrays(node_arr, path_nodes: np.ndarray, best: np.ndarray, kept: np.ndarray):
    """Arrow ``path`` (list<string>) and ``leaf`` (string, null where nothing is kept) of kept prefixes.

    Row i's path is the first ``kept[i]`` nodes of path ``best[i]``
    (``path_nodes`` (M, D) node indices into ``node_arr``, an Arrow string
    array of the K node names); built from offsets, no Python list per row.
    """
    import pyarrow as pa

    best = np.asarray(best, dtype=np.int64)
    kept = np.asarray(kept, dtype=np.int64)
    nodes = path_nodes[best]  # (n, D)
    mask = np.arange(nodes.shape[1])[None, :] < kept[:, None]
    values = node_arr.take(pa.array(nodes[mask], pa.int64()))  # row-major: each row's prefix in order
    offsets = pa.array(np.concatenate([[0], np.cumsum(kept)]).astype(np.int32), pa.int32())
    paths = pa.ListArray.from_arrays(offsets, values)
    last = nodes[np.arange(len(best)), np.maximum(kept - 1, 0)] if len(best) else np.zeros(0, np.int64)
    leaf = node_arr.take(pa.array(np.maximum(last, 0), pa.int64(), mask=kept == 0))
    return paths, leaf


def top_paths_array(path_arr, top_index: np.ndarray, top_probability: np.ndarray):
    """Arrow ``list<struct<path: list<string>, probability: double>>``: each row's k best paths.

    ``path_arr`` is the Arrow list array of the M real label paths;
    ``top_index`` / ``top_probability`` (n, k) from
    :func:`pcem_spark.core.top_k_paths` (or a beam's, where -1 marks no path:
    that row's list is shorter).
    """
    import pyarrow as pa

    n, k = top_index.shape
    index = np.asarray(top_index, dtype=np.int64).ravel()
    probability = np.asarray(top_probability, dtype=np.float64).ravel()
    if (index < 0).any():
        valid = index >= 0
        offsets = np.concatenate([[0], np.cumsum(valid.reshape(n, k).sum(axis=1))])
        index, probability = index[valid], probability[valid]
    else:
        offsets = np.arange(n + 1) * k
    flat_paths = path_arr.take(pa.array(index, pa.int64()))
    entries = pa.StructArray.from_arrays(
        [flat_paths, pa.array(probability, pa.float64())],
        names=["path", "probability"],
    )
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), pa.int32()), entries)


def label_path_index(labels, path_keys) -> np.ndarray:
    """Path index of each label list (``-1`` for null = unlabelled), vectorised with Arrow compute."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # Spark marks the element type non-nullable, which binary_join has no kernel for.
    joined = pc.binary_join(labels.cast(pa.list_(pa.string())), PATH_KEY_SEP)
    found = pc.index_in(joined, value_set=pa.array(path_keys, pa.string()))
    idx = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    unknown = np.asarray(labels.is_valid().to_numpy(zero_copy_only=False)) & (idx < 0)
    if unknown.any():
        bad = labels[int(np.flatnonzero(unknown)[0])].as_py()
        raise ValueError(f"label path {bad} is not a path of the taxonomy (validate labels before packing)")
    return idx


def node_score_rows(labels, path_keys, path_nodes: np.ndarray):
    """CSR ``(indptr, indices, data)`` node scores of true label paths (null = no row entries).

    ``labels``: an Arrow ``list<string>`` column (one path per row) or
    ``list<list<string>>`` (several). A row with ``k`` paths is ``k``
    documents of weight ``1/k``: each path's nodes get ``1/k``, summed where
    the paths share a node, so every score stays linear in the paths and a
    one-path row is scored exactly as in the flat shape.
    """
    import pyarrow as pa

    d = path_nodes.shape[1]
    if not pa.types.is_list(labels.type.value_type) and not pa.types.is_large_list(labels.type.value_type):
        q = label_path_index(labels, path_keys)
        lab = q >= 0
        indptr = np.concatenate([[0], np.cumsum(np.where(lab, d, 0))]).astype(np.int64)
        indices = path_nodes[q[lab]].ravel().astype(np.int32)
        return indptr, indices, np.ones(len(indices))
    import pyarrow.compute as pc

    n_paths = np.asarray(pc.list_value_length(labels).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    q = label_path_index(pc.list_flatten(labels), path_keys)
    if (q < 0).any():  # a null path inside a document's list: validate labels before packing
        raise ValueError("a label path inside a list of paths is null (validate labels before packing)")
    rows = np.repeat(np.arange(len(n_paths)), n_paths)
    weights = np.repeat(1.0 / np.maximum(n_paths, 1), n_paths)
    m = sp.csr_matrix(
        (np.repeat(weights, d), (np.repeat(rows, d), path_nodes[q].ravel())),
        shape=(len(n_paths), int(path_nodes.max(initial=-1)) + 1),
    )  # duplicates (shared nodes) summed
    m.sort_indices()
    return m.indptr.astype(np.int64), m.indices.astype(np.int32), m.data


def weak_score_rows(scores):
    """CSR node scores from an Arrow list<double> column of K scores per row (null = unlabelled)."""
    import pyarrow.compute as pc

    lengths = np.asarray(pc.list_value_length(scores).fill_null(0).to_numpy(zero_copy_only=False))
    flat = np.asarray(scores.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    k = int(lengths.max()) if lengths.size else 0
    dense = np.zeros((len(lengths), k))
    rows = lengths > 0
    if rows.any():
        dense[rows] = flat.reshape(-1, k)
    m = sp.csr_matrix(dense)
    return m.indptr.astype(np.int64), m.indices.astype(np.int32), m.data
