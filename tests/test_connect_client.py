"""What a Spark Connect client does itself: its file system (pyarrow.fs), staged parameters, progress, paths.

No Connect server here: a stand-in session whose class lives under
``pyspark.sql.connect`` is what ``is_spark_connect`` looks at, so the atomic
outputs take the pyarrow path. tests/test_connect.py runs the same code
against a real server.
"""

import json
import os
import pickle

import numpy as np
import pytest

from pcem_spark.engine import shipping
from pcem_spark.engine.limits import ResultSizeError
from pcem_spark.engine.storage import local_path, resolve
from pcem_spark.errors import OutputPathError
from pcem_spark.io.arrow_fs import ArrowFS, shared_path
from pcem_spark.io.file_system import file_system, session_path
from pcem_spark.io.outputs import MARKER, IncompleteOutputError, atomic_output, read_marker, require_complete


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


FakeConnectSession = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})


def _fake_connect(conf=None):
    session = FakeConnectSession()
    session.conf = _Conf(conf or {})
    return session


def test_storage_names_local_and_remote_paths():
    assert local_path("file:///tmp/x") == "/tmp/x" == local_path("file:/tmp/x")
    assert local_path("s3a://bucket/key") is None
    fs, inner, bucket = resolve("/tmp/some/where")
    assert type(fs).__name__ == "LocalFileSystem" and inner == "/tmp/some/where" and bucket == ""
    with pytest.raises(OSError, match="nosuchscheme://"):
        resolve("nosuchscheme://host/x")


def test_arrow_fs_does_what_hadoop_fs_does_on_local_disk(tmp_path):
    root = str(tmp_path / "d")
    fs = ArrowFS(root)
    assert not fs.exists() and fs.list_names() == [] and fs.read_text(f"{root}/nope") is None
    fs.mkdirs(f"{root}/sub")
    fs.write_text(f"{root}/sub/a.json", "é\nline two\n")
    fs.write_text(f"{root}/.hidden", "x")
    assert fs.exists() and fs.is_directory() and not fs.is_directory(f"{root}/sub/a.json")
    assert sorted(fs.list_names()) == [".hidden", "sub"]
    assert fs.read_text(f"{root}/sub/a.json") == "é\nline two"
    assert fs.read_head(f"{root}/sub/a.json", 2) == "é".encode() and fs.read_head(f"{root}/.hidden", 3) == b"x\0\0"
    assert fs.files_below() == [(f"{root}/.hidden", "/.hidden"), (f"{root}/sub/a.json", "/sub/a.json")]
    assert fs.qualify() == "file:" + os.path.realpath(root) and fs.path_string() == root
    fs.rename(f"{root}/sub", f"{root}/moved")
    assert fs.list_names(f"{root}/moved") == ["a.json"]
    with pytest.raises(OSError, match="target exists"):
        fs.rename(f"{root}/moved", f"{root}/.hidden")
    fs.delete(f"{root}/moved")
    fs.delete(f"{root}/never-there")
    assert sorted(fs.list_names()) == [".hidden"]
    with pytest.raises(FileNotFoundError):
        fs.is_directory(f"{root}/never-there")


def test_connect_sessions_get_the_client_file_system_and_shared_paths(spark, tmp_path, monkeypatch):
    remote = _fake_connect()
    assert isinstance(file_system(remote, str(tmp_path)), ArrowFS)
    assert type(file_system(spark, str(tmp_path))).__name__ == "HadoopFS"
    monkeypatch.chdir(tmp_path)
    assert session_path(remote, "out/model") == str(tmp_path / "out" / "model") == shared_path("out/model")
    assert session_path(spark, "out/model") == "out/model"  # the classic driver resolves it itself
    assert session_path(remote, "s3a://b/out") == "s3a://b/out"


def test_atomic_outputs_over_the_client_file_system(tmp_path, monkeypatch):
    """The outputs protocol with pyarrow.fs: replace when complete, refuse without the marker, recover a
    replacement killed between its renames."""
    remote = _fake_connect()
    out = str(tmp_path / "pred")

    def write(staged, rows):
        os.makedirs(staged.tmp)
        with open(os.path.join(staged.tmp, "part-0.json"), "w") as fh:
            fh.write(json.dumps({"rows": rows}))
        staged.info["rows"] = rows

    with atomic_output(remote, out, "predictions") as staged:
        write(staged, 3)
    assert require_complete(remote, out, "predictions")["rows"] == 3
    with pytest.raises(FileExistsError, match="--overwrite"):
        with atomic_output(remote, out, "predictions"):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_output(remote, out, "predictions", overwrite=True) as staged:
            write(staged, 5)
            raise RuntimeError("boom")
    assert read_marker(remote, out)["rows"] == 3
    assert [n for n in os.listdir(tmp_path) if n.startswith((".pred.pcem-tmp-", ".pred.pcem-old-"))] == []
    with pytest.raises(OutputPathError, match="nothing was written .* Spark Connect client can see"):
        with atomic_output(remote, out, "predictions", overwrite=True):
            pass
    # killed between the renames: the old output aside, the complete new one not yet in place
    with atomic_output(remote, out, "predictions", overwrite=True) as staged:
        write(staged, 7)
    os.rename(out, str(tmp_path / ".pred.pcem-tmp-20990101T000000-deadbeef"))
    assert require_complete(remote, out, "predictions")["rows"] == 7  # recover() moved it into place
    os.remove(os.path.join(out, MARKER))
    with pytest.raises(IncompleteOutputError, match="no completion marker"):
        require_complete(remote, out)


