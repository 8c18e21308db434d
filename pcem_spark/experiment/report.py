"""The paper-shaped report of an experiment: Table 2 with significance marks, Figures 2-3, efficiency.

Everything here reads the rows of ``results.csv`` (dicts of strings or
numbers), so a report can be rebuilt from a CSV alone (``pcem report``).

* ``table2.md``: mean micro/macro F1 over seeds per method (rows, in the
  paper's order) and setting (columns) at one label rate. As in the paper, a
  method is marked when PCEM is significantly better than it in a two-sided
  paired t-test over the seeds both ran (``scipy.stats.ttest_rel``): ``†``
  p < 0.05, ``‡`` p < 0.001; a method significantly *better* than PCEM is
  marked ``(+)`` instead. The best mean of each column is bold.
* ``figure_<setting>.png``: micro and macro F1 against label rate for the EM
  methods (the paper's Figures 2 and 3).
* ``efficiency.png`` / ``efficiency.md``: mean train and predict seconds per method.

Plots need matplotlib (``pip install matplotlib``, the ``plots`` extra); without it the
tables are still written and a warning says what is missing.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from pcem_spark.core.methods import EM_METHODS as _EM_METHODS

__all__ = ["PAPERS", "significance_mark", "paired_p_value", "table2", "curves", "efficiency_table", "write_report"]

log = logging.getLogger(__name__)

# Table 2's row order (discriminative, NB, EM) and display names.
TABLE2_ORDER = [
    "lr",
    "svm",
    "hiercost",
    "flat-nb",
    "nbmc",
    "tdnb",
    "wdnb",
    "pcnb",
    "flat-em",
    "emmc",
    "tdem",
    "wdem",
    "pcem",
]
DISPLAY = {
    "lr": "LR",
    "svm": "SVM",
    "hiercost": "HierCost",
    "flat-nb": "Flat-NB",
    "nbmc": "NBMC",
    "tdnb": "TDNB",
    "wdnb": "WDNB",
    "pcnb": "PCNB",
    "flat-em": "Flat-EM",
    "emmc": "EMMC",
    "tdem": "TDEM",
    "wdem": "WDEM",
    "pcem": "PCEM",
}
# The EM methods (pcem_spark.core.methods.EM_METHODS) in Table 2's order: the figures' curves.
EM_METHODS = sorted(_EM_METHODS, key=lambda m: (TABLE2_ORDER.index(m) if m in TABLE2_ORDER else len(TABLE2_ORDER), m))

# The paper's Table 2, 20NG, 1% (micro, macro) per setting.
PAPER_20NG = {
    "labeled": {
        "lr": (52.02, 42.41),
        "svm": (48.33, 39.73),
        "hiercost": (48.12, 40.89),
        "flat-nb": (53.39, 39.94),
        "nbmc": (46.99, 38.02),
        "tdnb": (55.50, 42.16),
        "wdnb": (53.66, 41.53),
        "pcnb": (58.33, 48.04),
        "flat-em": (63.21, 49.30),
        "emmc": (66.56, 52.95),
        "tdem": (62.14, 46.89),
        "wdem": (62.71, 48.85),
        "pcem": (70.73, 60.02),
    },
    "dataless": {
        "lr": (44.16, 31.51),
        "svm": (41.70, 30.24),
        "hiercost": (43.26, 32.30),
        "flat-nb": (47.29, 30.67),
        "nbmc": (43.24, 28.82),
        "tdnb": (48.06, 31.02),
        "wdnb": (47.19, 31.02),
        "pcnb": (52.14, 38.50),
        "flat-em": (55.13, 37.40),
        "emmc": (59.50, 41.56),
        "tdem": (55.62, 37.14),
        "wdem": (47.19, 31.02),
        "pcem": (63.54, 48.56),
    },
}


PAPERS = {"20ng": PAPER_20NG}


def significance_mark(p: Optional[float]) -> str:
    """The paper's marks: ``‡`` p < 0.001, ``†`` p < 0.05, else nothing."""
    if p is None or not math.isfinite(p):
        return ""
    if p < 0.001:
        return "‡"
    if p < 0.05:
        return "†"
    return ""


