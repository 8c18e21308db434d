"""The generative methods of the paper's Table 2 as mixture structures over one engine.

Every generative method is multinomial naive Bayes over ``R`` word
distributions ("components"); methods differ only in

* ``score_matrix`` (R, K): how a document's node scores (true labels or weak
  labels) become its fixed responsibilities over the components (Eq. 2 for
  the path cost-sensitive methods);
* a :class:`~pcem_spark.core.Structure`: which components compete in one
  softmax / share one prior, how labelled documents spread over components,
  and how a path is decoded at prediction time.

So the engine (blocks, broadcast, per-component sums, driver M-step) is the
same for all of them, and NB vs EM is only whether unlabelled documents
contribute.

==============  ===============================================================
``pcnb/pcem``   path cost-sensitive NB / EM (this paper): one component per
                path, path scores by Eq. 2, argmax of Eq. 5.
``flat-nb/em``  one component per leaf, one-hot leaf counts (Nigam et al.
                2000).
``nbmc/emmc``   ``components`` mixture components per leaf (Nigam et al.
                2000, Sec. 5.3 "multiple mixture components per class"): a
                labelled document's weight is spread over its leaf's
                components by their posterior, components start from a random
                hard split of the labelled documents (seeded), and
                ``P(leaf | x)`` is the sum over the leaf's components. NBMC
                iterates EM over the labelled documents only (the component
                of a labelled document is latent too); EMMC adds the
                unlabelled ones. With one component per leaf both equal flat
                NB / flat EM exactly.
``tdnb/tdem``   top-down: one NB classifier per internal node over its
                children, component = node, trained on the documents of each
                child's subtree (prior normalised among siblings). Prediction
                routes greedily from the root, taking the most probable child
                at each depth. TDEM's E-step gives an unlabelled document the
                node marginals ``P(c | x) = prod_{a on root..c} P(a | parent(a), x)``.
``wdnb/wdem``   win-driven (Wu, Tygert & LeCun 2017, "hierarchical loss /
                win"): one NB classifier per depth over all nodes of that
                depth; the win of a path is the sum over depths of its node's
                probability, and prediction takes the path of largest win.
                WDEM's E-step gives each depth's posterior to the unlabelled
                documents.
==============  ===============================================================

For top-down and win-driven EM the monitored log-likelihood is the sum of the
per-classifier log evidences: a convergence signal, not the objective of a
single generative model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Type

import numpy as np

from pcem_spark.core.structure import Structure, weighted_score_matrix
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.errors import InputError

__all__ = [
    "SPARSE_SCORE_MATRIX_CELLS",
    "GENERATIVE",
    "EM_METHODS",
    "DISCRIMINATIVE",
    "ALL_METHODS",
    "check_methods",
    "MethodSpec",
    "method_spec",
]

SPARSE_SCORE_MATRIX_CELLS = 1 << 22

GENERATIVE = ("pcnb", "pcem", "flat-nb", "flat-em", "nbmc", "emmc", "tdnb", "tdem", "wdnb", "wdem")
EM_METHODS = ("pcem", "flat-em", "emmc", "tdem", "wdem")
DISCRIMINATIVE = ("lr", "svm", "hiercost")
ALL_METHODS = GENERATIVE + DISCRIMINATIVE


def check_methods(names: Sequence[str], where: Optional[str] = None, error: Type[InputError] = InputError) -> None:
    """Raise ``error`` unless every name is one of :data:`ALL_METHODS`.

    Without ``where`` the message names the first unknown method (``unknown
    method 'nbx'; known: ...``); with it, a settings key such as
    ``experiment.methods``, it lists every unknown one after that key.
    """
    bad = [m for m in names if m not in ALL_METHODS]
    if not bad:
        return
    known = ", ".join(ALL_METHODS)
    if where is None:
        raise error(f"unknown method {bad[0]!r}; known: {known}")
    raise error(f"{where}: unknown method(s) {bad}; known: {known}")


@dataclass(frozen=True)
class MethodSpec:
    name: str
    score_matrix: np.ndarray  # (R, K) node scores -> fixed component scores
    structure: Optional[Structure]  # None: one softmax over paths, Eq. 5 (PC and flat methods)
    # How the method iterates (pcem_spark.engine.EM_MODES): "off" = naive Bayes,
    # "labeled" = EM over the labelled documents' latent components only (NBMC),
    # "all" = EM over labelled and unlabelled documents.
    em: str

    @property
    def n_components(self) -> int:
        return self.score_matrix.shape[0]


def _identity(K: int, sparse: bool):
    if sparse:
        import scipy.sparse as sp

        return sp.identity(K, format="csr")
    return np.eye(K)


def _path_nodes(taxonomy: Taxonomy) -> np.ndarray:
    """(M, D) node index of each path at each depth (dummies included)."""
    return np.array([[taxonomy.node_index[n] for n in p] for p in taxonomy.paths], dtype=np.int64)


def _padded_parents(taxonomy: Taxonomy) -> np.ndarray:
    """(K,) index of each node's parent in the padded tree (-1 for the root's children).

    Read off the padded paths, so a dummy node's parent is the shallow leaf it pads.
    """
    parent = np.full(taxonomy.n_nodes, -1, dtype=np.int64)
    for p in taxonomy.paths:
        for d in range(1, len(p)):
            parent[taxonomy.node_index[p[d]]] = taxonomy.node_index[p[d - 1]]
    return parent


def _node_parent_groups(taxonomy: Taxonomy) -> np.ndarray:
    """(K,) softmax group of each node = its parent (0 for the root's children, k+1 under node k)."""
    return _padded_parents(taxonomy) + 1


def method_spec(taxonomy: Taxonomy, method: str, components: int = 2, path_weight: float = 1.0) -> MethodSpec:
    """The components, scoring matrix and structure of a generative ``method`` on ``taxonomy``.

    ``path_weight`` (PCNB / PCEM only): 1 = Eq. 2, 0 = flat counts, in
    between see :func:`pcem_spark.core.weighted_score_matrix`.
    """
    M, K = taxonomy.n_paths, taxonomy.n_nodes
    em = "all" if method in EM_METHODS else "off"
    # Past ~4M cells the (R, K) score matrix is kept sparse (thousands of leaves).
    sparse = M * K >= SPARSE_SCORE_MATRIX_CELLS
    if method in ("pcnb", "pcem"):
        return MethodSpec(
            method,
            weighted_score_matrix(taxonomy.path_node_matrix(sparse), taxonomy.leaf_node_matrix(sparse), path_weight),
            None,
            em,
        )
    if method in ("flat-nb", "flat-em"):
        return MethodSpec(method, taxonomy.leaf_node_matrix(sparse), None, em)
    if method in ("nbmc", "emmc"):
        if components < 1:
            raise InputError(f"model.components must be >= 1, got {components}")
        owner = np.repeat(np.arange(M), components)
        leaf = taxonomy.leaf_node_matrix(sparse)
        return MethodSpec(
            method,
            leaf[np.repeat(np.arange(M), components)],
            Structure(np.zeros(M * components, np.int64), owner, restrict_labeled=components > 1),
            "labeled" if em == "off" and components > 1 else em,
        )
    node_owner = np.full(K, -1, dtype=np.int64)  # nodes are not paths; decoding uses path_nodes
    if method in ("tdnb", "tdem"):
        return MethodSpec(
            method,
            _identity(K, sparse),
            Structure(
                _node_parent_groups(taxonomy),
                node_owner,
                decoder="greedy",
                path_nodes=_path_nodes(taxonomy),
                parents=_padded_parents(taxonomy),
            ),
            em,
        )
    if method in ("wdnb", "wdem"):
        depth = np.zeros(K, dtype=np.int64)
        for p in taxonomy.paths:
            for d, n in enumerate(p, start=1):
                depth[taxonomy.node_index[n]] = d
        return MethodSpec(
            method,
            _identity(K, sparse),
            Structure(depth, node_owner, decoder="win", path_nodes=_path_nodes(taxonomy)),
            em,
        )
    raise InputError(f"unknown generative method {method!r}; known: {GENERATIVE}")
