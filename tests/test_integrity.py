"""What pcem-spark reads back from shared storage is data, and verified: a planted checkpoint never runs, a
model or predictions file with one byte changed (same size, no ``.crc`` beside it, as on HDFS and object
stores) is refused with exit 2 naming the file and both checksums before anything is written, and outputs
written before checksums still load with one warning. In-process commands on the test session's Spark."""

import hashlib
import json
import logging
import os
import pickle
import shutil
import struct

import pytest

from pcem_spark.cli import main
from pcem_spark.io.checksums import _by_spark, checksums_of
from pcem_spark.io.versions import MARKER

FAMILY = [
    "--set",
    "features.min_df=1",
    "--set",
    "model.names=off",
    "--set",
    "model.family=combined",
    "--set",
    "model.smoothing=0.1",
    "--set",
    "model.unlabeled_weight=0.3",
    "--set",
    "model.path_weight=1",
    "--set",
    "model.generative_weight=0.5",
    "--set",
    "model.calibration=none",
    "--set",
    "features.stop_words=none",
    "--log-level",
    "WARNING",
]


class Payload:
    """A pickle that would create the file ``path`` when unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _planted_checkpoint(path: str, marker: str) -> None:
    """A checkpoint file as an earlier release wrote them (magic, format 1, length, SHA-256, pickle), whose
    pickle would create ``marker``: what anyone who can write the shared scratch folder can plant."""
    payload = pickle.dumps({"format": 1, "fingerprint": Payload(marker), "stages": {}, "em": None})
    header = struct.pack(">8sIQ32s", b"PCEMCKPT", 1, len(payload), hashlib.sha256(payload).digest())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(header + payload)


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    """A small combined-family model (parameters and a regression), trained by ``pcem train`` over a
    checkpoint folder holding planted pickles (under the earlier release's file name, and under today's
    as its newest generation); its predictions of the quick start's test documents."""
    root = tmp_path_factory.mktemp("integrity")
    assert main(["quickstart", "--output", str(root), "--log-level", "WARNING"]) == 0
    model = str(root / "model")
    ran = str(root / "payload-ran")
    _planted_checkpoint(str(root / ".model.pcem-checkpoint" / "state-000000000007.pkl"), ran)
    _planted_checkpoint(str(root / ".model.pcem-checkpoint" / "state-000000000008.ckpt"), ran)
    logs = []
    handler = logging.Handler()
    handler.emit = lambda record: logs.append(record.getMessage())
    logging.getLogger("pcem_spark").addHandler(handler)
    try:
        assert main(["train", "--docs", str(root / "train.jsonl"), "--model", model, *FAMILY]) == 0
    finally:
        logging.getLogger("pcem_spark").removeHandler(handler)
    predictions = str(root / "predictions")
    assert main(["predict", "--model", model, "--docs", str(root / "test.jsonl"), "--output", predictions]) == 0
    return {"root": root, "model": model, "predictions": predictions, "ran": ran, "logs": logs}


def test_a_pickle_planted_in_the_checkpoint_folders_never_runs_and_the_train_starts_afresh(trained):
    """The train exited 0 (fixture) without running the payload; it said why it read neither file, and the
    commit deleted the checkpoint folder beside the model."""
    assert not os.path.exists(trained["ran"])
    text = "\n".join(trained["logs"])
    assert "state-000000000007.pkl" in text and "pickles are never read" in text
    assert "format 1 (a pickle" in text and "starting afresh" in text
    assert not os.path.exists(os.path.join(trained["root"], ".model.pcem-checkpoint"))


def _files(directory):
    """Every file of an output version (relative paths), its marker included, its .crc side files not."""
    found = []
    for dirpath, _, names in os.walk(directory):
        for name in names:
            if not name.endswith(".crc"):
                found.append(os.path.relpath(os.path.join(dirpath, name), directory))
    return sorted(found)


