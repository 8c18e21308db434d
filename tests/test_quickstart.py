"""The README's quick start: its sample lines are the shipped sample's. Its commands are run verbatim from an empty
folder, from the built wheel in a clean venv, by scripts/check_dist.sh (which CI runs beside the fast tier)."""

import json
import os
import re
import subprocess
import sys

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


def test_the_guide_and_the_cluster_page_share_one_spark_submit_line():
    def blocks(path):
        with open(os.path.join(REPO, path), encoding="utf-8") as fh:
            return _blocks(fh.read(), "bash")

    guide = next(b for b in blocks("docs/guide/scheduling.md") if "spark-submit --master spark://" in b)
    line = guide[guide.index("spark-submit") :].strip()
    assert any(line in b for b in blocks("docs/CLUSTER.md")), "the guide's spark-submit line is not CLUSTER.md's"
