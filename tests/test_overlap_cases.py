"""The cases of runs that overlap, outputs that cannot be written and inputs that are not finished, one test
each, through the ``pcem`` command (docs/FAILURES.md, "Runs that overlap").

The overlap is made with functions both this version and the one before it call (the vocabulary read's
``in_index_order``, the write's ``log_progress``, the output protocol's ``maybe_kill``), so each test also
shows the old behaviour failing it.
"""

import contextlib
import json
import os
import re
import threading

import numpy as np
import pytest
from test_outputs import FAST, _write_corpus
from test_predict_evaluate import TAX  # noqa: E402 (the four-topic taxonomy)
from test_tuning import FS  # noqa: E402

from pcem_spark.cli import main
from pcem_spark.cli.failures import EXIT_BAD_INPUT, EXIT_TRANSIENT
from pcem_spark.core.parameters import PathParameters
from pcem_spark.io.outputs import read_marker
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings
from pcem_spark.util.volumes import read_only_mount


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


# Calibration plays no part here: off, for speed.
QUICK = [*FAST, "--set", "model.calibration=none", "--set", "features.stop_words=english"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlap")
    docs = _write_corpus(d / "docs.jsonl")
    return d, docs


@pytest.fixture(scope="module")
def trained(corpus):
    """A model that the tests only read."""
    d, docs = corpus
    model = str(d / "model")
    assert _train(docs, model) == 0
    return model


def _model(seed, vocab_size):
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(vocab_size, 0.3), size=TAX.n_paths)
    params = PathParameters.from_log_theta(np.log(rng.dirichlet(np.ones(TAX.n_paths))), np.log(theta))
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    return PathModel(TAX, [f"s{seed}w{i}" for i in range(vocab_size)], None, params, FS, ms)


def _same(a, b):
    return (
        a.vocabulary == b.vocabulary
        and np.allclose(a.params.log_prior, b.params.log_prior)
        and np.allclose(a.log_theta, b.log_theta)
    )


def _train(docs, model, method="pcnb", *extra):
    return main(["train", "--docs", docs, "--model", model, "--method", method, *QUICK, *extra])


def _predictions(spark, path):
    return sorted((r["id"], tuple(r["path"])) for r in spark.read.parquet(path).select("id", "path").collect())


def _patch_module_function(monkeypatch, modules, name, wrapper):
    for module in modules:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, wrapper(getattr(module, name)))


# ------------------------------------------------------------------ readers against a writer
@pytest.mark.slow
def test_predict_while_train_overwrite_commits_reads_one_model(spark, corpus, tmp_path, monkeypatch):
    """The writer commits between the reader's vocabulary read and its parameters read."""
    from pcem_spark.model import model_files, path_model

    _, docs = corpus
    model = str(tmp_path / "model")
    assert _train(docs, model, "pcnb") == 0
    old_run = read_marker(spark, model)["run_id"]
    # the retrain sees more words: its vocabulary and parameters differ from the old model's in size too
    more_docs = str(tmp_path / "more.jsonl")
    with open(docs) as src, open(more_docs, "w") as dst:
        for line in src:
            doc = json.loads(line)
            doc["text"] += " extra" + doc["id"].split("-")[0][:4]
            dst.write(json.dumps(doc) + "\n")
    expected_old = str(tmp_path / "expected_old")
    assert main(["predict", "--model", model, "--docs", docs, "--output", expected_old, *QUICK]) == 0
    fired = []

    def wrap(original):
        def in_index_order(table, column, what):
            if "vocabulary" in what and not fired:
                fired.append(1)
                thread, box = _in_thread(lambda: _train(more_docs, model, "flat-nb", "--overwrite"))
                thread.join(300)
                assert box.get("value") == 0, box
            return original(table, column, what)

        return in_index_order

    _patch_module_function(monkeypatch, [model_files, path_model], "in_index_order", wrap)
    out = str(tmp_path / "pred")
    assert main(["predict", "--model", model, "--docs", docs, "--output", out, *QUICK]) == 0
    assert fired and read_marker(spark, model)["run_id"] != old_run  # the model was replaced mid-read
    assert _predictions(spark, out) == _predictions(spark, expected_old)  # ... and the old one predicted
    assert read_marker(spark, out)["model_version"] == old_run
    monkeypatch.undo()
    assert PathModel.load(model).model_settings.method == "flat-nb"


