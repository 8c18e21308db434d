import pytest

from pcem_spark.cli.config import ConfigError, load_settings
from pcem_spark.experiment.protocol import assign_roles, markdown_table, summarize


def test_assign_roles_is_stratified_reproducible_and_keeps_one_label_per_leaf(spark):
    rows = [(f"{leaf}-{i}", "t", ["top", leaf]) for leaf, n in (("a", 50), ("b", 20), ("c", 7)) for i in range(n)]
    rows.append(("nolabel", "t", None))
    df = spark.createDataFrame(rows, "id string, text string, labels array<string>")
    roles = {r["id"]: r["role"] for r in assign_roles(df, seed=3, test_fraction=0.2, label_rate=0.05).collect()}
    assert len(roles) == len(rows)  # nobody dropped
    assert roles["nolabel"] == "unlabeled"
    for leaf, n in (("a", 50), ("b", 20), ("c", 7)):
        mine = [roles[f"{leaf}-{i}"] for i in range(n)]
        n_test = round(0.2 * n)
        assert mine.count("test") == n_test
        assert mine.count("labeled") == max(1, round(0.05 * (n - n_test)))
    again = {r["id"]: r["role"] for r in assign_roles(df, seed=3, test_fraction=0.2, label_rate=0.05).collect()}
    assert again == roles
    other = {r["id"]: r["role"] for r in assign_roles(df, seed=4, test_fraction=0.2, label_rate=0.05).collect()}
    assert other != roles


def test_assign_roles_rejects_bad_rates(spark):
    df = spark.createDataFrame([("x", "t", ["a"])], "id string, text string, labels array<string>")
    with pytest.raises(ValueError, match="label rate"):
        assign_roles(df, 0, 0.2, 0.0)
    with pytest.raises(ValueError, match="test_fraction"):
        assign_roles(df, 0, 1.0, 0.1)


def test_summary_table_means_and_stds():
    rows = [
        {
            "method": "pcem",
            "setting": "labeled",
            "rate": 0.01,
            "seed": s,
            "micro_f1": m,
            "macro_f1": m - 0.1,
            "train_seconds": 2.0,
        }
        for s, m in enumerate([0.70, 0.72, 0.74])
    ]
    (s,) = summarize(rows)
    assert s["micro_mean"] == pytest.approx(72.0) and s["micro_std"] == pytest.approx(2.0)
    assert "| labeled | 1% | pcem | 3 | 72.00 ± 2.00 | 62.00 ± 2.00 | 2.0 |" in markdown_table(rows)


def test_settings_file_and_overrides(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[model]\nmethod = "pcnb"\nsmoothing = 2\n[features]\nvocab_size = 100\n')
    s = load_settings(str(conf), ["model.max_iter=7", "features.stop_words=none", "spark.conf.spark.x=1"])
    assert s.model.method == "pcnb" and s.model.smoothing == 2.0 and s.model.max_iter == 7
    assert s.features.vocab_size == 100 and s.features.stop_words == "none"
    # layered over the package defaults: the override adds an entry, the shipped ones stay
    assert s.spark.conf["spark.x"] == "1" and s.spark.conf["spark.sql.shuffle.partitions"] == "8"
    with pytest.raises(ConfigError, match=r"unknown section \[modle\]"):
        load_settings(None, ["modle.x=1"])
    with pytest.raises(ConfigError, match=r"\[model\]\.max_iter: expected int"):
        load_settings(None, ["model.max_iter='many'"])
    with pytest.raises(ValueError, match="model.method must be one of"):
        load_settings(None, ["model.method=svm"])


def test_shipped_config_files_load():
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "conf")
    for name in ("pcem.toml", "20ng.toml", "experiments/20ng.toml", "experiments/20ng_figures.toml"):
        s = load_settings(os.path.join(root, name))
        assert s.spark.master == "local[2,3]"  # task retries on
    table2 = load_settings(os.path.join(root, "experiments/20ng.toml")).experiment
    assert len(table2.methods) == 13 and table2.settings == ["labeled", "dataless"]
    figures = load_settings(os.path.join(root, "experiments/20ng_figures.toml")).experiment
    assert figures.rates == [0.01, 0.05, 0.1, 0.3, 0.5, 0.9]


def test_experiment_settings_are_validated():
    with pytest.raises(ConfigError, match=r"unknown method\(s\) \['nbx'\]"):
        load_settings(None, ["experiment.methods=['pcem', 'nbx']"])
    with pytest.raises(ConfigError, match="experiment.settings"):
        load_settings(None, ["experiment.settings=['weak']"])
    with pytest.raises(ConfigError, match="experiment.rates"):
        load_settings(None, ["experiment.rates=[0.0]"])


def test_supervision_settings():
    s = load_settings(None, ["supervision.kind=descriptions", "supervision.descriptions=d.json"])
    assert s.supervision.kind == "descriptions" and s.supervision.descriptions == "d.json"
    with pytest.raises(ConfigError, match="supervision.kind must be"):
        load_settings(None, ["supervision.kind=guess"])


# ------------------------------------------------- an experiment that plans no run (issue B)
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--seeds", "0"], "--seeds 0: "),
        (["--seeds", "-2"], "--seeds -2: "),
        (["--seeds", ""], "--seeds '': "),
        (["--seeds", "1,x"], "--seeds 1,x: "),
        (["--rates", "0"], "--rates 0: "),
        (["--rates", ""], "--rates '': "),
        (["--rates", "0.1,0"], "--rates 0.1,0: "),
        (["--methods", ""], "--methods '': "),
        (["--methods", "pcem,"], "--methods pcem,: "),
        (["--set", "experiment.seeds=[]"], "[experiment] seeds: "),
        (["--set", "experiment.seeds=[-1]"], "[experiment] seeds: "),
        (["--set", "experiment.rates=[]"], "[experiment] rates: "),
        (["--set", "experiment.methods=[]"], "[experiment] methods: "),
    ],
)
def test_experiment_without_runs_exits_2_before_spark(tmp_path, capsys, monkeypatch, extra, message):
    import pcem_spark.engine.session
    from pcem_spark.cli import main

    def no_spark(*a, **k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(pcem_spark.engine.session, "build_session", no_spark)
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "1", "text": "a b", "labels": ["a"]}\n')
    out = tmp_path / "out"
    rc = main(["experiment", "--docs", str(docs), "--output-dir", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err, err
    assert not out.exists()
