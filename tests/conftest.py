"""One SparkSession for the whole test session (local[2], small shuffles)."""

import os
import subprocess
import sys

import pytest

# The test JVMs compile with C1 only. Each is short-lived: the session's, and the ``pcem`` and
# ``spark-submit`` processes the slow tests start. For such a JVM, C2 (the optimising JIT) spends
# CPU in background threads on code that will not run long enough to repay it. Measured on this
# 2-core machine: one ``pcem train`` of 40 documents used 62 CPU-s with both compilers and 40 CPU-s
# with C1 only, and its wall time fell from 36 s to 33 s; two fast-tier files used 30% less CPU.
# That freed CPU is what lets scripts/test.sh run two pytest workers. Results do not depend on the
# JIT. SPARK_SUBMIT_OPTS reaches every JVM that spark-submit starts (pyspark's gateway included),
# and it is inherited by the processes the tests start. PCEM_TEST_FULL_JIT=1 keeps both compilers.
TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1"


def pytest_configure(config):
    if os.environ.get("PCEM_TEST_FULL_JIT") != "1" and "TieredStopAtLevel" not in os.environ.get(
        "SPARK_SUBMIT_OPTS", ""
    ):
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), TEST_JVM_OPTS]))


# The files whose tests run longest (the slow tier's durations), started first: scripts/test.sh hands whole
# files to two workers in collection order (--no-loadscope-reorder; xdist's own order, by the number of tests,
# left a 270 s one-test file to run alone at the end). The rest keep their order.
LONGEST_FIRST = (
    "test_connect.py",
    "test_outputs.py",
    "test_cluster.py",
    "test_resume.py",
    "test_tuning.py",
    "test_overlap_processes.py",
    "test_report.py",
    "test_overlapping_runs.py",
    "test_predict_evaluate.py",
    "test_warm_start.py",
    "test_fewest_labels.py",
    "test_linear_family.py",
    "test_end_to_end.py",
    "test_baselines.py",
    "test_sampled_cv.py",
    "test_python_tokens.py",
    "test_bench_scripts.py",
    "test_abstain.py",
    "test_suggestions.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


SHARED_DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
ARCHIVE_20NG = os.environ.get("PCEM_20NG_ARCHIVE", os.path.join(SHARED_DATA, "20news-bydate.tar.gz"))


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pcem-spark-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def archive_20ng():
    if not os.path.exists(ARCHIVE_20NG):
        pytest.skip(f"20 Newsgroups archive not found at {ARCHIVE_20NG} (set PCEM_20NG_ARCHIVE)")
    return ARCHIVE_20NG


@pytest.fixture
def staged_shipping(monkeypatch):
    """Every value this test ships to the executors goes through the staged-file format and back
    (pcem_spark.engine.safe_values with shipping.staged_types(), what a Spark Connect run writes to
    PCEM_STAGING_DIR), and the computation goes on with the decoded value: the test's own assertions
    then prove that the data-only format holds every kind of value shipped, exactly. Yields the sizes
    of the values that went through; the fixture checks that at least one did."""
    from pcem_spark.engine import safe_values, shipping

    sizes = []

    def through_a_file(spark, value, what=""):
        data = safe_values.dumps(value, shipping.staged_types())
        sizes.append(len(data))
        return shipping.Shipped(safe_values.loads(data, shipping.staged_types()))

    for module in ("weak_labels", "typicality", "beam_prediction", "path_model"):
        monkeypatch.setattr(f"pcem_spark.model.{module}.ship", through_a_file)
    for module in ("frame_softmax_pass", "frame_sums"):
        monkeypatch.setattr(f"pcem_spark.engine.{module}.ship_in_plan", through_a_file)
    yield sizes
    assert sizes, "no value was shipped through the staged-file format"


# ----------------------------------------------------------------- how many JVMs each test starts
# scripts/test_times.py prints them per file (CI's log): the JVM a test starts -- the session's Spark driver,
# a `pcem` or spark-submit process, a standalone cluster's daemons, a Spark Connect server -- costs it 5-25 s,
# and is the first thing to share. Counted where they are started: subprocess.Popen in this process (a
# `pcem` process's own driver JVM counts as its process; executors a standalone worker starts are not seen).
_JVM_SCRIPTS = ("spark-submit", "spark-class", "start-connect-server.sh", "start-master.sh", "start-worker.sh")
_jvms_started = [0]


def _starts_a_jvm(args) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    words = [os.path.basename(os.fsdecode(a)) for a in argv[:6]]
    if any(w == "java" or w in _JVM_SCRIPTS or w == "pcem" for w in words):
        return True
    return "-m" in words and any(w.startswith("pcem_spark") for w in words)


_popen_init = subprocess.Popen.__init__


def _counting_popen_init(self, args, *rest, **kwargs):
    if _starts_a_jvm(args):
        _jvms_started[0] += 1
    _popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _counting_popen_init


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.jvms_at_start = _jvms_started[0]
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown":  # the test's whole protocol (its fixtures' setup included) is done
        item.user_properties.append(("jvms", _jvms_started[0] - getattr(item, "jvms_at_start", _jvms_started[0])))
    yield
