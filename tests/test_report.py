"""The reproduction report (Table 2 with significance, figures) and resumable experiments."""

from __future__ import annotations

import csv
import functools
import os

import numpy as np
import pytest
from scipy import stats

from pcem_spark.experiment.report import curves, paired_p_value, significance_mark, table2, write_report


def _rows(method, setting, micro, macro, rate=0.01, secs=1.0):
    return [
        {
            "method": method,
            "setting": setting,
            "rate": rate,
            "seed": s,
            "micro_f1": a / 100,
            "macro_f1": b / 100,
            "train_seconds": secs,
            "predict_seconds": 0.5,
            "n_iter": 3,
        }
        for s, (a, b) in enumerate(zip(micro, macro))
    ]


def test_significance_marks_follow_the_paper():
    assert significance_mark(0.0005) == "‡"
    assert significance_mark(0.01) == "†"
    assert significance_mark(0.2) == ""
    assert significance_mark(None) == ""


def test_paired_p_value_is_scipys_paired_t_test_over_common_seeds():
    a = {0: 70.0, 1: 72.0, 2: 71.0, 3: 69.5, 9: 10.0}
    b = {0: 60.0, 1: 63.0, 2: 60.5, 3: 61.0}
    want = stats.ttest_rel([70.0, 72.0, 71.0, 69.5], [60.0, 63.0, 60.5, 61.0]).pvalue
    assert paired_p_value(a, b) == pytest.approx(want)
    assert paired_p_value({0: 1.0}, {0: 2.0}) is None  # one pair: no test
    assert paired_p_value({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}) == 1.0
    assert paired_p_value({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0}) == 0.0  # constant gap


