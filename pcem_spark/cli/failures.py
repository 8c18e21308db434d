"""Exit codes for schedulers: which failures a retry can fix, decided by the exception's kind.

``pcem`` exits with

* 0  done;
* 1  a bug in pcem-spark (a traceback is printed; retrying will not help);
* 2  bad input or settings: the request itself is wrong (the message names the
  file, row, field or setting); retrying will not help;
* 75 (``EX_TEMPFAIL``) a runtime failure that the same request can survive:
  lost executors or JVM, I/O and network errors, tasks failing after Spark's
  own retries.

:func:`classify_failure` decides by *kind and origin*, never by the wording of
a message, so a new failure of a known kind lands on the right side:

1. the Python exception type raised on the driver (:class:`~pcem_spark.errors.InputError`
   and its subclasses are bad input, the ``OSError`` family by errno, any other
   type is a bug);
2. for a failure that came out of the JVM, the Java exception classes of the
   whole cause chain and Spark's error condition (``SparkThrowable.getCondition``),
   looked up in :data:`BAD_INPUT_JAVA` and :data:`BAD_INPUT_CONDITIONS`;
3. for a Python exception raised in a Spark worker, its type, read from the
   worker's traceback (the only place the JVM keeps it): our own input errors
   and missing modules are bad input, programming-error types are bugs, the
   rest is transient.

Two failures have no class of their own and are recognised by the text Spark
gives them; each is listed in :data:`MESSAGE_RULES` with the reason. So are a
read-only file system and a full disk (:data:`STORAGE_JAVA` and the OS's own
words for ``EROFS`` / ``ENOSPC``, which the JVM has no class for): checked
before the other rules of a Spark failure, and reported as ``read-only file
system: PATH`` / ``disk full: PATH (no space left on device)``. The table
in the user guide (docs/guide/scheduling.md, "Exit codes") lists every rule, and ``tests/test_exit_codes.py``
raises a real exception for each of its rows.

Ambiguous kinds, and the side chosen:

* a read-only file system (``EROFS``) and a full disk (``ENOSPC``) are
  transient (75): a remounted volume or a cleaned disk makes the same run pass;
  each is named as such with its path (never as "permission denied": a
  read-only mount refuses root too), and a full disk whose error names no file
  names the outputs the command was writing;
  ``EACCES`` (:class:`PermissionError`, ``AccessDeniedException``,
  ``AccessControlException``) is bad input (2): permissions do not change by
  themselves; Hadoop's bare ``Mkdirs failed to create PATH`` is decided by
  looking at PATH: on a volume mounted read-only it is transient (read-only
  file system), a name over 255 bytes, a file on the way or (local disk)
  a parent this process may not write is bad input (2), anything else transient;
* :class:`~pcem_spark.errors.TransientError` (another run writing the same
  output, an input replaced or unfinished) is transient (75);
* the JVM exiting before it started (``JAVA_GATEWAY_EXITED``) is bad settings
  (2): its causes are a bad ``spark.master``, a malformed ``spark.*`` value or
  no usable Java; a machine too short of memory to start a JVM would be the
  exception, and the JVM's own message above says which;
* ``java.lang.OutOfMemoryError`` is transient (75): another node or a quieter
  machine may have the memory; if it recurs, raise ``spark.*.memory``;
* an unknown Python exception type raised in a worker (a library's own error
  class) is transient (75), as Spark's task retries already treat it.
"""

from __future__ import annotations

import errno
import json
import re
import tarfile
from typing import Iterator, List, Optional, Tuple

from pcem_spark.errors import InputError, TransientError
from pcem_spark.util import volumes
from pcem_spark.util.volumes import DISK_FULL, READ_ONLY, read_only_mount, storage_error_in

