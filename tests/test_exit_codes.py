"""Exit codes by the failure's kind (pcem_spark.cli.failures): every row of the README's table, with a real
exception of each kind, and the reported commands end to end.

Java exceptions are real JVM Throwables (made through py4j, or thrown by a real Spark read), delivered
the way a failed job delivers them: inside a SparkException, inside a Py4JJavaError. Worker exceptions
are raised in a real Python worker by a real Spark job.
"""

import errno
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib

import pytest
from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from pyspark.errors import PySparkRuntimeError, PySparkTypeError, PySparkValueError
from pyspark.errors.exceptions.captured import convert_exception

from pcem_spark.cli import failures, main
from pcem_spark.cli.failures import (
    EXIT_BAD_INPUT,
    EXIT_BUG,
    EXIT_TRANSIENT,
    TRANSIENT_JAVA,
    classify_failure,
    iter_rules,
    rules_markdown,
)
from pcem_spark.errors import InputError
from pcem_spark.io.documents import DocumentsError
from pcem_spark.util.volumes import read_only_mount

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


# ----------------------------------------------------------------- how each kind is produced
def _job_failure(spark, throwable):
    """A Py4JJavaError as a failed job delivers it: the cause inside a SparkException."""
    jvm = spark.sparkContext._jvm
    outer = jvm.org.apache.spark.SparkException("Job aborted due to stage failure: Task 0 failed", throwable)
    return Py4JJavaError("An error occurred while calling o42.collectToPython.\n", outer)


def _java(spark, name, tmp_path):
    jvm = spark.sparkContext._jvm
    cls = jvm
    for part in name.split("."):
        cls = getattr(cls, part)
    if name.endswith("InvalidInputException"):
        problems = jvm.java.util.ArrayList()
        problems.add(jvm.java.io.IOException("Input path does not exist: file:/nope"))
        return _job_failure(spark, cls(problems))
    if name == "org.apache.hadoop.fs.ChecksumException":
        return _job_failure(spark, cls("Checksum error: file:/x", 0))
    if name == "java.nio.charset.MalformedInputException":
        return _job_failure(spark, cls(1))
    if name == "org.apache.spark.sql.AnalysisException":
        with pytest.raises(Exception) as info:  # a real one, from a real query
            spark.sql("SELECT no_such_column")
        return _job_failure(spark, info.value._origin)
    return _job_failure(spark, cls(f"{name} raised for the test"))


