"""The DataFrame-only EM pass (no RDD, no broadcast variable) gives the RDD pass's sums."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.linalg import SparseVector, VectorUDT
from pyspark.sql import types as T
from test_reference import make_corpus

import pcem_spark.engine.frame_sums as frame_sums
import pcem_spark.engine.sums as sums
from pcem_spark.core.methods import method_spec
from pcem_spark.core.parameters import sparse_log_parameters
from pcem_spark.engine.blocks import block_batches, block_from_row, packed_label_frame
from pcem_spark.engine.limits import ResultSizeError
from pcem_spark.engine.sums import PassOptions, sufficient_stats


def _frame(spark, c, block_size=3, n_partitions=3):
    schema = T.StructType(
        [T.StructField("features", VectorUDT(), False), T.StructField("labels", T.ArrayType(T.StringType()), True)]
    )
    rows = []
    for i in range(c.X.shape[0]):
        nz = np.flatnonzero(c.X[i])
        rows.append(
            (SparseVector(c.V, nz.tolist(), c.X[i, nz].tolist()), list(c.order[c.true[i]]) if c.labeled[i] else None)
        )
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, n_partitions), schema)
    return packed_label_frame(df, c.tax.path_lookup(), c.tax.path_node_matrix(), block_size).cache()


@pytest.fixture(scope="module")
def corpus(spark):
    c = make_corpus("padded", n_docs=60, vocab=30, seed=7)
    c.frame = _frame(spark, c)
    vocab_size, n_nodes = c.V, c.tax.path_node_matrix().shape[1]  # the lambda must not capture c (a DataFrame)
    c.blocks = c.frame.rdd.map(lambda r: block_from_row(r, vocab_size, n_nodes)).cache()
    yield c
    c.frame.unpersist()
    c.blocks.unpersist()


def _assert_same(got, want):
    for g, w in zip(got[:2], want[:2]):
        g = g.toarray() if hasattr(g, "toarray") else g
        w = w.toarray() if hasattr(w, "toarray") else w
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert got[2] == pytest.approx(want[2], rel=1e-12, abs=1e-12) and got[3:] == want[3:]


@pytest.mark.parametrize("method", ["pcem", "flat-em", "emmc"])
@pytest.mark.parametrize("top_k", [0, 2])
def test_frame_pass_equals_the_rdd_pass(spark, corpus, method, top_k):
    c = corpus
    spec = method_spec(c.tax, method, 2, 1.0)
    n_nodes = c.tax.path_node_matrix().shape[1]
    init = PassOptions(use_unlabeled=False, init_seed=3 if spec.structure is not None else None)
    # The initialisation pass (no parameters: labelled rows only), then a full E-step pass from its parameters.
    want = sufficient_stats(c.blocks, None, spec.score_matrix, c.V, init, structure=spec.structure)
    got = frame_sums.frame_sufficient_stats(
        c.frame, None, spec.score_matrix, c.V, n_nodes, init, structure=spec.structure
    )
    if spec.structure is None:
        _assert_same(got, want)
    else:  # the random split of a class's documents over its components is seeded per task: same class sums
        owner = spec.structure.owner
        np.testing.assert_allclose(np.bincount(owner, got[1]), np.bincount(owner, want[1]), rtol=1e-12)
    params = sparse_log_parameters(np.asarray(want[0].toarray() if hasattr(want[0], "toarray") else want[0]), want[1])
    opts = PassOptions(top_k=top_k, unlabeled_weight=0.5, doc_length=20.0)
    want = sufficient_stats(c.blocks, params, spec.score_matrix, c.V, opts, structure=spec.structure)
    stats = {}
    got = frame_sums.frame_sufficient_stats(
        c.frame, params, spec.score_matrix, c.V, n_nodes, opts, structure=spec.structure, stats=stats
    )
    _assert_same(got, want)
    assert stats["broadcast_bytes"] > 0 and stats["collected_bytes"] > 0


@pytest.mark.parametrize("max_direct_tasks", [4, 0])
def test_frame_pass_sparse_sums_equal_the_rdd_pass(spark, corpus, monkeypatch, max_direct_tasks):
    """Sparse sums: a few tasks' rows added on the driver (4), or summed on the cluster first (0)."""
    c = corpus
    spec = method_spec(c.tax, "pcem", 2, 1.0)
    n_nodes = c.tax.path_node_matrix().shape[1]
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)  # both passes read it (sums.sums_layout)
    monkeypatch.setattr(sums, "DIRECT_COLLECT_MAX_TASKS", max_direct_tasks)
    direct = []
    real_unless = frame_sums._unless_too_large
    monkeypatch.setattr(frame_sums, "_unless_too_large", lambda collect: direct.append(1) or real_unless(collect))
    init = PassOptions(use_unlabeled=False)
    want = sufficient_stats(c.blocks, None, spec.score_matrix, c.V, init)
    got = frame_sums.frame_sufficient_stats(c.frame, None, spec.score_matrix, c.V, n_nodes, init)
    assert hasattr(got[0], "toarray")
    _assert_same(got, want)
    # wide models: more, smaller summed chunks (one result row each), the same sums
    monkeypatch.setattr(frame_sums, "CHUNK_TARGET_BYTES", 64)
    stats = {}
    got = frame_sums.frame_sufficient_stats(c.frame, None, spec.score_matrix, c.V, n_nodes, init, stats=stats)
    _assert_same(got, want)
    assert stats["collected_bytes"] > 0
    assert len(direct) == (2 if max_direct_tasks else 0)


