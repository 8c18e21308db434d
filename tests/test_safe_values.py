"""The data-only value format of checkpoints and staged values (pcem_spark.engine.safe_values), without
Spark: every kind of value a checkpoint or a staged value holds round-trips; what is not data is refused,
both when writing (a class not allowed, a function) and when reading (a pickle, an object array, a class
the reader does not allow). A pickle planted in a checkpoint folder never runs: its marker file never
appears."""

import dataclasses
import io
import json
import os
import pickle
import struct
import zipfile
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core.parameters import PathParameters
from pcem_spark.engine import safe_values
from pcem_spark.engine.em_checkpoint import EMState
from pcem_spark.engine.feature_settings import FeatureSettings
from pcem_spark.io.arrow_fs import ArrowFS
from pcem_spark.io.checkpoints import CheckpointStore, checkpoint_dir_for, decode, encode
from pcem_spark.ml.checkpointing import checkpoint_types
from pcem_spark.model.settings import ModelSettings


class Pair(NamedTuple):
    left: object
    right: object


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    values: tuple


class Plain:
    def __init__(self, a):
        self.a = a
        self.cache = "built"

    def __getstate__(self):
        return {"a": self.a, "cache": None}


class Marker:
    """What a planted pickle calls: it would create the file at ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _round_trip(value, types=()):
    return safe_values.loads(safe_values.dumps(value, types), types)


def test_plain_values_round_trip_with_their_kinds():
    value = {
        "none": None,
        "flags": [True, False],
        "int": 2**70,
        "float": 0.1,
        "special": [float("nan"), float("inf"), -float("inf")],
        "text": "naïve ✓",
        "tuple": (1, ("a", 2.5)),
        "set": {3, 1},
        "frozen": frozenset({"x"}),
        "bytes": b"\x00\xff",
        3: "an int key",
        (1, 2): "a tuple key",
        "$": {"$": "not a tag"},
    }
    back = _round_trip(value)
    assert back.keys() == value.keys()
    assert back["special"][0] != back["special"][0] and back["special"][1:] == [float("inf"), -float("inf")]
    for key in value:
        if key != "special":
            assert back[key] == value[key] and type(back[key]) is type(value[key]), key


def test_arrays_scalars_and_sparse_matrices_keep_dtype_shape_and_values():
    dense = np.arange(12, dtype=np.float32).reshape(3, 4)
    csr = sp.random(5, 7, density=0.3, format="csr", random_state=0)
    csc = sp.csc_matrix(csr)
    value = [dense, np.array(["a", "bc"]), np.int64(7), np.float32(0.5), csr, csc, sp.csr_array(csr)]
    back = _round_trip(value)
    assert back[0].dtype == np.float32 and (back[0] == dense).all()
    assert list(back[1]) == ["a", "bc"]
    assert back[2] == 7 and type(back[2]) is np.int64 and type(back[3]) is np.float32
    for original, restored in zip(value[4:], back[4:]):
        assert type(restored) is type(original) and (restored != original).nnz == 0


def test_allowed_classes_are_rebuilt_from_their_fields_without_init():
    params = PathParameters(np.zeros(2), np.ones(2), sp.csr_matrix(np.eye(2)))
    state = EMState(3, params, [1.0, 2.0], converged=True)
    types = (Pair, Frozen, Plain, PathParameters, EMState, FeatureSettings, ModelSettings)
    value = [Pair(1, Frozen("n", (1,))), Plain([1, 2]), state, FeatureSettings(), ModelSettings(smoothing=0.5)]
    back = _round_trip(value, types)
    assert back[0] == value[0] and isinstance(back[0], Pair) and isinstance(back[0].right, Frozen)
    assert isinstance(back[1], Plain) and back[1].a == [1, 2] and back[1].cache is None  # its own state, no init
    assert back[2].iteration == 3 and back[2].converged and (back[2].params.log_ratio != params.log_ratio).nnz == 0
    assert back[3] == FeatureSettings() and back[4] == ModelSettings(smoothing=0.5)


def test_what_is_not_data_cannot_be_written():
    with pytest.raises(TypeError, match="not among the types"):
        safe_values.dumps(Pair(1, 2))  # a class the caller did not allow
    with pytest.raises(TypeError):
        safe_values.dumps(lambda: 0, (Pair,))
    with pytest.raises(TypeError, match="dtype object"):
        safe_values.dumps(np.array([object()], dtype=object))


def _archive(tree, **arrays):
    out = io.BytesIO()
    np.savez(out, tree=np.frombuffer(json.dumps(tree).encode(), np.uint8), **arrays)
    return out.getvalue()


def test_reading_refuses_pickles_object_arrays_and_classes_it_does_not_allow(tmp_path):
    marker = tmp_path / "ran"
    payloads = [
        pickle.dumps(Marker(str(marker))),  # a bare pickle
        _archive({"$": "array", "a": "a0"}, a0=np.array([Marker(str(marker))], dtype=object)),  # an object array
        _archive({"$": "namedtuple", "t": "os.system", "v": [f"touch {marker}"]}),  # a callable by name
        _archive({"$": "object", "t": safe_values.type_name(Plain), "s": {}}),  # a class not passed in
        _archive({"$": "array", "a": "tree"}),  # the tree itself as an array
        _archive({"$": "what"}),
        b"PK\x03\x04 not a zip",
    ]
    for payload in payloads:
        with pytest.raises(safe_values.UnsafeValueError):
            safe_values.loads(payload, (Pair,))
    assert not marker.exists()
    # The zip entries are .npy files, never .pkl ones: numpy itself refuses an object array.
    with zipfile.ZipFile(io.BytesIO(safe_values.dumps({"a": np.arange(3)}))) as z:
        assert all(name.endswith(".npy") for name in z.namelist())


def _legacy_checkpoint(value) -> bytes:
    """A checkpoint file as releases before the data-only format wrote it: a valid header, then a pickle."""
    import hashlib

    payload = pickle.dumps(value)
    return struct.pack(">8sIQ32s", b"PCEMCKPT", 1, len(payload), hashlib.sha256(payload).digest()) + payload


def test_a_pickle_planted_in_a_checkpoint_folder_never_runs(tmp_path, caplog):
    """Today's valid header and SHA-256 around a pickle whose payload would write a marker file, planted as
    the old release's file name, as the new one, and as a format-2 file: none of them runs; the store
    reads as empty (the run starts afresh) and says why; its next write deletes the old file."""
    marker = tmp_path / "payload-ran"
    directory = checkpoint_dir_for(str(tmp_path / "model"))
    os.makedirs(directory)
    planted = _legacy_checkpoint({"format": 1, "stages": Marker(str(marker))})
    with open(os.path.join(directory, "state-000000000009.pkl"), "wb") as fh:
        fh.write(planted)
    store = CheckpointStore(ArrowFS(directory), directory, checkpoint_types())
    with caplog.at_level("WARNING"):
        assert store.read() is None
    assert "state-000000000009.pkl" in caplog.text and "never read" in caplog.text
    assert decode(planted, checkpoint_types()) == (
        None,
        "checkpoint file format 1 (a pickle, written by an earlier release): pickles are never read",
    )
    with open(os.path.join(directory, "state-000000000010.ckpt"), "wb") as fh:
        fh.write(planted)
    assert store.read() is None
    import hashlib

    payload = pickle.dumps(Marker(str(marker)))
    forged = struct.pack(">8sIQ32s", b"PCEMCKPT", 2, len(payload), hashlib.sha256(payload).digest()) + payload
    with open(os.path.join(directory, "state-000000000011.ckpt"), "wb") as fh:
        fh.write(forged)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert store.read() is None
    assert "not a checkpoint of this release" in caplog.text and "starting afresh" in caplog.text
    assert not marker.exists()
    store.write({"format": 2})
    assert sorted(os.listdir(directory)) == ["state-000000000012.ckpt"]
    assert store.read() == {"format": 2} and not marker.exists()


def test_the_checkpoint_types_cover_a_train_s_stages():
    params = PathParameters(np.zeros(3), np.full(3, -2.0), sp.csr_matrix(np.ones((3, 4))))
    value = {
        "format": 2,
        "fingerprint": {"inputs": {"--docs": [["part-0", 10, 1.5]]}},
        "stages": {
            "stop_words": (FeatureSettings(), {"choice": "english"}),
            "vocabulary": ["a", "b"],
            "cross_validation": (ModelSettings(), {"scores": [0.5, np.float64(0.25)]}),
        },
        "em": EMState(2, params, [-3.0, -2.5], path_mass=np.ones(3)),
    }
    data = encode(value, checkpoint_types())
    back, why = decode(data, checkpoint_types())
    assert why == "" and back["stages"]["stop_words"][0] == FeatureSettings()
    assert back["em"].iteration == 2 and (back["em"].path_mass == 1).all()


def test_a_staged_file_replaced_on_the_staging_storage_never_runs(tmp_path):
    """Over Spark Connect a large value is staged in PCEM_STAGING_DIR; its SHA-256 travels in the plan. A file
    replaced there (a pickle payload, or a forged archive whose digest the plan does not hold) is refused
    before a byte of it is decoded; even a pickle whose digest matched would not be unpickled."""
    import hashlib

    from pcem_spark.engine.shipping import StagedFile, StagedValueError

    marker = tmp_path / "payload-ran"
    uri = str(tmp_path / "pcem-shipped-1.npz")
    data = safe_values.dumps((np.arange(4.0), ["a"]), ())
    with open(uri, "wb") as fh:
        fh.write(data)
    staged = StagedFile(uri, len(data), hashlib.sha256(data).hexdigest())
    StagedFile._cache.clear()
    value = staged.value
    assert (value[0] == np.arange(4.0)).all() and value[1] == ["a"]
    StagedFile._cache.clear()
    payload = pickle.dumps(Marker(str(marker)))
    with open(uri, "wb") as fh:
        fh.write(payload)
    with pytest.raises(StagedValueError, match="replaced or damaged") as caught:
        _ = staged.value
    assert hashlib.sha256(payload).hexdigest() in str(caught.value) and staged.sha256 in str(caught.value)
    with pytest.raises(safe_values.UnsafeValueError):
        _ = StagedFile(uri, len(payload), hashlib.sha256(payload).hexdigest()).value
    assert not marker.exists()


def test_a_forged_sparse_matrix_or_a_deep_tree_is_refused_not_a_crash():
    """scipy trusts a CSR matrix's indices in its products (an index out of bounds writes out of bounds); a
    tree nested past the recursion limit must be refused like any other bad file."""
    forged = _archive(
        {"$": "csr_matrix", "shape": [2, 2], "data": "a0", "indices": "a1", "indptr": "a2"},
        a0=np.array([1.0]),
        a1=np.array([10**8], dtype=np.int32),
        a2=np.array([0, 1, 1], dtype=np.int32),
    )
    with pytest.raises(safe_values.UnsafeValueError, match="index|indices"):
        safe_values.loads(forged)
    out = io.BytesIO()
    text = '{"$":"tuple","v":[' * 100_000 + '{"$":"tuple","v":[]}' + "]}" * 100_000
    np.savez(out, tree=np.frombuffer(text.encode(), np.uint8))
    with pytest.raises(safe_values.UnsafeValueError):
        safe_values.loads(out.getvalue())
