"""The class hierarchy: loading, validation, dummy padding and path tables.

A :class:`Taxonomy` is a rooted tree. Classes live at depths 1..d (the root is
depth 0 and is never a class). Following Section 3 of the paper, leaves that
are shallower than the maximum depth ``d`` are padded with *dummy* children
until every leaf is at depth ``d``; a *path* is then the sequence of ``d``
nodes from depth 1 to a (possibly dummy) leaf, and there is one path per leaf.
Dummy nodes take part in the path-score arithmetic (a document labelled with a
shallow leaf is also labelled with the dummies below it, so its own path
scores ``d`` like every other fully correct path) but are never shown in
outputs or metrics.

Everything here is plain Python/numpy; nothing needs Spark.
"""

from __future__ import annotations

import difflib
import json
from collections import OrderedDict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pcem_spark.errors import InputError
from pcem_spark.util.strict_json import StrictJSONError, loads_strict

__all__ = [
    "DUMMY_SEP",
    "PATH_KEY_SEP",
    "path_key",
    "TaxonomyError",
    "dummy_name",
    "Taxonomy",
    "closest_name",
    "load_taxonomy",
]

DUMMY_SEP = "#dummy"
# Joins a label path into one string key (Arrow / Spark lookups of label -> path
# index): the ASCII unit separator. Node names are otherwise free-form (any
# non-empty string, stripped of surrounding whitespace -- which includes
# "\x1f"), so :func:`_check_name` rejects names containing it anywhere; with
# that the join is one-to-one and a key names exactly one label path.
PATH_KEY_SEP = "\x1f"


def path_key(labels: Sequence[str]) -> str:
    """One string per label path: the key of :meth:`Taxonomy.path_keys`."""
    return PATH_KEY_SEP.join(labels)


class TaxonomyError(InputError):
    """The taxonomy (or a label path checked against it) is not valid."""


def dummy_name(leaf: str, level: int) -> str:
    """Name of the dummy node that pads ``leaf`` at ``level`` (1-based)."""
    return f"{leaf}{DUMMY_SEP}{level}"


