"""The defaults do not depend on the folder: shipped in the package, layered with $PCEM_CONFIG, --config and --set,
and named in every command's first log line."""

import json
import os
import subprocess
import sys

import pytest
from cli_args import set_args

from pcem_spark.cli.config import CONFIG_ENV, ConfigError, load_settings, settings_table

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _settings_from(cwd, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != CONFIG_ENV}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    done = subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", "settings", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_command_from_an_empty_folder_runs_with_the_checkouts_settings(tmp_path):
    outside, first_line = _settings_from(str(tmp_path))
    inside, _ = _settings_from(REPO)
    assert outside == inside
    assert outside["sources"] == ["package defaults"]
    # what a run outside the checkout used to lose: the small shuffles, the quiet console, the local master
    assert outside["spark"]["conf"]["spark.sql.shuffle.partitions"] == "8"
    assert outside["spark"]["conf"]["spark.ui.showConsoleProgress"] == "false"
    assert outside["spark"]["master"] == "local[2,3]"
    lines = [ln for ln in first_line.splitlines() if ln.strip()]
    assert "settings: package defaults; spark: master local[2,3]" in lines[0]
    assert "spark.sql.shuffle.partitions=8" in lines[0]


def test_pcem_config_then_config_then_set_each_change_only_what_they_name(tmp_path):
    env_file = tmp_path / "site.toml"
    env_file.write_text('[model]\nmax_iter = 70\ntol = 1e-4\n[spark.conf]\n"spark.driver.memory" = "8g"\n')
    run_file = tmp_path / "run.toml"
    run_file.write_text('[model]\nmax_iter = 90\n[spark.conf]\n"spark.executor.cores" = "4"\n')
    got, log = _settings_from(
        str(tmp_path), "--config", str(run_file), "--set", "model.seed=7", env_extra={CONFIG_ENV: str(env_file)}
    )
    assert got["model"]["max_iter"] == 90 and got["model"]["tol"] == 1e-4 and got["model"]["seed"] == 7
    conf = got["spark"]["conf"]
    assert conf["spark.driver.memory"] == "8g" and conf["spark.executor.cores"] == "4"
    assert conf["spark.sql.shuffle.partitions"] == "8"  # a layer replaces entries, never the whole table
    assert got["sources"] == ["package defaults", f"PCEM_CONFIG={env_file}", f"--config {run_file}", "1 --set"]
    assert f"PCEM_CONFIG={env_file} + --config {run_file} + 1 --set" in log


def test_the_checkouts_conf_file_changes_nothing():
    plain, via_file = load_settings(None), load_settings(os.path.join(REPO, "conf", "pcem.toml"))
    assert {k: v for k, v in settings_table(plain).items() if k != "sources"} == {
        k: v for k, v in settings_table(via_file).items() if k != "sources"
    }


def test_a_bad_layer_is_named(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text("[modle]\nmax_iter = 3\n")
    with pytest.raises(ConfigError, match=r"bad.toml: unknown section \[modle\]"):
        load_settings(str(bad))
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="PCEM_CONFIG names settings file .*missing.toml.* not found"):
        load_settings(None)
    with pytest.raises(ConfigError, match=r"unknown section \[modle\]"):
        load_settings(None, ["modle.max_iter=3"], environment=False)


# ------------------------------------------------------------------------------- errors before Spark starts
def _pcem_without_java(cwd, *args):
    """``pcem ARGS`` where no JVM can start (JAVA_HOME points nowhere): it must fail on its own checks."""
    env = {k: v for k, v in os.environ.items() if k not in (CONFIG_ENV, "PYSPARK_SUBMIT_ARGS", "SPARK_REMOTE")}
    env.update(PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""), JAVA_HOME=str(cwd / "no-java"))
    done = subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["predict", "--model", "missing", "--docs", "d.jsonl", "--output", "p"], "--model 'missing' does not exist"),
        (["predict", "--model", "m", "--docs", "d.jsonl", "--output", "old"], "--output 'old' already exists"),
        (["train", "--docs", "d.jsonl", "--model", "old"], "--model 'old' already exists; pass --overwrite"),
        (["train", "--docs", "nope.jsonl", "--model", "new"], "--docs 'nope.jsonl' does not exist"),
        (["evaluate", "--predictions", "gone", "--model", "m"], "--predictions 'gone' does not exist"),
        (["predict", "--model", "old", "--docs", "d.jsonl", "--output", "p"], "old has no completion marker"),
    ],
)
def test_local_path_errors_exit_2_before_the_jvm_starts(tmp_path, args, message):
    (tmp_path / "d.jsonl").write_text('{"id": "1", "text": "a b"}\n')
    (tmp_path / "old").mkdir()  # a folder that is not a pcem output
    model = tmp_path / "m"
    model.mkdir()
    (model / "_PCEM_COMPLETE").write_text(json.dumps({"kind": "model", "run_id": "r1", "files": {}}))
    code, stderr = _pcem_without_java(tmp_path, *args)
    assert code == 2, stderr
    assert message in stderr
    assert "JAVA_HOME" not in stderr and "gateway" not in stderr.lower()  # no JVM was ever asked for