def paired_p_value(a: Dict[int, float], b: Dict[int, float]) -> Optional[float]:
    """Two-sided paired t-test p-value over the seeds present in both (None with < 2 pairs).

    Identical score lists give p = 1 (no evidence of a difference) and a
    constant non-zero difference p = 0, instead of scipy's NaN / warning.
    """
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    x = np.array([a[s] for s in seeds])
    y = np.array([b[s] for s in seeds])
    d = x - y
    if np.allclose(d, d[0]):
        # No spread in the differences: the t statistic is 0/0 (identical
        # scores, no evidence) or infinite (a constant non-zero gap).
        return 1.0 if np.isclose(d[0], 0.0) else 0.0
    return float(stats.ttest_rel(x, y).pvalue)


def _scores(rows, setting: str, rate: float, metric: str) -> Dict[str, Dict[int, float]]:
    out: Dict[str, Dict[int, float]] = {}
    for r in rows:
        if r["setting"] == setting and math.isclose(float(r["rate"]), rate):
            out.setdefault(r["method"], {})[int(r["seed"])] = 100 * float(r[metric])
    return out


def table2(
    rows: List[dict],
    rate: float = 0.01,
    reference: str = "pcem",
    paper: Optional[Dict[str, Dict[str, Tuple[float, float]]]] = None,
) -> str:
    """Markdown shaped like the paper's Table 2 at one label rate (mean over seeds)."""
    settings = [
        s
        for s in ("labeled", "dataless")
        if any(r["setting"] == s and math.isclose(float(r["rate"]), rate) for r in rows)
    ]
    if not settings:
        return f"(no runs at label rate {100 * rate:g}%)\n"
    methods_present = {r["method"] for r in rows if math.isclose(float(r["rate"]), rate)}
    order = [m for m in TABLE2_ORDER if m in methods_present] + sorted(methods_present - set(TABLE2_ORDER))
    head = "| method | " + " | ".join(f"{s} micro | {s} macro" for s in settings) + " |"
    if paper:
        head += " " + " | ".join(f"paper {s} micro / macro" for s in settings) + " |"
    cols = 1 + 2 * len(settings) + (len(settings) if paper else 0)
    ref = DISPLAY.get(reference, reference)
    lines = [
        f"F1 (%) at label rate {100 * rate:g}%: mean over seeds (n = number of seeds). "
        f"† / ‡: {ref} is better with p < 0.05 / p < 0.001 (two-sided paired t-test over the same "
        f"seeds); (+): significantly better than {ref} (p < 0.05). Bold: best in the column.",
        "",
        head,
        "|" + "---|" * cols,
    ]
    data = {s: {metric: _scores(rows, s, rate, metric) for metric in ("micro_f1", "macro_f1")} for s in settings}
    best = {
        (s, metric): max((np.mean(list(v.values())) for v in data[s][metric].values() if v), default=None)
        for s in settings
        for metric in ("micro_f1", "macro_f1")
    }
    for m in order:
        cells = []
        for s in settings:
            for metric in ("micro_f1", "macro_f1"):
                sc = data[s][metric].get(m)
                if not sc:
                    cells.append("–")
                    continue
                mean = np.mean(list(sc.values()))
                mark = ""
                ref_sc = data[s][metric].get(reference, {})
                if m != reference and ref_sc:
                    p = paired_p_value(sc, ref_sc)
                    ref_mean = np.mean([ref_sc[k] for k in sc if k in ref_sc]) if set(sc) & set(ref_sc) else None
                    if ref_mean is not None and ref_mean > np.mean([sc[k] for k in sc if k in ref_sc]):
                        mark = significance_mark(p)
                    elif p is not None and p < 0.05:
                        mark = "(+)"
                cell = f"{mark}{mean:.2f}"
                cells.append(f"**{cell}**" if np.isclose(mean, best[(s, metric)]) else cell)
        name = DISPLAY.get(m, m)
        n = max((len(data[s]["micro_f1"].get(m, {})) for s in settings), default=0)
        line = f"| {name} (n={n}) | " + " | ".join(cells) + " |"
        if paper:
            line += (
                " "
                + " | ".join(
                    (f"{paper[s][m][0]:.2f} / {paper[s][m][1]:.2f}" if m in paper.get(s, {}) else "–") for s in settings
                )
                + " |"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"


def curves(rows: List[dict], setting: str, methods: Sequence[str] = EM_METHODS):
    """{method: (rates, micro means, macro means)} over the label rates run for ``setting``."""
    out = {}
    for m in methods:
        by_rate: Dict[float, List[Tuple[float, float]]] = {}
        for r in rows:
            if r["setting"] == setting and r["method"] == m:
                by_rate.setdefault(float(r["rate"]), []).append(
                    (100 * float(r["micro_f1"]), 100 * float(r["macro_f1"]))
                )
        if by_rate:
            rates = sorted(by_rate)
            out[m] = (
                np.array(rates) * 100,
                np.array([np.mean([v[0] for v in by_rate[x]]) for x in rates]),
                np.array([np.mean([v[1] for v in by_rate[x]]) for x in rates]),
            )
    return out


def efficiency_table(rows: List[dict], rate: float = 0.01, setting: str = "labeled") -> str:
    """Mean train / predict seconds per method (one setting and rate)."""
    sel = [r for r in rows if r["setting"] == setting and math.isclose(float(r["rate"]), rate)]
    present = {r["method"] for r in sel}
    order = [m for m in TABLE2_ORDER if m in present] + sorted(present - set(TABLE2_ORDER))
    lines = [
        f"Seconds per run, {setting}, label rate {100 * rate:g}% (mean over seeds; train includes "
        "EM iterations, predict = scoring and evaluating the test split).",
        "",
        "| method | train s | predict s | EM iterations |",
        "|---|---|---|---|",
    ]
    for m in order:
        rs = [r for r in sel if r["method"] == m]
        lines.append(
            f"| {DISPLAY.get(m, m)} | {np.mean([float(r['train_seconds']) for r in rs]):.2f} | "
            f"{np.mean([float(r['predict_seconds']) for r in rs]):.2f} | "
            f"{np.mean([float(r.get('n_iter') or 0) for r in rs]):.1f} |"
        )
    return "\n".join(lines) + "\n"


def _plot_curves(rows, setting: str, path: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(rows, setting)
    if not data or max(len(v[0]) for v in data.values()) < 2:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m, (rates, mic, mac) in data.items():
        style = dict(marker="o", linewidth=2.5 if m == "pcem" else 1.5)
        axes[0].plot(rates, mic, label=DISPLAY.get(m, m), **style)
        axes[1].plot(rates, mac, label=DISPLAY.get(m, m), **style)
    for ax, name in zip(axes, ("Micro-F1 (%)", "Macro-F1 (%)")):
        ax.set_xscale("log")
        ax.set_xticks(sorted({x for v in data.values() for x in v[0]}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("label rate (%)" if setting == "labeled" else "weakly labelled share of training set (%)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"20NG-style evaluation, {setting}: EM methods vs label rate")
    fig.tight_layout()
    _save_figure(fig, path)
    plt.close(fig)
    return True


def _save_figure(fig, path: str) -> None:
    """PNG bytes in memory, then one atomic replace: a killed report never leaves a truncated image."""
    import io

    from pcem_spark.io.outputs import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


def _plot_efficiency(rows, path: str, rate: float = 0.01, setting: str = "labeled") -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["setting"] == setting and math.isclose(float(r["rate"]), rate)]
    present = {r["method"] for r in sel}
    order = [m for m in TABLE2_ORDER if m in present]
    if not order:
        return False
    secs = [np.mean([float(r["train_seconds"]) for r in sel if r["method"] == m]) for m in order]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.bar([DISPLAY[m] for m in order], secs, color=["C3" if m in ("pcnb", "pcem") else "C0" for m in order])
    ax.set_ylabel("train seconds (mean over seeds)")
    ax.set_title(f"Training time per method ({setting}, {100 * rate:g}% labels)")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    _save_figure(fig, path)
    plt.close(fig)
    return True


def write_report(rows: List[dict], out_dir: str, rate: float = 0.01, paper=None) -> List[str]:
    """Write table2.md, efficiency.md and (with matplotlib) the PNG figures; returns the files written."""
    written = []
    from pcem_spark.io.outputs import atomic_write_text

    atomic_write_text(os.path.join(out_dir, "table2.md"), table2(rows, rate, paper=paper))
    written.append("table2.md")
    atomic_write_text(os.path.join(out_dir, "efficiency.md"), efficiency_table(rows, rate))
    written.append("efficiency.md")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log.warning("matplotlib is not installed: figures skipped (pip install matplotlib, the plots extra)")
        return written
    for setting in ("labeled", "dataless"):
        if _plot_curves(rows, setting, os.path.join(out_dir, f"figure_{setting}.png")):
            written.append(f"figure_{setting}.png")
    if _plot_efficiency(rows, os.path.join(out_dir, "efficiency.png"), rate):
        written.append("efficiency.png")
    log.info("report written to %s: %s", out_dir, ", ".join(written))
    return written
