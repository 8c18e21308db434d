"""Weak supervision from label descriptions: the math, as pure numpy functions.

The paper's dataless setting (Section 4.2): a document's node score is 1 for
the node with the largest similarity among the classes of each depth, and
path scores follow Eq. 2. Here documents and node descriptions share one
TF-IDF space (IDF fitted on the corpus) and similarity is cosine.

Shapes: ``n`` documents, ``V`` vocabulary, ``C`` described (real) nodes,
``K`` taxonomy nodes with dummies (the engine's node-score columns).

On Spark (:func:`weak_label`) the description matrix and IDF are broadcast
and each Arrow batch of documents is scored as one sparse x dense product.
"""

from __future__ import annotations

import json
from typing import Dict, List, Sequence

import numpy as np
import scipy.sparse as sp

from .engine import arrow_blocks, csr_of
from .taxonomy import Taxonomy, TaxonomyError


def load_descriptions(path: str, taxonomy: Taxonomy) -> Dict[str, str]:
    """Read a JSON object node -> description and check it against the taxonomy.

    Every real (non-dummy, non-root) node needs a non-empty description; a
    node that is not in the taxonomy is an error naming it.
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise TaxonomyError(f"{path}: cannot read label descriptions ({exc})") from None
    return check_descriptions(obj, taxonomy, where=path)


def check_descriptions(obj, taxonomy: Taxonomy, where: str = "descriptions") -> Dict[str, str]:
    """Validate a parsed node -> description mapping against the taxonomy (see :func:`load_descriptions`)."""
    path = where
    if not isinstance(obj, dict):
        raise TaxonomyError(f"{path}: expected a JSON object node -> description text")
    unknown = sorted(set(obj) - set(taxonomy.real_nodes))
    if unknown:
        raise TaxonomyError(f"{path}: description for node(s) not in the taxonomy: {unknown[:10]}")
    missing = sorted(n for n in taxonomy.real_nodes if not str(obj.get(n) or "").strip())
    if missing:
        raise TaxonomyError(f"{path}: no description for node(s) {missing[:10]}")
    return {n: str(obj[n]) for n in obj}


def idf_weights(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """Smoothed inverse document frequency ``log((1 + N) / (1 + df)) + 1``, shape (V,)."""
    doc_freq = np.asarray(doc_freq, dtype=np.float64)
    return np.log((1.0 + n_docs) / (1.0 + doc_freq)) + 1.0


def tfidf_rows(X, idf: np.ndarray) -> sp.csr_matrix:
    """L2-normalised TF-IDF rows of a count matrix (n, V); all-zero rows stay zero."""
    X = sp.csr_matrix(X, dtype=np.float64).multiply(idf[None, :]).tocsr()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return sp.csr_matrix(sp.diags(scale) @ X)


def cosine_similarities(X, idf: np.ndarray, descriptions) -> np.ndarray:
    """Cosine similarity of each document to each description, shape (n, C).

    ``descriptions`` is the (C, V) count matrix of the node descriptions.
    """
    docs = tfidf_rows(X, idf)
    desc = tfidf_rows(descriptions, idf)
    return np.asarray((docs @ desc.T).todense())


def argmax_node_scores(sims: np.ndarray, node_depths: Sequence[int], min_similarity: float = 0.0) -> np.ndarray:
    """The paper's rule: per depth, node score 1 for the most similar node.

    Parameters
    ----------
    sims : (n, C) similarities of the described nodes
    node_depths : length C, the depth of each column
    min_similarity : a document whose best similarity at some depth is not
        above this gets no weak label at all (an all-zero row): with no known
        word every similarity is 0, and an arbitrary argmax would be noise.

    Returns
    -------
    (n, C) array of 0/1 node scores.
    """
    sims = np.asarray(sims, dtype=np.float64)
    depths = np.asarray(node_depths)
    out = np.zeros_like(sims)
    confident = np.ones(len(sims), dtype=bool)
    for level in np.unique(depths):
        cols = np.flatnonzero(depths == level)
        best = cols[np.argmax(sims[:, cols], axis=1)]
        out[np.arange(len(sims)), best] = 1.0
        confident &= sims[np.arange(len(sims)), best] > min_similarity
    out[~confident] = 0.0
    return out


def soft_node_scores(sims: np.ndarray, node_depths: Sequence[int], min_similarity: float = 0.0) -> np.ndarray:
    """Similarities normalised to sum to 1 within each depth (the soft option)."""
    sims = np.clip(np.asarray(sims, dtype=np.float64), 0.0, None)
    depths = np.asarray(node_depths)
    out = np.zeros_like(sims)
    confident = np.ones(len(sims), dtype=bool)
    for level in np.unique(depths):
        cols = np.flatnonzero(depths == level)
        block = sims[:, cols]
        total = block.sum(axis=1, keepdims=True)
        out[:, cols] = np.divide(block, total, out=np.zeros_like(block), where=total > 0)
        confident &= block.max(axis=1) > min_similarity
    out[~confident] = 0.0
    return out


def to_taxonomy_columns(node_scores: np.ndarray, nodes: List[str], taxonomy: Taxonomy) -> np.ndarray:
    """Place (n, C) scores of real nodes into the engine's (n, K) node columns.

    A dummy node inherits the score of the real leaf it pads, so a document
    weakly labelled with a shallow leaf scores its whole padded path.
    """
    out = np.zeros((node_scores.shape[0], taxonomy.n_nodes))
    col = {n: i for i, n in enumerate(nodes)}
    for k, node in enumerate(taxonomy.nodes):
        real = node.split("#dummy")[0] if node not in taxonomy.real_nodes else node
        if real in col:
            out[:, k] = node_scores[:, col[real]]
    return out


def description_matrix(spark, descriptions: Dict[str, str], vocabulary: List[str], feature_settings,
                       nodes: List[str], taxonomy: Taxonomy) -> sp.csr_matrix:
    """(C, V) term counts of each node's description plus its descendants' descriptions."""
    from .features import featurize
    rows = [(n, descriptions[n]) for n in nodes]
    df = featurize(spark.createDataFrame(rows, "id string, text string"), vocabulary, feature_settings)
    vecs = {r["id"]: r["features"] for r in df.collect()}  # C description rows, never documents
    out = sp.lil_matrix((len(nodes), len(vocabulary)))
    for i, n in enumerate(nodes):
        v = vecs[n]
        out[i, v.indices] = v.values
    out = out.tocsr()
    # A class means its subclasses too: a node's vector is its own description
    # plus its descendants' (measured on 20NG, 1%: coverage of the weak labels
    # rises from 49% with own descriptions only; see docs/RESULTS.md).
    index = {n: i for i, n in enumerate(nodes)}
    agg = sp.lil_matrix(out.shape)
    for i, n in enumerate(nodes):
        stack, rows = [n], []
        while stack:
            cur = stack.pop()
            if cur in index:
                rows.append(index[cur])
            stack.extend(taxonomy.children(cur))
        agg[i] = out[rows].sum(axis=0)
    out = agg.tocsr()
    empty = [n for i, n in enumerate(nodes) if out[i].nnz == 0]
    if empty:
        raise TaxonomyError(f"descriptions of {empty[:10]} have no word of the vocabulary; "
                            "use words that occur in the corpus")
    return out


def weak_columns(sims: np.ndarray, nodes: List[str], depths: Sequence[int], by_depth, taxonomy: Taxonomy,
                 mode: str, min_similarity: float):
    """Arrow columns ``node_scores`` (list<double> over taxonomy.nodes) and ``weak_path`` from (n, C)
    similarities; rows without a confident weak label are null in both."""
    import pyarrow as pa
    hard = argmax_node_scores(sims, depths, min_similarity)
    has = hard.sum(axis=1) > 0
    if mode == "path":
        cols_k, best_path = best_path_node_scores(sims, nodes, taxonomy)
        cols_k[~has] = 0.0
    else:
        node_sc = hard if mode == "argmax" else soft_node_scores(sims, depths, min_similarity)
        cols_k = to_taxonomy_columns(node_sc, nodes, taxonomy)
    n, k = cols_k.shape
    # Built column-wise: list offsets + flat values + a null mask.
    scores = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * k),
                                      pa.array(cols_k.ravel()), mask=pa.array(~has))
    if mode == "path":
        col = {nd: i for i, nd in enumerate(nodes)}
        real_paths = np.array([[col[nd] for nd in taxonomy.real_path(j)] +
                               [col[taxonomy.real_path(j)[-1]]] * (taxonomy.depth - len(taxonomy.real_path(j)))
                               for j in range(taxonomy.n_paths)])
        best = real_paths[best_path]
    else:
        best = np.stack([c[np.argmax(sims[:, c], axis=1)] for c in by_depth], axis=1)
    names = np.asarray(nodes, dtype=object)[best].ravel()
    paths = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * best.shape[1]),
                                     pa.array(names, pa.string()), mask=pa.array(~has))
    return scores, paths


def best_path_node_scores(sims: np.ndarray, nodes: List[str], taxonomy: Taxonomy):
    """The ``path`` option: the path whose real nodes have the largest summed similarity.

    Unlike the per-depth argmax, the chosen nodes always form one path of the
    tree. Returns ((n, K) node scores of that path, (n,) path index).
    """
    col = {nd: i for i, nd in enumerate(nodes)}
    member = np.zeros((len(nodes), taxonomy.n_paths))
    for j in range(taxonomy.n_paths):
        for nd in taxonomy.real_path(j):
            member[col[nd], j] = 1.0
    best = np.argmax(sims @ member, axis=1)
    return taxonomy.path_node_matrix()[best], best


def weak_label_from_similarities(df, taxonomy: Taxonomy, mode: str = "argmax", min_similarity: float = 0.0,
                                 block_size: int = 4096, similarities_col: str = "similarities"):
    """Weak labels from a precomputed ``similarities`` map<string,double> column (node -> score).

    Same outputs as :func:`weak_label`; a row with a null or empty map stays
    unlabelled, a missing node counts as similarity 0, and a key that is not
    a node of the taxonomy is an error naming it.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if mode not in ("argmax", "soft", "path"):
        raise ValueError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
    nodes = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depths = [taxonomy.node_depth(n) for n in nodes]
    # Distinct keys only reach the driver (bounded by the similarity model's classes).
    keys = [r[0] for r in df.select(F.explode(F.map_keys(similarities_col))).distinct().limit(10001).collect()]
    unknown = sorted(set(keys) - set(nodes))
    if unknown:
        raise TaxonomyError(f"column {similarities_col!r} scores node(s) that are not in the taxonomy: {unknown[:10]}")
    sims = F.when(F.size(similarities_col) > 0, F.array(*[
        F.coalesce(F.element_at(F.col(similarities_col), F.lit(n)), F.lit(0.0)) for n in nodes]))
    src = df.withColumn("_sims", sims)
    out_schema = T.StructType([f for f in src.schema.fields if f.name != "_sims"] + [
        T.StructField("node_scores", T.ArrayType(T.DoubleType(), False), True),
        T.StructField("weak_path", T.ArrayType(T.StringType(), False), True)])
    pos = src.columns.index("_sims")
    C = len(nodes)

    def score(batches):
        import pyarrow as pa
        by_depth = [np.flatnonzero(np.asarray(depths) == lvl) for lvl in range(1, max(depths) + 1)]
        for b in arrow_blocks(batches, block_size):
            col = b.column(pos)
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
            flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
            sims_np = np.zeros((b.num_rows, C))
            sims_np[valid] = flat.reshape(-1, C)
            scores, paths = weak_columns(sims_np, nodes, depths, by_depth, taxonomy, mode, min_similarity)
            keep = [b.column(i) for i in range(b.num_columns) if i != pos]
            yield pa.RecordBatch.from_arrays(keep + [scores, paths],
                                             names=[f.name for f in out_schema.fields])

    return src.mapInArrow(score, out_schema)