# ------------------------------------------------------------------------------- errors that teach
@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["train", "--modle", "m", "--docs", "d"],
            "pcem train: error: unrecognized option --modle; did you mean --model",
        ),
        (["train", "--docs", "d", "--model", "m", "--label_rate", "0.1"], "did you mean --label-rate"),
        (["trian", "--docs", "d"], "unknown command 'trian'; did you mean train?"),
        (["predict", "--model", "m", "--docs", "d", "--output", "o", "--bogus-flag"], "see pcem predict --help"),
    ],
)
def test_an_unknown_option_gets_its_commands_usage_and_the_closest_names(argv, message, capsys):
    from pcem_spark.cli.parser import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    if argv[0] != "trian":
        assert f"usage: pcem {argv[0]}" in err  # the command's usage, not the top-level one


def test_abbreviations_still_work_and_the_version_is_printed(capsys):
    from pcem_spark import __version__
    from pcem_spark.cli.parser import build_parser

    args = build_parser().parse_args(["predict", "--model", "m", "--docs", "d", "--output", "o", "--min-prob", "0.5"])
    assert args.min_probability == 0.5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"pcem-spark {__version__}"


def test_labels_written_as_one_string_get_an_error_that_shows_the_expected_form(spark, tmp_path, caplog):
    from pcem_spark.cli import main

    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        '{"id": "1", "text": "goal keeper", "labels": "sports/football"}\n'
        '{"id": "2", "text": "racket serve", "labels": "sports/tennis"}\n{"id": "3", "text": "volley"}\n'
    )
    assert main(["train", "--docs", str(docs), "--model", str(tmp_path / "m"), "--log-level", "ERROR"]) == 2
    message = " ".join(r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert "every labelled row was rejected for its labels (2 rows" in message
    assert '"labels": ["sports", "football"]' in message


def test_csv_documents_are_refused_with_how_to_convert_them(spark, tmp_path, caplog):
    from pcem_spark.cli import main

    docs = tmp_path / "docs.csv"
    docs.write_text("id,text,labels\n1,goal keeper,sports/football\n")
    assert main(["train", "--docs", str(docs), "--model", str(tmp_path / "m"), "--log-level", "ERROR"]) == 2
    message = " ".join(r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert "is CSV/TSV; pcem reads JSON Lines or Parquet" in message and ".csv(IN)" in message


@pytest.mark.slow
def test_evaluating_predictions_of_the_training_documents_warns(spark, tmp_path, caplog):
    from pcem_spark.cli import main
    from pcem_spark.cli.commands import training_documents

    assert training_documents({"source": "d.jsonl", "split": "test"}, {"source": "d.jsonl", "split": "train"}) == ""
    assert training_documents({"source": "other.jsonl"}, {"source": "d.jsonl"}) == ""
    same = {"source": str(tmp_path / "d")}
    assert "trained on" in training_documents({"source": "file:" + same["source"]}, same)
    docs = tmp_path / "docs.jsonl"
    rows = [("sport", "football", "goal keeper striker league"), ("tech", "phones", "android screen battery apps")]
    with open(docs, "w") as fh:
        for i in range(12):
            top, leaf, words = rows[i % 2]
            labels = [top, leaf] if i < 6 else None
            fh.write(json.dumps({"id": str(i), "text": f"{words} {i}", "labels": labels}) + "\n")
    model, pred = str(tmp_path / "m"), str(tmp_path / "p")
    fast = ["--set", "model.max_iter=2", "--set", "features.min_df=1", "--set", "model.calibration=none"]
    # fixed settings: the warning is the point, not the choices of the default pipeline (family auto cross-validates)
    fixed = ["model.smoothing=1", "model.unlabeled_weight=1", "model.path_weight=1", "model.family=generative"]
    fixed += ["model.names=off", "features.stop_words=none"]
    fast += set_args(*fixed)
    assert main(["train", "--docs", str(docs), "--model", model, *fast, "--log-level", "WARNING"]) == 0
    assert main(["predict", "--model", model, "--docs", str(docs), "--output", pred, "--log-level", "WARNING"]) == 0
    caplog.clear()
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--predictions", pred, "--model", model, "--output", str(out)]) == 0
    assert any("the documents the model was trained on" in r.getMessage() for r in caplog.records)
    assert json.loads(out.read_text())["predicted_training_documents"] is True
