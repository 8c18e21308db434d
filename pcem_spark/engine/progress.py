"""Progress of a long Spark action, in the log: tasks done / total and the rows they stand for."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

__all__ = ["log_progress"]

log = logging.getLogger(__name__)


def _task_counts(tracker, group: str):
    """(tasks done, tasks total) over the stages of the jobs in job group ``group``."""
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


@contextmanager
def log_progress(spark, what: str, n_rows: Optional[int] = None, interval: float = 10.0) -> Iterator[None]:
    """Log ``what``'s progress every ``interval`` seconds while the block runs Spark jobs.

    The jobs started inside the block are tagged with a job group; a daemon
    thread polls Spark's status tracker (no listener, no extra job) and logs
    tasks done / total and, given ``n_rows``, the approximate rows done.
    Over Spark Connect (no status tracker on the client) the server's
    progress messages are logged instead (:func:`_connect_progress`).
    """
    from pcem_spark.engine.session import is_spark_connect

    if is_spark_connect(spark):
        with _connect_progress(spark, what, n_rows, interval):
            yield
        return
    sc = spark.sparkContext
    group = f"pcem-progress-{what}-{time.time_ns()}"
    sc.setJobGroup(group, what, interruptOnCancel=False)
    stop = threading.Event()
    t0 = time.perf_counter()

    def poll():
        while not stop.wait(interval):
            try:
                done, total = _task_counts(sc.statusTracker(), group)
            except Exception:  # the context is stopping: nothing to report
                return
            if total:
                rows = f", ~{int(n_rows * done / total):,} of {n_rows:,} rows" if n_rows else ""
                log.info("%s: %d/%d tasks done%s, %.0fs", what, done, total, rows, time.perf_counter() - t0)

    thread = threading.Thread(target=poll, name=f"progress-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1.0)
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


@contextmanager
def _connect_progress(spark, what: str, n_rows: Optional[int], interval: float) -> Iterator[None]:
    """:func:`log_progress` over Spark Connect: a progress handler fed by the server's execution progress
    (``SparkSession.registerProgressHandler``), logging at most once per ``interval`` seconds."""
    t0 = time.perf_counter()
    last = [t0]

    def handler(stages, inflight_tasks, operation_id, done):
        now = time.perf_counter()
        if done or now - last[0] < interval:
            return
        last[0] = now
        stages = list(stages or [])
        finished = sum(s.num_completed_tasks for s in stages)
        total = sum(s.num_tasks for s in stages)
        if total:
            rows = f", ~{int(n_rows * finished / total):,} of {n_rows:,} rows" if n_rows else ""
            log.info("%s: %d/%d tasks done%s, %.0fs", what, finished, total, rows, now - t0)

    spark.registerProgressHandler(handler)
    try:
        yield
    finally:
        spark.removeProgressHandler(handler)
