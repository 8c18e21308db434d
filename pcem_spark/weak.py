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
import logging
from typing import Collection, Dict, List, Sequence

import numpy as np
import scipy.sparse as sp

from .engine import arrow_blocks, csr_of
from .taxonomy import DUMMY_SEP, Taxonomy, TaxonomyError, closest_name
from .errors import InputError

log = logging.getLogger(__name__)

# Node names listed in one message at most (the count of the rest follows).
_MAX_NAMES = 20


def load_descriptions(path: str, taxonomy: Taxonomy) -> Dict[str, str]:
    """Read a JSON object node -> description and check it against the taxonomy (:func:`check_descriptions`)."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise TaxonomyError(f"{path}: cannot read label descriptions ({exc})") from None
    return check_descriptions(obj, taxonomy, where=path)


def check_descriptions(obj, taxonomy: Taxonomy, where: str = "descriptions") -> Dict[str, str]:
    """Validate a parsed node -> description mapping against the taxonomy.

    Returns a dict node -> description text for the described nodes of the
    taxonomy (``where`` names the file or Param in every message):

    * a node that is not in the taxonomy (e.g. a class the training data
      lacks when the taxonomy is inferred): logged warning, ignored;
    * an inner node with no description: logged warning; its vector is then
      its descendants' descriptions only (:func:`description_matrix` always
      adds those, so the node still has words -- unlike in the paper, where
      every node has its own description);
    * a leaf with no description: :class:`TaxonomyError` naming the leaves.
      Such a leaf could never get a weak label, and the fix is one line of
      the file, so failing before training is the cheaper outcome.
    """
    if not isinstance(obj, dict):
        raise TaxonomyError(f"{where}: expected a JSON object node -> description text")
    known = set(taxonomy.real_nodes)
    if taxonomy.root in obj:
        # The root is not a class (no similarity column): nothing to warn about.
        log.info("%s: the description of the root %r is not used (the root is not a class)", where, taxonomy.root)
    unknown = sorted(set(obj) - known - {taxonomy.root})
    if unknown:
        hints = [f"{n!r}" + (f" (did you mean {g!r}?)" if (g := closest_name(n, sorted(known))) else "")
                 for n in unknown[:_MAX_NAMES]]
        log.warning("%s: %d description(s) for node(s) that are not in the taxonomy are ignored: %s%s. "
                    "Correct the node name in %s if it is a typo. A taxonomy inferred from the labels lacks "
                    "the classes no document is labelled with: pass --taxonomy FILE to keep them.",
                    where, len(unknown), ", ".join(hints), _more(unknown), where)
    missing = sorted((n for n in known if not _text(obj.get(n))), key=lambda n: (taxonomy.node_depth(n), n))
    leaves = set(taxonomy.leaves)
    missing_leaves = [n for n in missing if n in leaves]
    if missing_leaves:
        raise TaxonomyError(
            f"{where}: no description for leaf node(s) {missing_leaves[:_MAX_NAMES]}{_more(missing_leaves)} "
            f"({len(missing_leaves)} of {len(leaves)} leaves): a leaf without a description can never get a "
            f"weak label. Add a line \"{missing_leaves[0]}\": \"a few words typical of its documents\" for each "
            f"to {where}, or remove those leaves from the taxonomy")
    missing_inner = [n for n in missing if n not in leaves]
    if missing_inner:
        log.warning("%s: no description for inner node(s) %s%s: each is described by its descendants' "
                    "descriptions only. Add own descriptions to %s to follow the paper's setup.",
                    where, missing_inner[:_MAX_NAMES], _more(missing_inner), where)
    return {n: _text(v) for n, v in obj.items() if n in known and _text(v)}


def _text(value) -> str:
    """A description as stripped text ("" for null/blank)."""
    return str(value).strip() if value is not None else ""


def _more(names: Sequence) -> str:
    """The suffix ``" (+N more)"`` when a message lists only the first ``_MAX_NAMES`` of ``names``."""
    return f" (+{len(names) - _MAX_NAMES} more)" if len(names) > _MAX_NAMES else ""


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
        real = node.split(DUMMY_SEP)[0] if node not in taxonomy.real_nodes else node
        if real in col:
            out[:, k] = node_scores[:, col[real]]
    return out


def description_matrix(spark, descriptions: Dict[str, str], vocabulary: List[str], feature_settings,
                       nodes: List[str], taxonomy: Taxonomy) -> sp.csr_matrix:
    """(C, V) term counts of each node's description plus its descendants' descriptions.

    ``nodes`` (length C) are the real nodes; a node absent from
    ``descriptions`` contributes no words of its own. A row with no word of
    the vocabulary is logged as a warning naming the node and stays all
    zero: that node gets no weak label (its similarity is 0 for every
    document) while the rest of the run goes on. Raises a
    :class:`TaxonomyError` only when some depth has no usable node, since the
    per-depth rule would then leave every document without a weak label.
    """
    out = _add_descendants(_own_description_counts(spark, descriptions, vocabulary, feature_settings, nodes),
                           nodes, taxonomy)
    empty = empty_description_nodes(out, nodes)
    if empty:
        _warn_empty_descriptions(empty, descriptions, feature_settings)
        _require_usable_node_per_depth(empty, nodes, taxonomy)
    return out


def _own_description_counts(spark, descriptions: Dict[str, str], vocabulary: List[str], feature_settings,
                            nodes: List[str]) -> sp.csr_matrix:
    """(C, V) term counts of each node's own description (zero row when it has none)."""
    from .features import featurize
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


