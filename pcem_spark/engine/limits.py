"""Limits of the driver that a model's size can hit, checked before the job runs."""

from __future__ import annotations

import numpy as np

from pcem_spark.errors import InputError

__all__ = ["ResultSizeError", "byte_size", "max_result_size", "check_result_size"]


class ResultSizeError(InputError):
    """A collect would exceed ``spark.driver.maxResultSize``: a setting to raise, not a retry."""


def _result_size_setting(source) -> str:
    """``spark.driver.maxResultSize`` as written, from a SparkContext or a SparkSession (classic or Connect)."""
    if hasattr(source, "getConf"):
        return source.getConf().get("spark.driver.maxResultSize", "1g")
    try:
        return source.conf.get("spark.driver.maxResultSize", "1g") or "1g"
    except Exception:  # noqa: BLE001 - a session that cannot read it: Spark's default
        return "1g"


def max_result_size(sc) -> int:
    """``spark.driver.maxResultSize`` in bytes (0 = unlimited; Spark's default is 1g); ``sc`` a SparkContext or a
    SparkSession (a Spark Connect one included: the limit is the server's driver's)."""
    raw = _result_size_setting(sc)
    try:
        return int(sc._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(raw))
    except Exception:  # noqa: BLE001 - no JVM helper (e.g. a mocked context, Spark Connect): parse it here
        return byte_size(raw)


def byte_size(raw: str) -> int:
    """A Spark size setting in bytes, as Spark writes them (``"64m"``, ``"1g"``, ``"67108864b"``, ``"4096"``)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = str(raw).strip().lower().rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _human(n_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n_bytes < 1024 or unit == "TiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024.0
    return f"{n_bytes:.1f} TiB"


def check_result_size(sc, n_bytes: float, what: str) -> None:
    """Refuse, before the job runs, a collect of about ``n_bytes`` that Spark would abort.

    Spark aborts a stage whose serialized task results pass
    ``spark.driver.maxResultSize`` only after computing them -- minutes into
    an EM pass, with a message about "serialized results" that does not say
    which setting the model size needs. ``what`` names the data
    ("the per-path sums of 20 paths x 20,000 terms").
    """
    limit = max_result_size(sc)
    # Pickling and the records' framing add a little: 10% headroom.
    needed = int(n_bytes * 1.1) + (1 << 20)
    if limit > 0 and needed > limit:
        suggest = 1 << max(30, int(np.ceil(np.log2(needed))))
        raise ResultSizeError(
            f"{what} take about {_human(n_bytes)} on the driver, more than spark.driver.maxResultSize="
            f"{_result_size_setting(sc)} ({_human(limit)}): raise it, e.g. "
            f"--conf spark.driver.maxResultSize={suggest >> 30}g (and spark.driver.memory to at least 3x that), "
            f"or shrink the model (features.max_vocab, model.parameter_dtype=float32)"
        )