__all__ = [
    "EXIT_OK",
    "EXIT_BUG",
    "EXIT_BAD_INPUT",
    "EXIT_TRANSIENT",
    "BAD_INPUT_JAVA",
    "TRANSIENT_JAVA",
    "BAD_INPUT_CONDITIONS",
    "BUG_WORKER_TYPES",
    "DEPLOYMENT_WORKER_TYPES",
    "MESSAGE_RULES",
    "MKDIRS_RULE",
    "STORAGE_JAVA",
    "STORAGE_RULES",
    "root_cause",
    "java_chain",
    "classify_failure",
    "iter_rules",
    "rules_markdown",
]

EXIT_OK, EXIT_BUG, EXIT_BAD_INPUT, EXIT_TRANSIENT = 0, 1, 2, 75

# Java exception classes (anywhere in the cause chain) that mean the request is wrong:
# the path is missing, not readable, not a directory, or its bytes are not what was asked for.
BAD_INPUT_JAVA = {
    "java.io.FileNotFoundException": "not found",
    "java.nio.file.NoSuchFileException": "not found",
    "java.nio.file.NotDirectoryException": "not a directory",
    "java.nio.file.AccessDeniedException": "permission denied",
    "org.apache.hadoop.security.AccessControlException": "permission denied",
    "org.apache.hadoop.mapred.InvalidInputException": "not found",
    "org.apache.hadoop.mapreduce.lib.input.InvalidInputException": "not found",
    "org.apache.hadoop.fs.ParentNotDirectoryException": "a parent of the path is a file",
    "org.apache.hadoop.fs.PathIsNotDirectoryException": "not a directory",
    "org.apache.hadoop.fs.ChecksumException": "corrupt input",
    "java.util.zip.ZipException": "corrupt input",
    "org.apache.parquet.io.ParquetDecodingException": "corrupt input",
    "java.nio.charset.MalformedInputException": "corrupt input",
    "org.apache.spark.sql.AnalysisException": "the query does not fit the input",
}

# Java classes in the chain that say the job died of lost machines, whatever the deeper cause: a lost
# shuffle file shows up as a FileNotFoundException under a FetchFailedException. Checked first.
TRANSIENT_JAVA = ("org.apache.spark.shuffle.FetchFailedException", "org.apache.spark.ExecutorDeadException")

# Spark error conditions (the part before the first dot, or the whole name) that mean the same.
BAD_INPUT_CONDITIONS = {
    "PATH_NOT_FOUND": "not found",
    "UNABLE_TO_INFER_SCHEMA": "not a table of the expected format",
    "FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER": "not a Parquet/ORC file, or a truncated one",
    "FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH": "a column of the wrong type",
    "JAVA_GATEWAY_EXITED": "the Spark driver JVM could not start: check the [spark] settings (master, "
    "conf values such as memory sizes) and the Java installation; the JVM's own "
    "error is printed above",
    "CANNOT_CONFIGURE_SPARK_CONNECT_MASTER": "conflicting master / Spark Connect settings",
}

# Python exception types that, raised in a worker, are bugs of pcem-spark (every retry fails the same way:
# a row that breaks the code should have been a reject).
BUG_WORKER_TYPES = {
    "TypeError",
    "ValueError",
    "KeyError",
    "AttributeError",
    "IndexError",
    "NameError",
    "AssertionError",
    "UnicodeError",
    "UnicodeEncodeError",
    "UnicodeDecodeError",
    "ZeroDivisionError",
    "NotImplementedError",
    "UnboundLocalError",
    "RecursionError",
}
# ... and that mean a deployment problem (the executors lack a dependency).
DEPLOYMENT_WORKER_TYPES = {"ModuleNotFoundError", "ImportError"}