def _damaged_copy(source, target, relative):
    """A copy of the output ``source`` at ``target`` with one byte of ``relative`` changed (same size) and no
    .crc side files (as HDFS and object stores keep them)."""
    shutil.copytree(source, target)
    for dirpath, _, names in os.walk(target):
        for name in names:
            if name.endswith(".crc"):
                os.remove(os.path.join(dirpath, name))
    path = os.path.join(target, relative)
    data = bytearray(open(path, "rb").read())
    middle = len(data) // 2
    # A printable change keeps a text file text (a JSON digit stays a digit), the hardest case for a reader.
    data[middle] = data[middle] ^ 0x01 if chr(data[middle]).isalnum() else ord("7")
    open(path, "wb").write(bytes(data))
    assert os.path.getsize(path) == len(data)


def test_every_file_of_a_model_with_one_byte_changed_is_refused_by_every_reader(trained, tmp_path, capsys):
    model, root = trained["model"], trained["root"]
    files = [rel for rel in _files(model) if os.path.getsize(os.path.join(model, rel)) > 0]
    assert {rel.split("/")[0] for rel in files} >= {"metadata", "vocabulary", "parameters", "linear", MARKER}
    docs, test = str(root / "train.jsonl"), str(root / "test.jsonl")
    for i, rel in enumerate(files):
        damaged = str(tmp_path / f"model-{i}")
        _damaged_copy(model, damaged, rel)
        out = str(tmp_path / f"out-{i}")
        commands = {
            "predict": ["predict", "--model", damaged, "--docs", test, "--output", out],
            "evaluate": ["evaluate", "--model", damaged, "--predictions", trained["predictions"]],
            "warm start": ["train", "--docs", docs, "--init-model", damaged, "--model", out, *FAMILY],
            "inspect": ["inspect", "--model", damaged, "--output", out],
        }
        for what, argv in commands.items():
            capsys.readouterr()
            assert main(argv) == 2, f"{what} read {rel} with one byte changed"
            err = capsys.readouterr().err
            assert "damaged" in err and os.path.basename(rel) in err, (what, rel, err[-2000:])
            if rel != MARKER:
                assert err.count("sha256:") == 2, err  # both checksums named
            assert not os.path.exists(out), f"{what} wrote {out} from a damaged model"


