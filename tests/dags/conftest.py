"""Airflow for tests/dags: a throwaway AIRFLOW_HOME (sqlite), set before anything imports airflow.

The main suite does not install Airflow: the tests here then skip. With
``PCEM_REQUIRE_AIRFLOW=1`` (scripts/test_airflow.sh) a missing Airflow is an
error, and so is a run in which any test here was skipped or none passed, so
the separate CI step cannot go green without running the DAG.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile

import pytest

REQUIRED = os.environ.get("PCEM_REQUIRE_AIRFLOW") == "1"


def _have_airflow() -> bool:
    # With tests/ on sys.path (pytest puts it there for tests/conftest.py) this very folder is
    # importable as a namespace package "airflow": only a regular package (with a file) is Airflow.
    spec = importlib.util.find_spec("airflow")
    return spec is not None and spec.origin is not None


HAVE_AIRFLOW = _have_airflow()
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

if REQUIRED and not HAVE_AIRFLOW:
    raise pytest.UsageError(
        f"PCEM_REQUIRE_AIRFLOW=1 but airflow is not importable from {sys.executable}: "
        "install the extra (pip install -e '.[airflow,test]'; scripts/test_airflow.sh does it in .venv-airflow)"
    )

# tests/standalone.py (the loopback Spark cluster) lives one folder up.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

AIRFLOW_HOME = None
if HAVE_AIRFLOW:
    # Airflow reads its configuration when first imported: point it at a fresh home now.
    AIRFLOW_HOME = tempfile.mkdtemp(prefix="pcem-airflow-home-")
    os.environ.update(
        {
            "AIRFLOW_HOME": AIRFLOW_HOME,
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{os.path.join(AIRFLOW_HOME, 'airflow.db')}",
        }
    )

_counts = {"passed": 0, "skipped": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if report.skipped:
        _counts["skipped"] += 1
    elif report.when == "call" and report.passed:
        _counts["passed"] += 1
    elif report.failed:
        _counts["failed"] += 1


def pytest_sessionfinish(session, exitstatus):
    if REQUIRED and exitstatus == 0 and (_counts["skipped"] or not _counts["passed"]):
        print(
            f"\nPCEM_REQUIRE_AIRFLOW=1: {_counts['passed']} passed, {_counts['skipped']} skipped; "
            "every Airflow test must run",
            file=sys.stderr,
        )
        session.exitstatus = 1


def pytest_unconfigure(config):
    if AIRFLOW_HOME and os.environ.get("PCEM_KEEP_AIRFLOW_HOME") != "1":
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db():
    """``airflow db migrate`` on the sqlite database of this session's AIRFLOW_HOME."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