# Failures Spark gives no class or condition of its own, recognised by their text.
MESSAGE_RULES: List[Tuple[str, int, str]] = [
    # A SparkException like any aborted job: only the text tells it apart, and the setting it names
    # is too small for the model, so every retry fails the same way.
    (
        "spark.driver.maxResultSize",
        EXIT_BAD_INPUT,
        "results too large for the driver: {cause} (raise --conf spark.driver.maxResultSize and spark.driver.memory)",
    ),
    # Hadoop's DecompressorStream throws a bare java.io.EOFException for a truncated .gz/.bz2 file; an
    # EOFException elsewhere (a shuffle, a socket) is a lost connection, so the class alone cannot decide.
    ("EOFException: Unexpected end of input stream", EXIT_BAD_INPUT, "corrupt input (truncated): {cause}"),
]

# A read-only volume or a full disk (transient, named with the path): these Java classes anywhere in the chain,
# or the OS's words for EROFS / ENOSPC in the failure's text (Java has no class for them: a FileSystemException,
# a FileNotFoundException or a plain IOException carries the reason), or Hadoop's bare Mkdirs failure for a
# folder on a read-only mount.
STORAGE_JAVA = {
    "java.nio.file.ReadOnlyFileSystemException": READ_ONLY,
    "org.apache.hadoop.util.DiskChecker$DiskOutOfSpaceException": DISK_FULL,
}
STORAGE_RULES = (
    f"{READ_ONLY} (EROFS)",
    f"{DISK_FULL} (ENOSPC)",
    "Mkdirs failed to create, on a volume mounted read-only",
)

_PY_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)):\s?(.*)$")
_JAVA_CAUSE = re.compile(r"^\s*Caused by: (\S+?)(?:: (.*))?$")
_JAVA_THROWN = re.compile(r"^:\s*((?:java|javax|org|scala)\.[\w.$]+(?:Exception|Error))(?::|$)")
_JAVA_CLASS_IN_TEXT = re.compile(r"\b((?:java|javax|org|scala)\.[\w.$]+(?:Exception|Error|Throwable))\b")
_PYTHON_WORKER = "org.apache.spark.api.python.PythonException"


def root_cause(exc: BaseException) -> str:
    """The innermost cause of a Spark failure, in one line.

    A Python exception raised in a worker reaches the driver inside a Java
    stack trace inside a py4j error: the last Python ``Traceback`` block's
    final ``Type: message`` line is what went wrong. Without one, the
    deepest Java ``Caused by:`` line; without that, the first line.
    """
    text = _full_text(exc)
    worker = _worker_error_line(text)
    if worker:
        return worker
    causes = [m for m in (_JAVA_CAUSE.match(line) for line in text.splitlines()) if m]
    if causes:
        name, msg = causes[-1].group(1), (causes[-1].group(2) or "").strip()
        return f"{name}: {msg}" if msg else name
    # A Java exception thrown by the call itself ("An error occurred while
    # calling o79.getFileStatus.\n: java.io.FileNotFoundException: ..."): its own line.
    for line in text.splitlines():
        m = _JAVA_THROWN.match(line)
        if m:
            return line.strip().lstrip(": ").strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)


def _text(exc: BaseException) -> str:
    """``str(exc)``, which for a py4j error asks the JVM: when that is gone, what Python still has."""
    try:
        return str(exc)
    except Exception:
        return str(getattr(exc, "errmsg", "") or type(exc).__name__)


def _full_text(exc: BaseException) -> str:
    text = _text(exc)
    java = _java_origin(exc)
    if java is not None:
        try:
            text = text + "\n" + str(java.toString())
        except Exception:  # the JVM may be gone
            pass
    return text


def _worker_error_line(text: str) -> str:
    """``Type: message`` of the last Python traceback in ``text`` ("" if there is none)."""
    if "Traceback (most recent call last)" not in text:
        return ""
    tail = text.rsplit("Traceback (most recent call last)", 1)[1].splitlines()
    for line in reversed(tail):
        m = _PY_ERROR_LINE.match(line.strip())
        if m and m.group(1) != _PYTHON_WORKER:
            return f"{m.group(1)}: {m.group(2)}".strip()
    return ""