def _add_descendants(own: sp.csr_matrix, nodes: List[str], taxonomy: Taxonomy) -> sp.csr_matrix:
    """Each row plus the rows of the node's descendants, shape (C, V).

    A class means its subclasses too (measured on 20NG, 1%: coverage of the
    weak labels rises from 49% with own descriptions only; see
    docs/RESULTS.md). A leaf has no descendants, so an empty leaf stays empty.
    """
    index = {n: i for i, n in enumerate(nodes)}
    agg = sp.lil_matrix(own.shape)
    for i, n in enumerate(nodes):
        stack, rows = [n], []
        while stack:
            cur = stack.pop()
            if cur in index:
                rows.append(index[cur])
            stack.extend(taxonomy.children(cur))
        agg[i] = own[rows].sum(axis=0)
    return agg.tocsr()


def empty_description_nodes(D: sp.csr_matrix, nodes: List[str]) -> List[str]:
    """Nodes whose row of the (C, V) description matrix has no word (they can get no weak label)."""
    total = np.asarray(abs(sp.csr_matrix(D)).sum(axis=1)).ravel()
    return [n for n, t in zip(nodes, total) if t == 0]


def _warn_empty_descriptions(empty: List[str], descriptions: Dict[str, str], feature_settings) -> None:
    """One warning naming the nodes without a vocabulary word, their text, and the settings that dropped it."""
    shown = ", ".join(f"{n!r} ({_clip(descriptions.get(n, ''))!r})" for n in empty[:_MAX_NAMES])
    log.warning(
        "label descriptions: %d node(s) have no word of the vocabulary in their description (nor in their "
        "descendants'): %s%s. They get no weak label and the run goes on without them, so the model learns "
        "them (if at all) only through EM. To fix: use words in those descriptions that occur in at least "
        "features.min_df=%g and at most features.max_df=%g of the documents (e.g. frequent words of those "
        "classes' documents), or relax features.min_df / max_df / vocab_size=%d.",
        len(empty), shown, _more(empty), feature_settings.min_df, feature_settings.max_df,
        feature_settings.vocab_size)


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _require_usable_node_per_depth(empty: List[str], nodes: List[str], taxonomy: Taxonomy) -> None:
    """Raise when every node of some depth is in ``empty``.

    The per-depth rule (:func:`argmax_node_scores`) gives a weak label only
    to a document with a similar node at *every* depth, so such a depth
    means no weak label at all -- a run that would train on nothing.
    """
    dead = set(empty)
    for level in range(1, taxonomy.depth + 1):
        at_level = [n for n in nodes if taxonomy.node_depth(n) == level]
        if at_level and all(n in dead for n in at_level):
            raise TaxonomyError(
                f"label descriptions: no node of depth {level} ({at_level[:_MAX_NAMES]}{_more(at_level)}) has a "
                "word of the vocabulary in its description, so no document can get a weak label. Use words "
                "that occur in the corpus in those descriptions, or lower features.min_df")