@pytest.mark.parametrize("new_vocabulary", ["the same size", "another size"])
def test_a_commit_between_the_vocabulary_and_the_parameters_read_never_mixes(
    spark, tmp_path, monkeypatch, new_vocabulary
):
    from pcem_spark.model import model_files, path_model

    old, new = _model(1, 30), _model(2, 30 if new_vocabulary == "the same size" else 45)
    path = str(tmp_path / "m")
    old.save(path)
    fired = []

    def wrap(original):
        def in_index_order(table, column, what):
            result = original(table, column, what)
            if "vocabulary" in what and not fired:  # the vocabulary is read: a writer commits now
                fired.append(1)
                new.save(path, overwrite=True)
            return result

        return in_index_order

    _patch_module_function(monkeypatch, [model_files, path_model], "in_index_order", wrap)
    loaded = PathModel.load(path)
    assert fired and _same(loaded, old)  # the old model, whole: never its vocabulary with new parameters
    monkeypatch.undo()
    assert _same(PathModel.load(path), new)


def test_a_read_that_fails_because_a_commit_moved_the_version_reads_it_where_it_was_retained(
    spark, tmp_path, monkeypatch
):
    """Spark checks that a file exists, then lists it: a commit that moves the version in between leaves the
    listing empty, and the metadata read fails as "damaged" rather than "missing". The reader must see that the
    pinned files went away and read the retained version, not exit 2."""
    from pcem_spark.errors import InputError
    from pcem_spark.model import model_files, path_model

    old, new = _model(1, 30), _model(2, 30)
    path = str(tmp_path / "m")
    old.save(path)
    fired = []

    def wrap(original):
        def read_model_parts(spark_, snap):
            if not fired:
                fired.append(1)
                new.save(path, overwrite=True)  # the commit lands mid-read ...
                raise InputError(f"{path}/metadata: not a pcem-spark model metadata line (IndexError)")  # ... as seen
            return original(spark_, snap)

        return read_model_parts

    _patch_module_function(monkeypatch, [model_files, path_model], "read_model_parts", wrap)
    loaded = PathModel.load(path)
    assert fired and _same(loaded, old)
    # The same failure with nothing replaced is real damage: still reported as it is.
    fired.clear()
    other = str(tmp_path / "other")
    old.save(other)

    def damaged(original):
        def read_model_parts(spark_, snap):
            raise InputError(f"{other}/metadata: not a pcem-spark model metadata line (IndexError)")

        return read_model_parts

    _patch_module_function(monkeypatch, [model_files, path_model], "read_model_parts", damaged)
    with pytest.raises(InputError, match="metadata line"):
        PathModel.load(other)


def test_a_pinned_table_listed_short_by_spark_is_a_missing_file_not_fewer_rows(spark, tmp_path, monkeypatch):
    from pcem_spark.io.file_system import file_system
    from pcem_spark.io.snapshots import missing_file, resolve

    path = str(tmp_path / "m")
    _model(1, 30).save(path)
    snap = resolve(file_system(spark, path), path, "model")
    assert snap.table(spark, "vocabulary").count() == 30
    frame_type = type(spark.range(1))
    monkeypatch.setattr(frame_type, "inputFiles", lambda self: [])  # what Spark lists when the file just went
    with pytest.raises(FileNotFoundError, match="went away while Spark listed them") as caught:
        snap.table(spark, "vocabulary")
    assert missing_file(caught.value)