def _spark_read_failure(spark, fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _condition(spark, name, tmp_path):
    if name == "PATH_NOT_FOUND":
        return _spark_read_failure(spark, lambda: spark.read.parquet(str(tmp_path / "nope")))
    if name == "UNABLE_TO_INFER_SCHEMA":
        (tmp_path / "empty").mkdir()
        return _spark_read_failure(spark, lambda: spark.read.parquet(str(tmp_path / "empty")))
    if name == "FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER":  # a JSON file read as Parquet
        path = tmp_path / "docs.jsonl"
        path.write_text('{"id": "a", "text": "x"}\n')
        return _spark_read_failure(spark, lambda: spark.read.parquet(str(path)).collect())
    if name == "FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH":  # a part file with another column type
        d = tmp_path / "mixed"
        spark.createDataFrame([(1,)], "x int").write.parquet(str(d / "a"))
        spark.createDataFrame([("s",)], "x string").write.parquet(str(d / "b"))
        for f in os.listdir(d / "b"):
            if f.endswith(".parquet"):
                shutil.copy(d / "b" / f, d / "a" / ("z-" + f))
        return _spark_read_failure(spark, lambda: spark.read.parquet(str(d / "a")).collect())
    if name == "JAVA_GATEWAY_EXITED":  # end to end in test_reported_settings_failures_exit_2
        return PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
    if name == "CANNOT_CONFIGURE_SPARK_CONNECT_MASTER":
        return PySparkRuntimeError(
            errorClass=name, messageParameters={"master_url": "local[2]", "connect_url": "sc://localhost"}
        )
    raise KeyError(name)


WORKER_RAISES = {
    "InputError and subclasses": "__import__('pcem_spark.io.documents', fromlist=['x']).DocumentsError('line 3: bad')",
    "ImportError": "ImportError('cannot import name x')",
    "ModuleNotFoundError": "ModuleNotFoundError(\"No module named 'scipy'\")",
    "UnicodeDecodeError": "UnicodeDecodeError('utf-8', b'\\xff', 0, 1, 'invalid start byte')",
    "UnicodeEncodeError": "UnicodeEncodeError('utf-8', '\\ud800', 0, 1, 'surrogates not allowed')",
    "other (OSError, MemoryError, a library's own error)": "OSError(5, 'Input/output error')",
}


def _worker(spark, kind):
    source = WORKER_RAISES.get(kind, f"{kind}('raised in a worker for the test')")

    def boom(batches):
        for _ in batches:
            raise eval(source)  # noqa: S307 - the test's own fixed strings
        yield from ()

    return _spark_read_failure(spark, lambda: spark.range(1).mapInArrow(boom, "id long").collect())


def _driver(kind, read_only=None):
    from pcem_spark.io.leases import OutputBusyError

    return {
        "TransientError and subclasses": OutputBusyError("model is being written by another run"),
        "InputError and subclasses": DocumentsError("docs.jsonl: bad"),
        "FileExistsError": FileExistsError("output exists"),
        "FileNotFoundError": FileNotFoundError("taxonomy.tsv"),
        "NotADirectoryError": NotADirectoryError("x"),
        "IsADirectoryError": IsADirectoryError("x"),
        "PermissionError": PermissionError(errno.EACCES, "Permission denied"),
        "TarError": tarfile.ReadError("not a gzip file"),
        "JSONDecodeError": json.JSONDecodeError("Expecting value", "{", 1),
        "TOMLDecodeError": tomllib.TOMLDecodeError("Invalid value"),
        "OSError EROFS (read-only file system)": _read_only_oserror(read_only),
        "OSError ENOSPC (disk full)": _disk_full_oserror(),
        "OSError with another errno (EIO)": OSError(errno.EIO, os.strerror(errno.EIO)),
        "MemoryError": MemoryError(),
        "Py4JNetworkError": Py4JNetworkError("Error while sending or receiving"),
        "ConnectionError": ConnectionResetError("reset"),
        # With the gateway gone (the test replaces the liveness probe): py4j reports a reset socket so.
        "Py4JError with the JVM gone": Py4JError("An error occurred while calling o42.count"),
        "other (ValueError, TypeError, KeyError, RuntimeError, EOFError)": EOFError("Compressed file ended"),
    }[kind]


# ----------------------------------------------------------------- read-only volumes and full disks
@pytest.fixture(scope="module")
def read_only_dir(tmp_path_factory):
    """A folder on a volume mounted read-only, for the kernel's and the JVM's own EROFS: one this machine has
    (containers mount /sys and /proc/sys so), else a 64 KiB tmpfs mounted read-only for these tests where this
    process may mount one; None where neither exists (the tests then build the errors as the code receives
    them: the same errno, the same Java class and text)."""
    for path in ("/sys", "/proc/sys"):
        if read_only_mount(path) == path:
            yield path
            return
    target = tmp_path_factory.mktemp("read-only")
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "pcem-test", str(target)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield str(target) if mounted and read_only_mount(str(target)) == str(target) else None
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], capture_output=True)


def _read_only_oserror(read_only, name="pcem-test-dir"):
    """os.mkdir's OSError on a read-only mount: the kernel's own where there is one, else as os.mkdir raises it."""
    if read_only:
        with pytest.raises(OSError) as info:
            os.mkdir(os.path.join(read_only, name))
        assert info.value.errno == errno.EROFS
        return info.value
    return OSError(errno.EROFS, os.strerror(errno.EROFS), f"/data/{name}")


def _disk_full_oserror():
    """A write to /dev/full: the kernel's own ENOSPC (a write error names no file)."""
    if not os.path.exists("/dev/full"):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(OSError) as info:
        with open("/dev/full", "w") as fh:
            fh.write("x")
    assert info.value.errno == errno.ENOSPC
    return info.value


def _java_call_failure(fn):
    """The Java Throwable of a real py4j call that throws."""
    with pytest.raises(Exception) as info:  # a Py4JJavaError, or pyspark's conversion of a known Java class
        fn()
    return getattr(info.value, "java_exception", None) or info.value._origin


