"""Checkpoints of a long train, without Spark: the file format, the store's generations, the fingerprint's
first difference, the stages' record and skip, and EM taken up at a saved iteration (against an
uninterrupted fit). The kill-and-resume runs of ``pcem train`` are in test_resume.py (slow)."""

import logging

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core.methods import method_spec
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine import passes
from pcem_spark.engine.blocks import Block
from pcem_spark.engine.em_checkpoint import EMState, active_hook, em_hook
from pcem_spark.io.arrow_fs import ArrowFS
from pcem_spark.io.checkpoints import CheckpointStore, checkpoint_dir_for, decode, encode
from pcem_spark.ml.checkpointing import GracefulStop, TrainCheckpoint, first_difference
from pcem_spark.model.fitting import em_settings
from pcem_spark.model.settings import ModelSettings


def _store(tmp_path, name="m"):
    directory = checkpoint_dir_for(str(tmp_path / name))
    return CheckpointStore(ArrowFS(directory), directory)


# ----------------------------------------------------------------- the file and the store
def test_checkpoint_dir_is_a_hidden_sibling_or_inside_the_given_folder():
    assert checkpoint_dir_for("/data/models/daily") == "/data/models/.daily.pcem-checkpoint"
    assert checkpoint_dir_for("/data/models/daily/", "/scratch/ck") == "/scratch/ck/daily.pcem-checkpoint"


def test_a_damaged_or_cut_file_is_refused_with_its_reason():
    data = encode({"a": np.arange(5)})
    value, why = decode(data)
    assert why == "" and (value["a"] == np.arange(5)).all()
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF
    assert decode(bytes(flipped)) == (None, "its content does not match its checksum (damaged)")
    assert "cut short" in decode(data[:-4])[1]
    assert "not a pcem-spark checkpoint" in decode(b"x" * 100)[1]


def test_each_write_is_a_new_generation_and_the_older_ones_go(tmp_path):
    store = _store(tmp_path)
    assert store.read() is None
    store.write({"n": 1})
    store.write({"n": 2})
    assert store.read() == {"n": 2}
    names = sorted(p.name for p in (tmp_path / ".m.pcem-checkpoint").iterdir())
    assert names == ["state-000000000002.ckpt"]
    # A write cut before its rename leaves a .partial file, which a reader never takes.
    (tmp_path / ".m.pcem-checkpoint" / "state-000000000003.ckpt.partial").write_bytes(b"half")
    assert store.read() == {"n": 2}
    store.delete()
    assert not (tmp_path / ".m.pcem-checkpoint").exists() and store.read() is None


def test_a_damaged_newest_generation_reads_as_none_with_a_warning(tmp_path, caplog):
    store = _store(tmp_path)
    path = store.write({"n": 1})
    raw = bytearray(open(path, "rb").read())
    raw[-1] ^= 0x01
    open(path, "wb").write(bytes(raw))
    with caplog.at_level(logging.WARNING):
        assert store.read() is None
    assert "damaged" in caplog.text and "starting afresh" in caplog.text


def test_first_difference_names_the_key_and_both_values():
    a = {"inputs": {"--docs": [["part-0", 10, 1.0]]}, "settings": {"model": {"max_iter": 50}}}
    assert first_difference(a, a) is None
    b = {"inputs": {"--docs": [["part-0", 12, 1.0]]}, "settings": {"model": {"max_iter": 50}}}
    assert first_difference(a, b) == "inputs.--docs[0][1]: 10 before, 12 now"
    c = {"inputs": a["inputs"], "settings": {"model": {"max_iter": 30}}}
    assert first_difference(a, c) == "settings.model.max_iter: 50 before, 30 now"
    d = {"inputs": {"--docs": [["part-0", 10, 1.0], ["part-1", 3, 1.0]]}, "settings": a["settings"]}
    assert first_difference(a, d) == "inputs.--docs: 1 entries before, 2 now"
    assert first_difference(a, {**a, "flags": {}}) == "flags: absent before, now {}"


# ----------------------------------------------------------------- stages
def test_a_completed_stage_is_skipped_by_the_next_run_of_the_same_fingerprint(tmp_path, caplog):
    calls = []
    first = TrainCheckpoint(_store(tmp_path), {"seed": 0})
    assert first.stage("vocabulary", lambda: calls.append(1) or ["a", "b"]) == ["a", "b"]
    again = TrainCheckpoint(_store(tmp_path), {"seed": 0})
    with caplog.at_level(logging.INFO):
        assert again.stage("vocabulary", lambda: calls.append(2) or ["x"]) == ["a", "b"]
    assert calls == [1] and "skipping vocabulary" in caplog.text
    assert again.resumed_from == "vocabulary"


