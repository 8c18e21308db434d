"""Weak supervision from label descriptions: the math, as pure numpy functions.

The paper's dataless setting (Section 4.2): a document's node score is 1 for
the node with the largest similarity among the classes of each depth, and
path scores follow Eq. 2. Here documents and node descriptions share one
TF-IDF space (IDF fitted on the corpus) and similarity is cosine.

Shapes: ``n`` documents, ``V`` vocabulary, ``C`` described (real) nodes,
``K`` taxonomy nodes with dummies (the engine's node-score columns).

Status: building blocks for the dataless mode (issue 4); the Spark wiring
and the ``pcem`` commands do not use them yet.
"""

from __future__ import annotations

import json
from typing import Dict, List, Sequence

import numpy as np
import scipy.sparse as sp

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
