"""Cross-validation on a bounded sample: every (grid point, fold) fit is one task on the executors.

The cross-validation behind the "auto" settings (:mod:`pcem_spark.ml.tuning`)
costs a bounded multiple of one fit however large the corpus is:

* a seeded sample of at most ``max_labeled`` labelled and ``max_unlabeled``
  unlabelled documents (a hash of each id against the seed, so the same seed
  draws the same documents on any cluster);
* EM-lambda of every cross-validation fit is scaled by
  :func:`rescaled_unlabeled_weight`, so the unlabelled sample weighs, per
  labelled document, what all the unlabelled documents weigh in the full fit;
* the sample is packed once into CSR blocks (one list per fold and one for
  the unlabelled documents), gathered into one partition (or, over Spark
  Connect, broadcast by a join hint) and paired with the task list, so each
  task fits one grid point on the other folds with the same EM code as the
  full fit, in one process (:func:`pcem_spark.engine.passes.fit` over a list
  of blocks), and predicts its held-out fold. Only per-node
  TP / FP / FN counts come back to the driver -- never a document.

The math of a task is :func:`cv_task` on lists of blocks, tested without Spark.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Dict, List, NamedTuple, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.calibration import concat_out_of_fold, out_of_fold
from pcem_spark.core.decoding import block_scores, predict_paths
from pcem_spark.core.estep import length_normalize, scoring_tables
from pcem_spark.core.logistic import with_vectors
from pcem_spark.core.methods import method_spec
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine import passes
from pcem_spark.engine.blocks import Block, block_from_row, packed_label_frame
from pcem_spark.engine.session import is_spark_connect
from pcem_spark.engine.softmax_pass import block_vectors
from pcem_spark.evaluation.metrics import f1_scores, metric_nodes
from pcem_spark.model.fitting import em_settings
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "CVSample",
    "rescaled_unlabeled_weight",
    "metric_indicator",
    "true_paths",
    "single_path_rows",
    "fold_confusion",
    "cv_task",
    "cv_tasks",
    "em_key",
    "fold_metric",
    "KEPT_PART",
    "trained_paths",
    "sample_rows",
    "run_sampled_cv",
    "with_weight",
]

# The part number of the unlabelled sample's blocks; labelled blocks carry their fold (0..k-1).
UNLABELED_PART = -1
# ... and of labelled documents that every fold trains on and none holds out: the only labelled document of
# its leaf (the fewest-labels rule: a held-out document's leaf must have one in training, as a test one's has).
KEPT_PART = -2
_HASH_RANGE = 1 << 31


class CVSample(NamedTuple):
    """What was sampled: full and sampled counts, and lambda's scale (recorded in the training summary)."""

    n_labeled: int
    n_unlabeled: int
    n_labeled_sampled: int
    n_unlabeled_sampled: int
    seed: int
    # sampled labelled documents that a fold may hold out (not the only one of their leaf); -1: not counted
    n_held_out: int = -1

    @property
    def unlabeled_scale(self) -> float:
        return rescaled_unlabeled_weight(
            1.0, self.n_labeled, self.n_unlabeled, self.n_labeled_sampled, self.n_unlabeled_sampled
        )

    def as_dict(self) -> Dict[str, object]:
        return {**self._asdict(), "unlabeled_weight_scale": round(self.unlabeled_scale, 6)}


def rescaled_unlabeled_weight(
    weight: float, n_labeled: int, n_unlabeled: int, n_labeled_sampled: int, n_unlabeled_sampled: int
) -> float:
    """EM-lambda for a fit on the sample: the same unlabelled mass per labelled document as the full fit.

    The full fit gives ``weight * n_unlabeled / n_labeled`` unlabelled mass per
    labelled document; the sample gives ``w * n_unlabeled_sampled /
    n_labeled_sampled``. Without sampling (or without unlabelled documents) it
    is ``weight`` itself.

    >>> rescaled_unlabeled_weight(0.3, 100, 10_000, 100, 2_000)
    1.5
    """
    if n_unlabeled_sampled <= 0 or n_labeled <= 0:
        return float(weight)
    return float(weight) * (n_unlabeled / n_unlabeled_sampled) * (n_labeled_sampled / n_labeled)