def _java_origin(exc: BaseException):
    """The Java Throwable behind a py4j error or a pyspark captured exception, or None."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def java_chain(exc: BaseException) -> List[Tuple[str, Optional[str]]]:
    """(Java class name, Spark error condition or None) of every Throwable in the cause chain.

    Asked of the JVM when it is alive; when it is not (or for an exception
    built from text), the class names found in the exception's text.
    """
    chain: List[Tuple[str, Optional[str]]] = []
    throwable = _java_origin(exc)
    try:
        for _ in range(32):  # cause chains are short; a cycle must not hang the exit
            if throwable is None:
                break
            name = str(throwable.getClass().getName())
            condition = None
            try:
                condition = throwable.getCondition()
                condition = None if condition is None else str(condition)
            except Exception:  # not a SparkThrowable
                condition = None
            chain.append((name, condition))
            throwable = throwable.getCause()
    except Exception:  # the JVM is gone: fall back to the text
        chain = []
    if not chain:
        chain = [(name, None) for name in _JAVA_CLASS_IN_TEXT.findall(_full_text(exc))]
    condition = _condition(exc)
    if condition and all(c != condition for _, c in chain):
        chain.insert(0, (type(exc).__name__, condition))
    return chain


def _bad_input_classes(exc: BaseException, chain) -> List[str]:
    """The :data:`BAD_INPUT_JAVA` classes that some Throwable of the chain is an instance of.

    Asked of the JVM with ``instanceof`` (so subclasses count: Spark 4's
    ``ExtendedAnalysisException`` is an ``AnalysisException``); by exact
    name when the JVM is gone.
    """
    found = []
    throwable = _java_origin(exc)
    try:
        from py4j.java_gateway import is_instance_of
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        for _ in range(32):
            if throwable is None or gateway is None:
                break
            found += [name for name in BAD_INPUT_JAVA if is_instance_of(gateway, throwable, name)]
            throwable = throwable.getCause()
    except Exception:  # the JVM is gone
        found = []
    return found or [name for name, _ in chain if name in BAD_INPUT_JAVA]


def _condition(exc: BaseException) -> Optional[str]:
    get = getattr(exc, "getCondition", None)
    if get is None:
        return None
    try:
        value = get()
    except Exception:
        return None
    return None if value is None else str(value)


def _condition_rule(condition: Optional[str]) -> Optional[str]:
    if not condition:
        return None
    return BAD_INPUT_CONDITIONS.get(condition) or BAD_INPUT_CONDITIONS.get(condition.split(".", 1)[0])


def _input_error_names() -> set:
    """Names of InputError and every subclass (a worker's traceback gives only the type's name)."""
    import importlib

    modules = "experiment.settings io.documents io.snapshots io.warc_records engine.limits engine.session core.taxonomy"
    for module in (modules + " model.warm util.strict_json").split():
        try:  # the modules that define subclasses; some import optional libraries lazily
            importlib.import_module(f"pcem_spark.{module}")
        except ImportError:
            pass
    names, todo = set(), [InputError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def _driver_bad_input_types() -> tuple:
    import tomllib

    return (
        InputError,
        FileExistsError,
        FileNotFoundError,
        NotADirectoryError,
        IsADirectoryError,
        PermissionError,
        tarfile.TarError,
        json.JSONDecodeError,
        tomllib.TOMLDecodeError,
    )


def _bad_input_python(exc: BaseException) -> bool:
    if isinstance(exc, _driver_bad_input_types()):
        return True
    # The same kinds as errno values (an OSError built by hand or by a library).
    return isinstance(exc, OSError) and exc.errno in (
        errno.ENOENT,
        errno.EACCES,
        errno.EPERM,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
    )


def classify_failure(exc: BaseException) -> Tuple[int, str]:
    """(exit code, one-line message) of an exception: bad input (2), transient (75) or bug (1)."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
    from pyspark.errors import PySparkException

    if isinstance(exc, TransientError):  # another writer, a replaced input, an unfinished upstream output
        return EXIT_TRANSIENT, str(exc)
    if _bad_input_python(exc):
        return EXIT_BAD_INPUT, str(exc)
    storage = _storage_failure(exc)
    if storage is not None:  # a read-only volume or a full disk: transient, named with the path
        return storage
    if isinstance(exc, (Py4JNetworkError, ConnectionError)) or (
        isinstance(exc, Py4JError) and not isinstance(exc, Py4JJavaError) and not _jvm_alive()
    ):
        return EXIT_TRANSIENT, f"lost the connection to the Spark driver JVM ({type(exc).__name__}: {_text(exc)})"
    if isinstance(exc, (Py4JJavaError, PySparkException)):
        return _classify_spark(exc)
    if isinstance(exc, (OSError, MemoryError)):
        # I/O errors, a lost connection: the same run can pass once the volume is back.
        return EXIT_TRANSIENT, f"{type(exc).__name__}: {exc}"
    # Anything else -- a plain ValueError, TypeError, KeyError, RuntimeError -- is a bug: validation raises
    # InputError, so a ValueError here was not meant for the user.
    return EXIT_BUG, f"{type(exc).__name__}: {exc}"


