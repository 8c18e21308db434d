"""What a cluster needs, checked without one: maxResultSize, exit codes for deployment errors, the artifacts."""

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from pyspark.errors import PythonException

from pcem_spark import engine
from pcem_spark.cli.failures import EXIT_BAD_INPUT, EXIT_TRANSIENT, classify_failure, root_cause
from pcem_spark.engine.limits import ResultSizeError, byte_size, check_result_size, max_result_size
from pcem_spark.ops import packaging


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _Context:
    """Just enough of a SparkContext for the size check (no JVM: the parser's fallback)."""

    def __init__(self, limit):
        self.conf = _Conf({} if limit is None else {"spark.driver.maxResultSize": limit})

    def getConf(self):
        return self.conf


def test_max_result_size_parses_spark_sizes(spark):
    assert max_result_size(_Context("1g")) == 1 << 30
    assert max_result_size(_Context("512m")) == 512 << 20
    assert max_result_size(_Context(None)) == 1 << 30  # Spark's default
    assert max_result_size(_Context("0")) == 0
    # On a real context the JVM's own parser answers.
    assert max_result_size(spark.sparkContext) == 1 << 30


def test_byte_size_reads_sizes_as_spark_writes_them(spark):
    assert byte_size("67108864b") == 64 << 20  # how the session reports an Arrow batch size
    assert byte_size("64MB") == byte_size("64m") == 64 << 20
    assert byte_size(" 2g ") == 2 << 30 and byte_size("1.5k") == 1536 and byte_size("4096") == 4096
    # The same answer as the JVM's parser.
    parse = spark.sparkContext._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes
    for text in ("67108864b", "64m", "2g", "4096", "16k"):
        assert byte_size(text) == parse(text)
    with pytest.raises(ValueError):
        byte_size("lots")


def test_check_result_size_names_the_setting_before_the_job():
    check_result_size(_Context("1g"), 500e6, "sums")  # fits
    check_result_size(_Context("0"), 1e15, "sums")  # 0 = unlimited
    with pytest.raises(ResultSizeError) as err:
        check_result_size(_Context("1g"), 2000 * 61000 * 8.0, "the per-path sums of 2,000 paths x 61,000 terms")
    message = str(err.value)
    assert "spark.driver.maxResultSize=1g" in message and "2,000 paths" in message
    assert "--conf spark.driver.maxResultSize=" in message
    # A settings problem: exit 2, never retried.
    assert classify_failure(err.value)[0] == EXIT_BAD_INPUT


def test_em_pass_refuses_a_model_too_big_for_the_driver(spark):
    """The engine checks (M + 1) x (V + 1) cells before the pass runs, not after minutes of work."""

    class BlocksOnSmallDriver:
        context = _Context("2m")  # spark.driver.maxResultSize=2m

    with pytest.raises(ResultSizeError, match="20 paths x 20,000 terms"):
        engine.sufficient_stats(
            BlocksOnSmallDriver(), None, np.zeros((20, 2)), 20000, engine.PassOptions(use_unlabeled=True)
        )
    # float32 sums need half: 20 x 6,000 x 4 bytes fit where float64 would not.
    with pytest.raises(ResultSizeError):
        engine.sufficient_stats(
            BlocksOnSmallDriver(), None, np.zeros((20, 2)), 6000, engine.PassOptions(use_unlabeled=True)
        )
    engine.check_result_size(_Context("2m"), 21 * 6001 * 4, "float32 sums")
    # A real context with the default limit goes ahead (an empty RDD: no records).
    blocks = spark.sparkContext.parallelize([], 1)
    counts, totals, _, n_lab, n_unlab = engine.sufficient_stats(
        blocks, None, np.zeros((3, 2)), 5, engine.PassOptions(use_unlabeled=True)
    )
    assert counts.shape == (3, 5) and n_lab == 0 and n_unlab == 0


def test_missing_dependency_on_executors_is_a_deployment_error_not_a_retry():
    worker = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "pcem_spark/engine.py", line 20, in <module>\n'
        "ModuleNotFoundError: No module named 'scipy'\n"
    )
    code, message = classify_failure(PythonException(worker))
    assert code == EXIT_BAD_INPUT
    assert "No module named 'scipy'" in message and "pcem_env.tar.gz#environment" in message


def test_missing_input_thrown_by_the_jvm_is_bad_input():
    class FakeJava(Exception):
        pass

    thrown = FakeJava(
        "An error occurred while calling o79.getFileStatus.\n"
        ": java.io.FileNotFoundException: File file:/data/docs does not exist\n\tat org.apache..."
    )
    assert root_cause(thrown) == "java.io.FileNotFoundException: File file:/data/docs does not exist"
    # What the CLI sees: a PySpark exception carrying that text.
    code, message = classify_failure(PythonException(str(thrown)))
    assert code == EXIT_BAD_INPUT and "does not exist" in message
    too_big = (
        "An error occurred while calling o5.collect.\nCaused by: org.apache.spark.SparkException: "
        "Job aborted due to stage failure: Total size of serialized results of 3 tasks (1100.0 MiB) "
        "is bigger than spark.driver.maxResultSize (1024.0 MiB)"
    )
    code, message = classify_failure(PythonException(too_big))
    assert code == EXIT_BAD_INPUT and "spark.driver.maxResultSize" in message
    lost = (
        "An error occurred while calling o5.collect.\nCaused by: org.apache.spark.SparkException: "
        "Job aborted due to stage failure: ExecutorLostFailure (executor 1 exited)"
    )
    assert classify_failure(PythonException(lost))[0] == EXIT_TRANSIENT


def test_py_files_zip_holds_the_package_and_imports(tmp_path):
    path = packaging.build_py_files(str(tmp_path))
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert "pcem_spark/__init__.py" in names and "pcem_spark/engine/passes.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Deterministic: the same sources give the same bytes.
    first = packaging.sha256(path)
    assert packaging.sha256(packaging.build_py_files(str(tmp_path))) == first
    # Importable from the zip alone (what an executor does with --py-files).
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "import pcem_spark.cli, pcem_spark.engine; print(pcem_spark.engine.__file__); "
            "from pcem_spark.cli.config import load_settings; print(load_settings(None).spark.conf)",
            path,
        ],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(path)
    assert "spark.sql.shuffle.partitions" in probe.stdout  # the shipped defaults travel inside the zip


def test_driver_pins_name_the_installed_versions():
    import numpy
    import scipy

    pins = packaging.driver_pins()
    assert f"numpy=={numpy.__version__}" in pins and f"scipy=={scipy.__version__}" in pins
    assert {p.split("==")[0] for p in pins} == set(packaging.EXECUTOR_REQUIREMENTS)


def test_optional_pins_pack_the_warc_libraries_only_when_installed():
    from importlib import metadata

    pins = packaging.optional_pins(("fastwarc", "no-such-package-pcem"))
    # the test extra installs fastwarc: it is pinned to the installed version; a missing one is skipped
    assert pins == [f"fastwarc=={metadata.version('fastwarc')}"]
