"""Weak labels from similarities (the dataless setting), pure numpy/scipy: tf-idf cosine
similarity of documents to label descriptions, and node scores from it (per-depth argmax,
soft, or the best whole path)."""

from __future__ import annotations

import logging
from typing import Collection, List, Sequence

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.taxonomy import DUMMY_SEP, Taxonomy, TaxonomyError

__all__ = [
    "idf_weights",
    "tfidf_rows",
    "cosine_similarities",
    "argmax_node_scores",
    "soft_node_scores",
    "to_taxonomy_columns",
    "empty_description_nodes",
    "best_path_node_scores",
]

log = logging.getLogger(__name__)


# Node names listed in one message at most (the count of the rest follows).
_MAX_NAMES = 20


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
                "that occur in the corpus in those descriptions, or lower features.min_df"
            )


def best_path_node_scores(sims: np.ndarray, nodes: List[str], taxonomy: Taxonomy, excluded: Collection[str] = ()):
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