def _storage_failure(exc: BaseException) -> Optional[Tuple[int, str]]:
    """(75, "read-only file system: PATH ..." / "disk full: PATH ...") when ``exc`` is, or a Spark failure
    carries, ``EROFS`` or ``ENOSPC``; None otherwise. The path is the one the error names; for a full disk
    whose error names none, the outputs the command held leases on (:func:`pcem_spark.io.leases.outputs_of`)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    cause = text = ""
    if isinstance(exc, OSError):
        kinds = {errno.EROFS: READ_ONLY, errno.ENOSPC: DISK_FULL}
        if exc.errno not in kinds:
            return None
        found = storage_error_in(f"[Errno {exc.errno}] {exc.strerror}") or (kinds[exc.errno], [])
        kind, paths = kinds[exc.errno], [p for p in (exc.filename, exc.filename2) if p] + found[1]
    elif isinstance(exc, (Py4JJavaError, PySparkException)):
        text = _full_text(exc)
        worker = _worker_error_line(text)
        # A worker's own error decides (its message may quote a document); the JVM's classes, then its text.
        found = storage_error_in(worker) if worker else storage_error_in(text)
        if found is None and not worker:
            kind = next((STORAGE_JAVA[name] for name, _ in java_chain(exc) if name in STORAGE_JAVA), None)
            found = (kind, []) if kind else None
        folder = None if worker else _MKDIRS.search(text)
        if found is None and folder and read_only_mount(folder.group(1)):
            found = (READ_ONLY, [folder.group(1)])
        if found is None:
            return None
        (kind, paths), cause = found, f" -- {root_cause(exc)}"
    else:
        return None
    paths = list(dict.fromkeys(str(p) for p in paths))
    if kind == READ_ONLY:
        path = paths[0] if paths else None
        return EXIT_TRANSIENT, volumes.read_only_message(path, read_only_mount(path) if path else None) + cause
    if paths:
        return EXIT_TRANSIENT, volumes.disk_full_message(paths) + cause
    from pcem_spark.io.leases import outputs_of

    outputs = list(outputs_of(exc))
    if outputs:
        what = "the error names no file; these are the outputs the command was writing"
    elif re.search(r"shuffle|[Ss]pill|blockmgr-|DiskBlockObjectWriter", text):
        what = "in Spark's scratch space: spark.local.dir, on the executors' local disks"
    else:
        what = "the error names no file: " + ("a write by Spark (driver JVM or executor)" if cause else "a write")
    return EXIT_TRANSIENT, volumes.disk_full_message(outputs, what) + cause


def _jvm_alive() -> bool:
    """Whether this process's py4j gateway still answers (a py4j error without a Java one may be a dead JVM)."""
    try:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        return gateway is not None and gateway.jvm.java.lang.System.currentTimeMillis() > 0
    except Exception:
        return False


