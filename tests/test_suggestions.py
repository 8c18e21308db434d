"""Which documents to label next (``pcem suggest-labels``): the criteria against numpy, the batch rule, the command.

The criteria's Spark SQL expressions are checked against a plain numpy computation on hand-built
predictions; the ranking on a small model: deterministic for a seed, spread over the pairs of leaves
the model hesitates between, near-duplicate texts once, labelled documents never suggested; the
command end to end: a JSON Lines export whose rows, once a labeller fills in ``labels``, train with
``pcem train --labels``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_abstain import FS, SETTINGS, TAX, TREE, WORDS

from pcem_spark.core.committee import sample_member_parameters
from pcem_spark.core.parameters import sparse_log_parameters
from pcem_spark.errors import InputError
from pcem_spark.ml import train
from pcem_spark.model.schema import OutputOptions
from pcem_spark.model.settings import ModelSettings
from pcem_spark.ops.suggestions import (
    SUGGESTION_COLUMNS,
    Scoring,
    committee_models,
    suggest_labels,
    uncertainty_columns,
)

PRED_SCHEMA = (
    "id string, path array<string>, node_probabilities array<double>, "
    "top_paths array<struct<path: array<string>, probability: double>>"
)


def _reference(top, nodes):
    """(margin score, entropy score, level score, parting level, weakest level) by hand."""
    p = [q for _, q in top]
    margin = 1 - (p[0] - (p[1] if len(p) > 1 else 0.0))
    rest = max(0.0, 1 - sum(p))
    entropy = -sum(q * np.log(q) for q in p + [rest] if q > 0)
    a, b = top[0][0], (top[1][0] if len(top) > 1 else [])
    parting = next((i + 1 for i in range(len(a)) if i >= len(b) or a[i] != b[i]), len(a) + 1)
    return margin, entropy, 1 - min(nodes), parting, int(np.argmin(nodes)) + 1


def test_the_criteria_equal_a_numpy_computation(spark):
    rows = [
        ("a", ["sci", "space"], [0.9, 0.5], [(["sci", "space"], 0.5), (["sci", "med"], 0.4), (["rec", "x"], 0.05)]),
        ("b", ["rec", "x"], [0.6, 0.55], [(["rec", "x"], 0.55), (["sci", "med"], 0.45)]),
        ("c", ["misc"], [1.0], [(["misc"], 1.0)]),
        ("d", ["sci", "space", "r"], [0.97, 0.7, 0.9], [(["sci", "space", "r"], 0.6), (["sci", "space", "p"], 0.1)]),
    ]
    pred = spark.createDataFrame(rows, PRED_SCHEMA)
    got = {}
    for criterion in ("margin", "entropy", "level"):
        score, level, reason = uncertainty_columns(pred, criterion)
        for r in pred.select("id", score.alias("s"), level.alias("l"), reason.alias("r")).collect():
            got[(r.id, criterion)] = (r.s, r.l, r.r)
    for doc_id, _, nodes, top in rows:
        margin, entropy, level_score, parting, weakest = _reference([(p, q) for p, q in top], nodes)
        assert got[(doc_id, "margin")][:2] == (pytest.approx(margin, abs=1e-12), parting)
        assert got[(doc_id, "entropy")][:2] == (pytest.approx(entropy, abs=1e-12), parting)
        assert got[(doc_id, "level")][:2] == (pytest.approx(level_score, abs=1e-12), weakest)
    assert got[("a", "margin")][2] == "margin 0.100 between sci / space and sci / med (they part at level 2)"
    assert got[("c", "margin")][2].endswith("and (no other path) (they part at level 1)")
    assert got[("d", "level")][2] == "level 2: 0.700 sure of space on the path sci / space / r"
    with pytest.raises(InputError, match="criterion"):
        uncertainty_columns(pred, "votes")


def _mixed(a, b, share, rng):
    n_b = int(round(10 * share))
    return " ".join(list(rng.choice(WORDS[a].split(), 10 - n_b)) + list(rng.choice(WORDS[b].split(), n_b)))


@pytest.fixture(scope="module")
def model(spark):
    from test_abstain import _corpus

    return train(_corpus(spark, n_labeled=4), TAX, FS, ModelSettings(method="pcnb", **SETTINGS))[0]


def _pool(spark):
    """Unlabelled documents: many evenly mixed rockets/planets ones (the most uncertain pair), a few
    hockey/baseball and med/misc ones less evenly mixed, clear ones, two copies of one text, labelled ones."""
    rng = np.random.default_rng(5)
    rows = [(f"rp{i}", _mixed("rockets", "planets", 0.5, rng), None) for i in range(8)]
    rows += [(f"hb{i}", _mixed("hockey", "baseball", 0.4, rng), None) for i in range(3)]
    rows += [(f"mm{i}", _mixed("med", "misc", 0.4, rng), None) for i in range(3)]
    rows += [(f"clear{i}", _mixed(leaf, leaf, 0.0, rng), None) for i, leaf in enumerate(WORDS)]
    rows += [("dup1", "launch orbit launch orbit", None), ("dup2", "Launch, orbit! launch orbit", None)]
    rows += [(f"lab{i}", _mixed("rockets", "planets", 0.5, rng), TAX.real_path(0)) for i in range(3)]
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


def test_the_ranking_is_the_same_for_a_seed_and_never_suggests_a_labelled_document(spark, model):
    pool = _pool(spark)
    a = [tuple(r) for r in suggest_labels(model, pool, 10, seed=3).collect()]
    b = [tuple(r) for r in suggest_labels(model, pool.repartition(3), 10, seed=3).collect()]
    assert a == b
    assert [r[1] for r in a] == list(range(1, 11))
    assert not any(r[0].startswith("lab") for r in a)
    assert suggest_labels(model, pool, 10).columns == list(SUGGESTION_COLUMNS)
    # Ties (the two texts of the same words) are ordered by the seed's hash, whatever the input order.
    ties = spark.createDataFrame(
        [(f"t{i}", "launch orbit", None) for i in range(6)], "id string, text string, labels array<string>"
    )
    orders = {tuple(r.id for r in suggest_labels(model, ties, 6, batch="none", seed=s).collect()) for s in range(4)}
    assert len(orders) > 1


def test_the_batch_rule_spreads_the_picks_over_the_pairs_the_model_hesitates_between(spark, model):
    pool = _pool(spark)
    ranked = suggest_labels(model, pool, 100, batch="none").collect()  # every unlabelled document, by score
    assert len(ranked) == pool.where("labels IS NULL").count()

    def pair(r):
        return frozenset(c.path[-1] for c in r.candidates[:2])

    # Brute force: drop the later copy of a text (dup1 / dup2: the same known words), then each pair's best document,
    # the pairs in the order of their best score.
    copies = [r for r in ranked if r.id in ("dup1", "dup2")]
    once = [r for r in ranked if r.id != copies[1].id]
    best = {}
    for r in once:
        best.setdefault(pair(r), r)
    expected = [r.id for r in best.values()][:4]
    spread = suggest_labels(model, pool, 4, batch="spread").collect()
    assert [r.id for r in spread] == expected
    assert len({pair(r) for r in spread}) == 4 > len({pair(r) for r in ranked[:4]})
    # Past one pick per pair, the second turn: every pair's second best, and so on; a text once.
    picked = [r.id for r in suggest_labels(model, pool, 100).collect()]
    assert len(picked) == len(set(picked)) == len(ranked) - 1 and copies[1].id not in picked


@pytest.mark.slow
def test_suggestions_export_as_json_lines_and_read_back_into_train_labels(spark, model, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker
    from pcem_spark.model.path_model import PathModel

    model_dir, docs, out = str(tmp_path / "model"), str(tmp_path / "docs.jsonl"), str(tmp_path / "suggested")
    model.save(model_dir)
    pool = _pool(spark).collect()
    with open(docs, "w") as fh:
        for r in pool:
            fh.write(json.dumps({"id": r.id, "text": r.text, "labels": r.labels}) + "\n")
        fh.write('{"id": "broken"\n')
    argv = ["suggest-labels", "--model", model_dir, "--docs", docs, "--output", out, "--budget", "5"]
    assert main(argv + ["--output-format", "jsonl", "--density-weight", "0.5", "--log-level", "WARNING"]) == 0
    marker = read_marker(spark, out)
    assert marker["rows"] == 5 and marker["input"]["unlabelled"] == len(pool) - 3 and marker["input"]["rejected"] == 1
    assert marker["density_weight"] == 0.5
    (part,) = [n for n in os.listdir(out) if n.endswith(".json")]
    rows = [json.loads(line) for line in open(os.path.join(out, part))]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5] and all(r["labels"] is None for r in rows)
    assert all(len(r["candidates"]) == 3 and r["excerpt"] and r["reason"] for r in rows)
    # The labeller answers 4 of them (the first candidate) and skips one.
    with open(os.path.join(out, part), "w") as fh:
        for r in rows:
            fh.write(json.dumps({**r, "labels": r["candidates"][0]["path"] if r["rank"] < 5 else None}) + "\n")
    trained = str(tmp_path / "retrained")
    from test_labels_merge import FEW_ITERATIONS, FIXED

    fixed = [*FIXED, *FEW_ITERATIONS]

    taxonomy = str(tmp_path / "taxonomy.json")
    with open(taxonomy, "w") as fh:
        json.dump(TREE, fh)
    assert main(["train", "--docs", docs, "--labels", out, "--taxonomy", taxonomy, "--model", trained, *fixed]) == 0
    got = PathModel.load(trained).training_summary["input"]["labels_table"]
    assert (got["rows_read"], got["merged"], got["added"], got["rejected"]) == (5, 4, 4, 1)
    assert all(r["typicality"] <= 0 and r["reason"].endswith(" nats") for r in rows)
    # Refused before Spark starts: a budget below 1, a negative density weight.
    assert main(argv[:-1] + ["0", "--overwrite"]) == 2
    assert main(argv + ["--density-weight", "-1", "--overwrite"]) == 2


def test_suggest_labels_refuses_bad_settings(spark, model):
    pool = _pool(spark)
    for kwargs, needle in [
        (dict(budget=0), "budget"),
        (dict(budget=3, candidates=1), "candidates"),
        (dict(budget=3, batch="clusters"), "batch"),
        (dict(budget=3, scoring=Scoring("votes")), "criterion"),
        (dict(budget=3, scoring=Scoring(density_weight=-1.0)), "density-weight"),
    ]:
        with pytest.raises(InputError, match=needle):
            suggest_labels(model, pool, **kwargs)


def test_committee_members_are_draws_from_the_dirichlet_posterior_of_the_counts():
    """Each member is a distribution per component with the model's non-zeros; their mean is the posterior mean
    (c + s) / (N + V s) (the unseen words' share included), and a seed gives the same members."""
    counts = np.array([[5.0, 0.0, 2.0, 0.0, 0.0, 1.0], [0.0, 30.0, 0.0, 0.0, 4.0, 0.0]])
    s = 0.5
    params = sparse_log_parameters(counts, counts.sum(axis=1), smoothing=s)
    rng = np.random.default_rng(11)
    draws = [sample_member_parameters(params, s, rng) for _ in range(4000)]
    thetas = np.exp(np.stack([d.log_theta() for d in draws]))
    np.testing.assert_allclose(thetas.sum(axis=2), 1.0, atol=1e-12)
    assert all((d.log_ratio != 0).nnz <= params.log_ratio.nnz for d in draws[:5])
    posterior_mean = (counts + s) / (counts.sum(axis=1, keepdims=True) + counts.shape[1] * s)
    np.testing.assert_allclose(thetas.mean(axis=0), posterior_mean, atol=0.01)
    # The spread shrinks with the counts: the 30-count word varies less than the 5-count one (relative).
    rel = thetas.std(axis=0) / thetas.mean(axis=0)
    assert rel[1, 1] < rel[0, 0]
    again = sample_member_parameters(params, s, np.random.default_rng(11))
    np.testing.assert_array_equal(again.log_theta(), draws[0].log_theta())


def test_the_committee_criterion_equals_a_brute_force_reference(spark, model):
    """Dense numpy, from the members' parameters: each member's path posterior (prior + counts x log theta,
    normalised), its 3 best paths, the mean over the members (0 where a member does not list a path) and the
    mean KL divergence from it; the ranking with batch none is by that score."""
    import re

    # The members share the model's calibration: Eq. 5's joint log-likelihoods over its temperature.
    assert model.probability_map is None and model.linear is None
    temperature = model.effective_temperature
    pool = _pool(spark).where("labels IS NULL")
    size, k, seed = 3, 3, 7
    got = {
        r.id: r
        for r in suggest_labels(
            model, pool, 100, Scoring("committee", committee_size=size), batch="none", candidates=k, seed=seed
        ).collect()
    }
    members = committee_models(model, size, seed)
    index = {w: j for j, w in enumerate(model.vocabulary)}
    expected = {}
    for r in pool.collect():
        x = np.zeros(len(index))
        for w in re.findall(r"[a-z]+", r.text.lower()):
            if w in index:
                x[index[w]] += 1
        lists = []
        for m in members:
            logp = (m.params.log_prior + m.params.log_theta() @ x) / temperature
            post = np.exp(logp - logp.max())
            post /= post.sum()
            top = np.argsort(-post, kind="stable")[:k]
            lists.append({int(j): post[j] for j in top})
        mean = {j: sum(lst.get(j, 0.0) for lst in lists) / size for lst in lists for j in lst}
        expected[r.id] = sum(q * np.log(q / mean[j]) for lst in lists for j, q in lst.items() if q > 0) / size
    assert set(got) == set(expected)
    for doc_id, score in expected.items():
        assert got[doc_id].score == pytest.approx(score, abs=1e-9), doc_id
        assert got[doc_id].criterion == "committee"
    order = [r.id for r in sorted(got.values(), key=lambda r: r.rank)]
    assert [expected[i] for i in order] == pytest.approx(sorted(expected.values(), reverse=True), abs=1e-9)
    # The mixed rockets/planets texts divide the committee more than the clear ones.
    assert max(expected[f"rp{i}"] for i in range(8)) > max(expected[f"clear{i}"] for i in range(len(WORDS)))
    top = got[order[0]]
    assert top.reason.startswith("committee disagreement ") and f"the {size} members' best paths: " in top.reason
    with pytest.raises(InputError, match="committee-size"):
        suggest_labels(model, pool, 3, Scoring("committee", committee_size=1))


def _counts(model, texts):
    """Dense term counts over the model's vocabulary, tokenised by hand (the test words are lowercase)."""
    import re

    index = {w: j for j, w in enumerate(model.vocabulary)}
    X = np.zeros((len(texts), len(index)))
    for i, text in enumerate(texts):
        for w in re.findall(r"[a-z]+", text.lower()):
            if w in index:
                X[i, index[w]] += 1
    return X


def test_the_typicality_column_is_the_kl_divergence_from_the_predicted_path(spark, model, staged_shipping):
    """Dense numpy: -KL(p || theta of the predicted path), every route of the decoder (exact, beam)."""
    pool = (
        _pool(spark)
        .where("labels IS NULL")
        .union(spark.createDataFrame([("unknown", "zzz qqq", None)], "id string, text string, labels array<string>"))
    )
    texts = {r.id: r.text for r in pool.collect()}
    log_theta = model.params.log_theta()
    paths = [tuple(model.taxonomy.real_path(j)) for j in range(model.taxonomy.n_paths)]
    for beam in (0, 2):
        rows = model.transform_outputs(pool, OutputOptions(typicality=True), beam=beam).collect()
        assert len(rows) == len(texts)
        X = _counts(model, [texts[r.id] for r in rows])
        for r, x in zip(rows, X):
            if x.sum() == 0:
                assert r.id == "unknown" and r.typicality is None
                continue
            p = x / x.sum()
            nz = p > 0
            best = paths.index(tuple(r.path))
            want = float(np.sum(p[nz] * log_theta[best, nz]) - np.sum(p[nz] * np.log(p[nz])))
            assert r.typicality == pytest.approx(want, abs=1e-9), (beam, r.id)
    assert "typicality" not in model.transform(pool).columns
    with pytest.raises(InputError, match="clashes with the predictions' own column 'typicality'"):
        model.transform(pool.withColumnRenamed("labels", "Typicality"), keep_columns=["Typicality"])


def test_the_density_weight_ranks_outliers_lower_and_never_suggests_what_the_model_cannot_read(spark, model):
    """The score is the margin times exp(beta * typicality) (brute force from the columns); a document with
    no known word, the most uncertain by its margin alone (the prior's), comes last at any beta."""
    rng = np.random.default_rng(3)
    # Typical mixed documents, and outliers: a word of every leaf, like nothing the model has seen together.
    rows = [(f"mix{i}", _mixed("rockets", "planets", 0.5, rng), None) for i in range(4)]
    rows += [(f"odd{i}", " ".join(rng.choice(w.split()) for w in WORDS.values()), None) for i in range(3)]
    rows += [(f"sure{i}", _mixed("med", "med", 0.0, rng), None) for i in range(2)]
    rows += [("unknown", "zzz qqq xxx", None)]
    pool = spark.createDataFrame(rows, "id string, text string, labels array<string>")
    margin_only = {
        r.id: 1 - r.top_paths[0].probability + r.top_paths[1].probability
        for r in model.transform(pool, top_k=2).collect()
    }
    assert max(margin_only, key=margin_only.get) == "unknown"  # what density weighting must not pick first
    rankings = {}
    for beta in (0.0, 1.0, 4.0):
        got = suggest_labels(model, pool, 100, Scoring(density_weight=beta), batch="none").collect()
        assert [r.id for r in got][-1] == "unknown" and got[-1].score == 0 and got[-1].typicality is None
        assert got[-1].reason.endswith("; no word the model knows")
        for r in got[:-1]:
            assert r.score == pytest.approx(margin_only[r.id] * np.exp(beta * r.typicality), abs=1e-12)
            assert r.reason.endswith(f"; typicality {r.typicality:.3f} nats")
        assert [r.score for r in got] == sorted((r.score for r in got), reverse=True)
        rankings[beta] = [r.id for r in got]
    # The outliers hesitate as much as the mixed documents, but are far from every path's words.
    assert sorted(rankings[4.0][:4]) == [f"mix{i}" for i in range(4)]
    assert any(i.startswith("odd") for i in rankings[0.0][:4])


def test_the_fingerprint_column_is_the_bag_of_known_words_hashed(spark, model):
    """Spark's column against ``bag_fingerprints`` of hand-made counts, on the exact and the beam decoder."""
    import scipy.sparse as sp
    from chispa import assert_df_equality

    from pcem_spark.core.fingerprints import bag_fingerprints

    pool = _pool(spark).union(
        spark.createDataFrame(
            [("unknown", "zzz qqq", None), ("shuffled", "orbit LAUNCH orbit; launch", None)],
            "id string, text string, labels array<string>",
        )
    )
    rows = pool.collect()
    values, empty = bag_fingerprints(sp.csr_matrix(_counts(model, [r.text for r in rows])))
    expected = spark.createDataFrame(
        [(r.id, None if e else int(v)) for r, v, e in zip(rows, values, empty)], "id string, bag_fingerprint long"
    )
    for beam in (0, 2):
        got = model.transform_outputs(pool, OutputOptions(fingerprint=True), beam=beam).select("id", "bag_fingerprint")
        assert_df_equality(got, expected, ignore_row_order=True)
    by_id = {r.id: r.bag_fingerprint for r in expected.collect()}
    assert by_id["dup1"] == by_id["dup2"] == by_id["shuffled"] and by_id["unknown"] is None
    assert "bag_fingerprint" not in model.transform(pool).columns


def test_documents_in_other_scripts_are_not_taken_for_copies_of_each_other(spark, model):
    """Texts with no ASCII letter (Cyrillic, CJK, Greek) are distinct documents: each is suggested once; two
    that only differ in case and punctuation, or in words the model does not know, count once."""
    texts = ["Привет, мир", "Ракета на орбите", "火箭发射", "宇宙探索", "Η πύραυλος", "launch orbit земля"]
    rows = [(f"u{i}", t, None) for i, t in enumerate(texts)] + [("u6", "LAUNCH orbit", None)]
    docs = spark.createDataFrame(rows, "id string, text string, labels array<string>")
    picked = [r.id for r in suggest_labels(model, docs, 10).collect()]
    assert sorted(picked) == [f"u{i}" for i in range(5)] + sorted({"u5", "u6"} & set(picked))
    assert len({"u5", "u6"} & set(picked)) == 1  # the same known words, launch and orbit once each