# ------------------------------------------------------------------ two writers
def test_a_second_predict_into_the_same_path_exits_75_and_the_first_finishes(
    spark, corpus, trained, tmp_path, monkeypatch
):
    from pcem_spark.engine import progress

    _, docs = corpus
    model = trained
    out = str(tmp_path / "pred")
    assert main(["predict", "--model", model, "--docs", docs, "--output", out, *QUICK]) == 0
    first_in, let_go = threading.Event(), threading.Event()
    original = progress.log_progress

    @contextlib.contextmanager
    def log_progress(*args, **kwargs):
        with original(*args, **kwargs):
            yield
        if threading.current_thread().name == "first":  # the first run's part files are written: wait here
            first_in.set()
            assert let_go.wait(120)

    monkeypatch.setattr(progress, "log_progress", log_progress)
    box = {}
    first = threading.Thread(
        name="first",
        target=lambda: box.update(
            code=main(["predict", "--model", model, "--docs", docs, "--output", out, "--overwrite", *QUICK])
        ),
    )
    first.start()
    assert first_in.wait(300)
    tmp_dirs = [n for n in os.listdir(tmp_path) if n.startswith(".pred.pcem-tmp-")]
    code = main(["predict", "--model", model, "--docs", docs, "--output", out, "--overwrite", *QUICK])
    assert code == EXIT_TRANSIENT
    assert [n for n in os.listdir(tmp_path) if n.startswith(".pred.pcem-tmp-")] == tmp_dirs  # untouched
    let_go.set()
    first.join(300)
    assert box["code"] == 0
    assert read_marker(spark, out)["rows"] == 40


@pytest.mark.slow
def test_a_second_train_while_the_first_saves_exits_75_and_the_model_is_whole(spark, corpus, tmp_path, monkeypatch):
    from pcem_spark.io import outputs

    _, docs = corpus
    model = str(tmp_path / "model")
    assert _train(docs, model) == 0
    first_in, let_go = threading.Event(), threading.Event()
    original = outputs.maybe_kill

    def maybe_kill(kind, point):
        if kind == "model" and point == "staged" and threading.current_thread().name == "first":
            first_in.set()
            assert let_go.wait(120)
        return original(kind, point)

    monkeypatch.setattr(outputs, "maybe_kill", maybe_kill)
    box = {}
    first = threading.Thread(
        name="first", target=lambda: box.update(code=_train(docs, model, "flat-nb", "--overwrite"))
    )
    first.start()
    assert first_in.wait(300)
    assert _train(docs, model, "pcnb", "--overwrite") == EXIT_TRANSIENT
    let_go.set()
    first.join(300)
    assert box["code"] == 0
    loaded = PathModel.load(model)  # complete: metadata, vocabulary and parameters of one run
    assert loaded.model_settings.method == "flat-nb"
    assert sorted(n for n in os.listdir(model) if not n.startswith(".")) == [
        "_PCEM_COMPLETE",
        "metadata",
        "parameters",
        "vocabulary",
    ]


# ------------------------------------------------------------------ outputs that can never be written
@pytest.mark.parametrize("where", ["sysfs", "under a file"])
def test_an_output_that_cannot_be_written_exits_2_before_any_work(spark, corpus, trained, tmp_path, capsys, where):
    _, docs = corpus
    model = trained
    if where == "sysfs":
        out = "/sys/pcem-test-predictions"  # not even root may create a file there
    else:
        (tmp_path / "a_file").write_text("x")
        out = str(tmp_path / "a_file" / "pred")
    capsys.readouterr()
    code = main(["predict", "--model", model, "--docs", docs, "--output", out, *QUICK])
    err = capsys.readouterr().err
    if where == "sysfs" and read_only_mount("/sys"):  # containers mount it read-only: said so, exit 75
        assert code == EXIT_TRANSIENT and f"read-only file system: {out}" in err, err
    else:
        assert code == EXIT_BAD_INPUT and out in err and ("cannot be written" in err or "is a file" in err), err
    assert not os.path.exists(out + "_rejects")  # refused before the documents were read