def test_a_frame_pass_whose_direct_collect_spark_aborts_for_its_size_sums_on_the_cluster(spark, corpus, monkeypatch):
    """Spark's maxResultSize abort of the tasks' unsummed rows: the same sums, summed on the cluster; any other
    error propagates."""
    c = corpus
    DataFrame = type(c.frame)  # the classic DataFrame (pyspark.sql.classic), which has its own toArrow
    spec = method_spec(c.tax, "pcem", 2, 1.0)
    n_nodes = c.tax.path_node_matrix().shape[1]
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    init = PassOptions(use_unlabeled=False)
    want = sufficient_stats(c.blocks, None, spec.score_matrix, c.V, init)
    real_to_arrow = DataFrame.toArrow
    raised = []

    def to_arrow_aborted_once(self):
        if not raised:
            raised.append(1)
            raise RuntimeError(
                "Job aborted due to stage failure: Total size of serialized results of 2 tasks (1100.0 MiB) is "
                "bigger than spark.driver.maxResultSize (1024.0 MiB)"
            )
        return real_to_arrow(self)

    monkeypatch.setattr(DataFrame, "toArrow", to_arrow_aborted_once)
    _assert_same(frame_sums.frame_sufficient_stats(c.frame, None, spec.score_matrix, c.V, n_nodes, init), want)
    assert raised == [1]

    def to_arrow_failing(self):
        raise RuntimeError("Task 0 in stage 3.0 failed 1 times")

    monkeypatch.setattr(DataFrame, "toArrow", to_arrow_failing)
    with pytest.raises(RuntimeError, match="failed 1 times"):
        frame_sums.frame_sufficient_stats(c.frame, None, spec.score_matrix, c.V, n_nodes, init)


def test_frame_pass_refuses_sums_over_max_result_size(spark):
    old = spark.conf.get("spark.driver.maxResultSize", "1g")
    # What the collect is checked against is read from the session's conf (as a Connect client can).
    limit = frame_sums.check_result_size
    with pytest.raises(ResultSizeError, match="maxResultSize"):
        limit(_ConfOnly("1k"), 1 << 20, "the per-path sums")
    assert spark.conf.get("spark.driver.maxResultSize", "1g") == old


class _ConfOnly:
    """A session as a Connect client sees it: a conf to read, no SparkContext, no JVM."""

    def __init__(self, max_result_size):
        self.conf = {"spark.driver.maxResultSize": max_result_size}


@pytest.mark.parametrize("method", ["pcem", "flat-em"])
def test_a_fit_on_the_dataframe_of_blocks_equals_the_rdd_fit(spark, corpus, method, staged_shipping):
    from pcem_spark.engine.passes import EMSettings, fit

    c = corpus
    spec = method_spec(c.tax, method, 2, 1.0)
    settings = EMSettings(smoothing=0.5, max_iter=4, unlabeled_weight=0.7, doc_length=20.0)
    want = fit(c.blocks, spec.score_matrix, c.V, settings)
    got = fit(c.frame, spec.score_matrix, c.V, settings)
    np.testing.assert_allclose(got.params.log_prior, want.params.log_prior, rtol=1e-10)
    np.testing.assert_allclose(got.params.log_theta(), want.params.log_theta(), rtol=1e-10, atol=1e-10)
    assert got.n_iter == want.n_iter and got.loglik_history == pytest.approx(want.loglik_history, rel=1e-10)


_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"


