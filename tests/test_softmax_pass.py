"""The discriminative path model's Spark pass against the same sums computed in this process (real SparkSession)."""

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core.logistic import fit_softmax, softmax_terms, tfidf_features
from pcem_spark.core.similarity import idf_weights
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import BLOCK_ROW, Block
from pcem_spark.engine.frame_softmax_pass import (
    fit_softmax_in_one_task_on_frame,
    fit_softmax_on_frame,
    labeled_frame,
    row_of_block,
)
from pcem_spark.engine.softmax_pass import (
    fit_softmax_in_one_task,
    fit_softmax_on_blocks,
    labeled_rows,
    softmax_terms_pass,
)
from pcem_spark.model.linear_family import LINEAR_ONE_TASK_NNZ, LINEAR_ONE_TASK_WORK, fits_in_one_task

TAXONOMY = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos", "hockey"]})


@pytest.fixture(scope="module")
def corpus():
    """24 documents, 4 paths, each path with its own terms; 10 labelled, spread over 5 blocks."""
    rng = np.random.default_rng(7)
    M, V, per = len(TAXONOMY.paths), 16, 6
    X = np.zeros((M * per, V))
    for m in range(M):
        X[m * per : (m + 1) * per, 4 * m : 4 * m + 4] = rng.integers(0, 4, size=(per, 4))
    X += (rng.random(X.shape) < 0.2) * rng.integers(1, 3, size=X.shape)
    paths = np.repeat(np.arange(M), per)
    labeled = np.zeros(len(X), dtype=bool)
    labeled[rng.choice(len(X), size=10, replace=False)] = True
    leaf_node = TAXONOMY.leaf_node_matrix()
    node_scores = np.where(labeled[:, None], leaf_node[paths], 0.0)  # the leaf's node, labelled rows only
    blocks = [
        Block(sp.csr_matrix(X[lo : lo + 5]), sp.csr_matrix(node_scores[lo : lo + 5]), labeled[lo : lo + 5])
        for lo in range(0, len(X), 5)
    ]
    idf = idf_weights((X > 0).sum(axis=0), len(X))
    return X, paths, labeled, blocks, idf, leaf_node


def _local_terms(corpus, W, b):
    X, paths, labeled, _, idf, _ = corpus
    F = tfidf_features(sp.csr_matrix(X[labeled]), idf)
    Y = np.eye(W.shape[0])[paths[labeled]]
    return softmax_terms(F, Y, np.ones(int(labeled.sum())), W, b)


def test_a_pass_sums_the_labelled_rows_of_every_block(spark, corpus):
    _, _, labeled, blocks, idf, leaf_node = corpus
    rdd = spark.sparkContext.parallelize(blocks, 3)
    assert labeled_rows(rdd).map(lambda blk: blk.X.shape[0]).sum() == labeled.sum()
    rng = np.random.default_rng(1)
    W, b = rng.normal(size=(leaf_node.shape[0], len(idf))), rng.normal(size=leaf_node.shape[0])
    static_bc = spark.sparkContext.broadcast((idf, leaf_node))
    got = softmax_terms_pass(rdd, static_bc, W, b)
    want = _local_terms(corpus, W, b)
    assert got.loss == pytest.approx(want.loss, rel=1e-12)
    assert got.weight == labeled.sum()
    np.testing.assert_allclose(got.grad_W, want.grad_W, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.grad_b, want.grad_b, rtol=1e-10, atol=1e-12)


FITS = {"a pass per evaluation": fit_softmax_on_blocks, "one task": fit_softmax_in_one_task}


@pytest.mark.parametrize("where", list(FITS))
def test_the_fit_on_spark_equals_the_local_fit(spark, corpus, where):
    X, paths, labeled, blocks, idf, leaf_node = corpus
    M, V = leaf_node.shape[0], len(idf)
    rdd = spark.sparkContext.parallelize(blocks, 3).cache()
    on_spark = FITS[where](rdd, idf, leaf_node, l2=0.01, max_iter=200, tol=1e-8)
    local = fit_softmax(lambda W, b: _local_terms(corpus, W, b), M, V, 0.01, max_iter=200, tol=1e-8)
    # The same evaluations in the same order: the same iterates, up to the order of the float sums.
    np.testing.assert_allclose(on_spark.W, local.W, atol=1e-6)
    assert on_spark.objective == pytest.approx(local.objective, rel=1e-9)
    scores = tfidf_features(sp.csr_matrix(X), idf) @ on_spark.W.T + on_spark.b
    assert (scores.argmax(axis=1)[labeled] == paths[labeled]).all()


@pytest.mark.parametrize("where", list(FITS))
def test_no_labelled_document_is_a_clear_error(spark, corpus, where):
    _, _, _, blocks, idf, leaf_node = corpus
    unlabelled = [Block(blk.X, blk.node_scores, np.zeros_like(blk.labeled)) for blk in blocks]
    rdd = spark.sparkContext.parallelize(unlabelled, 2)
    with pytest.raises(ValueError, match="no labelled document"):
        FITS[where](rdd, idf, leaf_node, l2=0.01)


def test_the_one_task_fit_is_the_same_whatever_the_partitioning(spark, corpus):
    """The shuffle to one task delivers blocks in any order; the task sorts them, so the sums never change."""
    _, _, _, blocks, idf, leaf_node = corpus
    fits = [
        fit_softmax_in_one_task(spark.sparkContext.parallelize(blocks, n), idf, leaf_node, l2=0.01, tol=1e-8)
        for n in (1, 2, 5, 5)
    ]
    for fit in fits[1:]:
        np.testing.assert_array_equal(fit.W, fits[0].W)
        np.testing.assert_array_equal(fit.b, fits[0].b)


FRAME_FITS = {"a pass per evaluation": fit_softmax_on_frame, "one task": fit_softmax_in_one_task_on_frame}


@pytest.mark.parametrize("where", list(FRAME_FITS))
def test_the_fit_on_block_rows_equals_the_local_fit(spark, corpus, where, staged_shipping):
    """The DataFrame-only routes (what Spark Connect runs), on a classic session's packed block rows."""
    X, paths, labeled, blocks, idf, leaf_node = corpus
    M, V = leaf_node.shape[0], len(idf)
    frame = spark.createDataFrame([row_of_block(blk) for blk in blocks], BLOCK_ROW).repartition(3)
    rows = labeled_frame(frame, V, leaf_node.shape[1]).cache()
    try:
        assert rows.count() == sum(1 for blk in blocks if blk.labeled.any())
        on_spark = FRAME_FITS[where](rows, idf, leaf_node, 0.01, V, max_iter=200, tol=1e-8)
    finally:
        rows.unpersist()
    local = fit_softmax(lambda W, b: _local_terms(corpus, W, b), M, V, 0.01, max_iter=200, tol=1e-8)
    np.testing.assert_allclose(on_spark.W, local.W, atol=1e-6)
    assert on_spark.objective == pytest.approx(local.objective, rel=1e-9)


def test_a_small_labelled_set_fits_in_one_task_and_a_large_one_pass_by_pass():
    assert fits_in_one_task(0, 20) and fits_in_one_task(1_500_000, 20)  # 20NG at 90% labelled
    assert fits_in_one_task(LINEAR_ONE_TASK_WORK // 20, 20)
    assert not fits_in_one_task(LINEAR_ONE_TASK_WORK // 20 + 1, 20)  # an evaluation's arithmetic
    assert not fits_in_one_task(LINEAR_ONE_TASK_NNZ + 1, 1)  # the task's memory
    assert not fits_in_one_task(100_000, 10_000)  # 10,000 leaves