def _classify_spark(exc: BaseException) -> Tuple[int, str]:
    cause = root_cause(exc)
    worker = _worker_error_line(_full_text(exc))
    if worker:
        return _classify_worker(worker)
    chain = java_chain(exc)
    for _name, condition in chain:
        why = _condition_rule(condition)
        if why:
            return EXIT_BAD_INPUT, f"{why}: {_message(exc, cause)}"
    if _java_origin(exc) is None and isinstance(
        exc, (ValueError, TypeError, AttributeError, NotImplementedError, AssertionError)
    ):
        # pyspark's own argument checks (PySparkValueError, PySparkTypeError ...), raised in Python: pcem-spark
        # called pyspark wrongly.
        return EXIT_BUG, f"{type(exc).__name__}: {_text(exc)}"
    if any(name in TRANSIENT_JAVA for name, _ in chain):
        return EXIT_TRANSIENT, f"Spark job failed (executors or their files lost): {cause}"
    folder = _MKDIRS.search(_full_text(exc))
    problem = _folder_problem(folder.group(1)) if folder else None
    if problem is not None:
        return EXIT_BAD_INPUT, f"{problem} ({cause})"
    for java_class in _bad_input_classes(exc, chain):
        return EXIT_BAD_INPUT, f"{BAD_INPUT_JAVA[java_class]}: {cause}"
    for marker, code, template in MESSAGE_RULES:
        if marker in cause or marker in _text(exc):
            return code, template.format(cause=cause)
    from pyspark.errors import AnalysisException, IllegalArgumentException

    if isinstance(exc, (AnalysisException, IllegalArgumentException)):
        return EXIT_BAD_INPUT, _message(exc, cause)
    # Tasks that failed after Spark's own retries, lost executors, I/O errors: worth a retry.
    return EXIT_TRANSIENT, f"Spark job failed: {cause}"


# Hadoop's bare "Mkdirs failed to create PATH" (an IOException): permanent or not, only the file system says.
_MKDIRS = re.compile(r"Mkdirs failed to create (\S+?)(?:\s|$|\))")
MKDIRS_RULE = "Mkdirs failed to create, where the folder cannot be (a file, permission, a name over 255 bytes)"


def _folder_problem(folder: str) -> Optional[str]:
    """Why the folder Hadoop failed to create can never be created, by looking at it: a name longer than a
    folder name may be, a file on the way, or (local disk) a parent this process may not write. None: no
    permanent reason (a full disk, a lost connection: transient)."""
    name_max = 255
    for part in folder.split("/"):
        if len(part.encode("utf-8")) > name_max:
            return f"cannot create the folder {folder!r}: its name {part[:40]!r}... is longer than {name_max} bytes"
    try:
        from pcem_spark.io.leases import parent_problem

        if folder.startswith("file:") or "://" not in folder:
            from pcem_spark.io.arrow_fs import ArrowFS

            fs = ArrowFS(folder)
        else:
            from pyspark.sql import SparkSession

            from pcem_spark.io.hadoop_fs import HadoopFS

            spark = SparkSession.getActiveSession()
            if spark is None:
                return None
            fs = HadoopFS(spark, folder)
        problem = parent_problem(fs, folder.rstrip("/") + "/_")
    except Exception:  # noqa: BLE001 - cannot look: no permanent reason known
        return None
    return str(problem) if isinstance(problem, InputError) else None  # a read-only volume is not permanent