def metric_indicator(taxonomy: Taxonomy) -> sp.csr_matrix:
    """(R, K') 0/1 matrix: the metric nodes (:func:`metric_nodes`, real non-root nodes) of each path."""
    nodes = metric_nodes(taxonomy)
    index = {n: k for k, n in enumerate(nodes)}
    rows, cols = [], []
    for j in range(taxonomy.n_paths):
        for node in taxonomy.real_path(j):
            rows.append(j)
            cols.append(index[node])
    data = np.ones(len(rows), dtype=np.int64)
    return sp.csr_matrix((data, (rows, cols)), shape=(taxonomy.n_paths, len(nodes)))


def true_paths(node_scores: sp.csr_matrix, path_node) -> np.ndarray:
    """(n,) path index of labelled rows whose node scores are the nodes of one (padded) path."""
    matches = sp.csr_matrix(node_scores != 0).astype(np.int64) @ sp.csr_matrix(path_node, dtype=np.int64).T
    return np.asarray(matches.argmax(axis=1)).ravel()


def single_path_rows(node_scores: sp.csr_matrix) -> np.ndarray:
    """(n,) bool: rows labelled with one path (every node score 1); a row with ``k > 1`` paths has
    scores ``1/k`` on its leaves (:func:`pcem_spark.engine.arrow_io.node_score_rows`)."""
    ns = sp.csr_matrix(node_scores)
    fractional = np.asarray(sp.csr_matrix((ns.data != 1.0, ns.indices, ns.indptr), shape=ns.shape).sum(axis=1))
    return (np.diff(ns.indptr) > 0) & (fractional.ravel() == 0)