def _batch_rows(frame):
    """The rows of each Arrow batch a mapInArrow over ``frame`` reads, in one task."""
    import pyarrow as pa

    def sizes(batches):
        counts = ",".join(str(b.num_rows) for b in batches)
        yield pa.RecordBatch.from_arrays([pa.array([counts], pa.string())], names=["rows"])

    return [[int(n) for n in r.rows.split(",")] for r in frame.coalesce(1).mapInArrow(sizes, "rows string").collect()]


def test_block_batches_hold_a_few_blocks_in_the_body_and_restore_the_setting_after(spark, corpus):
    explicit_before = spark.conf.get(_BATCH_BYTES, None)  # None: nobody set it, Spark's default holds
    in_force_before = spark.conf.get(_BATCH_BYTES)
    n_blocks = corpus.frame.count()
    assert _batch_rows(corpus.frame) == [[n_blocks]]  # the default: every block in one batch
    with block_batches(spark, 1):  # smaller than any block: one block per batch
        assert spark.conf.get(_BATCH_BYTES) == "1"
        assert _batch_rows(corpus.frame) == [[1] * n_blocks]
    # Put back as it was: unset again when it was unset, not pinned to the default's value.
    assert spark.conf.get(_BATCH_BYTES, None) == explicit_before
    assert spark.conf.get(_BATCH_BYTES) == in_force_before
    with pytest.raises(RuntimeError, match="a pass that fails"):
        with block_batches(spark, 1):
            raise RuntimeError("a pass that fails")
    assert spark.conf.get(_BATCH_BYTES, None) == explicit_before
    with pytest.raises(ValueError, match="max_bytes=0"):
        with block_batches(spark, 0):
            pass
    try:
        # A value set by the user is put back as set; a smaller one stays as it is.
        spark.conf.set(_BATCH_BYTES, "32m")
        with block_batches(spark, 1 << 20):
            assert spark.conf.get(_BATCH_BYTES) == str(1 << 20)
        assert spark.conf.get(_BATCH_BYTES, None) == "32m"
        spark.conf.set(_BATCH_BYTES, "1024")
        with block_batches(spark, 1 << 20):
            assert spark.conf.get(_BATCH_BYTES) == "1024"
        assert spark.conf.get(_BATCH_BYTES, None) == "1024"
    finally:
        if explicit_before is None:
            spark.conf.unset(_BATCH_BYTES)
        else:
            spark.conf.set(_BATCH_BYTES, explicit_before)


def test_frame_pass_in_batches_of_one_block_equals_the_rdd_pass(spark, corpus, monkeypatch):
    c = corpus
    spec = method_spec(c.tax, "pcem", 2, 1.0)
    n_nodes = c.tax.path_node_matrix().shape[1]
    seen = []

    def one_block_per_batch(session):
        seen.append(session)
        return block_batches(session, 1)

    monkeypatch.setattr(frame_sums, "block_batches", one_block_per_batch)
    init = PassOptions(use_unlabeled=False)
    want = sufficient_stats(c.blocks, None, spec.score_matrix, c.V, init)
    params = sparse_log_parameters(np.asarray(want[0].toarray() if hasattr(want[0], "toarray") else want[0]), want[1])
    opts = PassOptions(unlabeled_weight=0.5)
    want = sufficient_stats(c.blocks, params, spec.score_matrix, c.V, opts)
    got = frame_sums.frame_sufficient_stats(c.frame, params, spec.score_matrix, c.V, n_nodes, opts)
    assert seen == [spark]
    _assert_same(got, want)


def _refuse(*args):
    raise ResultSizeError("refused for the test")


def test_sums_sized_exactly_and_refused_leave_nothing_cached(spark, corpus, monkeypatch):
    """Both passes cache the summed records to size them exactly when the bound may not fit; a refusal
    unpersists them (a fit that fails on the driver limit must not pin them in executor memory)."""
    c = corpus
    spec = method_spec(c.tax, "pcem", 2, 1.0)
    n_nodes = c.tax.path_node_matrix().shape[1]
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    for module in (sums, frame_sums):
        monkeypatch.setattr(module, "_limit_or_inf", lambda sc: 0.0)  # the bound never fits: size exactly
        monkeypatch.setattr(module, "check_result_size", _refuse)
    persistent = spark.sparkContext._jsc.getPersistentRDDs().size()
    init = PassOptions(use_unlabeled=False)
    with pytest.raises(ResultSizeError, match="refused for the test"):
        sufficient_stats(c.blocks, None, spec.score_matrix, c.V, init)
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == persistent
    with pytest.raises(ResultSizeError, match="refused for the test"):
        frame_sums.frame_sufficient_stats(c.frame, None, spec.score_matrix, c.V, n_nodes, init)
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == persistent
