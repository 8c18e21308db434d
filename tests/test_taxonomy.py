import json

import numpy as np
import pytest

from pcem_spark.core.taxonomy import (
    PATH_KEY_SEP,
    Taxonomy,
    TaxonomyError,
    closest_name,
    dummy_name,
    load_taxonomy,
    path_key,
)

# The paper's Figure 1 shape: two level-1 nodes with three children each.
FIG1 = {"ROOT": ["c1", "c2"], "c1": ["c11", "c12", "c13"], "c2": ["c21", "c22", "c23"]}


def test_paths_are_enumerated_depth_first_with_sorted_children():
    t = Taxonomy(FIG1)
    assert t.root == "ROOT"
    assert t.depth == 2
    assert t.paths == [("c1", "c11"), ("c1", "c12"), ("c1", "c13"), ("c2", "c21"), ("c2", "c22"), ("c2", "c23")]
    assert t.n_paths == 6 and t.n_nodes == 8
    assert t.nodes[:2] == ["c1", "c2"]
    assert t.node_depth("c1") == 1 and t.node_depth("c23") == 2 and t.node_depth("ROOT") == 0
    assert t.paths_through("c2") == [3, 4, 5]
    assert t.paths_through("c12") == [1]


def test_shallow_leaves_are_padded_with_dummies_hidden_from_outputs():
    t = Taxonomy({"R": ["a", "b"], "a": ["a1"], "a1": ["a11", "a12"]})
    assert t.depth == 3
    assert ("b", dummy_name("b", 2), dummy_name("b", 3)) in t.paths
    j = t.paths.index(("b", dummy_name("b", 2), dummy_name("b", 3)))
    assert t.real_path(j) == ["b"]
    assert t.is_dummy.sum() == 2
    assert set(t.real_nodes) == {"a", "b", "a1", "a11", "a12"}
    # A document labelled with the shallow leaf maps to the padded path.
    assert t.path_of_labels(["b"]) == j
    assert t.path_lookup()[("b",)] == j


def test_path_keys_follow_path_lookup_and_names_cannot_contain_the_separator():
    t = Taxonomy({"R": ["a", "b"], "a": ["a1"], "a1": ["a11", "a12"]})
    keys = t.path_keys()
    assert len(keys) == t.n_paths
    assert {labels: keys[j] for labels, j in t.path_lookup().items()} == {
        labels: path_key(labels) for labels in t.path_lookup()
    }
    assert keys[t.path_of_labels(["b"])] == "b"
    assert keys[t.path_of_labels(["a", "a1", "a12"])] == f"a{PATH_KEY_SEP}a1{PATH_KEY_SEP}a12"
    with pytest.raises(TaxonomyError, match="reserved to join label paths"):
        Taxonomy({"R": ["a", f"b{PATH_KEY_SEP}c"]})
    with pytest.raises(TaxonomyError, match="reserved to join label paths"):
        Taxonomy.from_label_paths([["a", f"x{PATH_KEY_SEP}y"]])


def test_path_node_matrix_gives_shared_node_counts():
    t = Taxonomy(FIG1)
    a = t.path_node_matrix()
    assert a.shape == (6, 8)
    assert np.all(a.sum(axis=1) == 2)
    shared = a @ a.T
    assert shared[1, 1] == 2 and shared[1, 0] == 1 and shared[1, 3] == 0
    leaf = t.leaf_node_matrix()
    assert np.array_equal(leaf @ a.T, np.eye(6)) or np.array_equal((a @ leaf.T), np.eye(6))


def test_two_roots_is_an_error_naming_them():
    with pytest.raises(TaxonomyError, match=r"more than one root.*'a'.*'b'"):
        Taxonomy({"a": ["a1"], "b": ["b1"]})


def test_cycle_is_an_error():
    with pytest.raises(TaxonomyError, match="no root: every node has a parent"):
        Taxonomy({"a": ["b"], "b": ["a"]})
    with pytest.raises(TaxonomyError, match=r"cycle: nodes \['b', 'c'\] are not reachable"):
        Taxonomy({"R": ["a"], "b": ["c"], "c": ["b"]})
    with pytest.raises(TaxonomyError, match="cycle"):
        Taxonomy({"R": ["a"], "x": ["y"], "y": ["x"]}, root="R")


def test_node_with_two_parents_is_an_error_naming_it():
    with pytest.raises(TaxonomyError, match=r"'shared' has two parents"):
        Taxonomy({"R": ["a", "b"], "a": ["shared"], "b": ["shared"]})