def fold_confusion(
    true: np.ndarray, predicted: np.ndarray, indicator: sp.csr_matrix
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per metric node ``(tp, fp, fn)`` of predicted vs true path indices, as ``node_confusion`` counts them."""
    t = indicator[true]
    p = indicator[predicted]
    tp = np.asarray(t.multiply(p).sum(axis=0)).ravel()
    return tp, np.asarray(p.sum(axis=0)).ravel() - tp, np.asarray(t.sum(axis=0)).ravel() - tp


def fold_metric(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, metric: str) -> float:
    """The HierarchicalF1Evaluator's ``metricName`` value of one fold's counts."""
    f = f1_scores(tp, fp, fn)
    if metric == "microF1":
        return f["micro_f1"]
    if metric == "macroF1":
        return f["macro_f1"]
    return (f["micro_f1"] + f["macro_f1"]) / 2.0


def cv_task(
    parts: Sequence[Tuple[int, Block]],
    fold: int,
    taxonomy: Taxonomy,
    vocab_size: int,
    settings: ModelSettings,
    keep_out_of_fold: bool = False,
    linear=None,
) -> Dict[str, object]:
    """Fit ``settings`` on every part but ``fold`` and count its held-out fold's node confusion.

    ``parts``: ``(part, block)`` pairs, part = fold of labelled blocks or
    :data:`UNLABELED_PART`. ``settings``: resolved numbers (EM-lambda already
    rescaled); ``smoothing`` may be "auto". Returns ``tp``/``fp``/``fn``
    (lists over :func:`metric_nodes`), the fit's ``n_iter`` and ``seconds``;
    with ``keep_out_of_fold`` (Eq. 5 methods) also ``out_of_fold``, the held-out
    rows' best paths' scores and true path (:func:`pcem_spark.core.calibration.out_of_fold`).
    ``linear``: the fold's softmax regression when already fitted (it depends on the fold's
    labelled documents, not on the grid point's weights); fitted here when None and
    ``settings.family`` needs one.
    """
    return cv_tasks(parts, fold, taxonomy, vocab_size, [settings], keep_out_of_fold, [linear])[0]


def em_key(settings: ModelSettings) -> str:
    """What a fold's EM depends on: grid points with the same key share one EM fit (:func:`cv_tasks`).

    The family, its pooling weight and its regression's settings only change how a path is scored; a
    discriminative point ignores the generative model altogether and fits naive Bayes (lambda 0) instead.
    """
    em = replace(
        settings,
        family="generative",
        generative_weight=0.0,
        linear_c=1.0,
        linear_weights="auto",
        embedding_weight=1.0,
    )
    if settings.family == "discriminative":
        em = replace(em, family="discriminative", unlabeled_weight=0.0, path_weight=0.0)
    return repr(em)


def cv_tasks(
    parts: Sequence[Tuple[int, Block]],
    fold: int,
    taxonomy: Taxonomy,
    vocab_size: int,
    settings: Sequence[ModelSettings],
    keep_out_of_fold: bool = False,
    linears: Sequence = (),
) -> List[Dict[str, object]]:
    """:func:`cv_task` for several grid points of one :func:`em_key`: one EM fit, each point's scores.

    ``linears``: per point, its fold regression or None. Each result's ``seconds`` is the shared fit's
    share plus the point's own scoring.
    """
    if len({em_key(point) for point in settings}) != 1:
        raise ValueError("cv_tasks: the grid points need one EM fit (the same em_key)")
    t0 = time.perf_counter()
    first = settings[0]
    train = [b for p, b in parts if p != fold]
    held = [b for p, b in parts if p == fold]
    spec = method_spec(taxonomy, first.method, first.components, first.path_weight)
    # The fold fits stop at the tuning's max_iter on purpose: no warning that they did not converge.
    em = replace(em_settings(first, spec), capped=True)
    if first.family == "discriminative":
        # Its scores ignore the generative model (beta 0): one counting pass (PCNB) stands in for the EM.
        em = replace(em, unlabeled_weight=0.0)
    result = passes.fit(train, spec.score_matrix, vocab_size, em, structure=spec.structure)
    fit_share = (time.perf_counter() - t0) / len(settings)
    linears = list(linears) or [None] * len(settings)
    out = []
    for point, linear in zip(settings, linears):
        t1 = time.perf_counter()
        tables = scoring_tables(result.params, point.parameter_dtype)
        if point.family == "vmf":  # the fold's own vector mixture, after the fold's EM
            from pcem_spark.model.vmf_family import fit_vmf_local

            tables = tables._replace(linear=fit_vmf_local(train, taxonomy, vocab_size, point, tables))
        elif point.family != "generative":  # the fold's own softmax regression, pooled as in the full model
            from pcem_spark.model.linear_family import fit_linear_local, generative_weight_of

            if linear is None:
                linear = fit_linear_local(train, taxonomy, vocab_size, point)
            tables = tables._replace(linear=linear._replace(generative_weight=generative_weight_of(point)))
        scored = _score_fold(held, train, tables, spec, point, taxonomy, keep_out_of_fold)
        scored["n_iter"] = result.n_iter
        scored["seconds"] = fit_share + time.perf_counter() - t1
        out.append(scored)
    return out


def _score_fold(held, train, tables, spec, settings: ModelSettings, taxonomy: Taxonomy, keep_out_of_fold: bool):
    """The held-out fold's node confusion (and out-of-fold set) under ``tables`` (:func:`cv_task`)."""
    path_node = taxonomy.path_node_matrix(sparse=True)
    indicator = metric_indicator(taxonomy)
    # Only a held-out row whose path has a labelled row in training is scored, as every test document's has.
    trained = trained_paths([b.node_scores for b in train], path_node, taxonomy.is_dummy)
    n_nodes = indicator.shape[1]
    tp, fp, fn = (np.zeros(n_nodes, dtype=np.int64) for _ in range(3))
    keep = keep_out_of_fold and spec.structure is None
    kept, scored, skipped = [], 0, 0
    for b in held:
        # Scored on the held-out rows with one true path: a row in several categories trains the other
        # folds' fits, but has no single path to count a hit or a calibration event against.
        single = single_path_rows(b.node_scores)
        if not single.any():
            continue
        true = np.full(b.X.shape[0], -1, dtype=np.int64)
        true[single] = true_paths(b.node_scores[single], path_node)
        scorable = single & (true >= 0) & trained[np.maximum(true, 0)]
        skipped += int(single.sum() - scorable.sum())
        if not scorable.any():
            continue
        scored += int(scorable.sum())
        X, true = (b.X, true) if scorable.all() else (b.X[scorable], true[scorable])
        if tables.linear is not None and tables.linear.embedding_dim:
            # The fold's regression scores the held-out rows' vectors beside their words.
            E = block_vectors(b, np.flatnonzero(scorable), tables.linear.embedding_dim)
            tables = tables._replace(linear=with_vectors(tables.linear, E))
        if keep:
            X = length_normalize(X, settings.doc_length) if settings.doc_length > 0 else X
            jll = np.vstack([chunk for _, chunk in block_scores(X, tables)])
            kept.append(out_of_fold(jll, true))
            predicted = np.argmax(jll, axis=1)  # what predict_paths decodes, from the same scores
        else:
            predicted, _ = predict_paths(X, None, None, spec.structure, settings.doc_length, tables=tables)
        counts = fold_confusion(true, predicted, indicator)
        tp, fp, fn = tp + counts[0], fp + counts[1], fn + counts[2]
    out = {"tp": tp.tolist(), "fp": fp.tolist(), "fn": fn.tolist(), "scored": scored, "skipped": skipped}
    if keep:
        out["out_of_fold"] = concat_out_of_fold(kept)
    return out


def trained_paths(node_scores: Sequence[sp.csr_matrix], path_node, is_dummy) -> np.ndarray:
    """(R,) bool: the paths that some labelled row of ``node_scores`` (blocks' node scores) is labelled with.

    A row is labelled with a path when it scores every real node of it (a row in several categories
    scores several paths' nodes); unlabelled rows score nothing.

    >>> import scipy.sparse as sp
    >>> pn = sp.csr_matrix([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]])  # two paths under node 0, one alone
    >>> trained_paths([sp.csr_matrix([[1.0, 0, 1.0, 0], [0, 0, 0, 0]])], pn, [False] * 4).tolist()
    [False, True, False]
    """
    real = sp.csr_matrix(path_node, dtype=np.int64)[:, np.flatnonzero(~np.asarray(is_dummy, dtype=bool))]
    needed = np.asarray(real.sum(axis=1)).ravel()
    present = np.zeros(real.shape[0], dtype=bool)
    for ns in node_scores:
        if ns is None or ns.shape[0] == 0:
            continue
        scored = sp.csr_matrix(ns, dtype=np.float64)[:, np.flatnonzero(~np.asarray(is_dummy, dtype=bool))]
        hits = sp.csr_matrix(sp.csr_matrix((scored != 0).astype(np.int64)) @ real.T)  # scored nodes per path
        present[hits.indices[hits.data >= needed[hits.indices]]] = True
    return present


def _hash_share(id_col: str, seed: int, share: float):
    """A seeded Bernoulli(share) of rows by a hash of their id: the same rows for a seed on any cluster."""
    if share >= 1.0:
        return F.lit(True)
    return F.pmod(F.xxhash64(F.col(id_col), F.lit(seed)), F.lit(_HASH_RANGE)) < F.lit(int(share * _HASH_RANGE))


def sample_rows(rows: DataFrame, n_rows: int, cap: int, seed: int, id_col: str = "id") -> DataFrame:
    """About ``min(n_rows, cap)`` of ``rows`` (``n_rows`` of them), chosen by a seeded hash of the id."""
    return rows.where(_hash_share(id_col, seed, cap / n_rows if n_rows > cap else 1.0))


def run_sampled_cv(
    sample: DataFrame,
    taxonomy: Taxonomy,
    vocab_size: int,
    grid: List[ModelSettings],
    n_folds: int,
    block_size: int = 4096,
    keep_out_of_fold: bool = False,
) -> List[List[Dict[str, object]]]:
    """Run every (grid point, fold) fit as one task; returns ``results[point][fold]`` (:func:`cv_task`).

    ``sample``: ``features, labels, fold`` rows over ``vocab_size`` terms --
    the labelled sample with its fold (:data:`KEPT_PART`: trained on by every
    fold, never held out), the unlabelled sample with fold :data:`UNLABELED_PART`.
    ``grid``: the settings of each grid point, lambda
    already rescaled. One Spark job packs the sample and runs the
    ``len(grid) x n_folds`` tasks next to it: with RDDs on a classic session
    (:func:`_tasks_on_rdd`), with DataFrames alone over Spark Connect
    (:func:`_tasks_on_frames`); the tasks are the same :func:`cv_task`.
    ``keep_out_of_fold``: each task also returns its held-out fold's
    out-of-fold set (:func:`cv_task`).
    """
    lookup, path_node = taxonomy.path_lookup(), taxonomy.path_node_matrix(sparse=True)
    packed = [
        (part, packed_label_frame(sample.where(F.col("fold") == part), lookup, path_node, block_size))
        for part in [*range(n_folds), KEPT_PART, UNLABELED_PART]
    ]
    runner = _tasks_on_frames if is_spark_connect(sample) else _tasks_on_rdd
    fold_linear = _fold_regressions(packed, runner, taxonomy, vocab_size, grid, n_folds, path_node.shape[1])
    # Grid points that differ only in how a path is scored (the family, its weight) share each fold's EM.
    groups: Dict[str, List[int]] = {}
    for i, point in enumerate(grid):
        groups.setdefault(em_key(point), []).append(i)
    tasks = [(members, f) for members in groups.values() for f in range(n_folds)]

    def run(parts, task):
        members, f = tasks[task]
        linears = [fold_linear.get((_regression_key(grid[i]), f)) for i in members]
        return cv_tasks(parts, f, taxonomy, vocab_size, [grid[i] for i in members], keep_out_of_fold, linears)

    out = runner(packed, len(tasks), run, vocab_size, path_node.shape[1])
    results: List[List[Dict[str, object]]] = [[{} for _ in range(n_folds)] for _ in grid]
    for task, scored in out:
        members, f = tasks[task]
        for i, r in zip(members, scored):
            results[i][f] = r
    return results


def _regression_key(settings: ModelSettings):
    """What a fold's softmax regression depends on besides the fold (None: the family has none)."""
    if settings.family in ("generative", "vmf"):  # vmf: its mixture follows the fold's EM (cv_tasks)
        return None
    return (settings.linear_c, settings.linear_weights, settings.parameter_dtype, settings.embedding_weight)


def _fold_regressions(packed, runner, taxonomy, vocab_size, grid, n_folds, n_nodes) -> Dict[tuple, object]:
    """Each fold's softmax regression, fitted once for every grid point that pools one: one task per
    (regression settings, fold), before the grid's tasks. ``{(key, fold): LinearTables}``."""
    keys = sorted({k for k in map(_regression_key, grid) if k is not None}, key=repr)
    if not keys:
        return {}
    by_key = {_regression_key(s): s for s in grid if _regression_key(s) is not None}
    tasks = [(key, f) for key in keys for f in range(n_folds)]

    def run(parts, task):
        from pcem_spark.model.linear_family import fit_linear_local

        key, f = tasks[task]
        train = [b for p, b in parts if p != f]
        return fit_linear_local(train, taxonomy, vocab_size, by_key[key])

    return {tasks[task]: linear for task, linear in runner(packed, len(tasks), run, vocab_size, n_nodes)}


def _tasks_on_rdd(packed, n_tasks: int, run, vocab_size: int, n_nodes: int) -> List[Tuple[int, Dict[str, object]]]:
    """``[(task, run(parts, task))]``: the sample gathered into one cached partition, paired with each task."""
    sc = packed[0][1].sparkSession.sparkContext
    rdds = [
        frame.rdd.map(lambda row, part=part: (part, block_from_row(row, vocab_size, n_nodes))) for part, frame in packed
    ]
    # One partition holding the whole (bounded) sample, computed once and read by every task.
    gathered = sc.union(rdds).coalesce(1).glom().cache()
    try:
        task_rdd = sc.parallelize(range(n_tasks), n_tasks)
        # one small dict of node counts per task comes back
        return gathered.cartesian(task_rdd).map(lambda pair: (pair[1], run(pair[0], pair[1]))).collect()
    finally:
        gathered.unpersist()


_TASK_RESULT = "task long, payload binary"


def _tasks_on_frames(packed, n_tasks: int, run, vocab_size: int, n_nodes: int) -> List[Tuple[int, Dict[str, object]]]:
    """:func:`_tasks_on_rdd` on the DataFrame API alone (Spark Connect: no RDD, no broadcast variable).

    The packed sample (bounded) is broadcast by a join hint to a one-row-per-
    partition frame of task numbers: each partition then holds one task and
    the whole sample, in the sample's order, and a ``mapInArrow`` runs it.
    No shuffle, so adaptive execution cannot merge the tasks into one.
    """
    spark = packed[0][1].sparkSession
    sample = None
    for part, frame in packed:
        tagged = frame.withColumn("_part", F.lit(part))
        sample = tagged if sample is None else sample.unionByName(tagged)
    pairs = spark.range(0, n_tasks, 1, n_tasks).withColumnRenamed("id", "_task").crossJoin(F.broadcast(sample))

    def run_partition(batches):
        import pickle

        import pyarrow as pa

        parts: Dict[int, list] = {}
        for batch in batches:
            for row in batch.to_pylist():
                parts.setdefault(row["_task"], []).append((row["_part"], block_from_row(row, vocab_size, n_nodes)))
        for task, blocks in parts.items():
            payload = pickle.dumps(run(blocks, task), protocol=pickle.HIGHEST_PROTOCOL)
            yield pa.RecordBatch.from_arrays(
                [pa.array([task], pa.int64()), pa.array([payload], pa.binary())], ["task", "payload"]
            )

    import pickle

    rows = pairs.mapInArrow(run_partition, _TASK_RESULT).collect()
    return [(int(r["task"]), pickle.loads(r["payload"])) for r in rows]


def with_weight(settings: ModelSettings, scale: float) -> ModelSettings:
    """``settings`` with EM-lambda multiplied by ``scale`` (the sample's :func:`rescaled_unlabeled_weight`)."""
    return replace(settings, unlabeled_weight=float(settings.unlabeled_weight) * scale)