def _message(exc: BaseException, cause: str) -> str:
    text = _text(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if cause in first or len(cause) > 400 else f"{first} ({cause})"


def _classify_worker(line: str) -> Tuple[int, str]:
    type_name = line.split(":", 1)[0].rsplit(".", 1)[-1]
    if type_name in _input_error_names():
        return EXIT_BAD_INPUT, line
    if type_name in DEPLOYMENT_WORKER_TYPES:
        # The executors' Python lacks a dependency: a deployment problem, not a flaky task.
        return EXIT_BAD_INPUT, (
            f"the executors cannot import a dependency: {line}; ship them with "
            "--py-files dist/pcem_spark.zip --archives dist/pcem_env.tar.gz#environment "
            "--conf spark.pyspark.python=./environment/bin/python (bash scripts/package.sh; "
            "docs/CLUSTER.md)"
        )
    if type_name in BUG_WORKER_TYPES:
        return EXIT_BUG, f"a Spark worker hit a bug in pcem-spark: {line}"
    return EXIT_TRANSIENT, f"Spark job failed: {line}"


def iter_rules() -> Iterator[Tuple[str, Tuple[str, ...], int]]:
    """(where raised, kinds, exit code) of every rule, in the order of the user guide's table (and its test).

    A kind that starts with "other" is the fallback of its origin.
    """
    yield "driver Python", ("TransientError and subclasses",), EXIT_TRANSIENT
    yield "driver Python", ("InputError and subclasses",), EXIT_BAD_INPUT
    yield "driver Python", tuple(cls.__name__ for cls in _driver_bad_input_types()[1:]), EXIT_BAD_INPUT
    yield "driver Python", ("OSError EROFS (read-only file system)", "OSError ENOSPC (disk full)"), EXIT_TRANSIENT
    yield "driver Python", ("OSError with another errno (EIO)", "MemoryError"), EXIT_TRANSIENT
    yield "driver Python", ("Py4JNetworkError", "ConnectionError", "Py4JError with the JVM gone"), EXIT_TRANSIENT
    yield "driver Python", ("other (ValueError, TypeError, KeyError, RuntimeError, EOFError)",), EXIT_BUG
    yield "Java cause chain or worker", tuple(sorted(STORAGE_JAVA)) + STORAGE_RULES, EXIT_TRANSIENT
    yield "Spark error condition", tuple(sorted(BAD_INPUT_CONDITIONS)), EXIT_BAD_INPUT
    yield "pyspark, raised in Python", ("PySparkValueError", "PySparkTypeError"), EXIT_BUG
    yield "Java cause chain", TRANSIENT_JAVA, EXIT_TRANSIENT
    yield "Java cause chain", tuple(sorted(BAD_INPUT_JAVA)), EXIT_BAD_INPUT
    for marker, code, _ in MESSAGE_RULES:
        yield "Java message (no class of its own)", (marker,), code
    yield "Java message (no class of its own)", (MKDIRS_RULE,), EXIT_BAD_INPUT
    yield "pyspark, from the JVM", ("AnalysisException", "IllegalArgumentException"), EXIT_BAD_INPUT
    yield (
        "Java cause chain",
        ("other (SparkException, IOException, OutOfMemoryError, FileAlreadyExistsException)",),
        EXIT_TRANSIENT,
    )
    yield "worker Python", ("InputError and subclasses",) + tuple(sorted(DEPLOYMENT_WORKER_TYPES)), EXIT_BAD_INPUT
    yield "worker Python", tuple(sorted(BUG_WORKER_TYPES)), EXIT_BUG
    yield "worker Python", ("other (OSError, MemoryError, a library's own error)",), EXIT_TRANSIENT


def rules_markdown() -> str:
    """The user guide's exit-code table (``python -m pcem_spark.cli.failures`` prints it)."""
    rows = ["| raised in | kinds | exit |", "|---|---|---|"]
    for origin, kinds, code in iter_rules():
        rows.append(
            f"| {origin} | "
            + ", ".join(k if k.startswith("other") or " " in k else f"`{k}`" for k in kinds)
            + f" | {code} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(rules_markdown())
