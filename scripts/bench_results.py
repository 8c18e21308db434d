"""What the corpus benchmarks share: logging, and a ``results.csv`` written after every cell so a stopped run
resumes where it was (the cells already in it are skipped)."""

from __future__ import annotations

import csv
import logging
import os
from typing import Dict, List, Sequence, Tuple

__all__ = ["quiet_logging", "read_results", "write_results"]


def quiet_logging() -> None:
    """INFO logging with timestamps; py4j's and pyspark's at WARNING (they log every call)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def read_results(out_dir: str) -> Tuple[str, List[Dict[str, object]]]:
    """``(OUT_DIR/results.csv, its rows)``; no rows when there is none yet (``out_dir`` is made)."""
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "results.csv")
    rows: List[Dict[str, object]] = []
    if os.path.exists(csv_path):
        with open(csv_path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    return csv_path, rows


def write_results(csv_path: str, rows: Sequence[Dict[str, object]], fields: Sequence[str]) -> None:
    """``rows`` to ``csv_path`` with the columns ``fields``, whole or not at all (a temporary file renamed)."""
    tmp = csv_path + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields), restval="")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, csv_path)
