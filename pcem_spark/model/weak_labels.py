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

import logging
from typing import Collection, Dict, List, NamedTuple, Sequence

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.similarity import (
    _MAX_NAMES,
    _add_descendants,
    _more,
    _require_usable_node_per_depth,
    argmax_node_scores,
    best_path_node_scores,
    empty_description_nodes,
    idf_weights,
    soft_node_scores,
    tfidf_rows,
    to_taxonomy_columns,
)
from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.engine.arrow_io import arrow_blocks, csr_of
from pcem_spark.engine.shipping import ship
from pcem_spark.errors import InputError

__all__ = ["WeakLabelSettings", "description_matrix", "weak_columns", "weak_label_from_similarities", "weak_label"]

log = logging.getLogger(__name__)


class WeakLabelSettings(NamedTuple):
    """How :func:`weak_label` turns similarities into node scores."""

    mode: str = "argmax"  # argmax (the paper's rule) | soft | path
    min_similarity: float = 0.0  # no weak label unless every depth's best similarity is above this
    block_size: int = 4096  # documents scored per sparse x dense product


def description_matrix(
    spark, descriptions: Dict[str, str], vocabulary: List[str], feature_settings, nodes: List[str], taxonomy: Taxonomy
) -> sp.csr_matrix:
    """(C, V) term counts of each node's description plus its descendants' descriptions.

    ``nodes`` (length C) are the real nodes; a node absent from
    ``descriptions`` contributes no words of its own. A row with no word of
    the vocabulary is logged as a warning naming the node and stays all
    zero: that node gets no weak label (its similarity is 0 for every
    document) while the rest of the run goes on. Raises a
    :class:`TaxonomyError` only when some depth has no usable node, since the
    per-depth rule would then leave every document without a weak label.
    """
    out = _add_descendants(
        _own_description_counts(spark, descriptions, vocabulary, feature_settings, nodes), nodes, taxonomy
    )
    empty = empty_description_nodes(out, nodes)
    if empty:
        _warn_empty_descriptions(empty, descriptions, feature_settings)
        _require_usable_node_per_depth(empty, nodes, taxonomy)
    return out


def _own_description_counts(
    spark, descriptions: Dict[str, str], vocabulary: List[str], feature_settings, nodes: List[str]
) -> sp.csr_matrix:
    """(C, V) term counts of each node's own description (zero row when it has none)."""
    from pcem_spark.engine.features import featurize

    rows = [(n, descriptions[n]) for n in nodes if n in descriptions]
    out = sp.lil_matrix((len(nodes), len(vocabulary)))
    if not rows:
        return out.tocsr()
    df = featurize(spark.createDataFrame(rows, "id string, text string"), vocabulary, feature_settings)
    vecs = {r["id"]: r["features"] for r in df.collect()}  # C description rows, never documents
    for i, n in enumerate(nodes):
        v = vecs.get(n)
        if v is not None:
            out[i, v.indices] = v.values
    return out.tocsr()


def _warn_empty_descriptions(empty: List[str], descriptions: Dict[str, str], feature_settings) -> None:
    """One warning naming the nodes without a vocabulary word, their text, and the settings that dropped it."""
    shown = ", ".join(f"{n!r} ({_clip(descriptions.get(n, ''))!r})" for n in empty[:_MAX_NAMES])
    log.warning(
        "label descriptions: %d node(s) have no word of the vocabulary in their description (nor in their "
        "descendants'): %s%s. They get no weak label and the run goes on without them, so the model learns "
        "them (if at all) only through EM. To fix: use words in those descriptions that occur in at least "
        "features.min_df=%g and at most features.max_df=%g of the documents (e.g. frequent words of those "
        "classes' documents), or relax features.min_df / max_df / vocab_size=%d.",
        len(empty),
        shown,
        _more(empty),
        feature_settings.min_df,
        feature_settings.max_df,
        feature_settings.vocab_size,
    )


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def weak_columns(
    sims: np.ndarray,
    nodes: List[str],
    depths: Sequence[int],
    by_depth,
    taxonomy: Taxonomy,
    mode: str,
    min_similarity: float,
    excluded: Collection[str] = (),
):
    """Arrow columns ``node_scores`` (list<double> over taxonomy.nodes) and ``weak_path`` from (n, C)
    similarities; rows without a confident weak label are null in both. ``excluded`` nodes (no usable
    description) are never on a ``path``-mode weak label."""
    import pyarrow as pa

    hard = argmax_node_scores(sims, depths, min_similarity)
    has = hard.sum(axis=1) > 0
    if mode == "path":
        cols_k, best_path = best_path_node_scores(sims, nodes, taxonomy, excluded)
        cols_k[~has] = 0.0
    else:
        node_sc = hard if mode == "argmax" else soft_node_scores(sims, depths, min_similarity)
        cols_k = to_taxonomy_columns(node_sc, nodes, taxonomy)
    n, k = cols_k.shape
    # Built column-wise: list offsets + flat values + a null mask.
    scores = pa.ListArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32) * k), pa.array(cols_k.ravel()), mask=pa.array(~has)
    )
    if mode == "path":
        col = {nd: i for i, nd in enumerate(nodes)}
        real_paths = np.array(
            [
                [col[nd] for nd in taxonomy.real_path(j)]
                + [col[taxonomy.real_path(j)[-1]]] * (taxonomy.depth - len(taxonomy.real_path(j)))
                for j in range(taxonomy.n_paths)
            ]
        )
        best = real_paths[best_path]
    else:
        best = np.stack([c[np.argmax(sims[:, c], axis=1)] for c in by_depth], axis=1)
    names = np.asarray(nodes, dtype=object)[best].ravel()
    paths = pa.ListArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32) * best.shape[1]), pa.array(names, pa.string()), mask=pa.array(~has)
    )
    return scores, paths