def test_label_path_errors_name_the_document_and_node():
    t = Taxonomy(FIG1)
    with pytest.raises(TaxonomyError, match=r"document 'doc-7'.*'nope'.*not a node"):
        t.path_of_labels(["c1", "nope"], doc="doc-7")
    with pytest.raises(TaxonomyError, match=r"document 'd'.*parent of 'c21' is 'c2', not 'c1'"):
        t.path_of_labels(["c1", "c21"], doc="d")
    with pytest.raises(TaxonomyError, match=r"stop at 'c1', which is not a leaf"):
        t.path_of_labels(["c1"], doc="d")
    assert t.path_of_labels(["c2", "c22"]) == 4


def test_infer_from_label_paths_and_conflicting_parent():
    t = Taxonomy.from_label_paths([["sci", "sci.space"], ["sci", "sci.med"], ["rec", "rec.autos"]])
    assert t.paths == [("rec", "rec.autos"), ("sci", "sci.med"), ("sci", "sci.space")]
    with pytest.raises(TaxonomyError, match=r"'x' has two parents in the label paths"):
        Taxonomy.from_label_paths([["a", "x"], ["b", "x"]])


def test_load_tsv_and_json(tmp_path):
    tsv = tmp_path / "tax.tsv"
    tsv.write_text("# parent child\nROOT\tc1\nROOT\tc2\nc1\tc11\n\nc2\tc21\n")
    t = load_taxonomy(str(tsv))
    assert t.paths == [("c1", "c11"), ("c2", "c21")]
    js = tmp_path / "tax.json"
    js.write_text(json.dumps(FIG1))
    assert load_taxonomy(str(js)) == Taxonomy(FIG1)
    assert Taxonomy.from_json(Taxonomy(FIG1).to_json()) == Taxonomy(FIG1)


def test_bad_tsv_line_names_file_and_line(tmp_path):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("ROOT\tc1\nROOT c2\n")
    with pytest.raises(TaxonomyError, match=r"bad.tsv:2: expected 'parent<TAB>child'"):
        load_taxonomy(str(tsv))


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_json_taxonomy_with_a_repeated_node_names_file_key_and_line(tmp_path, wrapped):
    """Plain JSON keeps the last copy of a key: the first "c1" subtree would vanish without a word."""
    body = '  "ROOT": ["c1", "c2"],\n  "c1": ["c11", "c12"],\n  "c2": ["c21"],\n  "c1": ["c13"]\n'
    text = '{"root": "ROOT", "children": {\n' + body + "}}" if wrapped else "{\n" + body + "}"
    js = tmp_path / "tax.json"
    js.write_text(text)
    first = r"\(its first copy is at line 3"
    with pytest.raises(TaxonomyError, match=rf'^{js}: line 5, column 3: repeated key "c1" {first}'):
        load_taxonomy(str(js))
    # the same node under two parents' lists is the taxonomy's own check, not a JSON one
    js.write_text('{"ROOT": ["a", "b"], "a": ["x"], "b": ["y"]}')
    assert load_taxonomy(str(js)).n_paths == 2


def test_taxonomy_from_json_refuses_a_repeated_key_naming_where():
    text = '{"root": "R", "children": {"R": ["a"], "a": ["a1"], "a": ["a2"]}}'
    with pytest.raises(TaxonomyError, match=r'^PathEM taxonomy Param: line 1, column 53: repeated key "a"'):
        Taxonomy.from_json(text, "PathEM taxonomy Param")
    with pytest.raises(TaxonomyError, match=r"^taxonomy JSON: line 1"):
        Taxonomy.from_json(text)


def test_suggest_path_for_wrong_labels():
    t = Taxonomy({"ROOT": ["sci", "rec", "misc"], "sci": ["sci.space", "sci.med"], "rec": ["rec.autos"]})
    assert t.suggest_path(["sci", "sci.spcae"]) == ["sci", "sci.space"]  # typo of a leaf
    assert t.suggest_path(["rec", "sci.med"]) == ["sci", "sci.med"]  # known leaf, wrong parent
    assert t.suggest_path(["misk"]) == ["misc"]  # shallow leaf
    assert t.suggest_path(["sci"]) is None  # stops at an inner node
    assert t.suggest_path(["sci", "sci.space"]) is None  # already right
    assert t.suggest_path(["zzz", "qqqqqq"]) is None  # nothing similar
    assert t.suggest_path([]) is None


def test_closest_name_cutoff_and_self():
    assert closest_name("comp.graphcis", ["comp.graphics", "comp.windows.x"]) == "comp.graphics"
    assert closest_name("tech", ["text"], cutoff=0.8) is None
    assert closest_name("a", ["a"]) is None  # never itself
