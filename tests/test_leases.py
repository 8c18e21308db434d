"""One writer per output: the lease beside it (pcem_spark.io.leases), on the local disk, without Spark."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from pcem_spark.errors import OutputPathError
from pcem_spark.io import leases
from pcem_spark.io.arrow_fs import ArrowFS
from pcem_spark.io.output_policy import OutputSettings, configure
from pcem_spark.util.volumes import read_only_mount


@pytest.fixture(autouse=True)
def policy():
    previous = configure(OutputSettings())
    yield
    configure(previous)


def _lease_files(tmp_path, name="out"):
    return sorted(n for n in os.listdir(tmp_path) if n.startswith(f".{name}.pcem-lease-"))


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    return box


def test_generations_grow_and_a_released_lease_leaves_one_file(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    first = leases.acquire(fs, path, "run-a", "pcem train")
    assert _lease_files(tmp_path) == [".out.pcem-lease-000000000000"]
    owner = json.loads((tmp_path / ".out.pcem-lease-000000000000").read_text())
    assert owner["run_id"] == "run-a" and owner["pid"] == os.getpid() and owner["command"] == "pcem train"
    first.release()
    assert _lease_files(tmp_path) == [".out.pcem-lease-000000000000.released"]
    second = leases.acquire(fs, path, "run-b")
    assert second.generation == 1 and _lease_files(tmp_path) == [".out.pcem-lease-000000000001"]
    second.check()  # still the newest: fencing passes
    second.release()
    assert leases.live_holder(fs, path) is None


def test_a_live_lease_makes_the_second_writer_exit_75_naming_the_first(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    first = leases.acquire(fs, path, "run-a", "pcem predict")
    try:
        box = _in_thread(lambda: leases.acquire(fs, path, "run-b"))
        assert isinstance(box.get("error"), leases.OutputBusyError)
        message = str(box["error"])
        assert "run run-a (pcem predict)" in message and f"process {os.getpid()}" in message
        holder = leases.live_holder(fs, path)
        assert holder.run_id == "run-a" and holder.generation == 0
    finally:
        first.release()


def test_a_writer_waits_for_the_live_one_when_asked(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    first = leases.acquire(fs, path, "run-a")
    timer = threading.Timer(0.5, first.release)
    timer.start()
    second = leases.acquire(fs, path, "run-b", wait_seconds=30)
    assert second.generation == 1
    second.release()


def test_the_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path, caplog):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"run_id": "killed", "host": leases.HOST, "pid": int(dead.stdout), "pid_start": "1", "command": "x"}
    (tmp_path / ".out.pcem-lease-000000000004").write_text(json.dumps(record))
    assert leases.live_holder(fs, path) is None
    with caplog.at_level("WARNING"):
        lease = leases.acquire(fs, path, "run-b")
    assert lease.generation == 5 and "taking over the lease of run killed" in caplog.text
    assert "is gone" in caplog.text
    assert _lease_files(tmp_path) == [".out.pcem-lease-000000000005"]
    lease.release()


def test_a_lease_of_another_host_expires_without_heartbeat(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    configure(OutputSettings(lease_expiry_seconds=60, heartbeat_seconds=10))
    lease_file = tmp_path / ".out.pcem-lease-000000000000"
    lease_file.write_text(json.dumps({"run_id": "far", "host": "another-host", "pid": 1, "command": "x"}))
    with pytest.raises(leases.OutputBusyError, match="run far .* on host another-host"):
        leases.acquire(fs, path, "run-b")
    old = time.time() - 61
    os.utime(lease_file, (old, old))  # no heartbeat for 61 s
    lease = leases.acquire(fs, path, "run-b")
    assert lease.generation == 1
    lease.release()


def test_a_writer_that_lost_its_lease_cannot_commit(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    configure(OutputSettings(lease_expiry_seconds=60, heartbeat_seconds=10))
    zombie = leases.acquire(fs, path, "zombie")
    old = time.time() - 120
    os.utime(zombie.file, (old, old))
    # ... seen from another host, the zombie's lease has expired (its process here is alive)
    record = json.loads(open(zombie.file).read())
    record["host"] = "another-host"
    with open(zombie.file, "w") as fh:
        json.dump(record, fh)
    os.utime(zombie.file, (old, old))
    leases._unregister(zombie)  # no heartbeat from this process for it either
    box = _in_thread(lambda: leases.acquire(fs, path, "successor"))
    successor = box["value"]
    with pytest.raises(leases.LeaseLostError, match="lost its lease on the output to run successor"):
        zombie.check()
    successor.check()
    successor.release()


def test_racing_writers_get_exactly_one_lease(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    start = threading.Barrier(6)
    got, busy = [], []

    def race(i):
        start.wait()
        try:
            got.append(leases.acquire(fs, path, f"run-{i}"))
        except leases.OutputBusyError:
            busy.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 1 and len(busy) == 5
    got[0].release()


def test_the_heartbeat_renews_a_held_lease(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    configure(OutputSettings(lease_expiry_seconds=1.0, heartbeat_seconds=0.1))
    lease = leases.acquire(fs, path, "run-a")
    try:
        old = time.time() - 30
        os.utime(lease.file, (old, old))
        deadline = time.time() + 10
        while os.path.getmtime(lease.file) < time.time() - 5 and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.getmtime(lease.file) > time.time() - 5  # touched again by the heartbeat thread
    finally:
        lease.release()


def test_hold_is_reentrant_in_its_thread_only(tmp_path):
    path = str(tmp_path / "out")
    fs = ArrowFS(path)
    with leases.hold(fs, path, "run-a") as outer:
        with leases.hold(fs, path, "run-b") as inner:
            assert inner is outer
        assert isinstance(_in_thread(lambda: leases.acquire(fs, path, "run-c")).get("error"), leases.OutputBusyError)
    assert leases.live_holder(fs, path) is None


@pytest.mark.parametrize("where", ["a file", "sysfs"])
def test_an_output_whose_folder_cannot_be_written_is_refused_with_the_path(tmp_path, where):
    error = OutputPathError
    if where == "a file":
        (tmp_path / "plain").write_text("x")
        path = str(tmp_path / "plain" / "sub" / "out")
        reason = "is a file, not a folder"
    else:
        path = "/sys/pcem-test-output"  # sysfs: not even root may create a file there
        reason = "cannot be written"
        if read_only_mount("/sys"):  # containers mount it read-only: that is what the error says (exit 75)
            error, reason = leases.ReadOnlyOutputError, "read-only file system: /sys/pcem-test-output"
    with pytest.raises(error, match=reason) as info:
        leases.acquire(ArrowFS(path), path, "run-a")
    assert path in str(info.value)


def test_an_output_on_a_read_only_volume_is_named_so_and_is_transient(tmp_path, monkeypatch):
    """A read-only mount refuses root too: not "permission denied" (exit 2) but "read-only file system" (75)."""
    import errno

    from pcem_spark.errors import TransientError

    path = str(tmp_path / "ro" / "out")
    (tmp_path / "ro").mkdir()
    fs = ArrowFS(path)

    def refuse(path, text):  # what creating a file on a read-only mount raises
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(fs, "create_exclusive", refuse)
    # the error alone says so ...
    with pytest.raises(leases.ReadOnlyOutputError, match=rf"^read-only file system: {path} \(") as info:
        leases.acquire(fs, path, "run-a")
    assert isinstance(info.value, TransientError) and "permission" not in str(info.value)
    # ... and the volume, looked at (statvfs's ST_RDONLY on the nearest existing folder), names the mount
    monkeypatch.setattr(leases, "read_only_mount", lambda p: str(tmp_path / "ro"))
    with pytest.raises(leases.ReadOnlyOutputError, match=rf"volume holding {tmp_path / 'ro'} is mounted read-only"):
        leases.acquire(fs, path, "run-a")


def test_read_only_mount_looks_at_the_nearest_existing_folder(tmp_path, monkeypatch):
    assert read_only_mount(str(tmp_path / "not" / "yet" / "there")) is None  # a writable volume
    assert read_only_mount("hdfs://nn/x") is None  # not a local path: cannot look
    real = os.statvfs

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly() if p == str(tmp_path) else real(p))
    assert read_only_mount(str(tmp_path / "not" / "yet")) == str(tmp_path)
    assert read_only_mount(f"file:{tmp_path}/out") == read_only_mount(f"file://{tmp_path}/out") == str(tmp_path)


def test_a_command_failure_carries_the_outputs_it_held_leases_on(tmp_path):
    path = str(tmp_path / "out")
    with pytest.raises(OSError) as info:
        with leases.run("run-a", "pcem predict"):
            leases.keep(ArrowFS(path), path)
            raise OSError(28, "No space left on device")
    assert leases.outputs_of(info.value) == (path,)
    assert leases.live_holder(ArrowFS(path), path) is None  # released all the same
    assert leases.outputs_of(ValueError("x")) == ()