def weak_label_from_similarities(
    df,
    taxonomy: Taxonomy,
    mode: str = "argmax",
    min_similarity: float = 0.0,
    block_size: int = 4096,
    similarities_col: str = "similarities",
):
    """Weak labels from a precomputed ``similarities`` map<string,double> column (node -> score).

    Same outputs as :func:`weak_label`; a row with a null or empty map stays
    unlabelled, a missing node counts as similarity 0, and a key that is not
    a node of the taxonomy is an error naming it.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if mode not in ("argmax", "soft", "path"):
        raise InputError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
    nodes = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depths = [taxonomy.node_depth(n) for n in nodes]
    # Distinct keys only reach the driver (bounded by the similarity model's classes).
    keys = [r[0] for r in df.select(F.explode(F.map_keys(similarities_col))).distinct().limit(10001).collect()]
    unknown = sorted(set(keys) - set(nodes))
    if unknown:
        raise TaxonomyError(f"column {similarities_col!r} scores node(s) that are not in the taxonomy: {unknown[:10]}")
    sims = F.when(
        F.size(similarities_col) > 0,
        F.array(*[F.coalesce(F.element_at(F.col(similarities_col), F.lit(n)), F.lit(0.0)) for n in nodes]),
    )
    src = df.withColumn("_sims", sims)
    out_schema = T.StructType(
        [f for f in src.schema.fields if f.name != "_sims"]
        + [
            T.StructField("node_scores", T.ArrayType(T.DoubleType(), False), True),
            T.StructField("weak_path", T.ArrayType(T.StringType(), False), True),
        ]
    )
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
            yield pa.RecordBatch.from_arrays(keep + [scores, paths], names=[f.name for f in out_schema.fields])

    return src.mapInArrow(score, out_schema)


def weak_label(
    df,
    vocabulary: List[str],
    feature_settings,
    taxonomy: Taxonomy,
    descriptions: Dict[str, str],
    settings: WeakLabelSettings = WeakLabelSettings(),
    features_col: str = "features",
):
    """Add ``node_scores`` (array<double> over ``taxonomy.nodes``, null = no weak label) and
    ``weak_path`` (the most similar real node per depth, null likewise) to a featurised DataFrame.

    IDF is fitted on ``df`` itself (its document frequencies).
    """
    from pyspark.ml.feature import IDF
    from pyspark.sql import types as T

    mode, min_similarity, block_size = settings
    if mode not in ("argmax", "soft", "path"):
        raise InputError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
    spark = df.sparkSession
    idf_model = IDF(inputCol=features_col, outputCol="_idf").fit(df)
    idf = idf_weights(np.asarray(idf_model.docFreq), int(idf_model.numDocs))
    nodes = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depths = [taxonomy.node_depth(n) for n in nodes]
    D = description_matrix(spark, descriptions, vocabulary, feature_settings, nodes, taxonomy)
    excluded = frozenset(empty_description_nodes(D, nodes))
    desc_unit = tfidf_rows(D, idf)
    bc = ship(spark, (idf, desc_unit, nodes, depths, excluded), "the label descriptions' tf-idf vectors")
    out_schema = T.StructType(
        list(df.schema.fields)
        + [
            T.StructField("node_scores", T.ArrayType(T.DoubleType(), False), True),
            T.StructField("weak_path", T.ArrayType(T.StringType(), False), True),
        ]
    )
    feat_pos = df.columns.index(features_col)
    V = len(vocabulary)

    def score(batches):
        import pyarrow as pa

        idf_b, desc_b, nodes_b, depths_b, excluded_b = bc.value
        by_depth = [np.flatnonzero(np.asarray(depths_b) == lvl) for lvl in range(1, max(depths_b) + 1)]
        for b in arrow_blocks(batches, block_size):
            X = csr_of(b.column(feat_pos), V)
            sims = np.asarray((tfidf_rows(X, idf_b) @ desc_b.T).todense())
            scores, paths = weak_columns(sims, nodes_b, depths_b, by_depth, taxonomy, mode, min_similarity, excluded_b)
            yield pa.RecordBatch.from_arrays(
                list(b.columns) + [scores, paths], names=[f.name for f in out_schema.fields]
            )

    return df.mapInArrow(score, out_schema)