def _java_read_only(spark, read_only, name="pcem-test-file"):
    """Java's error for a file created on a read-only mount: the JVM's own (FileNotFoundException "PATH
    (Read-only file system)") where there is one, else java.nio's FileSystemException with the OS's reason."""
    jvm = spark.sparkContext._jvm
    if read_only:
        return _java_call_failure(lambda: jvm.java.io.FileOutputStream(os.path.join(read_only, name)))
    return jvm.java.nio.file.FileSystemException(f"/data/{name}", None, "Read-only file system")


def _java_disk_full(spark):
    """The JVM's own IOException "No space left on device": a write to /dev/full."""
    jvm = spark.sparkContext._jvm
    if not os.path.exists("/dev/full"):
        return jvm.java.io.IOException("No space left on device")
    return _java_call_failure(lambda: jvm.java.io.FileOutputStream("/dev/full").write(1))


def _storage(spark, kind, tmp_path, monkeypatch, read_only):
    jvm = spark.sparkContext._jvm
    if kind == "java.nio.file.ReadOnlyFileSystemException":  # the JDK's runtime image is a read-only file system
        jrt = jvm.java.nio.file.Paths.get(jvm.java.net.URI.create("jrt:/modules"))
        return _job_failure(spark, _java_call_failure(lambda: jvm.java.nio.file.Files.delete(jrt)))
    if kind == "org.apache.hadoop.util.DiskChecker$DiskOutOfSpaceException":
        cls = getattr(jvm.org.apache.hadoop.util, "DiskChecker$DiskOutOfSpaceException")
        return _job_failure(spark, cls("Out of space: no local directory has 1 GB free"))
    if kind.startswith("Read-only file system"):
        return _job_failure(spark, _java_read_only(spark, read_only))
    if kind.startswith("No space left on device"):
        return _job_failure(spark, _java_disk_full(spark))
    if kind.startswith("Mkdirs failed to create"):
        if read_only:  # Hadoop's own failure, from a real write
            return _spark_read_failure(spark, lambda: spark.range(1).write.parquet(f"file:{read_only}/pcem-out"))
        # Hadoop's bare IOException, for a folder whose volume the test says is read-only
        monkeypatch.setattr(failures, "read_only_mount", lambda p: str(tmp_path) if str(tmp_path) in p else None)
        return _job_failure(spark, jvm.java.io.IOException(f"Mkdirs failed to create file:{tmp_path}/out/_temporary/0"))
    raise KeyError(kind)


def _assert_read_only(exc, path, end=" ("):
    code, message = classify_failure(exc)
    assert code == EXIT_TRANSIENT, message
    assert message.startswith(f"read-only file system: {path}{end}") and "mounted read-only" in message, message
    assert "permission" not in message.lower(), message
    return message


