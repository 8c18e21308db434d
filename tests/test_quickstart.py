"""The README's quick start, run verbatim: its sample lines are the shipped sample's, and its commands work from an
empty folder outside the checkout (slow: four Spark runs)."""

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _section(title: str) -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _blocks(section: str, lang: str):
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def _shim(tmp_path):
    """A ``pcem`` on the PATH that runs this checkout (what ``pip install -e .`` gives)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    pcem = bin_dir / "pcem"
    pcem.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m pcem_spark.cli "$@"\n')
    pcem.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PCEM_CONFIG", "PYSPARK_SUBMIT_ARGS", "SPARK_REMOTE")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_quick_starts_sample_lines_are_the_shipped_samples(tmp_path):
    section = _section("Your own data in two minutes")
    (shown,) = _blocks(section, "text")
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["pcem", "quickstart", "--output", "quickstart"], cwd=work, env=_shim(tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = set((work / "quickstart" / "train.jsonl").read_text().splitlines())
    lines |= set((work / "quickstart" / "test.jsonl").read_text().splitlines())
    shown = shown.strip().splitlines()
    assert len(shown) == 3 and all(line in lines for line in shown)
    assert "labels" in shown[0] and "labels" not in shown[1] and "test" in json.loads(shown[2])["id"]
    again = subprocess.run(
        ["pcem", "quickstart", "--output", "quickstart"], cwd=work, env=_shim(tmp_path), capture_output=True, text=True
    )
    assert again.returncode == 2 and "already exists; pass --overwrite" in again.stderr


@pytest.mark.slow
def test_the_quick_start_runs_verbatim_from_an_empty_folder(tmp_path):
    (commands,) = _blocks(_section("Your own data in two minutes"), "bash")
    work = tmp_path / "empty"
    work.mkdir()
    env = _shim(tmp_path)
    for line in commands.strip().splitlines():
        done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
        assert "settings: package defaults;" in done.stderr.splitlines()[0]  # the first log line names them
    metrics = json.loads((work / "out" / "quick" / "metrics.json").read_text())
    assert metrics["n_documents"] == 30 and metrics["micro_f1"] > 0.8
    for name in ("model.md", "taxonomy.html", "confusion.md"):
        assert (work / "out" / "quick" / "report" / name).exists()


def test_the_guide_and_the_cluster_page_share_one_spark_submit_line():
    def blocks(path):
        with open(os.path.join(REPO, path), encoding="utf-8") as fh:
            return _blocks(fh.read(), "bash")

    guide = next(b for b in blocks("docs/guide/scheduling.md") if "spark-submit --master spark://" in b)
    line = guide[guide.index("spark-submit") :].strip()
    assert any(line in b for b in blocks("docs/CLUSTER.md")), "the guide's spark-submit line is not CLUSTER.md's"