def test_a_level1_node_name_too_long_for_a_folder_exits_2_before_reading(spark, tmp_path, capsys):
    long_name = "n" * 300
    docs = tmp_path / "docs.jsonl"
    with open(docs, "w") as fh:
        for i in range(12):
            top = long_name if i % 2 else "short"
            fh.write(
                json.dumps({"id": f"d{i}", "text": f"{top[:5]} word{i % 2} common", "labels": [top, f"{top[:3]}x"]})
            )
            fh.write("\n")
    model = str(tmp_path / "model")
    assert _train(str(docs), model) == 0
    out = str(tmp_path / "pred")
    capsys.readouterr()
    code = main(["predict", "--model", model, "--docs", str(docs), "--output", out, "--partition-by", "level1", *QUICK])
    assert code == EXIT_BAD_INPUT
    assert "over the 255 a folder name may have" in capsys.readouterr().err
    assert not os.path.exists(out) and not os.path.exists(out + "_rejects")


# ------------------------------------------------------------------ inputs from an unfinished job
@pytest.fixture(scope="module")
def parquet_docs(spark, corpus):
    d, docs = corpus
    folder = str(d / "docs_parquet")
    spark.read.json(docs).repartition(3).write.parquet(folder)
    return folder


def _copy_folder(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


@pytest.mark.parametrize(
    "case,flags,code,says",
    [
        ("_temporary", [], EXIT_TRANSIENT, "_temporary/ folder"),
        ("zero-byte part", [], EXIT_BAD_INPUT, "zero-byte Parquet file"),
        pytest.param("no _SUCCESS", ["--require-success"], EXIT_TRANSIENT, "no _SUCCESS file", marks=pytest.mark.slow),
        pytest.param("no _SUCCESS", [], 0, "", marks=pytest.mark.slow),
        pytest.param("_temporary", ["--allow-incomplete-input"], 0, "", marks=pytest.mark.slow),
        ("zero-byte part", ["--allow-incomplete-input"], 0, ""),
    ],
)
def test_a_docs_folder_of_an_unfinished_job_is_refused_before_any_work(
    spark, parquet_docs, trained, tmp_path, capsys, caplog, case, flags, code, says
):
    docs = _copy_folder(parquet_docs, tmp_path / "docs")
    if case == "_temporary":
        os.makedirs(os.path.join(docs, "_temporary", "0", "task_1"))
        with open(os.path.join(docs, "_temporary", "0", "task_1", "part-00009.parquet"), "wb") as fh:
            fh.write(b"PAR1")
    elif case == "zero-byte part":
        open(os.path.join(docs, "part-00099-killed.snappy.parquet"), "wb").close()
    else:
        os.remove(os.path.join(docs, "_SUCCESS"))
    out = str(tmp_path / "pred")
    capsys.readouterr()
    got = main(["predict", "--model", trained, "--docs", docs, "--output", out, *flags, *QUICK])
    assert got == code
    if code:
        err = capsys.readouterr().err
        assert says in err and docs in err
        assert not os.path.exists(out) and not os.path.exists(out + "_rejects")
    else:
        counts = read_marker(spark, out)["input"]
        assert counts["rows_read"] == counts["valid"] == 40  # every document of the finished part files
        if flags:
            assert "not finished (--allow-incomplete-input)" in caplog.text


# ------------------------------------------------------------------ reports
MALICIOUS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "nul\u0000byte",
    "rlo\u202etxt.exe",
    "pipe|tick`",
]


