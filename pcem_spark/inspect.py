"""Model inspection (``pcem inspect``): what a user checks before trusting a model.

Per taxonomy node (dummy padding nodes hidden):

* its **training mass** -- the document weight the M-step gave the
  components (paths) through the node, split into the labelled part and the
  expected part (``total - labelled``: lambda x the unlabelled documents'
  last E-step posteriors), from the training summary's ``path_mass_labeled``
  / ``path_mass`` (R,). For PCNB / PCEM a labelled document weighs Eq. 2's
  path scores (``D`` on its own path, ``d`` on a path sharing ``d`` nodes
  with it, scaled by ``path_weight``), so an inner node's labelled mass is
  larger than its number of labelled documents; the number of **labelled
  documents** through the node is recovered exactly from those masses
  (:func:`labeled_documents`) when the supervision was true labels. Models
  saved before the summary had the masses fall back to the word mass ``N_j``
  of the parameters (the output says so);
* its **prior** -- the sum of the path priors through it (top-down methods:
  the product of the per-parent priors down to it), summing to 1 per depth;
* its **top terms** against its siblings: ranked by the signed log-likelihood
  ratio, shown with their log-odds under the model's smoothing
  (:func:`sibling_log_odds`).

Given a predictions table with true labels, a per-level confusion table
(:func:`confusion_counts`, one Spark aggregation; only the (true, predicted)
node pairs reach the driver).

Outputs (:func:`write_inspection`): ``model.md``, ``model.json``,
``taxonomy.html`` (self-contained), ``taxonomy.png`` (with matplotlib) and,
with predictions, ``confusion.md`` / ``confusion.json`` -- plain files,
readable without Spark, written to a **local** directory atomically.

Everything here except :func:`confusion_counts` is numpy / scipy on the
driver. Shapes: ``R`` components, ``M`` paths, ``K`` nodes (dummies
included), ``V`` terms.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import logging
import os
import shutil
from dataclasses import asdict
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from . import pathnb
from .methods import EM_METHODS
from .errors import InputError

log = logging.getLogger(__name__)

NONE_LABEL = "(none)"        # a predicted path that stops above the level (or no prediction)
INSPECT_KIND = "inspect"


# ------------------------------------------------------------------ the math
def _membership(path_nodes, owner: Optional[np.ndarray] = None) -> sp.csr_matrix:
    """(R, K) 0/1 component -> node membership: ``path_nodes[owner]`` (``owner`` None: R = M)."""
    pn = sp.csr_matrix(path_nodes, dtype=np.float64)
    if owner is None:
        return pn
    owner = np.asarray(owner, dtype=np.int64)
    if len(owner) and (owner.min() < 0 or owner.max() >= pn.shape[0]):
        raise ValueError(f"owner must map every component to a path in [0, {pn.shape[0]}), "
                         f"got values in [{owner.min()}, {owner.max()}]")
    return pn[owner]


def component_paths(taxonomy, spec) -> Tuple[sp.csr_matrix, Optional[np.ndarray]]:
    """``(path_nodes, owner)`` of a method: how its R components map to the K nodes.

    PCNB / PCEM / flat: components are the paths (``owner`` None); nbmc / emmc:
    several components per path (``owner`` = ``spec.structure.owner``);
    top-down / win-driven: components are the nodes themselves (``path_nodes``
    = the (K, K) identity, ``owner`` None).
    """
    K = taxonomy.n_nodes
    structure = spec.structure
    if structure is None:
        return taxonomy.path_node_matrix(sparse=True), None
    owner = np.asarray(structure.owner, dtype=np.int64)
    if len(owner) and (owner >= 0).all():
        return taxonomy.path_node_matrix(sparse=True), owner
    if spec.n_components != K:
        raise ValueError(f"{spec.name}: {spec.n_components} node components for {K} taxonomy nodes")
    return sp.identity(K, format="csr", dtype=np.float64), None


def node_counts(params: pathnb.PathParameters, smoothing: float, path_nodes,
                owner: Optional[np.ndarray] = None) -> Tuple[sp.csr_matrix, np.ndarray]:
    """Word counts and word mass per node: the sums over the components through it.

    The counts behind the Lidstone-smoothed parameters are recovered by
    :func:`pcem_spark.pathnb.recovered_counts` (``c = s expm1(log_ratio)``,
    ``N_j = s exp(-log_base_j) - V s``). Time and memory ``O(nnz D + K)``.

    Parameters
    ----------
    params : PathParameters (R, V) built with ``smoothing``
    path_nodes : (M, K) 0/1 path -> node membership (sparse or dense)
    owner : int ndarray (R,) or None -- path of each component (None: R = M)

    Returns
    -------
    counts : csr_matrix (K, V), word_mass : ndarray (K,)
    """
    counts, n_words = pathnb.recovered_counts(params, smoothing)
    member = _membership(path_nodes, owner)
    if member.shape[0] != counts.shape[0]:
        raise ValueError(f"{counts.shape[0]} components but the membership has {member.shape[0]} rows")
    node = (member.T @ counts).tocsr()
    node.sort_indices()
    return node, np.asarray(member.T @ n_words, dtype=np.float64).ravel()


def node_sum(path_nodes, component_values: np.ndarray, owner: Optional[np.ndarray] = None) -> np.ndarray:
    """(K,) the sum of a per-component quantity (R,) over the components through each node."""
    member = _membership(path_nodes, owner)
    values = np.asarray(component_values, dtype=np.float64)
    if values.shape != (member.shape[0],):
        raise ValueError(f"expected {member.shape[0]} per-component values, got shape {values.shape}")
    return np.asarray(member.T @ values, dtype=np.float64).ravel()


class NodeMass(NamedTuple):
    """Per node (K,): labelled, expected (= total - labelled) and total mass, and the prior.

    ``labeled`` / ``expected`` are None when only a total is known (the word
    mass fallback of models without ``path_mass``).
    """
    labeled: Optional[np.ndarray]
    expected: Optional[np.ndarray]
    total: np.ndarray
    prior: np.ndarray


def node_prior(log_prior: np.ndarray, path_nodes, owner: Optional[np.ndarray] = None,
               parents: Optional[np.ndarray] = None) -> np.ndarray:
    """(K,) prior of each node: the sum of the component priors through it.

    ``parents`` (R,) for top-down methods, whose components are nodes with a
    prior normalised among siblings: the node's prior is then the product of
    those conditional priors from the top down to it. Either way the priors of
    the nodes at one depth (dummies included) sum to 1.
    """
    prior = np.exp(np.asarray(log_prior, dtype=np.float64))
    if parents is None:
        return node_sum(path_nodes, prior, owner)
    parents = np.asarray(parents, dtype=np.int64)
    marginal = prior.copy()
    for c, p in enumerate(parents):     # parents come before their children (pathnb.top_down_log_marginals)
        if p >= c:
            raise ValueError("top-down structure: a parent must come before its children")
        if p >= 0:
            marginal[c] *= marginal[p]
    return node_sum(path_nodes, marginal, owner)


def node_mass(path_nodes, total: np.ndarray, log_prior: np.ndarray, labeled: Optional[np.ndarray] = None,
              owner: Optional[np.ndarray] = None, parents: Optional[np.ndarray] = None) -> NodeMass:
    """Per-node masses and priors from per-component ones (R,).

    ``total`` = the training summary's ``path_mass`` (or the word mass when a
    model lacks it), ``labeled`` = ``path_mass_labeled`` (None if unknown);
    ``expected = total - labeled``, clipped at 0 against rounding.
    """
    tot = node_sum(path_nodes, total, owner)
    lab = exp = None
    if labeled is not None:
        lab = node_sum(path_nodes, labeled, owner)
        exp = np.maximum(tot - lab, 0.0)
    return NodeMass(lab, exp, tot, node_prior(log_prior, path_nodes, owner, parents))


def labeled_documents(path_nodes, labeled_mass: np.ndarray, path_weight: float = 0.0,
                      owner: Optional[np.ndarray] = None, atol: float = 1e-4) -> Optional[np.ndarray]:
    """(K,) labelled documents through each node, recovered from the labelled masses; None if they are not counts.

    A labelled document on path p gives path j the mass ``(1 - g) [j = p] + g
    |p and j|`` (Eq. 2 with ``path_weight`` g; flat and multi-component
    methods: g = 0), so the per-path masses are ``m = ((1 - g) I + g A A^T) n``
    with ``A`` the (M, K) path-node matrix and ``n`` the labelled documents
    per path. ``A A^T`` is positive definite (each path has its own depth-D
    node), so ``n`` is unique; it is found by conjugate gradients
    (``O(nnz(A))`` per step, never an M x M matrix). For methods whose
    components are nodes pass the (K, K) identity as ``path_nodes`` (then ``m``
    already counts documents per node).

    Weak or soft labels (the dataless setting) need not give whole documents:
    when ``n`` is not a vector of non-negative integers (to ``atol``), None.
    """
    from scipy.sparse.linalg import LinearOperator, cg
    A = sp.csr_matrix(path_nodes, dtype=np.float64)
    m = np.asarray(labeled_mass, dtype=np.float64)
    if owner is not None:     # components -> paths
        owner = np.asarray(owner, dtype=np.int64)
        m = np.bincount(owner, weights=m, minlength=A.shape[0])
    if m.shape != (A.shape[0],):
        raise ValueError(f"expected {A.shape[0]} labelled masses, got shape {m.shape}")
    g = float(path_weight)
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"path_weight must be in [0, 1], got {g}")
    if g == 0.0 or not m.any():
        n = m.copy()
    else:
        At = A.T.tocsr()
        op = LinearOperator((len(m), len(m)), dtype=np.float64,
                            matvec=lambda x: (1.0 - g) * x + g * (A @ (At @ x)))
        n, info = cg(op, m, x0=m / max(np.asarray(A.sum(axis=1)).max(), 1.0), rtol=1e-12, atol=0.0,
                     maxiter=10 * len(m) + 100)
        if info != 0:
            log.warning("labelled documents: conjugate gradients did not converge (%s); not reported", info)
            return None
    rounded = np.round(n)
    if np.any(rounded < 0) or np.max(np.abs(n - rounded), initial=0.0) > atol:
        return None
    return np.asarray(A.T @ rounded, dtype=np.float64).ravel()


class TermScore(NamedTuple):
    """One top term of a node: index, log-odds, signed log-likelihood ratio, count in the node, pooled
    count in its siblings."""
    term: int
    log_odds: float
    llr: float
    count: float
    sibling_count: float


TERM_RANKINGS = ("llr", "log-odds")


def _o_log_o_over_e(o: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``o log(o / e)`` elementwise, 0 where ``o`` is 0 (the G-test's convention)."""
    out = np.zeros(np.broadcast(o, e).shape)
    pos = o > 0
    o_b, e_b = np.broadcast_to(o, out.shape), np.broadcast_to(e, out.shape)
    out[pos] = o_b[pos] * np.log(o_b[pos] / e_b[pos])
    return out


