"""scripts/test_times.py (where the suite's time goes, printed at the end of every CI run) and the JVM count that
tests/conftest.py records for it."""

import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")
sys.path.insert(0, SCRIPTS)

import test_times  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="4" time="61.5">
<testcase classname="tests.test_a" name="test_one" time="10.25">
  <properties><property name="jvms" value="2"/></properties></testcase>
<testcase classname="tests.test_a" name="test_two" time="0.75">
  <properties><property name="jvms" value="0"/></properties></testcase>
<testcase classname="tests.test_b" name="test_three[x]" time="40.0">
  <properties><property name="jvms" value="1"/></properties><failure message="boom"/></testcase>
<testcase classname="tests.dags.test_c" name="test_four" time="3.0"/>
</testsuite></testsuites>
"""


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "slow.xml"
    path.write_text(JUNIT)
    return str(path)


def test_seconds_and_jvms_are_summed_per_file_slowest_first(results):
    cases, wall = test_times.read_results(results)
    assert wall == 61.5 and len(cases) == 4
    rows = test_times.per_file(cases)
    assert [(r["file"], r["tests"], r["seconds"], r["jvms"]) for r in rows] == [
        ("test_b.py", 1, 40.0, 1),
        ("test_a.py", 2, 11.0, 2),
        ("dags/test_c.py", 1, 3.0, 0),
    ]
    assert [c["outcome"] for c in cases] == ["passed", "passed", "failure", "passed"]


def test_the_tables_name_the_tier_the_totals_and_the_slowest_tests(results, capsys):
    assert test_times.main([results, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("slow: 4 tests (1 failure, 3 passed), 54 s summed over the workers, 62 s wall, 3 JVMs")
    slowest = out.split("the 2 slowest tests:\n")[1].strip().splitlines()
    assert slowest[0].split() == ["40.0", "test_b.py::test_three[x]", "(1", "JVMs)"]
    assert slowest[1].split() == ["10.2", "test_a.py::test_one", "(2", "JVMs)"] and len(slowest) == 2
    assert test_times.main([results, "--markdown", "--top", "0", "--files", "1"]) == 0
    md = capsys.readouterr().out
    assert "| test_b.py | 1 | 40.0 | 1 | 74.1% |" in md and "test_a.py |" not in md
    assert "... 2 more files, 14.0 s" in md


def test_a_missing_tier_is_exit_2(tmp_path, capsys):
    assert test_times.main([str(tmp_path / "fast.xml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_jvms_a_test_starts_are_recorded_as_its_property(request):
    """tests/conftest.py counts the processes that start a JVM (java, spark-submit, a pcem process) where
    subprocess starts them; a plain process is not one."""
    from conftest import _jvms_started, _starts_a_jvm

    assert _starts_a_jvm([sys.executable, "-m", "pcem_spark.cli", "train"])
    assert _starts_a_jvm(["/opt/spark/bin/spark-submit", "--master", "local[1]", "job.py"])
    assert _starts_a_jvm("java") and _starts_a_jvm(["/usr/bin/java", "-version"])
    assert not _starts_a_jvm([sys.executable, "-c", "print(1)"]) and not _starts_a_jvm(["git", "status"])
    before = _jvms_started[0]
    subprocess.run(["java", "-version"], capture_output=True, check=False)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert _jvms_started[0] == before + 1