class Taxonomy:
    """A validated, dummy-padded tree of classes.

    Parameters
    ----------
    children : mapping node -> list of child nodes
        Every node except the root must appear as a child exactly once.
        Leaves may be omitted as keys or map to an empty list.
    root : str, optional
        Name of the root. Inferred (the only node that is nobody's child)
        when omitted.

    Attributes
    ----------
    root : str
    depth : int
        ``d``, the depth of the deepest real leaf.
    nodes : list of str, length K
        All non-root nodes, real and dummy, ordered by depth then name.
        Columns of node-score matrices follow this order.
    paths : list of tuple of str, length M
        Root-excluded paths of length ``d`` ending at every (padded) leaf,
        in a deterministic order (depth-first, children sorted by name).
    """

    def __init__(self, children: Mapping[str, Sequence[str]], root: Optional[str] = None):
        self._children: Dict[str, List[str]] = {}
        parent: Dict[str, str] = {}
        for node, kids in children.items():
            node = _check_name(node)
            if isinstance(kids, (str, bytes)) or not isinstance(kids, Iterable):
                raise TaxonomyError(f"children of node {node!r} must be a list of node names, got {kids!r}")
            kid_list = []
            for kid in kids:
                kid = _check_name(kid)
                if kid == node:
                    raise TaxonomyError(f"node {kid!r} is its own child (cycle)")
                if kid in parent and parent[kid] != node:
                    raise TaxonomyError(f"node {kid!r} has two parents: {parent[kid]!r} and {node!r}")
                if kid in parent:
                    raise TaxonomyError(f"edge {node!r} -> {kid!r} is listed twice")
                parent[kid] = node
                kid_list.append(kid)
            self._children.setdefault(node, []).extend(kid_list)
        all_nodes = set(self._children) | set(parent)
        if not all_nodes:
            raise TaxonomyError("the taxonomy is empty")
        roots = sorted(n for n in all_nodes if n not in parent)
        if root is not None:
            if root not in all_nodes:
                raise TaxonomyError(f"root {root!r} is not a node of the taxonomy")
            if root in parent:
                raise TaxonomyError(f"root {root!r} has a parent {parent[root]!r}")
            others = [r for r in roots if r != root]
            if others:
                raise TaxonomyError(f"more than one root: {root!r} and {others} have no parent")
        else:
            if len(roots) == 0:
                raise TaxonomyError("no root: every node has a parent (the edges contain a cycle)")
            if len(roots) > 1:
                raise TaxonomyError(f"more than one root: {roots[:10]} have no parent; add a single root above them")
            root = roots[0]
        self.root = root
        self._parent = parent
        # Depths by BFS from the root; any node not reached lies on a cycle.
        depth_of = {root: 0}
        frontier = [root]
        while frontier:
            nxt = []
            for node in frontier:
                for kid in self._children.get(node, []):
                    depth_of[kid] = depth_of[node] + 1
                    nxt.append(kid)
            frontier = nxt
        unreached = sorted(all_nodes - set(depth_of))
        if unreached:
            raise TaxonomyError(f"cycle: nodes {unreached[:10]} are not reachable from root {root!r}")
        if len(depth_of) == 1:
            raise TaxonomyError(f"the taxonomy has only the root {root!r} and no classes")
        if any(DUMMY_SEP in n for n in all_nodes):
            bad = sorted(n for n in all_nodes if DUMMY_SEP in n)[:5]
            raise TaxonomyError(f"node names may not contain {DUMMY_SEP!r}: {bad}")
        self.real_nodes = frozenset(all_nodes - {root})
        self.depth = max(depth_of.values())
        self._build_paths(depth_of)

    # ----------------------------------------------------------------- build
    def _build_paths(self, depth_of: Dict[str, int]) -> None:
        paths: List[Tuple[str, ...]] = []
        real_leaf_of_path: List[str] = []

        def walk(node: str, prefix: Tuple[str, ...]) -> None:
            kids = sorted(self._children.get(node, []))
            if not kids:
                leaf = node
                padded = prefix + tuple(dummy_name(leaf, lvl) for lvl in range(len(prefix) + 1, self.depth + 1))
                paths.append(padded)
                real_leaf_of_path.append(leaf)
                return
            for kid in kids:
                walk(kid, prefix + (kid,))

        walk(self.root, ())
        self.paths: List[Tuple[str, ...]] = paths
        self.leaves: List[str] = real_leaf_of_path
        node_depth: Dict[str, int] = {}
        for p in paths:
            for lvl, node in enumerate(p, start=1):
                node_depth[node] = lvl
        self.nodes: List[str] = sorted(node_depth, key=lambda n: (node_depth[n], n))
        self.node_index: Dict[str, int] = {n: k for k, n in enumerate(self.nodes)}
        self._node_depth = node_depth
        self.path_index: Dict[Tuple[str, ...], int] = {p: j for j, p in enumerate(paths)}
        self.is_dummy = np.array([n not in self.real_nodes for n in self.nodes], dtype=bool)

    # ------------------------------------------------------------ accessors
    @property
    def n_paths(self) -> int:
        """M, the number of root-to-leaf paths (= padded leaves)."""
        return len(self.paths)

    @property
    def n_nodes(self) -> int:
        """K, the number of non-root nodes, dummies included."""
        return len(self.nodes)

    def node_depth(self, node: str) -> int:
        if node == self.root:
            return 0
        try:
            return self._node_depth[node]
        except KeyError:
            raise TaxonomyError(f"unknown node {node!r}") from None

    def children(self, node: str) -> List[str]:
        return sorted(self._children.get(node, []))

    def parent(self, node: str) -> Optional[str]:
        return self._parent.get(node)

    def path_node_matrix(self, sparse: bool = False):
        """0/1 membership matrix ``A`` of shape (M, K): ``A[j, k] = 1`` iff node k is on path j.

        ``sparse=True``: a scipy CSR matrix (M x D non-zeros) -- with thousands of
        leaves the dense (M, K) array is hundreds of MB of zeros.
        """
        rows = np.repeat(np.arange(self.n_paths), [len(p) for p in self.paths])
        cols = np.fromiter((self.node_index[node] for p in self.paths for node in p), dtype=np.int64, count=len(rows))
        return self._membership(rows, cols, sparse)

    def _membership(self, rows: np.ndarray, cols: np.ndarray, sparse: bool):
        if sparse:
            import scipy.sparse as sp

            return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(self.n_paths, self.n_nodes))
        a = np.zeros((self.n_paths, self.n_nodes), dtype=np.float64)
        a[rows, cols] = 1.0
        return a

    def leaf_node_matrix(self, sparse: bool = False):
        """Matrix of shape (M, K) with a single 1 per path at its (padded) leaf.

        Used as the scoring matrix of the *flat* baselines: the path score is
        then 1 for the labelled leaf and 0 elsewhere, i.e. one-hot counts.
        ``sparse=True``: a scipy CSR matrix.
        """
        cols = np.array([self.node_index[p[-1]] for p in self.paths], dtype=np.int64)
        return self._membership(np.arange(self.n_paths), cols, sparse)

    def paths_through(self, node: str) -> List[int]:
        """Indices of the paths that contain ``node`` (node -> paths membership)."""
        k = self.node_index.get(node)
        if k is None:
            raise TaxonomyError(f"unknown node {node!r}")
        return [j for j, p in enumerate(self.paths) if node in p]

    def real_path(self, j: int) -> List[str]:
        """Path ``j`` without its dummy nodes (what outputs show)."""
        return [n for n in self.paths[j] if n in self.real_nodes]

    # -------------------------------------------------------------- labels
    def path_of_labels(self, labels: Sequence[str], doc: object = None) -> int:
        """Index of the path whose real nodes are exactly ``labels``.

        ``labels`` is the path from level 1 to a real leaf. Raises a
        :class:`TaxonomyError` naming ``doc`` and the offending node when the
        labels are not a root-to-leaf path of the tree.
        """
        where = f"document {doc!r}: " if doc is not None else ""
        if labels is None or len(labels) == 0:
            raise TaxonomyError(f"{where}empty label path")
        labels = list(labels)
        for lvl, node in enumerate(labels, start=1):
            if node not in self.real_nodes:
                raise TaxonomyError(f"{where}label {node!r} (level {lvl}) is not a node of the taxonomy")
            expected_parent = self.root if lvl == 1 else labels[lvl - 2]
            actual = self._parent.get(node)
            if actual != expected_parent:
                raise TaxonomyError(
                    f"{where}labels {labels} are not a path of the taxonomy: "
                    f"the parent of {node!r} is {actual!r}, not {expected_parent!r}"
                )
        leaf = labels[-1]
        if self._children.get(leaf):
            raise TaxonomyError(
                f"{where}labels {labels} stop at {leaf!r}, which is not a leaf (children: {self.children(leaf)[:5]})"
            )
        padded = tuple(labels) + tuple(dummy_name(leaf, lvl) for lvl in range(len(labels) + 1, self.depth + 1))
        return self.path_index[padded]

    def suggest_path(self, labels: Sequence[str]) -> Optional[List[str]]:
        """The real path a wrong label path most likely meant, or None.

        Cheap on purpose (used only for the few paths an error message lists):
        a known leaf in the wrong place -> that leaf's real path; an unknown
        last label -> the real path of the most similar leaf name (difflib,
        :func:`closest_name`). A path that stops at an inner node gets None:
        its error already lists the children to choose from.
        """
        if not labels:
            return None
        last = str(labels[-1]).strip()
        leaf_path = {leaf: j for j, leaf in enumerate(self.leaves)}  # self.leaves is aligned with self.paths
        if last in self.real_nodes:
            j = leaf_path.get(last)
            if j is None:
                return None
            real = self.real_path(j)
            return real if real != list(labels) else None
        guess = closest_name(last, list(leaf_path))
        return None if guess is None else self.real_path(leaf_path[guess])

    def path_lookup(self) -> Dict[Tuple[str, ...], int]:
        """Map real label path (tuple) -> path index, for fast per-row lookup."""
        return {tuple(self.real_path(j)): j for j in range(self.n_paths)}

    def path_keys(self) -> List[str]:
        """:func:`path_key` of each path's real (dummy-free) label path, in path index order.

        ``path_keys()[j] == path_key(labels)`` for every ``labels, j`` in
        :meth:`path_lookup`.
        """
        return [path_key(self.real_path(j)) for j in range(self.n_paths)]

    # ---------------------------------------------------------- (de)serialise
    def to_dict(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = OrderedDict()
        out[self.root] = self.children(self.root)
        for n in sorted(self.real_nodes, key=lambda n: (self._node_depth[n], n)):
            kids = self.children(n)
            if kids:
                out[n] = kids
        return out

    def to_json(self) -> str:
        return json.dumps({"root": self.root, "children": self.to_dict()})

    @classmethod
    def from_json(cls, text: str, where: str = "taxonomy JSON") -> "Taxonomy":
        """The taxonomy :meth:`to_json` wrote; a key repeated in one object is a :class:`TaxonomyError` naming
        ``where`` and its line (plain JSON keeps the last copy, and the first subtree would vanish)."""
        try:
            obj = loads_strict(text, where)
        except StrictJSONError as exc:
            raise TaxonomyError(str(exc)) from None
        return cls(obj["children"], root=obj.get("root"))

    @classmethod
    def from_edges(cls, edges: Iterable[Tuple[str, str]], root: Optional[str] = None) -> "Taxonomy":
        children: Dict[str, List[str]] = OrderedDict()
        for parent, child in edges:
            children.setdefault(parent, []).append(child)
        return cls(children, root=root)

    @classmethod
    def from_label_paths(cls, label_paths: Iterable[Sequence[str]], root: str = "ROOT") -> "Taxonomy":
        """Infer the tree from observed label paths (level 1 -> leaf).

        A node reached from two different parents is an error naming it.
        """
        parent: Dict[str, str] = {}
        for labels in label_paths:
            prev = root
            for node in labels:
                node = _check_name(node)
                if node == root:
                    raise TaxonomyError(f"label path {list(labels)} contains the root name {root!r}")
                seen = parent.get(node)
                if seen is not None and seen != prev:
                    raise TaxonomyError(f"node {node!r} has two parents in the label paths: {seen!r} and {prev!r}")
                parent[node] = prev
                prev = node
        if not parent:
            raise TaxonomyError("cannot infer a taxonomy: no labelled document")
        return cls.from_edges(sorted((p, c) for c, p in parent.items()), root=root)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Taxonomy) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Taxonomy(root={self.root!r}, depth={self.depth}, nodes={len(self.real_nodes)}, paths={self.n_paths})"