def signed_llr(a: np.ndarray, b: np.ndarray, n_a: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """Dunning's (1993) log-likelihood ratio G^2 of the 2 x 2 table (term, other terms) x (node, siblings).

    ``a``, ``b``: the term's counts in the node and in its siblings; ``n_a``,
    ``n_b``: their word totals (arrays of one shape, or broadcastable). Signed:
    positive where the node's rate ``a / n_a`` exceeds the siblings' ``b / n_b``.
    No smoothing needed: zero counts are exact (``0 log 0 = 0``).
    """
    a, b, n_a, n_b = (np.asarray(x, dtype=np.float64) for x in (a, b, n_a, n_b))
    n = n_a + n_b
    t = a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * (_o_log_o_over_e(a, t * n_a / n) + _o_log_o_over_e(b, t * n_b / n)
                   + _o_log_o_over_e(np.maximum(n_a - a, 0.0), (n - t) * n_a / n)
                   + _o_log_o_over_e(np.maximum(n_b - b, 0.0), (n - t) * n_b / n))
        rate_a = np.where(n_a > 0, a / np.where(n_a > 0, n_a, 1.0), 0.0)
        rate_b = np.where(n_b > 0, b / np.where(n_b > 0, n_b, 1.0), 0.0)
    g = np.maximum(g, 0.0)                      # rounding can make an exact 0 slightly negative
    return np.where(rate_a >= rate_b, g, -g)


def sibling_log_odds(counts, parent_of: np.ndarray, smoothing: float, top_n: int = 10,
                     show: Optional[np.ndarray] = None, rank: str = "llr") -> List[List[TermScore]]:
    """Per node, the ``top_n`` terms that most favour it over its siblings.

    ``log_odds(k, w) = log theta_kw - log theta_Sw`` with the node's and its
    pooled siblings' (the other children of its parent; for a top-level node
    the other top-level nodes) smoothed multinomials

        ``theta_kw = (c_kw + s) / (N_k + V s)``,
        ``theta_Sw = (sum_{j in S} c_jw + s) / (sum_{j in S} N_j + V s)``,

    ``s`` = ``smoothing`` (pass the model's own word pseudo-count: the
    log-odds is then the weight with which one occurrence of ``w`` moves a
    document from the siblings towards the node), ``N`` the row sums.

    Ranking: ``rank="llr"`` (default) orders by the signed log-likelihood
    ratio (:func:`signed_llr`): how surely the node's rate of ``w`` differs
    from its siblings', which grows with the evidence behind the ratio. The
    log-odds alone (``rank="log-odds"``) puts terms seen a few times in the
    node and never in its siblings first -- with a small ``s`` a top list of
    rare names and ids (on the 20NG demo model: "abc, bruins, gld" for
    rec.sport.hockey, against "hockey, nhl, team" by llr). Only terms the node
    holds (``c_kw > 0``) are candidates: a term it never saw is not what
    characterises it. Ties: larger count first, then lower term index. A node
    without siblings (an only child) gets an empty list.

    Time ``O(nnz log nnz + K)``, memory ``O(nnz + K)``: never a dense (K, V) array.

    Parameters
    ----------
    counts : sparse or dense (K, V) non-negative node counts (:func:`node_counts`)
    parent_of : int ndarray (K,) -- parent node of each node, -1 for top-level nodes
    smoothing : float > 0
    top_n : int >= 1
    show : bool ndarray (K,) or None -- nodes taking part (False: dummy nodes,
        which are neither scored nor anyone's sibling); None = all
    rank : ``"llr"`` | ``"log-odds"``
    """
    if smoothing <= 0:
        raise InputError(f"the log-odds smoothing must be > 0, got {smoothing}")
    if top_n < 1:
        raise InputError(f"top_n must be >= 1, got {top_n}")
    if rank not in TERM_RANKINGS:
        raise InputError(f"term ranking must be one of {TERM_RANKINGS}, got {rank!r}")
    C = sp.csr_matrix(counts, dtype=np.float64)
    C.sum_duplicates()
    C.eliminate_zeros()
    C.sort_indices()
    K, V = C.shape
    parent_of = np.asarray(parent_of, dtype=np.int64)
    if parent_of.shape != (K,):
        raise ValueError(f"parent_of must have {K} entries, got shape {parent_of.shape}")
    show = np.ones(K, dtype=bool) if show is None else np.asarray(show, dtype=bool)
    # Sibling groups: one per parent (the top level is group 0); hidden nodes in no group.
    group_of = parent_of + 1
    members = np.flatnonzero(show)
    n_groups = K + 1
    G_member = sp.csr_matrix((np.ones(len(members)), (group_of[members], members)), shape=(n_groups, K))
    group_counts = (G_member @ C).tocsr()
    group_counts.sort_indices()
    group_size = np.bincount(group_of[members], minlength=n_groups)
    N = np.asarray(C.sum(axis=1), dtype=np.float64).ravel()
    group_N = G_member @ N
    # Every non-zero (k, w) of C: look up its group's pooled count by key g*V + w (sorted in CSR order).
    rows = np.repeat(np.arange(K), np.diff(C.indptr))
    cols, c = C.indices.astype(np.int64), C.data
    keep = show[rows] & (group_size[group_of[rows]] > 1)
    rows, cols, c = rows[keep], cols[keep], c[keep]
    g_rows = np.repeat(np.arange(n_groups), np.diff(group_counts.indptr))
    g_keys = g_rows.astype(np.int64) * V + group_counts.indices.astype(np.int64)
    keys = group_of[rows].astype(np.int64) * V + cols
    pos = np.searchsorted(g_keys, keys)
    pooled = group_counts.data[pos]                 # the node's own counts are part of its group's
    sib = np.maximum(pooled - c, 0.0)
    N_sib = np.maximum(group_N[group_of[rows]] - N[rows], 0.0)
    s = float(smoothing)
    log_odds = (np.log(c + s) - np.log(N[rows] + V * s)) - (np.log(sib + s) - np.log(N_sib + V * s))
    llr = signed_llr(c, sib, N[rows], N_sib)
    key = llr if rank == "llr" else log_odds
    order = np.lexsort((cols, -c, -key, rows))
    rows, cols, c, sib, log_odds, llr = rows[order], cols[order], c[order], sib[order], log_odds[order], llr[order]
    starts = np.searchsorted(rows, np.arange(K))
    ends = np.searchsorted(rows, np.arange(K), side="right")
    out: List[List[TermScore]] = []
    for k in range(K):
        a, b = starts[k], min(ends[k], starts[k] + top_n)
        out.append([TermScore(int(cols[i]), float(log_odds[i]), float(llr[i]), float(c[i]), float(sib[i]))
                    for i in range(a, b)])
    return out


# ------------------------------------------------------------- the report
def _rounded(x, digits: int = 4):
    return None if x is None else float(round(float(x), digits))


def padded_parents(taxonomy) -> np.ndarray:
    """(K,) parent node index of each node in the padded tree (-1 for top-level nodes)."""
    parent = np.full(taxonomy.n_nodes, -1, dtype=np.int64)
    for p in taxonomy.paths:
        for d in range(1, len(p)):
            parent[taxonomy.node_index[p[d]]] = taxonomy.node_index[p[d - 1]]
    return parent


def tree_order(taxonomy) -> List[str]:
    """The real nodes depth-first (each parent followed by its subtree, children by name)."""
    out: List[str] = []

    def walk(node: str) -> None:
        for kid in taxonomy.children(node):
            out.append(kid)
            walk(kid)

    walk(taxonomy.root)
    return out


def inspect_model(model, top_n: int = 10, model_path: Optional[str] = None, rank: str = "llr") -> Dict[str, object]:
    """Everything ``model.md`` / ``model.json`` / the views show, as a JSON-able dict (no Spark).

    ``model`` is a :class:`pcem_spark.model.PathModel`; ``top_n`` / ``rank``: the top terms per node
    (:func:`sibling_log_odds`).
    """
    tax, params, ms = model.taxonomy, model.params, model.model_settings
    summary = dict(model.training_summary or {})
    smoothing = float(ms.smoothing)
    spec = model.spec
    path_nodes, owner = component_paths(tax, spec)
    counts, word_mass = node_counts(params, smoothing, path_nodes, owner)
    parents = spec.structure.parents if spec.structure is not None else None
    R = params.shape[0]
    lab_path, tot_path = summary.get("path_mass_labeled"), summary.get("path_mass")
    if lab_path is not None and tot_path is not None and len(lab_path) == R and len(tot_path) == R:
        source = "training_summary"
        mass = node_mass(path_nodes, np.asarray(tot_path, float), params.log_prior, np.asarray(lab_path, float),
                         owner, parents)
        g = float(ms.path_weight) if ms.method in ("pcnb", "pcem") else 0.0
        docs = labeled_documents(path_nodes, np.asarray(lab_path, float), g, owner)
        lam = float(ms.unlabeled_weight)
        exp_docs = mass.expected / lam if ms.method in EM_METHODS and lam > 0 else None
        mass_note = ("document mass as the M-step counts it: labelled = the labelled documents' weights "
                     "(Eq. 2 path scores for PCNB/PCEM), expected = total - labelled = unlabelled weight "
                     "(lambda) x the last E-step posteriors; a node sums the paths / components through it")
    else:
        source = "word_counts"
        _, comp_words = pathnb.recovered_counts(params, smoothing)
        mass = node_mass(path_nodes, comp_words, params.log_prior, None, owner, parents)
        docs = exp_docs = None
        mass_note = ("this model was saved without path_mass in its training summary (an older pcem-spark): "
                     "the mass shown is the word mass N of the parameters (tokens after doc_length "
                     "normalisation, labelled + expected), with no labelled / expected split; retrain to get it")
        if lab_path is not None or tot_path is not None:
            mass_note = (f"the training summary's path masses do not have {R} entries: " + mass_note)
    show = ~np.asarray(tax.is_dummy, dtype=bool)
    parent_idx = padded_parents(tax)
    top = sibling_log_odds(counts, parent_idx, smoothing, top_n, show, rank)
    vocab = model.vocabulary
    nodes = []
    for name in tree_order(tax):
        k = tax.node_index[name]
        parent = tax.parent(name)
        kids = tax.children(name)
        siblings = [s for s in tax.children(parent) if s != name]
        nodes.append({
            "node": name, "depth": tax.node_depth(name), "parent": None if parent == tax.root else parent,
            "leaf": not kids, "children": kids,
            "labeled_documents": None if docs is None else int(round(docs[k])),
            "labeled_mass": None if mass.labeled is None else _rounded(mass.labeled[k]),
            "expected_mass": None if mass.expected is None else _rounded(mass.expected[k]),
            "expected_documents": None if exp_docs is None else _rounded(exp_docs[k], 2),
            "total_mass": _rounded(mass.total[k]),
            "word_mass": _rounded(word_mass[k], 2),
            "prior": _rounded(mass.prior[k], 6),
            "n_siblings": len(siblings),
            "top_terms": [{"term": vocab[t.term], "log_odds": _rounded(t.log_odds), "llr": _rounded(t.llr, 2),
                           "count": _rounded(t.count, 2),
                           "sibling_count": _rounded(t.sibling_count, 2)} for t in top[k]],
        })
    depth_prior = {str(d): _rounded(sum(mass.prior[tax.node_index[n]] for n in tax.nodes
                                        if tax.node_depth(n) == d), 6) for d in range(1, tax.depth + 1)}
    history = summary.get("loglik_history") or []
    iters = summary.get("iter_seconds") or []
    keep_summary = {k: summary[k] for k in ("n_labeled", "n_unlabeled", "n_iter", "converged", "smoothing")
                    if k in summary}
    if history:
        keep_summary["final_loglik"] = float(history[-1])
    if iters:
        keep_summary["em_seconds"] = round(float(sum(iters)), 2)
    if isinstance(summary.get("tuning"), dict):
        keep_summary["tuning_chosen"] = summary["tuning"].get("chosen")
    if isinstance(summary.get("input"), dict):
        keep_summary["input"] = {k: v for k, v in summary["input"].items()
                                 if k in ("source", "rows_read", "valid", "rejected", "split", "selected")}
    paths = []
    nodes_are_components = spec.structure is not None and owner is None   # top-down / win-driven
    for j in range(tax.n_paths):
        entry = {"path": tax.real_path(j)}
        if not nodes_are_components:
            cols = np.flatnonzero(owner == j) if owner is not None else np.array([j])
            entry["prior"] = _rounded(np.exp(params.log_prior[cols]).sum(), 6)
            if source == "training_summary":
                entry["labeled_mass"] = _rounded(np.asarray(lab_path, float)[cols].sum())
                entry["mass"] = _rounded(np.asarray(tot_path, float)[cols].sum())
        paths.append(entry)
    return {
        "model": model_path,
        "method": ms.method,
        "model_settings": asdict(ms),
        "feature_settings": asdict(model.feature_settings),
        "vocabulary_size": len(vocab),
        "n_components": int(R),
        "nnz_parameters": int(params.log_ratio.nnz),
        "taxonomy": {"root": tax.root, "depth": tax.depth, "nodes": len(tax.real_nodes),
                     "leaves": len(tax.leaves), "padded_nodes_hidden": int((~show).sum())},
        "training_summary": keep_summary,
        "mass": {"source": source, "unit": "documents" if source == "training_summary" else "words",
                 "note": mass_note, "labeled_documents_known": docs is not None,
                 "expected_documents_known": exp_docs is not None,
                 "prior_sum_per_depth": depth_prior},
        "log_odds": {"smoothing": smoothing, "top_n": top_n, "ranked_by": rank,
                     "definition": "log-odds = log theta(node, w) - log theta(siblings pooled, w), theta = "
                                   "(c + s) / (N + V s), s = the model's word smoothing; llr = Dunning's "
                                   "log-likelihood ratio G^2 of (term, other terms) x (node, siblings), signed + "
                                   "where the node's rate is higher; candidates: terms with count > 0 in the node; "
                                   "a top-level node's siblings are the other top-level nodes"},
        "nodes": nodes,
        "paths": paths,
    }


# -------------------------------------------------------------- confusion
def confusion_counts(pred, path_col: str = "path", labels_col: str = "labels"):
    """Spark: ``(level, true, predicted, n)`` rows of a predictions DataFrame, and the row counts.

    Per level d, every document whose true path reaches d is counted under
    (its true node at d, its predicted node at d); a predicted path that
    stops above d (or a null path) counts as predicted None. Rows without
    labels are not scored. One aggregation: at most ``(nodes at d + 1)^2``
    rows per level reach the driver, never a document.

    Returns
    -------
    (list of (level, true, predicted or None, n), n_scored, n_without_labels)
    """
    from pyspark.sql import functions as F
    for col in (path_col, labels_col):
        if col not in pred.columns:
            raise InputError(f"predictions: column {col!r} is missing (found {pred.columns})")
    scored = pred.where(F.col(labels_col).isNotNull())
    cells = (scored.select(F.coalesce(F.col(path_col), F.array().cast("array<string>")).alias("p"),
                           F.posexplode(labels_col).alias("pos", "t"))
             .select((F.col("pos") + 1).alias("level"), F.col("t").alias("true"),
                     F.try_element_at("p", (F.col("pos") + 1).cast("int")).alias("predicted"))
             .groupBy("level", "true", "predicted").count()
             .collect())
    counts = pred.select(F.count(F.lit(1)).alias("n"), F.count(labels_col).alias("n_lab")).first()
    rows = [(int(r["level"]), r["true"], r["predicted"], int(r["count"])) for r in cells]
    return rows, int(counts["n_lab"]), int(counts["n"]) - int(counts["n_lab"])


def confusion_tables(cells: Sequence[Tuple[int, str, Optional[str], int]], taxonomy,
                     n_scored: int, n_without_labels: int = 0, top_errors: int = 10) -> Dict[str, object]:
    """Per-level confusion tables (pure) from :func:`confusion_counts`' cells.

    Rows and columns: the taxonomy's real nodes at that level (by name), then
    any other name met (unknown labels), then ``(none)`` as a column.
    Accuracy at level d = diagonal / documents whose true path reaches d
    (the ``level_accuracy`` of ``pcem evaluate``).
    """
    levels = {}
    depth = max([taxonomy.depth] + [c[0] for c in cells])
    for d in range(1, depth + 1):
        here = [c for c in cells if c[0] == d]
        known = sorted(n for n in taxonomy.real_nodes if taxonomy.node_depth(n) == d)
        seen = {c[1] for c in here} | {c[2] for c in here if c[2] is not None}
        unknown = sorted(seen - set(known))
        labels = known + unknown
        index = {n: i for i, n in enumerate(labels)}
        mat = np.zeros((len(labels), len(labels) + 1), dtype=np.int64)   # last column: (none)
        for _, t, p, n in here:
            mat[index[t], len(labels) if p is None else index[p]] += n
        total = int(mat.sum())
        correct = int(np.trace(mat[:, :len(labels)]))
        off = [(int(mat[i, j]), labels[i], NONE_LABEL if j == len(labels) else labels[j])
               for i, j in zip(*np.nonzero(mat)) if i != j]
        off.sort(key=lambda x: (-x[0], x[1], x[2]))
        row_tot = mat.sum(axis=1)
        levels[str(d)] = {
            "nodes": labels, "columns": labels + [NONE_LABEL], "counts": mat.tolist(),
            "documents": total, "correct": correct, "accuracy": (correct / total) if total else None,
            "unknown_nodes": unknown,
            "recall": {labels[i]: (float(mat[i, i]) / row_tot[i] if row_tot[i] else None) for i in range(len(labels))},
            "largest_errors": [{"true": t, "predicted": p, "count": n,
                                "share_of_true": n / float(row_tot[index[t]])} for n, t, p in off[:top_errors]],
        }
    return {"n_scored": n_scored, "n_without_labels": n_without_labels, "levels": levels}


# --------------------------------------------------------------- renderers
def _fmt(x, digits: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_model_markdown(report: Dict[str, object]) -> str:
    """``model.md``: summary, a legend of the columns, then one table row per node in tree order."""
    ms, ts, mass, lo = report["model_settings"], report["training_summary"], report["mass"], report["log_odds"]
    lines = [f"# Model inspection: {report['model'] or report['method']}", ""]
    lines.append(f"- method: **{report['method']}**; smoothing {ms['smoothing']:g}, unlabelled weight (lambda) "
                 f"{ms['unlabeled_weight']}, path weight {ms['path_weight']}, doc_length {ms['doc_length']:g}, "
                 f"posterior_top_k {ms['posterior_top_k']}")
    lines.append(f"- vocabulary: {report['vocabulary_size']:,} terms; {report['n_components']:,} components; "
                 f"{report['nnz_parameters']:,} non-zero word parameters")
    tx = report["taxonomy"]
    lines.append(f"- taxonomy: {tx['nodes']} nodes, {tx['leaves']} leaves, depth {tx['depth']}"
                 + (f" ({tx['padded_nodes_hidden']} padding nodes hidden)" if tx["padded_nodes_hidden"] else ""))
    if ts:
        parts = []
        for key, label in (("n_labeled", "labelled documents"), ("n_unlabeled", "unlabelled documents"),
                           ("n_iter", "EM iterations"), ("converged", "converged"),
                           ("final_loglik", "final log-likelihood"), ("em_seconds", "EM seconds")):
            if key in ts:
                v = ts[key]
                parts.append(f"{label} {v:,.1f}" if isinstance(v, float) else f"{label} {v}")
        lines.append("- training: " + ", ".join(parts))
        if ts.get("tuning_chosen"):
            lines.append(f"- cross-validation chose: {ts['tuning_chosen']}")
    split = mass["source"] == "training_summary"
    docs_known, exp_docs_known = mass["labeled_documents_known"], mass.get("expected_documents_known", False)
    lines += ["", "Columns:", ""]
    if docs_known:
        lines.append("- **labelled docs**: labelled training documents whose path passes through the node")
    if exp_docs_known:
        lines.append("- **expected docs**: unlabelled training documents expected at the node by the last "
                     "E-step (expected mass / lambda)")
    if split:
        lines.append(f"- **labelled mass**, **expected mass**: {mass['note']}")
    else:
        lines.append(f"- **word mass**: {mass['note']}")
    lines.append(f"- **prior**: sum of the path priors through the node (sums per depth: "
                 f"{', '.join(f'{d}: {p:g}' for d, p in mass['prior_sum_per_depth'].items())})")
    lines.append(f"- **top terms vs siblings**, ranked by {lo['ranked_by']}, shown with their log-odds: "
                 f"{lo['definition']} (s = {lo['smoothing']:g})")
    lines.append("")
    header = ["depth", "node", "parent"] + (["labelled docs"] if docs_known else []) + \
        (["expected docs"] if exp_docs_known else []) + \
        (["labelled mass", "expected mass"] if split else ["word mass"]) + ["prior", "top terms vs siblings"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|---|---|" + "---:|" * (len(header) - 4) + "---|")
    for n in report["nodes"]:
        indent = "&nbsp;&nbsp;" * (n["depth"] - 1)
        terms = ", ".join(f"{t['term']} ({t['log_odds']:+.1f})" for t in n["top_terms"]) or \
            ("(no siblings)" if n["n_siblings"] == 0 else "(no terms)")
        row = [str(n["depth"]), indent + _md_cell(n["node"]) + ("" if n["leaf"] else " /"),
               _md_cell(n["parent"] or "–")]
        if docs_known:
            row.append(_fmt(n["labeled_documents"]))
        if exp_docs_known:
            row.append(_fmt(n["expected_documents"], 0))
        row += [_fmt(n["labeled_mass"]), _fmt(n["expected_mass"])] if split else [_fmt(n["total_mass"], 0)]
        row += [f"{n['prior']:.4f}", _md_cell(terms)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_confusion_markdown(conf: Dict[str, object]) -> str:
    """``confusion.md``: per level, accuracy, the table (rows = true, columns = predicted) and the largest errors."""
    lines = ["# Confusion per level", "",
             f"{conf['n_scored']:,} predictions with true labels scored"
             + (f"; {conf['n_without_labels']:,} without labels not scored" if conf["n_without_labels"] else "")
             + ". Rows: true node at the level; columns: predicted node (numbered as the rows; "
               f"`{NONE_LABEL}`: the predicted path stops above the level). Only documents whose true path "
               "reaches the level are counted (as `pcem evaluate`'s level accuracy).", ""]
    for d, lv in conf["levels"].items():
        acc = "n/a" if lv["accuracy"] is None else f"{100 * lv['accuracy']:.2f}%"
        lines += [f"## Level {d}", "", f"accuracy {acc} ({lv['correct']:,} of {lv['documents']:,})", ""]
        if lv["unknown_nodes"]:
            lines += [f"names not in the taxonomy at this level: {', '.join(lv['unknown_nodes'])}", ""]
        nodes = lv["nodes"]
        cols = [str(i + 1) for i in range(len(nodes))] + [NONE_LABEL]
        lines.append("| true \\ predicted | " + " | ".join(cols) + " | recall |")
        lines.append("|---|" + "---:|" * (len(cols) + 1))
        for i, name in enumerate(nodes):
            row = lv["counts"][i]
            rec = lv["recall"][name]
            cells = [f"**{v}**" if j == i and v else (str(v) if v else "·") for j, v in enumerate(row)]
            lines.append(f"| {i + 1}. {_md_cell(name)} | " + " | ".join(cells) + " | "
                         + ("–" if rec is None else f"{100 * rec:.0f}%") + " |")
        if lv["largest_errors"]:
            lines += ["", "largest off-diagonal cells:", ""]
            for e in lv["largest_errors"]:
                lines.append(f"- {_md_cell(e['true'])} → {_md_cell(e['predicted'])}: {e['count']:,} "
                             f"({100 * e['share_of_true']:.0f}% of {_md_cell(e['true'])})")
        lines.append("")
    return "\n".join(lines)


_HTML_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} .meta{color:#555;margin:.2em 0}
.tree{margin-top:1em} .row{display:flex;align-items:center;gap:.6em;padding:2px 0;border-bottom:1px solid #f0f0f0}
.name{width:20em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.inner .name{font-weight:600}
.bar{width:24em;height:14px;background:#f4f4f4;position:relative;flex:none}
.bar span{position:absolute;top:0;height:100%}
.lab{background:#1f77b4} .exp{background:#9ecae1}
.num{width:15em;font-variant-numeric:tabular-nums;color:#333;flex:none}
.terms{color:#555;font-size:.92em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;flex:1}
.key span{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 .8em}
"""


def _html_amounts(report: Dict[str, object], n: Dict[str, object]) -> Tuple[float, float, str]:
    """(labelled, expected, unit) of a node for the HTML bars: documents when known, else masses / words."""
    mass = report["mass"]
    if mass["source"] != "training_summary":
        return 0.0, n["total_mass"] or 0.0, "words"
    if mass["labeled_documents_known"] and mass.get("expected_documents_known"):
        return float(n["labeled_documents"] or 0), n["expected_documents"] or 0.0, "docs"
    return n["labeled_mass"] or 0.0, n["expected_mass"] or 0.0, "mass"


def render_html(report: Dict[str, object]) -> str:
    """``taxonomy.html``: an indented tree, one bar per node sized by its training documents (labelled +
    expected; masses when documents are not known) relative to the largest node at its depth, the
    labelled part dark and the expected part light; top terms as text and (with their scores and
    counts) as a tooltip. Self-contained: inline CSS, no script, no external resource."""
    esc = html.escape
    nodes = report["nodes"]
    split = report["mass"]["source"] == "training_summary"
    amounts = [_html_amounts(report, n) for n in nodes]
    unit = amounts[0][2] if amounts else "mass"
    max_at: Dict[int, float] = {}
    for n, (lab, exp, _) in zip(nodes, amounts):
        max_at[n["depth"]] = max(max_at.get(n["depth"], 0.0), lab + exp)
    what = {"docs": "training documents (labelled + expected unlabelled)", "mass": "training mass",
            "words": "word mass"}[unit]
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>pcem inspect: {esc(str(report['model'] or report['method']))}</title>",
           f"<style>{_HTML_STYLE}</style></head><body>",
           f"<h1>Model inspection: {esc(str(report['model'] or report['method']))}</h1>",
           f"<p class='meta'>method <b>{esc(report['method'])}</b>, {report['vocabulary_size']:,} terms, "
           f"{report['taxonomy']['nodes']} nodes / {report['taxonomy']['leaves']} leaves, depth "
           f"{report['taxonomy']['depth']}</p>",
           f"<p class='meta'>mass ({esc(report['mass']['unit'])}): {esc(report['mass']['note'])}</p>",
           f"<p class='meta'>bars: {what}, relative to the largest node at the same depth"
           + ("<span class='key'><span class='lab'></span>labelled<span class='exp'></span>expected</span>"
              if split else "") + f"; text: top terms against the siblings (ranked by "
           f"{esc(report['log_odds']['ranked_by'])}, s = {report['log_odds']['smoothing']:g}); hover a row for "
           "their scores and counts</p>",
           "<div class='tree'>"]
    for n, (lab, exp, _) in zip(nodes, amounts):
        scale = max_at[n["depth"]] or 1.0
        width = 100.0 * (lab + exp) / scale
        lab_w = 100.0 * lab / scale
        # A labelled part, however small, stays visible (min 2px).
        bar = (f"<span class='lab' style='left:0;width:{lab_w:.2f}%;min-width:2px'></span>" if lab > 0 else "") + \
            f"<span class='exp' style='left:{lab_w:.2f}%;width:{width - lab_w:.2f}%'></span>"
        if unit == "docs":
            num = f"{_fmt(n['labeled_documents'])} + {_fmt(n['expected_documents'], 0)} docs · p {n['prior']:.3f}"
        elif unit == "mass":
            num = f"{_fmt(n['labeled_mass'])} + {_fmt(n['expected_mass'])} · p {n['prior']:.3f}"
        else:
            num = f"{_fmt(n['total_mass'], 0)} words · p {n['prior']:.3f}"
        terms = ", ".join(t["term"] for t in n["top_terms"]) or \
            ("(no siblings)" if n["n_siblings"] == 0 else "(no terms)")
        tip = "\n".join(f"{t['term']}: llr {t['llr']:.1f}, log-odds {t['log_odds']:+.2f}, count {t['count']:g} "
                        f"vs siblings {t['sibling_count']:g}" for t in n["top_terms"])
        cls = "row inner" if not n["leaf"] else "row"
        pad = 1.4 * (n["depth"] - 1)
        out.append(f"<div class='{cls}' title='{esc(tip, quote=True)}'>"
                   f"<div class='name' style='padding-left:{pad:.1f}em'>{esc(n['node'])}</div>"
                   f"<div class='bar'>{bar}</div><div class='num'>{esc(num)}</div>"
                   f"<div class='terms'>{esc(terms)}</div></div>")
    out.append("</div></body></html>")
    return "\n".join(out) + "\n"


def render_png(report: Dict[str, object]) -> Optional[bytes]:
    """``taxonomy.png`` bytes: horizontal bars per node in tree order (each top-level subtree shaded),
    labelled documents (or mass) on the left panel, expected unlabelled documents (or mass) on the
    right, the top 3 terms beside; None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: taxonomy.png skipped (pip install 'pcem-spark[plots]')")
        return None
    import io
    nodes = report["nodes"]
    split = report["mass"]["source"] == "training_summary"
    names = [n["node"] for n in nodes]
    y = np.arange(len(nodes))[::-1]
    colours = [f"C{min(n['depth'] - 1, 9)}" for n in nodes]
    height = max(3.0, 0.28 * len(nodes) + 1.2)
    mass = report["mass"]
    if not split:
        panels = [("word mass (no labelled / expected split in this model)", "total_mass")]
    else:
        panels = [("labelled documents" if mass["labeled_documents_known"] else "labelled mass",
                   "labeled_documents" if mass["labeled_documents_known"] else "labeled_mass"),
                  ("expected unlabelled documents (last E-step)" if mass.get("expected_documents_known")
                   else "expected mass", "expected_documents" if mass.get("expected_documents_known")
                   else "expected_mass")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 3.5, height), sharey=True,
                             squeeze=False)
    axes = axes[0]
    for ax, (title, key) in zip(axes, panels):
        vals = np.array([n[key] or 0.0 for n in nodes])
        ax.barh(y, vals, color=colours, height=0.75)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        for yi, v in zip(y, vals):
            ax.text(v, yi, f" {v:,.0f}", va="center", fontsize=7, color="#333")
        ax.set_xlim(0, max(vals.max(initial=0.0), 1e-9) * 1.15)
    # Alternate shading per top-level subtree, so each parent is seen with its children.
    top_rows = [i for i, n in enumerate(nodes) if n["depth"] == 1] + [len(nodes)]
    for g, (a, b) in enumerate(zip(top_rows, top_rows[1:])):
        if g % 2 == 0:
            for ax in axes:
                ax.axhspan(y[b - 1] - 0.5, y[a] + 0.5, color="#f2f2f2", zorder=0)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(names, fontsize=8)
    for label, n in zip(axes[0].get_yticklabels(), nodes):
        if not n["leaf"]:
            label.set_fontweight("bold")
    for ax in axes:
        ax.set_ylim(-0.6, len(nodes) - 0.4)
        ax.set_axisbelow(True)
    last = axes[-1]
    xmax = last.get_xlim()[1]
    for yi, n in zip(y, nodes):
        terms = ", ".join(t["term"] for t in n["top_terms"][:3])
        last.text(xmax * 1.02, yi, terms, va="center", fontsize=7, color="#444", clip_on=False)
    fig.suptitle(f"{report['model'] or report['method']} ({report['method']}): training documents per node; "
                 "right: top terms vs siblings", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8 if len(panels) > 1 else 0.75, 0.97))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


# ----------------------------------------------------------------- writing
def check_local_output(path: str) -> str:
    """The absolute local path of an inspect output directory; other filesystems are refused (ValueError)."""
    if "://" in path and not path.startswith("file://"):
        raise InputError(f"--output {path!r}: pcem inspect writes plain files to a local directory; "
                         "give a local path (and copy the folder elsewhere afterwards)")
    path = path[len("file://"):] if path.startswith("file://") else path
    path = os.path.abspath(path.rstrip("/") or "/")
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"--output {path!r} exists and is not a directory")
    return path


def write_inspection(out_dir: str, files: Dict[str, bytes], overwrite: bool = False,
                     info: Optional[dict] = None) -> str:
    """Write ``files`` (name -> bytes) as the directory ``out_dir``, atomically; returns its absolute path.

    Built in a hidden temporary sibling ``.NAME.pcem-tmp-RUNID`` with a
    ``_PCEM_COMPLETE`` marker (the convention of :mod:`pcem_spark.outputs`),
    then renamed into place (an existing directory is first renamed aside and
    deleted after): a killed run leaves the old folder or the new one.
    Local filesystem only (:func:`check_local_output`).
    """
    from .outputs import MARKER, OUTPUT_FORMAT_VERSION, new_run_id
    path = check_local_output(out_dir)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    for stale in os.listdir(parent):       # left by a killed run
        if stale.startswith(f".{name}.pcem-tmp-") or stale.startswith(f".{name}.pcem-old-"):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")
    from .output_paths import Output, check_output_paths
    check_output_paths(None, [Output("--output", path, INSPECT_KIND)], [], overwrite)  # no other kind replaced
    run_id = new_run_id()
    tmp = os.path.join(parent, f".{name}.pcem-tmp-{run_id}")
    os.makedirs(tmp)
    try:
        for fname, data in files.items():
            with open(os.path.join(tmp, fname), "wb") as fh:
                fh.write(data)
        marker = {"complete": True, "kind": INSPECT_KIND, "format_version": OUTPUT_FORMAT_VERSION,
                  "run_id": run_id, "files": sorted(files),
                  "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **(info or {})}
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
            json.dump(marker, fh, sort_keys=True)
        old = None
        if os.path.exists(path):
            old = os.path.join(parent, f".{name}.pcem-old-{run_id}")
            os.rename(path, old)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def inspection_files(report: Dict[str, object], confusion: Optional[Dict[str, object]] = None) -> Dict[str, bytes]:
    """The output files (name -> bytes) of a report and, optionally, its confusion tables."""
    files = {"model.md": render_model_markdown(report).encode("utf-8"),
             "model.json": (json.dumps(report, indent=1, ensure_ascii=False) + "\n").encode("utf-8"),
             "taxonomy.html": render_html(report).encode("utf-8")}
    png = render_png(report)
    if png is not None:
        files["taxonomy.png"] = png
    if confusion is not None:
        files["confusion.md"] = render_confusion_markdown(confusion).encode("utf-8")
        files["confusion.json"] = (json.dumps(confusion, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    return files