def test_large_values_travel_as_staged_files_over_connect(tmp_path, monkeypatch):
    remote = _fake_connect({"spark.connect.grpc.maxInboundMessageSize": str(64 << 20)})
    small = np.arange(10.0)
    assert isinstance(shipping.ship_in_plan(remote, small, "x"), shipping.Shipped)
    big = np.random.default_rng(0).random((shipping.INLINE_LIMIT // 8) + 1000)
    monkeypatch.delenv(shipping.STAGING_ENV, raising=False)
    shipping.set_staging_dir(None)
    assert isinstance(shipping.ship_in_plan(remote, big, "x"), shipping.Shipped)  # no staging dir, fits the plan
    huge = np.zeros((64 << 20) // 8)
    with pytest.raises(ResultSizeError, match=shipping.STAGING_ENV):
        shipping.ship_in_plan(remote, huge, "the parameters")
    monkeypatch.setenv(shipping.STAGING_ENV, str(tmp_path / "stage"))
    staged = shipping.ship_in_plan(remote, big, "x")
    assert isinstance(staged, shipping.StagedFile) and os.path.exists(staged.uri)
    shipping.StagedFile._cache.clear()
    np.testing.assert_array_equal(staged.value, big)
    assert staged.value is staged.value  # read once per process
    # what an executor receives: the handle, pickled small, never the value
    assert len(pickle.dumps(staged)) < 1000
    others = [shipping.ship_in_plan(remote, big + i, "x") for i in (1, 2)]
    for i, other in enumerate(others, start=1):
        np.testing.assert_array_equal(other.value, big + i)
    assert len(shipping.StagedFile._cache) == 2 and staged.uri not in shipping.StagedFile._cache
    for s in (staged, *others):
        s.unpersist()
    assert os.listdir(tmp_path / "stage") == []
    classic = type("SparkSession", (), {})()
    assert isinstance(shipping.ship_in_plan(classic, huge, "x"), shipping.Shipped)


def test_directory_moves_on_object_stores_copy_the_markers_last(tmp_path):
    """pyarrow moves no directory on S3 / GCS: ArrowFS copies each file, "_" files (markers) last."""
    root = str(tmp_path)
    fs = ArrowFS(root)
    fs.mkdirs(f"{root}/src/part")
    for name in ("_PCEM_COMPLETE", "part/a.parquet", "_SUCCESS", "b.parquet"):
        fs.write_text(f"{root}/src/{name}", name)
    copied = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def copy_file(self, src, dst):
            copied.append(os.path.basename(src))
            self.inner.copy_file(src, dst)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    fs.fs, fs._bucket = Recording(fs.fs), "as-if-a-bucket"
    fs.rename(f"{root}/src", f"{root}/dst")
    assert sorted(copied[:2]) == ["a.parquet", "b.parquet"] and sorted(copied[2:]) == ["_PCEM_COMPLETE", "_SUCCESS"]
    assert not fs.exists(f"{root}/src") and fs.read_text(f"{root}/dst/part/a.parquet") == "part/a.parquet"


def test_progress_over_connect_comes_from_the_servers_progress_handler(caplog):
    """log_progress on a Connect session registers a progress handler (no status tracker on a client),
    logs tasks done / total at most once per interval, and removes the handler at the end."""
    import logging
    from types import SimpleNamespace

    from pcem_spark.engine.progress import log_progress

    remote = _fake_connect()
    handlers = []
    remote.registerProgressHandler = handlers.append
    remote.removeProgressHandler = handlers.remove
    stages = [SimpleNamespace(num_tasks=4, num_completed_tasks=1), SimpleNamespace(num_tasks=4, num_completed_tasks=3)]
    with caplog.at_level(logging.INFO, logger="pcem_spark.engine.progress"):
        with log_progress(remote, "predict", n_rows=800, interval=0.0):
            assert len(handlers) == 1
            handlers[0](stages, 2, "op", False)
            handlers[0](stages, 0, "op", True)  # the final call of an operation: nothing more to say
    assert handlers == []
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("predict: 4/8 tasks done, ~400 of 800 rows")