def test_a_predictions_part_with_one_byte_changed_is_refused_by_evaluate_and_inspect(trained, tmp_path, capsys):
    predictions = trained["predictions"]
    parts = [rel for rel in _files(predictions) if rel.endswith(".parquet")]
    assert parts
    damaged = str(tmp_path / "predictions")
    _damaged_copy(predictions, damaged, parts[0])
    for argv in (
        ["evaluate", "--model", trained["model"], "--predictions", damaged],
        ["inspect", "--model", trained["model"], "--predictions", damaged, "--output", str(tmp_path / "inspect")],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "damaged" in err and parts[0].rsplit("/", 1)[-1] in err and err.count("sha256:") == 2, err
    assert not os.path.exists(tmp_path / "inspect")


def test_a_large_output_is_checked_by_its_page_checksums_and_a_failed_read_names_the_file(trained, tmp_path, capsys):
    """Above output.verify_max_bytes nothing is hashed before the read: the Parquet reader's page checksums
    catch a changed data page, and the failed read's file is then hashed and named with both checksums."""
    import pyarrow.parquet as pq

    predictions = trained["predictions"]
    part = next(rel for rel in _files(predictions) if rel.endswith(".parquet"))
    damaged = str(tmp_path / "predictions")
    shutil.copytree(predictions, damaged)
    path = os.path.join(damaged, part)
    for name in os.listdir(os.path.dirname(path)):
        if name.endswith(".crc"):
            os.remove(os.path.join(os.path.dirname(path), name))
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    # The predicted path's column, which evaluate reads (a column no reader reads is not read, nor checked).
    column = next(
        row_group.column(i)
        for i in range(row_group.num_columns)
        if row_group.column(i).path_in_schema.startswith("path.")
    )
    data = bytearray(open(path, "rb").read())
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    at = start + column.total_compressed_size - 2  # inside the column chunk's last page
    data[at] ^= 0x01
    open(path, "wb").write(bytes(data))
    argv = ["evaluate", "--model", trained["model"], "--predictions", damaged, "--set", "output.verify_max_bytes=0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and part.rsplit("/", 1)[-1] in err and err.count("sha256:") == 2, err


def test_outputs_written_before_checksums_load_with_one_warning(trained, tmp_path, caplog):
    old = str(tmp_path / "model")
    shutil.copytree(trained["model"], old)
    marker_path = os.path.join(old, MARKER)
    os.remove(os.path.join(old, f".{MARKER}.crc"))
    marker = json.load(open(marker_path))
    del marker["checksums"], marker["marker_sha256"]
    open(marker_path, "w").write(json.dumps(marker, sort_keys=True))
    from pcem_spark.model.path_model import PathModel

    with caplog.at_level(logging.WARNING, logger="pcem_spark"):
        first = PathModel.load(old)
        PathModel.load(old)
    warnings = [r for r in caplog.records if "before checksums" in r.getMessage()]
    assert len(warnings) == 1 and old in warnings[0].getMessage()
    assert first.vocabulary == PathModel.load(trained["model"]).vocabulary


def test_a_large_version_is_hashed_by_the_executors_as_the_driver_would(spark, trained):
    from pcem_spark.io.arrow_fs import ArrowFS
    from pcem_spark.io.versions import manifest_of

    fs = ArrowFS(trained["predictions"])
    manifest = manifest_of(fs, trained["predictions"])
    on_driver = checksums_of(fs, trained["predictions"], manifest)
    by_spark = checksums_of(fs, trained["predictions"], manifest, spark, driver_max_bytes=0)
    data = [rel for rel in manifest if not rel.startswith(("_", "."))]
    hashed = _by_spark(spark, trained["predictions"], data)  # what the executors hashed, not the fallback
    assert data and sorted(hashed) == sorted(data) and all(on_driver[r] == f"sha256:{hashed[r]}" for r in data)
    assert by_spark == on_driver and json.load(open(os.path.join(trained["predictions"], MARKER)))["checksums"] == (
        on_driver
    )
    part = next(rel for rel in manifest if rel.endswith(".parquet"))
    expected = hashlib.sha256(open(os.path.join(trained["predictions"], part), "rb").read()).hexdigest()
    assert on_driver[part] == f"sha256:{expected}"


def test_a_file_off_the_driver_s_disk_is_hashed_by_the_jvm_as_python_would(spark, trained, monkeypatch):
    """HDFS, S3A, GCS: the file streams through the JVM's digest (commons-codec), no byte over py4j."""
    from pcem_spark.io.hadoop_fs import HadoopFS

    part = next(rel for rel in _files(trained["predictions"]) if rel.endswith(".parquet"))
    path = os.path.join(trained["predictions"], part)
    fs = HadoopFS(spark, path)
    monkeypatch.setattr(fs, "local", lambda path=None: None)
    assert fs.sha256(path) == hashlib.sha256(open(path, "rb").read()).hexdigest()


# ----------------------------------------------------------------- verification racing a commit (no Spark)
def _local_output(path, text, overwrite=False):
    from pcem_spark.io.outputs import write_local_output

    return write_local_output(path, {"part-0.txt": text.encode()}, "table", overwrite=overwrite)


@pytest.mark.parametrize("where", ["before the read", "after a failed read"])
def test_a_commit_that_moves_the_version_while_it_is_hashed_sends_the_reader_after_it(tmp_path, monkeypatch, where):
    """A writer's commit renames the pinned version away while the reader hashes it (before reading, or after a
    read failed for another reason and named the file): the reader follows the version to where it is retained,
    never reports the missing file as bad input or damage."""
    from pcem_spark.io import snapshots
    from pcem_spark.io.arrow_fs import ArrowFS
    from pcem_spark.io.output_policy import OutputSettings, configure

    path = str(tmp_path / "out")
    _local_output(path, "one")
    previous = configure(OutputSettings(verify_max_bytes=0 if where == "after a failed read" else 1 << 20))
    original, commits = ArrowFS.sha256, []

    def sha256(self, file=None):
        if not commits:  # the commit lands while this file is hashed (its own hashing not intercepted)
            commits.append(path)
            _local_output(path, "two", overwrite=True)
        return original(self, file)

    monkeypatch.setattr(ArrowFS, "sha256", sha256)
    failed = []

    def read(snap):
        if where == "after a failed read" and not failed:
            failed.append(1)
            raise ValueError(f"cannot parse {snap.location}/part-0.txt")  # names the file: it is hashed
        return open(f"{snap.location}/part-0.txt").read()

    try:
        assert snapshots.read_pinned(ArrowFS(path), path, "table", read) == "one"  # the version it pinned
    finally:
        configure(previous)
    assert commits and (failed or where == "before the read")


def test_a_marker_read_between_a_commit_s_two_renames_is_not_damage(tmp_path, monkeypatch):
    from pcem_spark.io import snapshots
    from pcem_spark.io.arrow_fs import ArrowFS

    path = str(tmp_path / "out")
    _local_output(path, "one")
    original, calls = snapshots.marker_at, []

    def marker_at(fs, directory):
        calls.append(directory)
        return None if len(calls) == 1 else original(fs, directory)  # missing for a moment, then the new one

    monkeypatch.setattr(snapshots, "marker_at", marker_at)
    assert snapshots.resolve(ArrowFS(path), path, "table").marker["files"] == ["part-0.txt"]


def test_a_damaged_marker_of_an_input_is_refused_not_read_as_a_plain_folder(spark, trained, tmp_path, capsys):
    """A documents input that pcem-spark wrote, with one byte of its marker changed: refused as damaged, never
    read as a folder of files without a manifest (which would skip every check)."""
    from pcem_spark.io.outputs import atomic_output

    docs = str(tmp_path / "docs")
    with atomic_output(spark, docs, "documents", parts=[""]) as staged:  # what pcem ingest-* writes
        spark.read.json(str(trained["root"] / "test.jsonl")).write.parquet(staged.tmp)
    out = str(tmp_path / "first")
    assert main(["predict", "--model", trained["model"], "--docs", docs, "--output", out]) == 0
    marker = os.path.join(docs, MARKER)
    os.remove(os.path.join(docs, f".{MARKER}.crc"))
    text = open(marker).read()
    at = text.index('"run_id": "') + len('"run_id": "') + 3
    open(marker, "w").write(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1 :])
    capsys.readouterr()
    out = str(tmp_path / "again")
    assert main(["predict", "--model", trained["model"], "--docs", docs, "--output", out]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and MARKER in err and not os.path.exists(out)


def test_a_saved_estimator_or_evaluator_never_chooses_the_code_that_loads_it(spark, tmp_path, monkeypatch):
    """pyspark's DefaultParamsReader imports and calls the class a folder's metadata names; PathEM's and the
    evaluator's readers check the name first: a folder naming a planted module is refused, never imported."""
    import sys

    from pcem_spark.errors import InputError
    from pcem_spark.evaluation import HierarchicalF1Evaluator
    from pcem_spark.ml import PathEM

    ran = tmp_path / "imported"
    (tmp_path / "planted_module.py").write_text(f"open({str(ran)!r}, 'w').close()\nclass Payload:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for original, folder in ((PathEM(maxIter=3), "est"), (HierarchicalF1Evaluator(metricName="macroF1"), "ev")):
        path = str(tmp_path / folder)
        original.write().save(path)
        loaded = type(original).load(path)
        assert loaded.uid == original.uid and loaded.extractParamMap() == {
            loaded.getParam(p.name): v for p, v in original.extractParamMap().items()
        }
        (part,) = [p for p in (tmp_path / folder / "metadata").iterdir() if p.name.startswith("part-")]
        meta = json.loads(part.read_text())
        part.write_text(json.dumps({**meta, "class": "planted_module.Payload"}) + "\n")
        for crc in (tmp_path / folder / "metadata").glob(".*.crc"):
            crc.unlink()
        with pytest.raises(InputError, match="planted_module.Payload"):
            type(original).load(path)
    assert not ran.exists() and "planted_module" not in sys.modules
