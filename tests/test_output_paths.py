"""No output flag can clobber data: not the run's own input or model, not another kind of output,
not an existing path without --overwrite (pcem_spark.io.output_paths).

Every command runs in this process on the test session's SparkSession (``main``), so a refused run
costs no JVM start; each test checks the exit code, the message and that the data is untouched.
"""

import hashlib
import json
import os

import pytest
from test_outputs import FAST, _write_corpus

from pcem_spark.cli import main
from pcem_spark.cli.failures import EXIT_BAD_INPUT
from pcem_spark.errors import OutputPathError
from pcem_spark.io.output_paths import Output, check_output_paths, qualify
from pcem_spark.io.outputs import MARKER, read_marker
from pcem_spark.io.warc import split_inputs


def _digest(path):
    """A fingerprint of a file or directory tree (names, sizes, bytes), to prove it was not touched."""
    h = hashlib.sha256()
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            h.update(fh.read())
        return h.hexdigest()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    """A documents file, a trained model and its predictions."""
    d = tmp_path_factory.mktemp("paths")
    docs = _write_corpus(d / "docs.jsonl")
    model = str(d / "model")
    # fixed settings: the paths are the point, not the default pipeline's calibration, names and stop list
    fixed = ["--set", "model.calibration=none", "--set", "model.names=off", "--set", "features.stop_words=none"]
    assert main(["train", "--docs", docs, "--model", model, *FAST, *fixed]) == 0
    preds = str(d / "preds")
    assert main(["predict", "--model", model, "--docs", docs, "--output", preds, *FAST]) == 0
    return {"dir": d, "docs": docs, "model": model, "preds": preds}


def _refused(args, capsys, *needles):
    code = main(list(args) + FAST)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err[-2000:]
    for needle in needles:
        assert needle in err, err[-2000:]
    return err


# ------------------------------------------------------------ the reported cases
@pytest.mark.slow
def test_predict_rejects_pointing_at_the_input_table_is_refused_and_the_input_kept(world, tmp_path, capsys):
    # pcem predict --model M --docs D --output P --rejects D, with and without --overwrite.
    before = _digest(world["docs"])
    for extra in ([], ["--overwrite"]):
        _refused(
            [
                "predict",
                "--model",
                world["model"],
                "--docs",
                world["docs"],
                "--output",
                str(tmp_path / "p"),
                "--rejects",
                world["docs"],
                *extra,
            ],
            capsys,
            "--rejects",
            "the run's input --docs",
        )
        assert _digest(world["docs"]) == before
    assert not os.path.exists(tmp_path / "p")


def test_predict_rejects_pointing_at_the_model_is_refused_and_the_model_kept(world, tmp_path, capsys):
    before = _digest(world["model"])
    for extra in ([], ["--overwrite"]):
        _refused(
            [
                "predict",
                "--model",
                world["model"],
                "--docs",
                world["docs"],
                "--output",
                str(tmp_path / "p"),
                "--rejects",
                world["model"],
                *extra,
            ],
            capsys,
            "the run's input --model",
        )
        assert _digest(world["model"]) == before
    assert read_marker(_spark(), world["model"])["kind"] == "model"


def _spark():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def test_rejects_over_a_model_of_another_run_is_refused_even_with_overwrite(world, tmp_path, capsys):
    # Not this run's input, but a complete output of another kind: never replaced.
    other = str(world["dir"] / "model-copy")
    import shutil

    shutil.copytree(world["model"], other, dirs_exist_ok=True)
    before = _digest(other)
    _refused(
        [
            "predict",
            "--model",
            world["model"],
            "--docs",
            world["docs"],
            "--output",
            str(tmp_path / "p"),
            "--rejects",
            other,
            "--overwrite",
        ],
        capsys,
        "holds a complete pcem-spark model output",
        "even with --overwrite",
    )
    assert _digest(other) == before


def test_an_existing_rejects_path_needs_overwrite(world, tmp_path, capsys):
    someone = tmp_path / "someone-elses"
    someone.mkdir()
    (someone / "data.csv").write_text("a,b\n1,2\n")
    _refused(
        [
            "predict",
            "--model",
            world["model"],
            "--docs",
            world["docs"],
            "--output",
            str(tmp_path / "p"),
            "--rejects",
            str(someone),
        ],
        capsys,
        "already exists; pass --overwrite",
    )
    assert (someone / "data.csv").read_text() == "a,b\n1,2\n"
    assert (
        main(
            [
                "predict",
                "--model",
                world["model"],
                "--docs",
                world["docs"],
                "--output",
                str(tmp_path / "p"),
                "--rejects",
                str(someone),
                "--overwrite",
                *FAST,
            ]
        )
        == 0
    )
    assert json.loads((someone / MARKER).read_text())["kind"] == "rejects"