@pytest.mark.slow
def test_inspect_reports_cannot_carry_script(spark, tmp_path):
    docs = tmp_path / "docs.jsonl"
    with open(docs, "w") as fh:
        for i in range(36):
            top = MALICIOUS[i % len(MALICIOUS)]
            leaf = MALICIOUS[(i + 1) % len(MALICIOUS)] + " leaf"
            words = f"w{i % len(MALICIOUS)}_x common"
            fh.write(json.dumps({"id": f"d{i}", "text": words, "labels": [top, leaf]}) + "\n")
    model, pred, out = str(tmp_path / "model"), str(tmp_path / "pred"), str(tmp_path / "insp")
    assert _train(str(docs), model) == 0
    predict = ["predict", "--model", model, "--docs", str(docs), "--output", pred, "--node-probabilities"]
    assert main([*predict, *QUICK]) == 0
    assert main(["inspect", "--model", model, "--predictions", pred, "--output", out, "--log-level", "WARNING"]) == 0
    for name in ("model.md", "confusion.md", "reliability.md", "taxonomy.html"):
        text = open(os.path.join(out, name), encoding="utf-8").read()
        for raw in ("<script", "<img", "\u0000", "\u202e"):
            assert raw not in text, (name, raw)
        if name.endswith(".md"):  # no Markdown link, table cell or code span made of a name (inert in HTML)
            assert not re.search(r"(?<!\\)\]\(javascript:|pipe\|tick(?<!\\)`", text), name
    model_md = open(os.path.join(out, "model.md"), encoding="utf-8").read()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in model_md and "rlo&lt;U+202E&gt;txt.exe" in model_md
    assert "\\[x\\](javascript:alert(1))" in model_md and "pipe\\|tick\\`" in model_md
    assert "w0\\_x" in model_md  # a term's underscores are not emphasis
    html = open(os.path.join(out, "taxonomy.html"), encoding="utf-8").read()
    assert "&lt;script&gt;" in html and "&lt;U+0000&gt;" in html


# ------------------------------------------------------------------ cheap guards
def test_partitioning_by_a_column_with_too_many_values_exits_2_before_writing(spark, trained, tmp_path, capsys):
    docs = str(tmp_path / "docs")
    rows = [(f"d{i}", "goal striker silicon wafer", None, f"u{i}") for i in range(30)]
    spark.createDataFrame(rows, "id string, text string, labels array<string>, url string").write.parquet(docs)
    model, out = trained, str(tmp_path / "pred")
    capsys.readouterr()
    args = ["predict", "--model", model, "--docs", docs, "--output", out, "--keep-columns", "url"]
    code = main([*args, "--partition-by", "url", "--set", "predict.max_partitions=10", *QUICK])
    assert code == EXIT_BAD_INPUT
    assert "30 distinct values would make 30 folders, over predict.max_partitions = 10" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_a_kept_column_that_differs_from_an_output_column_only_by_case_exits_2_up_front(tmp_path, capsys, corpus):
    _, docs = corpus
    out = str(tmp_path / "pred")
    code = main(["predict", "--model", str(tmp_path / "m"), "--docs", docs, "--output", out, "--keep-columns", "Path"])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "'Path' clashes with the predictions' own column 'path'" in err and "--keep-columns" in err
    assert not os.path.exists(out + "_rejects")


def test_a_docs_input_replaced_while_a_run_reads_it_exits_75_not_2(spark, tmp_path, monkeypatch, capsys):
    """A pcem-spark documents output is pinned for the run; its files gone mid-run is a retry, not bad input."""
    from pcem_spark.cli import app
    from pcem_spark.io.input_files import input_files
    from pcem_spark.io.outputs import atomic_output

    docs = str(tmp_path / "docs")

    def write_docs(n):
        with atomic_output(spark, docs, "documents", overwrite=True, parts=[""]) as staged:
            spark.createDataFrame(
                [(f"d{i}", "goal striker") for i in range(n)], "id string, text string"
            ).write.parquet(staged.tmp)

    write_docs(5)

    def long_read(args, settings):  # a command that pins --docs, and reads it again after a writer replaced it
        source = input_files(spark, docs)
        assert source.files and source.version == read_marker(spark, docs)["run_id"]
        _in_thread(lambda: write_docs(7))[0].join(120)
        return spark.read.option("basePath", source.base).parquet(*source.files).count() and 0

    monkeypatch.setitem(app.COMMANDS, "evaluate", long_read)
    capsys.readouterr()
    code = main(["evaluate", "--predictions", docs, "--taxonomy", "unused.tsv"])
    assert code == EXIT_TRANSIENT
    assert f"a writer replaced {docs} (pinned version" in capsys.readouterr().err
