"""Runs that overlap never mix: every reader step against every writer step, driven deterministically.

A writer runs in a thread that stops at one of its named steps (``pcem_spark.util.faults.on_point``:
the lease taken, the new version staged, marked, the old one moved aside, the new one in place);
the reader, in the test's thread, runs until one of its own steps and only then lets the writer run
to its stop. Whatever the pair, the reader gets the old version, the new one, or an exit-75 error
(:class:`~pcem_spark.errors.TransientError`): never a mixture, never a bad-input or internal error.
No step waits on a clock but the reader's bounded wait for a commit in flight (set short here).
"""

import os
import threading

import pytest
from test_overlap_cases import _model, _same

from pcem_spark.errors import TransientError
from pcem_spark.io import leases
from pcem_spark.io.file_system import file_system
from pcem_spark.io.output_policy import OutputSettings, configure
from pcem_spark.io.outputs import atomic_output, read_marker
from pcem_spark.io.snapshots import read_pinned
from pcem_spark.model.path_model import PathModel
from pcem_spark.util.faults import on_point

SLOW = pytest.mark.slow
WRITER_STEPS = ["lease:taken", "{kind}:staged", "{kind}:marked", "{kind}:old_moved", "{kind}:committed", None]


@pytest.fixture(autouse=True)
def short_waits():
    """A reader waits 0.3 s (not 30) for a commit in flight: a paused writer then means exit 75, quickly."""
    previous = configure(OutputSettings(commit_wait_seconds=0.3))
    yield
    configure(previous)


class PausedRun:
    """``fn()`` in a thread of its own that stops at the step ``stop_at`` (None: runs to the end)."""

    def __init__(self, fn, stop_at):
        self.fn, self.stop_at = fn, stop_at
        self.arrived, self.go = threading.Event(), threading.Event()
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self._remove = on_point(stop_at, self._hook) if stop_at else (lambda: None)

    def _hook(self):
        if threading.current_thread() is self.thread:
            self.arrived.set()
            assert self.go.wait(120), "the paused run was never resumed"

    def _run(self):
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
        finally:
            self.arrived.set()

    def start(self):
        """Run it up to its stop (or to its end)."""
        if not self.thread.is_alive() and not self.arrived.is_set():
            self.thread.start()
        assert self.arrived.wait(120), "the run never reached its stop"

    def finish(self):
        self.start()
        self.go.set()
        self.thread.join(120)
        self._remove()
        assert not self.thread.is_alive()
        return self


def interleave(read, reader_step, write, writer_step):
    """``read()`` in this thread; at ``reader_step`` the writer runs to ``writer_step``; then both finish.

    Returns ``("value", result)`` or ``("exit 75", error)`` for the reader.
    """
    writer = PausedRun(write, writer_step)
    me = threading.current_thread()
    remove = on_point(reader_step, lambda: writer.start() if threading.current_thread() is me else None)
    try:
        try:
            outcome = ("value", read())
        except TransientError as exc:
            outcome = ("exit 75", exc)
    finally:
        remove()
        writer.finish()
    assert writer.error is None, f"the writer failed: {writer.error!r}"
    return outcome


# ------------------------------------------------------------------------------ models
@pytest.fixture(scope="module")
def two_models():
    # Different vocabularies, of different sizes, and different parameters: any mixture shows.
    return _model(1, 30), _model(2, 45)


def _check_model_outcome(outcome, old, new, where):
    kind, value = outcome
    if kind == "exit 75":
        return "75"
    assert _same(value, old) or _same(value, new), f"{where}: a model that is neither the old nor the new one"
    return "old" if _same(value, old) else "new"


READER_STEPS_MODEL = [
    "model:read:start",
    "model:read:resolved",
    "model:read:metadata",
    "model:read:vocabulary",
    "model:read:parameters",
]


@pytest.mark.slow
@pytest.mark.parametrize("reader_step", READER_STEPS_MODEL)
def test_every_model_read_step_against_every_save_step(spark, tmp_path, two_models, reader_step):
    old, new = two_models
    seen = {}
    for i, step in enumerate(WRITER_STEPS):
        writer_step = step.format(kind="model") if step else None
        path = str(tmp_path / f"m{i}")
        old.save(path)
        outcome = interleave(
            lambda path=path: PathModel.load(path),
            reader_step,
            lambda path=path: new.save(path, overwrite=True),
            writer_step,
        )
        seen[writer_step] = _check_model_outcome(outcome, old, new, f"{reader_step} / {writer_step}")
        assert _same(PathModel.load(path), new)  # and the writer's commit went through
    # Before the writer moves anything the reader has the old model; a writer stopped between its renames
    # is waited for (then exit 75) by a reader that had not pinned a version yet, never read half-way.
    assert seen["lease:taken"] == seen["model:staged"] == seen["model:marked"] == "old"
    if reader_step != "model:read:start":
        assert seen["model:old_moved"] == seen["model:committed"] == "old"  # the pinned version, retained


def test_a_commit_between_the_vocabulary_and_the_parameters_read_gives_one_model(spark, tmp_path, two_models):
    """The case that mixed an old vocabulary with new parameters, without a word."""
    old, new = two_models
    path = str(tmp_path / "m")
    old.save(path)
    outcome = interleave(
        lambda: PathModel.load(path), "model:read:vocabulary", lambda: new.save(path, overwrite=True), None
    )
    assert _check_model_outcome(outcome, old, new, "vocabulary / commit") == "old"
    loaded = PathModel.load(path)
    assert _same(loaded, new) and loaded.version == read_marker(spark, path)["run_id"]