def closest_name(name: str, candidates: Sequence[str], cutoff: float = 0.6) -> Optional[str]:
    """The candidate most similar to ``name`` (difflib ratio >= ``cutoff``), or None.

    For "did you mean" hints only: O(len(candidates)) string comparisons, so
    callers use it for the handful of names a message shows.
    """
    others = [c for c in candidates if c != name]
    match = difflib.get_close_matches(name, others, n=1, cutoff=cutoff)
    return match[0] if match else None


def _check_name(node: object) -> str:
    if not isinstance(node, str) or not node.strip():
        raise TaxonomyError(f"node names must be non-empty strings, got {node!r}")
    node = node.strip()
    if PATH_KEY_SEP in node:
        raise TaxonomyError(
            f"node name {node!r} contains the control character {PATH_KEY_SEP!r} (ASCII unit "
            "separator), which is reserved to join label paths; remove it from the name"
        )
    return node


def load_taxonomy(path: str) -> Taxonomy:
    """Load a taxonomy file.

    ``.json``: an object ``{node: [children...]}`` (optionally wrapped as
    ``{"root": ..., "children": {...}}``). Anything else: TSV lines
    ``parent<TAB>child``; blank lines and lines starting with ``#`` are ignored.
    Errors name the file and line (a JSON key repeated in one object included).
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise TaxonomyError(f"{path}: not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise TaxonomyError(f"{path}: cannot read the taxonomy file ({exc.strerror})") from None
    if path.endswith(".json"):
        try:
            obj = loads_strict(text, path)
        except json.JSONDecodeError as exc:
            raise TaxonomyError(f"{path}: not valid JSON ({exc})") from None
        except StrictJSONError as exc:  # a repeated node would silently drop its first list of children
            raise TaxonomyError(str(exc)) from None
        if not isinstance(obj, dict):
            raise TaxonomyError(f"{path}: expected a JSON object node -> [children], got {type(obj).__name__}")
        try:
            if "children" in obj and isinstance(obj["children"], dict):
                return Taxonomy(obj["children"], root=obj.get("root"))
            return Taxonomy(obj)
        except TaxonomyError as exc:
            raise TaxonomyError(f"{path}: {exc}") from None
    edges = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise TaxonomyError(f"{path}:{lineno}: expected 'parent<TAB>child', got {line!r}")
        edges.append((parts[0].strip(), parts[1].strip()))
    try:
        return Taxonomy.from_edges(edges)
    except TaxonomyError as exc:
        raise TaxonomyError(f"{path}: {exc}") from None