@pytest.mark.slow
def test_a_retry_replaces_its_own_rejects_without_overwrite(world, tmp_path):
    out, rej = str(tmp_path / "p"), str(tmp_path / "r")
    assert (
        main(["predict", "--model", world["model"], "--docs", world["docs"], "--output", out, "--rejects", rej, *FAST])
        == 0
    )
    import shutil

    shutil.rmtree(out)  # as if the run had died after writing its rejects
    assert (
        main(["predict", "--model", world["model"], "--docs", world["docs"], "--output", out, "--rejects", rej, *FAST])
        == 0
    )


# ------------------------------------------------------------ --output / --model of every command
@pytest.mark.parametrize("which", ["docs", "model", "inside-model", "parent-of-docs"])
def test_predict_output_cannot_be_or_contain_the_input_or_model(world, which, capsys):
    target = {
        "docs": world["docs"],
        "model": world["model"],
        "inside-model": os.path.join(world["model"], "sub"),
        "parent-of-docs": str(world["dir"]),
    }[which]
    before = (_digest(world["docs"]), _digest(world["model"]))
    _refused(
        ["predict", "--model", world["model"], "--docs", world["docs"], "--output", target, "--overwrite"],
        capsys,
        "--output",
    )
    assert (_digest(world["docs"]), _digest(world["model"])) == before


def test_predict_output_over_another_kind_is_refused_even_with_overwrite(world, tmp_path, capsys):
    import shutil

    other = str(tmp_path / "a-model")
    shutil.copytree(world["model"], other)
    _refused(
        ["predict", "--model", world["model"], "--docs", world["docs"], "--output", other, "--overwrite"],
        capsys,
        "holds a complete pcem-spark model output",
    )
    assert read_marker(_spark(), other)["kind"] == "model"


def test_train_model_cannot_replace_its_documents_init_model_or_predictions(world, tmp_path, capsys):
    before = _digest(world["preds"])
    _refused(
        ["train", "--docs", world["docs"], "--model", world["docs"], "--overwrite"], capsys, "the run's input --docs"
    )
    _refused(
        ["train", "--docs", world["docs"], "--model", world["model"], "--init-model", world["model"], "--overwrite"],
        capsys,
        "the run's input --init-model",
    )
    _refused(
        ["train", "--docs", world["docs"], "--model", world["preds"], "--overwrite"],
        capsys,
        "holds a complete pcem-spark predictions output",
    )
    _refused(
        ["train", "--docs", world["docs"], "--model", str(tmp_path / "m"), "--rejects", world["preds"], "--overwrite"],
        capsys,
        "predictions output",
    )
    _refused(
        ["train", "--docs", world["docs"], "--model", str(tmp_path / "m"), "--rejects", str(tmp_path / "m")],
        capsys,
        "overlap",
    )
    assert _digest(world["preds"]) == before


def test_experiment_output_dir_cannot_be_the_input_or_a_model(world, capsys):
    before = (_digest(world["docs"]), _digest(world["model"]))
    _refused(
        [
            "experiment",
            "--docs",
            world["docs"],
            "--output-dir",
            world["docs"],
            "--methods",
            "pcnb",
            "--rates",
            "0.5",
            "--seeds",
            "1",
        ],
        capsys,
        "--output-dir",
    )
    _refused(
        [
            "experiment",
            "--docs",
            world["docs"],
            "--output-dir",
            world["model"],
            "--methods",
            "pcnb",
            "--rates",
            "0.5",
            "--seeds",
            "1",
        ],
        capsys,
        "is a pcem-spark model output",
    )
    assert (_digest(world["docs"]), _digest(world["model"])) == before


def test_inspect_output_cannot_replace_the_model_or_predictions(world, capsys):
    before = (_digest(world["model"]), _digest(world["preds"]))
    _refused(
        ["inspect", "--model", world["model"], "--output", world["model"], "--overwrite"],
        capsys,
        "the run's input --model",
    )
    _refused(
        [
            "inspect",
            "--model",
            world["model"],
            "--predictions",
            world["preds"],
            "--output",
            os.path.join(world["preds"], "inspection"),
        ],
        capsys,
        "lies inside the run's input --predictions",
    )
    assert (_digest(world["model"]), _digest(world["preds"])) == before


def test_ingest_20ng_output_cannot_be_its_archive_and_needs_overwrite(tmp_path, capsys):
    archive = tmp_path / "20news.tar.gz"
    archive.write_bytes(b"not read: refused before")
    _refused(
        ["ingest-20ng", "--archive", str(archive), "--output", str(archive), "--overwrite"],
        capsys,
        "the run's input --archive",
    )
    existing = tmp_path / "docs.jsonl.gz"
    existing.write_bytes(b"yesterday's documents")
    _refused(
        ["ingest-20ng", "--archive", str(archive), "--output", str(existing)],
        capsys,
        "already exists; pass --overwrite",
    )
    assert existing.read_bytes() == b"yesterday's documents"