def test_table2_marks_methods_against_pcem():
    rows = (
        _rows("pcem", "labeled", [70, 71, 72, 73, 74], [60, 61, 62, 63, 64])
        + _rows("flat-em", "labeled", [60, 61.5, 61, 63.2, 63.9], [59.5, 61.2, 61.8, 63.1, 64.2])
        + _rows("pcem", "dataless", [63, 64, 65, 66, 67], [48, 49, 50, 51, 52])
    )
    md = table2(rows, 0.01, paper={"labeled": {"pcem": (70.73, 60.02)}, "dataless": {}})
    line = next(x for x in md.splitlines() if x.startswith("| Flat-EM"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    p_micro = stats.ttest_rel([60, 61.5, 61, 63.2, 63.9], [70, 71, 72, 73, 74]).pvalue
    assert p_micro < 0.001 and cells[1] == f"‡{np.mean([60, 61.5, 61, 63.2, 63.9]):.2f}"
    assert cells[2] == f"{np.mean([59.5, 61.2, 61.8, 63.1, 64.2]):.2f}"  # not significant: no mark
    assert cells[3] == "–"  # flat-em not run dataless
    pcem = next(x for x in md.splitlines() if x.startswith("| PCEM"))
    assert "**72.00**" in pcem and "70.73 / 60.02" in pcem
    # rows follow the paper's order: discriminative, NB, EM
    assert md.index("| Flat-EM") < md.index("| PCEM")
    # a method significantly better than PCEM is not marked as if PCEM won
    better = rows + _rows("lr", "labeled", [80, 81.5, 82, 83.1, 84.2], [70, 71, 72, 73, 74])
    lr = next(x for x in table2(better).splitlines() if x.startswith("| LR"))
    assert "**(+)82.16**" in lr and "‡" not in lr and "†" not in lr


def test_curves_average_seeds_per_rate():
    rows = _rows("pcem", "labeled", [70, 72], [60, 62], rate=0.01) + _rows(
        "pcem", "labeled", [80, 82], [75, 77], rate=0.1
    )
    rates, mic, mac = curves(rows, "labeled")["pcem"]
    np.testing.assert_allclose(rates, [1, 10])
    np.testing.assert_allclose(mic, [71, 81])
    np.testing.assert_allclose(mac, [61, 76])


def test_write_report_writes_tables_and_png_figures(tmp_path):
    pytest.importorskip("matplotlib")
    rows = []
    for rate in (0.01, 0.1, 0.5):
        for m in ("pcem", "flat-em"):
            rows += _rows(m, "labeled", [60 + 30 * rate, 61], [50, 51], rate=rate, secs=2.0)
    rows += _rows("lr", "labeled", [50, 52], [40, 41], secs=9.0)
    written = write_report(rows, str(tmp_path))
    assert {"table2.md", "efficiency.md", "figure_labeled.png", "efficiency.png"} <= set(written)
    for name in ("figure_labeled.png", "efficiency.png"):
        with open(tmp_path / name, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    eff = (tmp_path / "efficiency.md").read_text()
    assert "| LR | 9.00 |" in eff and "| PCEM | 2.00 |" in eff


# ---------------------------------------------------------------- experiments


def _corpus(spark):
    words = {
        "a1": "alpha apple pie",
        "a2": "alpha apricot jam",
        "b1": "beta banana split",
        "b2": "beta blueberry muffin",
    }
    rows = [
        (f"{leaf}-{i}", f"{text} word{i % 4} {text.split()[i % 3]}", [leaf[0], leaf])
        for leaf, text in words.items()
        for i in range(15)
    ]
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


@pytest.mark.slow
def test_experiment_runs_every_method_and_resumes(spark, tmp_path, monkeypatch):
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.experiment import protocol as experiment
    from pcem_spark.experiment.settings import ExperimentSettings
    from pcem_spark.model.settings import ModelSettings

    docs = _corpus(spark)
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1", "b2"]})
    fs = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
    # Fixed settings: the cross-validations (test_tuning), the names (test_fewest_labels) and the calibration
    # (test_calibration) are tested where they are the point; here 26 trains are.
    ms = ModelSettings(
        max_iter=5, unlabeled_weight=1.0, path_weight=1.0, family="generative", names="off", calibration="none"
    )
    # The linear baselines' optimiser to 10 iterations (MLlib's default is 100, each a Spark job per class): the
    # runs and their records are the point here; test_baselines shows each method learning at its defaults.
    from pcem_spark.baselines import discriminative

    monkeypatch.setattr(discriminative, "LinearSettings", functools.partial(discriminative.LinearSettings, max_iter=10))
    out = str(tmp_path / "exp")
    descriptions = {"a": "alpha", "b": "beta", "a1": "apple", "a2": "apricot", "b1": "banana", "b2": "blueberry"}
    methods = list(experiment.ALL_METHODS)
    rows = experiment.run_experiment(
        docs,
        tax,
        ExperimentSettings(
            methods=methods, rates=[0.2], seeds=[0], test_fraction=0.2, settings=["labeled", "dataless"]
        ),
        fs,
        ms,
        out,
        descriptions=descriptions,
    )
    assert len(rows) == 2 * len(methods)
    assert {(r["method"], r["setting"]) for r in rows} == {(m, s) for m in methods for s in ("labeled", "dataless")}
    for r in rows:
        assert 0.0 <= r["micro_f1"] <= 1.0 and r["n_test"] == 12
        assert {"train_seconds", "predict_seconds"} <= set(r)  # recorded; speed lives in scripts/
    # a separable corpus: every method learns it from true labels
    lab = {r["method"]: r["micro_f1"] for r in rows if r["setting"] == "labeled"}
    assert min(lab.values()) >= 0.75, lab
    with open(os.path.join(out, "results.csv")) as fh:
        header = next(csv.reader(fh))
    for col in ("method", "setting", "rate", "seed", "micro_f1", "macro_f1", "train_seconds", "predict_seconds"):
        assert col in header
    assert os.path.exists(os.path.join(out, "table2.md"))

    # Resume: the finished runs are read back, only the new seed is computed.
    calls = []
    real = experiment._run_split

    def counting(*args, **kwargs):
        calls.append((args[5], args[6], args[7], tuple(args[4])))
        return real(*args, **kwargs)

    monkeypatch.setattr(experiment, "_run_split", counting)
    again = experiment.run_experiment(
        docs,
        tax,
        ExperimentSettings(methods=["pcem", "flat-nb"], rates=[0.2], seeds=[0, 1], test_fraction=0.2),
        fs,
        ms,
        out,
    )
    assert calls == [("labeled", 0.2, 1, ("pcem", "flat-nb"))]
    assert len(again) == len(rows) + 2
    first = {(r["method"], r["setting"], int(r["seed"])): float(r["micro_f1"]) for r in again}
    assert first[("pcem", "labeled", 0)] == pytest.approx(lab["pcem"])
    # read-back rows (strings) and new rows summarise together: one line per method, 2 seeds
    md = open(os.path.join(out, "results.md")).read()
    assert md.count("| labeled | 20% | pcem | 2 |") == 1

    # Other settings into the same CSV are refused instead of mixed.
    with pytest.raises(ValueError, match="other settings"):
        experiment.run_experiment(
            docs,
            tax,
            ExperimentSettings(methods=["pcem"], rates=[0.2], seeds=[0], test_fraction=0.2),
            fs,
            ModelSettings(max_iter=5, smoothing=0.5),
            out,
        )


def test_experiment_rejects_unknown_methods_and_settings(spark, tmp_path):
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.experiment.protocol import run_experiment
    from pcem_spark.experiment.settings import ExperimentSettings
    from pcem_spark.model.settings import ModelSettings

    tax = Taxonomy({"R": ["a", "b"]})
    docs = spark.createDataFrame([("x", "t", ["a"])], "id string, text string, labels array<string>")
    with pytest.raises(ValueError, match="unknown method 'nbx'"):
        run_experiment(
            docs,
            tax,
            ExperimentSettings(methods=["nbx"], rates=[0.1], seeds=[0], test_fraction=0.2),
            FeatureSettings(),
            ModelSettings(),
            str(tmp_path),
        )
    with pytest.raises(ValueError, match="setting must be"):
        run_experiment(
            docs,
            tax,
            ExperimentSettings(methods=["pcem"], rates=[0.1], seeds=[0], test_fraction=0.2, settings=["labelled"]),
            FeatureSettings(),
            ModelSettings(),
            str(tmp_path),
        )


def test_read_csv_names_a_broken_row(tmp_path):
    from pcem_spark.experiment.protocol import read_csv

    p = tmp_path / "results.csv"
    p.write_text(
        "method,setting,rate,seed,micro_f1,macro_f1\npcem,labeled,0.01,0,0.7,0.6\npcem,labeled,0.01,,0.7,0.6\n"
    )
    with pytest.raises(ValueError, match=r"results.csv:3: row without seed"):
        read_csv(str(p))
    assert read_csv(str(tmp_path / "none.csv")) == []