def weak_label(df, vocabulary: List[str], feature_settings, taxonomy: Taxonomy,
               descriptions: Dict[str, str], mode: str = "argmax", min_similarity: float = 0.0,
               block_size: int = 4096, features_col: str = "features"):
    """Add ``node_scores`` (array<double> over ``taxonomy.nodes``, null = no weak label) and
    ``weak_path`` (the most similar real node per depth, null likewise) to a featurised DataFrame.

    IDF is fitted on ``df`` itself (its document frequencies).
    """
    from pyspark.ml.feature import IDF
    from pyspark.sql import types as T


    if mode not in ("argmax", "soft", "path"):
        raise ValueError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
    spark = df.sparkSession
    idf_model = IDF(inputCol=features_col, outputCol="_idf").fit(df)
    idf = idf_weights(np.asarray(idf_model.docFreq), int(idf_model.numDocs))
    nodes = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depths = [taxonomy.node_depth(n) for n in nodes]
    D = description_matrix(spark, descriptions, vocabulary, feature_settings, nodes, taxonomy)
    desc_unit = tfidf_rows(D, idf)
    bc = spark.sparkContext.broadcast((idf, desc_unit, nodes, depths))
    out_schema = T.StructType(list(df.schema.fields) + [
        T.StructField("node_scores", T.ArrayType(T.DoubleType(), False), True),
        T.StructField("weak_path", T.ArrayType(T.StringType(), False), True)])
    feat_pos = df.columns.index(features_col)
    V = len(vocabulary)

    def score(batches):
        import pyarrow as pa
        idf_b, desc_b, nodes_b, depths_b = bc.value
        by_depth = [np.flatnonzero(np.asarray(depths_b) == lvl) for lvl in range(1, max(depths_b) + 1)]
        for b in arrow_blocks(batches, block_size):
            X = csr_of(b.column(feat_pos), V)
            sims = np.asarray((tfidf_rows(X, idf_b) @ desc_b.T).todense())
            scores, paths = weak_columns(sims, nodes_b, depths_b, by_depth, taxonomy, mode, min_similarity)
            yield pa.RecordBatch.from_arrays(list(b.columns) + [scores, paths],
                                             names=[f.name for f in out_schema.fields])

    return df.mapInArrow(score, out_schema)