def weak_columns(sims: np.ndarray, nodes: List[str], depths: Sequence[int], by_depth, taxonomy: Taxonomy,
                 mode: str, min_similarity: float, excluded: Collection[str] = ()):
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


def best_path_node_scores(sims: np.ndarray, nodes: List[str], taxonomy: Taxonomy,
                          excluded: Collection[str] = ()):
    """The ``path`` option: the path whose real nodes have the largest summed similarity.

    Unlike the per-depth argmax, the chosen nodes always form one path of the
    tree. Paths through an ``excluded`` node are never chosen: without that,
    a leaf with an empty description would still win ties through its parent's
    similarity. Returns ((n, K) node scores of that path, (n,) path index).
    """
    col = {nd: i for i, nd in enumerate(nodes)}
    member = np.zeros((len(nodes), taxonomy.n_paths))
    for j in range(taxonomy.n_paths):
        for nd in taxonomy.real_path(j):
            member[col[nd], j] = 1.0
    path_sims = sims @ member
    if excluded:
        dead = [j for j in range(taxonomy.n_paths) if any(nd in excluded for nd in taxonomy.real_path(j))]
        path_sims[:, dead] = -np.inf
    best = np.argmax(path_sims, axis=1)
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
        raise InputError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
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
        raise InputError(f"weak labels: mode must be 'argmax', 'soft' or 'path', got {mode!r}")
    spark = df.sparkSession
    idf_model = IDF(inputCol=features_col, outputCol="_idf").fit(df)
    idf = idf_weights(np.asarray(idf_model.docFreq), int(idf_model.numDocs))
    nodes = sorted(taxonomy.real_nodes, key=lambda n: (taxonomy.node_depth(n), n))
    depths = [taxonomy.node_depth(n) for n in nodes]
    D = description_matrix(spark, descriptions, vocabulary, feature_settings, nodes, taxonomy)
    excluded = frozenset(empty_description_nodes(D, nodes))
    desc_unit = tfidf_rows(D, idf)
    bc = spark.sparkContext.broadcast((idf, desc_unit, nodes, depths, excluded))
    out_schema = T.StructType(list(df.schema.fields) + [
        T.StructField("node_scores", T.ArrayType(T.DoubleType(), False), True),
        T.StructField("weak_path", T.ArrayType(T.StringType(), False), True)])
    feat_pos = df.columns.index(features_col)
    V = len(vocabulary)

    def score(batches):
        import pyarrow as pa
        idf_b, desc_b, nodes_b, depths_b, excluded_b = bc.value
        by_depth = [np.flatnonzero(np.asarray(depths_b) == lvl) for lvl in range(1, max(depths_b) + 1)]
        for b in arrow_blocks(batches, block_size):
            X = csr_of(b.column(feat_pos), V)
            sims = np.asarray((tfidf_rows(X, idf_b) @ desc_b.T).todense())
            scores, paths = weak_columns(sims, nodes_b, depths_b, by_depth, taxonomy, mode, min_similarity,
                                         excluded_b)
            yield pa.RecordBatch.from_arrays(list(b.columns) + [scores, paths],
                                             names=[f.name for f in out_schema.fields])

    return df.mapInArrow(score, out_schema)