def test_a_read_only_file_system_is_named_with_its_path_never_permission_denied(spark, read_only_dir, tmp_path):
    import pyarrow.fs as pafs

    jvm = spark.sparkContext._jvm
    # Python: os.mkdir's and pyarrow's error (the path in its text), built as the code receives them ...
    _assert_read_only(OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/out"), "/data/out")
    pyarrow_text = "Failed to open local file '/data/out/x'. Detail: [errno 30] Read-only file system"
    _assert_read_only(OSError(errno.EROFS, pyarrow_text), "/data/out/x")
    # ... Java: java.nio's FileSystemException and java.io's FileNotFoundException (a bad-input class elsewhere:
    # the volume decides), from a py4j call and inside a failed job
    for throwable, path in [
        (jvm.java.nio.file.FileSystemException("/data/out", None, "Read-only file system"), "/data/out"),
        (jvm.java.io.FileNotFoundException("/data/out/part-0 (Read-only file system)"), "/data/out/part-0"),
    ]:
        _assert_read_only(_job_failure(spark, throwable), path)
        _assert_read_only(Py4JJavaError("An error occurred while calling o1.create.\n", throwable), path)
    if read_only_dir is None:
        return
    # ... and the kernel's, pyarrow's and the JVM's own errors on this machine's read-only mount
    target = os.path.join(read_only_dir, "pcem-test-x")
    _assert_read_only(_read_only_oserror(read_only_dir, "pcem-test-x"), target)
    with pytest.raises(OSError) as info:
        pafs.LocalFileSystem().open_output_stream(target)
    _assert_read_only(info.value, target)
    _assert_read_only(_job_failure(spark, _java_read_only(spark, read_only_dir, "pcem-test-x")), target)
    new_dir = jvm.java.io.File(target).toPath()
    no_attributes = spark.sparkContext._gateway.new_array(jvm.java.nio.file.attribute.FileAttribute, 0)
    created = _java_call_failure(lambda: jvm.java.nio.file.Files.createDirectory(new_dir, no_attributes))
    assert "FileSystemException" in str(created.toString())
    _assert_read_only(_job_failure(spark, created), target)
    # Hadoop's bare "Mkdirs failed to create" of a real Spark write: the mount says why
    failed = _spark_read_failure(spark, lambda: spark.range(1).write.parquet(f"file:{read_only_dir}/pcem-test-out"))
    _assert_read_only(failed, f"file:{read_only_dir}/pcem-test-out/_temporary/", end="")


def _assert_disk_full(exc, *names):
    code, message = classify_failure(exc)
    assert code == EXIT_TRANSIENT, message
    assert message.startswith("disk full") and "(no space left on device" in message, message
    for name in names:
        assert name in message, message
    return message


def test_a_full_disk_is_named_with_the_path_it_gives(spark):
    jvm = spark.sparkContext._jvm
    _assert_disk_full(
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/out/part-0"), "disk full: /data/out/part-0"
    )
    # the kernel's own (a write error names no file): says so
    assert "the error names no file" in _assert_disk_full(_disk_full_oserror())
    # the JVM's own, from a py4j call and inside a failed job
    java = _java_disk_full(spark)
    assert "names no file: a write by Spark" in _assert_disk_full(_job_failure(spark, java))
    # Java's FileNotFoundException form names the file, here a shuffle file of Spark's scratch space
    shuffle = "/tmp/blockmgr-1/0c/shuffle_0_0_0.data"
    _assert_disk_full(
        _job_failure(spark, jvm.java.io.FileNotFoundException(f"{shuffle} (No space left on device)")),
        f"disk full: {shuffle} (",
    )
    # a task's spill, as Spark reports it: the task's stack trace in the job's message
    spill = jvm.org.apache.spark.SparkException(
        "Job aborted due to stage failure: Task 1 in stage 2.0 failed 3 times, most recent failure: Lost task 1.2 "
        "in stage 2.0 (TID 7) (10.0.0.5 executor 2): java.io.IOException: No space left on device\n"
        "\tat org.apache.spark.storage.DiskBlockObjectWriter.commitAndGet(DiskBlockObjectWriter.scala:180)",
        java,
    )
    _assert_disk_full(Py4JJavaError("An error occurred while calling o9.collectToPython.\n", spill), "spark.local.dir")
    # Spark's failed write names its file (TASK_WRITE_FAILED)
    written = jvm.org.apache.spark.SparkException(
        "[TASK_WRITE_FAILED] Task failed while writing rows to file:/out/_t/0.", java
    )
    _assert_disk_full(_job_failure(spark, written), "disk full: file:/out/_t/0 (")
    # Hadoop's own class for a full local disk
    cls = getattr(jvm.org.apache.hadoop.util, "DiskChecker$DiskOutOfSpaceException")
    _assert_disk_full(_job_failure(spark, cls("Out of space: no local directory has 1 GB free")))


def test_a_task_that_hits_a_full_disk_or_a_read_only_volume_is_named_so(spark, read_only_dir):
    """A Python worker's OSError, delivered by a real failed job: the worker's traceback line decides."""

    def full(batches):
        for _ in batches:
            with open("/dev/full", "w") as fh:
                fh.write("x")
        yield from ()

    if os.path.exists("/dev/full"):
        failed = _spark_read_failure(spark, lambda: spark.range(1).mapInArrow(full, "id long").collect())
        assert "Errno 28" in _assert_disk_full(failed)
    target = os.path.join(read_only_dir, "pcem-test-task") if read_only_dir else "/data/pcem-test-task"

    def read_only(batches):
        for _ in batches:
            if read_only_dir:
                os.mkdir(target)
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), target)
        yield from ()

    failed = _spark_read_failure(spark, lambda: spark.range(1).mapInArrow(read_only, "id long").collect())
    _assert_read_only(failed, target)