def test_a_reader_that_has_not_pinned_waits_for_a_commit_in_flight_then_exits_75(spark, tmp_path, two_models):
    old, new = two_models
    path = str(tmp_path / "m")
    old.save(path)
    outcome = interleave(
        lambda: PathModel.load(path), "model:read:start", lambda: new.save(path, overwrite=True), "model:old_moved"
    )
    assert outcome[0] == "exit 75" and "committing a new version" in str(outcome[1])
    assert _same(PathModel.load(path), new)


def test_a_retained_version_deleted_mid_read_sends_the_reader_to_the_new_one(spark, tmp_path, two_models):
    """keep_superseded_seconds = 0: the writer deletes the replaced version at once (the cleanup step)."""
    old, new = two_models
    path = str(tmp_path / "m")
    old.save(path)
    configure(OutputSettings(commit_wait_seconds=0.3, keep_superseded_seconds=0.0))
    outcome = interleave(
        lambda: PathModel.load(path), "model:read:metadata", lambda: new.save(path, overwrite=True), None
    )
    assert _check_model_outcome(outcome, old, new, "metadata / commit and cleanup") == "new"
    assert not [n for n in os.listdir(tmp_path) if ".pcem-v-" in n]


# ------------------------------------------------------------------- tables: predictions and rejects
def _write_table(spark, path, kind, ids):
    def write():
        with atomic_output(spark, path, kind, overwrite=True, parts=[""]) as staged:
            spark.createDataFrame([(i, f"row {i}") for i in ids], "id long, text string").repartition(3).write.parquet(
                staged.tmp
            )
            staged.info["rows"] = len(ids)

    return write


def _read_table(spark, path, kind):
    fs = file_system(spark, path)
    return lambda: sorted(r["id"] for r in read_pinned(fs, path, kind, lambda snap: snap.table(spark).collect()))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["predictions", "rejects"])
@pytest.mark.parametrize("reader_step", ["{kind}:read:start", "{kind}:read:resolved", "{kind}:read:done"])
def test_every_table_read_step_against_every_write_step(spark, tmp_path, kind, reader_step):
    old_ids, new_ids = list(range(5)), list(range(100, 108))
    for i, step in enumerate(WRITER_STEPS):
        path = str(tmp_path / f"t{i}")
        _write_table(spark, path, kind, old_ids)()
        outcome = interleave(
            _read_table(spark, path, kind),
            reader_step.format(kind=kind),
            _write_table(spark, path, kind, new_ids),
            step.format(kind=kind) if step else None,
        )
        assert outcome[0] == "exit 75" or outcome[1] in (old_ids, new_ids), (reader_step, step, outcome)
        assert _read_table(spark, path, kind)() == new_ids


@pytest.mark.parametrize("kind", ["predictions", "rejects"])
def test_a_table_read_overlapping_a_commit_gets_the_version_it_pinned(spark, tmp_path, kind):
    path = str(tmp_path / "t")
    _write_table(spark, path, kind, [1, 2, 3])()
    outcome = interleave(
        _read_table(spark, path, kind),
        f"{kind}:read:resolved",
        _write_table(spark, path, kind, [7, 8]),
        f"{kind}:committed",
    )
    assert outcome == ("value", [1, 2, 3])  # from the retained copy: the new version was already in place
    assert _read_table(spark, path, kind)() == [7, 8]


# ------------------------------------------------------------------------------ a second writer
SECOND_WRITER_STEPS = [
    pytest.param(s, id=s.replace("{kind}:", ""), marks=[] if s in ("{kind}:staged", "{kind}:old_moved") else [SLOW])
    for s in WRITER_STEPS
    if s
]


@pytest.mark.parametrize("step", SECOND_WRITER_STEPS)
def test_a_second_writer_exits_75_at_once_and_never_touches_the_first(spark, tmp_path, two_models, step):
    old, new = two_models
    path = str(tmp_path / "m")
    old.save(path)
    first = PausedRun(lambda: new.save(path, overwrite=True), step.format(kind="model"))
    first.start()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(leases.OutputBusyError, match="is being written by another run") as busy:
        old.save(path, overwrite=True)
    assert "run " in str(busy.value) and f"process {os.getpid()}" in str(busy.value)
    # nothing of the first writer's was deleted or moved by the second
    assert sorted(os.listdir(tmp_path)) == before
    assert first.finish().error is None
    assert _same(PathModel.load(path), new)


def test_a_model_is_never_marked_without_every_part(spark, tmp_path, two_models):
    """A part deleted while the save runs (what a second writer's cleanup did): exit 75, the old model stays."""
    import shutil

    from pcem_spark.io.versions import IncompleteWriteError

    old, new = two_models
    path = str(tmp_path / "m")
    old.save(path)

    def delete_metadata():
        for name in os.listdir(tmp_path):
            if name.startswith(".m.pcem-tmp-"):
                shutil.rmtree(tmp_path / name / "metadata")

    remove = on_point("model:staged", delete_metadata)
    try:
        with pytest.raises(IncompleteWriteError, match="metadata holds no data file"):
            new.save(path, overwrite=True)
    finally:
        remove()
    assert _same(PathModel.load(path), old)
    assert not [n for n in os.listdir(tmp_path) if ".pcem-tmp-" in n]