def test_ingest_warc_outputs_cannot_hit_their_inputs_or_other_outputs(world, tmp_path, capsys):
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    (crawl / "a.warc.gz").write_bytes(b"")
    before = _digest(str(crawl))
    _refused(
        ["ingest-warc", "--input", str(crawl / "*.warc.gz"), "--output", str(crawl / "a.warc.gz"), "--overwrite"],
        capsys,
        "is matched by the run's input --input",
    )
    _refused(
        ["ingest-warc", "--input", str(crawl / "*.warc.gz"), "--output", str(crawl), "--overwrite"],
        capsys,
        "contains the files of the run's input --input",
    )
    _refused(
        [
            "ingest-warc",
            "--input",
            str(crawl),
            "--output",
            str(tmp_path / "d"),
            "--rejects",
            world["model"],
            "--overwrite",
        ],
        capsys,
        "holds a complete pcem-spark model output",
    )
    assert _digest(str(crawl)) == before


# ------------------------------------------------------------ unit level
def test_qualified_paths_compare_equal_across_spellings(spark, tmp_path):
    (tmp_path / "a").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    forms = [
        str(tmp_path / "a"),
        str(tmp_path / "a") + "/",
        "file://" + str(tmp_path / "a"),
        str(tmp_path / "link"),
        os.path.relpath(tmp_path / "a"),
    ]
    assert len({qualify(spark, f) for f in forms}) == 1
    assert len({qualify(None, f) for f in forms}) == 1


def test_a_results_folder_may_hold_the_input_but_not_be_inside_it(tmp_path):
    docs = tmp_path / "exp" / "docs.jsonl"
    docs.parent.mkdir()
    docs.write_text("{}\n")
    # The experiment writes named files into its folder: a folder that holds the input is fine ...
    check_output_paths(None, [Output("--output-dir", str(tmp_path / "exp"), None)], [("--docs", str(docs))], False)
    # ... a model directory (replaced as a whole) that holds it is not.
    with pytest.raises(OutputPathError, match="contains the run's input --docs"):
        check_output_paths(None, [Output("--model", str(tmp_path / "exp"), "model")], [("--docs", str(docs))], True)


def test_evaluate_output_respects_the_umask_needs_overwrite_and_spares_its_inputs(world, tmp_path, capsys):
    import stat

    metrics = str(tmp_path / "metrics.json")
    old = os.umask(0o022)
    try:
        assert main(["evaluate", "--predictions", world["preds"], "--model", world["model"], "--output", metrics]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(metrics).st_mode) == 0o644  # readable by a task running as another user
    assert "micro_f1" in json.load(open(metrics))
    _refused(
        ["evaluate", "--predictions", world["preds"], "--model", world["model"], "--output", metrics],
        capsys,
        "already exists; pass --overwrite",
    )
    assert (
        main(
            ["evaluate", "--predictions", world["preds"], "--model", world["model"], "--output", metrics, "--overwrite"]
        )
        == 0
    )
    before = _digest(world["preds"])
    _refused(
        [
            "evaluate",
            "--predictions",
            world["preds"],
            "--model",
            world["model"],
            "--output",
            os.path.join(world["preds"], "metrics.json"),
            "--overwrite",
        ],
        capsys,
        "lies inside the run's input",
    )
    assert _digest(world["preds"]) == before


def test_globs_protect_what_they_match_and_input_lists_split_like_ingest_warc(tmp_path):
    crawl = tmp_path / "crawl"
    (crawl / "2024").mkdir(parents=True)
    (crawl / "2024" / "a.warc.gz").write_bytes(b"")
    docs = Output("--output", str(crawl / "2024"), "documents")
    for pattern in (
        str(crawl / "*" / "*.warc.gz"),
        str(crawl / "202?"),
        str(crawl / "{2023,2024}" / "a.warc.gz"),
        f"{tmp_path / 'other.warc'}, {crawl / '2024'}",
    ):
        with pytest.raises(OutputPathError, match="run's input --input"):
            check_output_paths(None, [docs], [("--input", path) for path in split_inputs([pattern])], True)
    # A sibling folder with a longer name is not inside the input.
    check_output_paths(
        None, [Output("--output", str(crawl / "2024b"), "documents")], [("--input", str(crawl / "2024"))], True
    )


def test_a_root_output_needs_an_explicit_rejects_path(world, capsys):
    _refused(
        ["predict", "--model", world["model"], "--docs", world["docs"], "--output", "s3a://bucket/"],
        capsys,
        "root of a file system or bucket: give --rejects",
    )