def test_a_full_disk_without_a_path_names_the_outputs_the_command_was_writing(spark, tmp_path, capsys, monkeypatch):
    """pcem ingest-20ng into a Parquet folder, under its lease, hits a full disk (a write to /dev/full) as it
    writes the output: the error names no file, so the message names the output the command was writing."""
    import pcem_spark.io.newsgroups as newsgroups
    import pcem_spark.io.outputs as outputs

    def docs(archive, headers=False):
        yield {"id": "d1", "text": "apple", "labels": ["f", "apple"], "split": "train"}

    def full_disk(*args, **kwargs):
        with open("/dev/full" if os.path.exists("/dev/full") else os.devnull, "w") as fh:
            fh.write("x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # only without /dev/full

    monkeypatch.setattr(newsgroups, "iter_20ng", docs)
    monkeypatch.setattr(outputs, "atomic_output", full_disk)
    (tmp_path / "20news.tar.gz").write_bytes(b"")
    out = str(tmp_path / "docs")
    code = main(["ingest-20ng", "--archive", str(tmp_path / "20news.tar.gz"), "--output", out])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSIENT, err
    assert f"disk full: {out} (no space left on device; the error names no file; these are the outputs" in err
    assert "retry" in err


def test_a_read_only_output_is_75_naming_it_before_any_work(
    spark, docs_file, tmp_path, capsys, monkeypatch, read_only_dir
):
    """The output's lease is the probe: on a read-only volume it says so (75), not "permission denied" (2),
    before the documents are read."""
    from pcem_spark.io.hadoop_fs import HadoopFS

    if read_only_dir is None:  # the error a create on a read-only mount gives
        model = str(tmp_path / "model")

        def refuse(self, path, text):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

        monkeypatch.setattr(HadoopFS, "create_exclusive", refuse)
    else:
        model = os.path.join(read_only_dir, "pcem-test-model")
    code = main(["train", "--docs", docs_file, "--model", model, "--log-level", "WARNING"])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSIENT, err
    assert f"read-only file system: {model}" in err and "mounted read-only" in err, err
    assert "permission" not in err.lower(), err


def _message(spark, marker, tmp_path):
    if marker == "spark.driver.maxResultSize":
        jvm = spark.sparkContext._jvm
        return Py4JJavaError(
            "An error occurred while calling o9.collectToPython.\n",
            jvm.org.apache.spark.SparkException(
                "Job aborted due to stage failure: Total size of serialized results of 3 tasks (1100.0 MiB) is "
                "bigger than spark.driver.maxResultSize (1024.0 MiB)"
            ),
        )
    if marker == failures.MKDIRS_RULE:  # Hadoop's bare IOException, for a folder under a file
        (tmp_path / "a_file").write_text("x")
        jvm = spark.sparkContext._jvm
        return _job_failure(spark, jvm.java.io.IOException(f"Mkdirs failed to create file:{tmp_path}/a_file/out"))
    if marker.startswith("EOFException"):  # a truncated .gz file
        path = tmp_path / "cut.jsonl.gz"
        data = gzip.compress(b"".join(b'{"id": "%d", "text": "word"}\n' % i for i in range(2000)))
        path.write_bytes(data[: len(data) // 2])
        return _spark_read_failure(spark, lambda: spark.read.text(str(path)).count())
    raise KeyError(marker)


def _pyspark(spark, kind):
    if kind == "PySparkValueError":
        return PySparkValueError(
            errorClass="VALUE_NOT_POSITIVE", messageParameters={"arg_name": "k", "arg_value": "-1"}
        )
    if kind == "PySparkTypeError":
        return PySparkTypeError(
            errorClass="NOT_EXPECTED_TYPE",
            messageParameters={"arg_name": "k", "expected_type": "int", "arg_type": "str"},
        )
    if kind == "AnalysisException":
        return _spark_read_failure(spark, lambda: spark.sql("SELECT no_such_column"))
    if kind == "IllegalArgumentException":
        return convert_exception(spark.sparkContext._jvm.java.lang.IllegalArgumentException("bad argument"))
    raise KeyError(kind)


def _lost_executors(spark, kind):
    jvm = spark.sparkContext._jvm
    if kind == "org.apache.spark.shuffle.FetchFailedException":
        # A lost shuffle file: its FileNotFoundException must not make the job look like bad input.
        none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
        manager = jvm.org.apache.spark.storage.BlockManagerId.apply("1", "host", 7337, none)
        lost = jvm.java.io.FileNotFoundException("/tmp/blockmgr-1/0c/shuffle_0_0_0.data (No such file)")
        return _job_failure(
            spark, jvm.org.apache.spark.shuffle.FetchFailedException(manager, 0, 0, 0, 0, "fetch failed", lost)
        )
    return _job_failure(spark, jvm.org.apache.spark.ExecutorDeadException("executor 1 is dead"))


def _exception(spark, origin, kind, tmp_path, monkeypatch=None, read_only=None):
    if origin == "driver Python":
        return _driver(kind, read_only)
    if origin == "Java cause chain or worker":
        return _storage(spark, kind, tmp_path, monkeypatch, read_only)
    if origin.startswith("pyspark"):
        return _pyspark(spark, kind)
    if origin == "Java cause chain" and kind in TRANSIENT_JAVA:
        return _lost_executors(spark, kind)
    if origin == "Spark error condition":
        return _condition(spark, kind, tmp_path)
    if origin == "Java cause chain":
        if kind.startswith("other"):
            return _job_failure(spark, spark.sparkContext._jvm.java.io.IOException("Connection reset by peer"))
        return _java(spark, kind, tmp_path)
    if origin.startswith("Java message"):
        return _message(spark, kind, tmp_path)
    if origin == "worker Python":
        return _worker(spark, kind)
    raise KeyError(origin)


CASES = [(origin, kind, code) for origin, kinds, code in iter_rules() for kind in kinds]


def test_the_guides_table_is_the_rule_table():
    with open(os.path.join(ROOT, "docs", "guide", "scheduling.md"), encoding="utf-8") as fh:
        readme = fh.read()
    assert rules_markdown() in readme, (
        "the user guide's exit-code table is out of date: python -m pcem_spark.cli.failures"
    )


@pytest.mark.parametrize("origin,kind,code", CASES, ids=[f"{o}:{k}"[:60] for o, k, _ in CASES])
def test_every_row_of_the_table(spark, tmp_path, monkeypatch, read_only_dir, origin, kind, code):
    if kind == "Py4JError with the JVM gone":
        monkeypatch.setattr(failures, "_jvm_alive", lambda: False)
    exc = _exception(spark, origin, kind, tmp_path, monkeypatch, read_only_dir)
    got, message = classify_failure(exc)
    assert got == code, f"{origin} {kind}: {type(exc).__name__} -> {got} ({message})"
    assert message


def test_internal_value_errors_are_bugs_and_validation_errors_are_bad_input():
    assert classify_failure(ValueError("index 3 out of range in a pure function"))[0] == EXIT_BUG
    assert classify_failure(InputError("model.tol must be >= 0"))[0] == EXIT_BAD_INPUT
    # A settings error raised by the settings code is an InputError, not a ValueError
    from pcem_spark.cli.config import load_settings

    with pytest.raises(InputError):
        load_settings(None, ["model.tol=-1"])


def test_a_py4j_error_with_the_jvm_alive_is_a_bug_and_classifying_never_raises(spark):
    assert failures._jvm_alive()
    assert classify_failure(Py4JError("An error occurred while calling o42.count"))[0] == EXIT_BUG

    class Unprintable(Py4JJavaError):  # str() of a py4j error asks the JVM; a dead one cannot answer
        def __init__(self):
            Exception.__init__(self, "An error occurred while calling o7.count")
            self.java_exception, self.errmsg = None, "An error occurred while calling o7.count"

        def __str__(self):
            raise Py4JNetworkError("Answer from Java side is empty")

    code, message = classify_failure(Unprintable())
    assert code == EXIT_TRANSIENT and "o7.count" in message


def test_the_worker_type_and_message_reach_the_user(spark):
    code, message = classify_failure(_worker(spark, "KeyError"))
    assert code == EXIT_BUG and "KeyError" in message and "raised in a worker for the test" in message


# ----------------------------------------------------------------- the reported commands, end to end
def _pcem(args, preexec=()):
    env = {k: v for k, v in os.environ.items() if k not in ("PCEM_KILL_AT", "PCEM_INJECT_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    return subprocess.run(
        [*preexec, sys.executable, "-m", "pcem_spark.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def docs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"d{i}",
                    "text": "apple banana" if i % 2 else "car wheel",
                    "labels": ["f", "apple"] if i % 2 else ["v", "car"],
                }
            )
            + "\n"
            for i in range(20)
        )
    )
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["spark.master=bogus", "spark.conf.spark.driver.memory=abc"])
def test_reported_settings_failures_exit_2(docs_file, tmp_path, setting):
    proc = _pcem(["train", "--docs", docs_file, "--model", str(tmp_path / "m"), "--set", setting])
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr[-3000:]
    assert "could not start" in proc.stderr and "retry" not in proc.stderr.splitlines()[-1]


@pytest.mark.slow
def test_reported_input_failures_exit_2(spark, docs_file, tmp_path, capsys):
    fast = [
        "--set",
        "model.smoothing=0.1",
        "--set",
        "model.unlabeled_weight=0.5",
        "--set",
        "model.path_weight=0",
        "--set",
        "features.min_df=1",
        "--log-level",
        "WARNING",
    ]
    # --format parquet on a JSON file
    assert (
        main(["train", "--docs", docs_file, "--format", "parquet", "--model", str(tmp_path / "m1"), *fast])
        == EXIT_BAD_INPUT
    )
    assert "not a Parquet" in capsys.readouterr().err
    # a truncated Parquet part file (no checksum file beside it, as on object stores)
    table = str(tmp_path / "table")
    spark.read.json(docs_file).repartition(2).write.parquet(table)
    part = sorted(f for f in os.listdir(table) if f.endswith(".parquet"))[0]
    os.truncate(os.path.join(table, part), 200)
    for crc in [f for f in os.listdir(table) if f.endswith(".crc")]:
        os.remove(os.path.join(table, crc))
    assert main(["train", "--docs", table, "--model", str(tmp_path / "m2"), *fast]) == EXIT_BAD_INPUT
    assert part in capsys.readouterr().err
    # --output whose parent is a regular file
    model = str(tmp_path / "model")
    assert main(["train", "--docs", docs_file, "--model", model, *fast]) == 0
    (tmp_path / "afile").write_text("x")
    assert (
        main(["predict", "--model", model, "--docs", docs_file, "--output", str(tmp_path / "afile" / "sub"), *fast])
        == EXIT_BAD_INPUT
    )
    err = capsys.readouterr().err
    assert "afile" in err and "retry" not in err


@pytest.mark.slow
def test_an_unreadable_documents_folder_exits_2(docs_file, tmp_path):
    folder = tmp_path / "noread"
    folder.mkdir()
    shutil.copy(docs_file, folder / "docs.jsonl")
    os.chmod(folder, 0)
    # root reads everything: drop the capabilities that let it ignore permissions, as a normal user has none
    preexec = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    try:
        proc = _pcem(["train", "--docs", str(folder), "--model", str(tmp_path / "m")], preexec)
    finally:
        os.chmod(folder, 0o755)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr[-3000:]
    assert re.search(r"permission denied", proc.stderr, re.I)


def test_a_truncated_archive_is_bad_input(tmp_path, capsys):
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = os.urandom(100_000)  # incompressible, so half the gzip stream is half the member
        info = tarfile.TarInfo("20news-bydate-train/alt.atheism/1")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    cut = tmp_path / "20news.tar.gz"
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    assert main(["ingest-20ng", "--archive", str(cut), "--output", str(tmp_path / "d.jsonl")]) == EXIT_BAD_INPUT
    assert "damaged or truncated archive" in capsys.readouterr().err
    assert not (tmp_path / "d.jsonl").exists()