def test_another_fingerprint_or_no_resume_starts_afresh_and_says_why(tmp_path, caplog):
    TrainCheckpoint(_store(tmp_path), {"seed": 0}).stage("vocabulary", lambda: ["a"])
    with caplog.at_level(logging.INFO):
        other = TrainCheckpoint(_store(tmp_path), {"seed": 1})
    assert other.stages == {} and "seed: 0 before, 1 now" in caplog.text and "starting afresh" in caplog.text
    TrainCheckpoint(_store(tmp_path), {"seed": 0}).stage("vocabulary", lambda: ["a"])
    fresh = TrainCheckpoint(_store(tmp_path), {"seed": 0}, resume=False)
    assert fresh.stages == {} and fresh.stage("vocabulary", lambda: ["new"]) == ["new"]


def test_a_stop_request_ends_the_run_after_the_stage_it_came_in(tmp_path):
    ck = TrainCheckpoint(_store(tmp_path), {})
    ck.request_stop()
    with pytest.raises(GracefulStop, match="after the vocabulary stage"):
        ck.stage("vocabulary", lambda: ["a"])
    assert TrainCheckpoint(_store(tmp_path), {}).stages == {"vocabulary": ["a"]}  # written before the stop


# ----------------------------------------------------------------- EM
TAX = Taxonomy.from_edges([("root", "a"), ("root", "b"), ("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")])
V = 12


def _blocks(seed=0, n=60):
    rng = np.random.default_rng(seed)
    paths = TAX.path_node_matrix(sparse=True)
    blocks = []
    for _ in range(0, n, 15):
        rows = 15
        true = rng.integers(0, TAX.n_paths, rows)
        X = sp.csr_matrix(rng.poisson(0.6, (rows, V)) + np.eye(TAX.n_paths, V)[true] * 3)
        labelled = rng.random(rows) < 0.3
        ns = sp.vstack([paths[p] if lab else sp.csr_matrix((1, TAX.n_nodes)) for p, lab in zip(true, labelled)])
        blocks.append(Block(X.astype(np.float64), ns.tocsr().astype(np.float64), labelled))
    return blocks


class _Recorder:
    """An EM hook that keeps every state and resumes from a given one."""

    def __init__(self, resume=None):
        self.resume, self.states = resume, []

    def resume_state(self):
        return self.resume

    def iteration_done(self, state):
        self.states.append(state)


def _fit(blocks, hook):
    ms = ModelSettings(method="pcem", smoothing=0.1, unlabeled_weight=0.5, path_weight=1.0, max_iter=9, tol=0)
    spec = method_spec(TAX, ms.method, ms.components, ms.path_weight)
    with em_hook(hook):
        assert active_hook() is hook
        return passes.fit(blocks, spec.score_matrix, V, em_settings(ms.resolved(), spec), structure=spec.structure)


def test_em_resumed_at_iteration_k_ends_where_the_uninterrupted_run_ends():
    blocks = _blocks()
    whole = _Recorder()
    full = _fit(blocks, whole)
    assert [s.iteration for s in whole.states] == list(range(1, 10)) and whole.states[-1].finished
    for k in (1, 4, 8):
        again = _Recorder(resume=whole.states[k - 1])
        resumed = _fit(blocks, again)
        assert [s.iteration for s in again.states] == list(range(k + 1, 10))  # only the iterations left
        assert resumed.n_iter == full.n_iter == 9
        assert np.allclose(resumed.loglik_history, full.loglik_history, rtol=0, atol=1e-9)
        assert np.abs(resumed.params.log_prior - full.params.log_prior).max() <= 1e-9
        assert np.abs(resumed.params.log_theta() - full.params.log_theta()).max() <= 1e-9
    done = _Recorder(resume=whole.states[-1])
    finished = _fit(blocks, done)
    assert done.states == [] and finished.n_iter == 9  # EM had finished: the saved parameters are the result
    assert np.abs(finished.params.log_theta() - full.params.log_theta()).max() == 0


def test_em_checkpoints_every_k_iterations_the_last_one_and_on_a_stop(tmp_path):
    blocks = _blocks(1)
    ck = TrainCheckpoint(_store(tmp_path), {}, every_iterations=4, every_seconds=1e9)
    written = []
    original = ck._save
    ck._save = lambda: (written.append(ck.em.iteration), original())[1]
    _fit(blocks, ck)
    assert written == [4, 8, 9]  # every 4, and the last (finished)
    stopping = TrainCheckpoint(_store(tmp_path, "n"), {}, every_iterations=100, every_seconds=1e9)
    stopping.request_stop()
    with pytest.raises(GracefulStop, match="after EM iteration 1"):
        _fit(blocks, stopping)
    state = TrainCheckpoint(_store(tmp_path, "n"), {}).em
    assert isinstance(state, EMState) and state.iteration == 1 and not state.finished
