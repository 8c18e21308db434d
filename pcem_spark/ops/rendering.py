"""``pcem inspect``'s report as Markdown, HTML and a PNG chart: presentation only, from the dict
that :mod:`pcem_spark.ops.inspection` builds."""

from __future__ import annotations

import html
import logging
import re
import unicodedata
from typing import Dict, List, Optional, Tuple

import numpy as np

__all__ = [
    "NONE_LABEL",
    "visible",
    "md_text",
    "html_text",
    "render_model_markdown",
    "render_confusion_markdown",
    "render_html",
    "render_png",
    "in_taxonomy_lines",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------- renderers
NONE_LABEL = "(none)"  # a predicted path that stops above the level (or no prediction)


def in_taxonomy_lines(record) -> List[str]:
    """The report's lines on the in_taxonomy score: its labelled documents' distribution and threshold."""
    if not record:
        return []
    if "labelled_quantiles" not in record:
        why = record.get("reason") or "no labelled document to set a threshold on"
        return [f"- in_taxonomy: no suggested threshold ({why})"]
    q = record["labelled_quantiles"]
    spread = ", ".join(f"{float(k):.0%} {v:.3f}" for k, v in q.items())
    n, kept = record.get("labelled_documents", "?"), record.get("kept_in_scope", 0.95)
    return [
        f"- in_taxonomy (nats per token) of the {n} labelled documents: {spread}; "
        f"suggested --min-in-taxonomy {record['suggested_threshold']:.3f} (keeps {kept:.0%} of them); "
        f"unknown tokens {100 * record.get('unknown_rate', 0):.1f}% of the corpus's, "
        f"{100 * record.get('labelled_unknown_rate', 0):.1f}% of the labelled documents'"
    ]


def _fmt(x, digits: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


# Characters a label or term may hold that must never act in a report: control characters (NUL, escape,
# newlines), the bidirectional controls that reorder what is displayed (a right-to-left override can make
# "exe.txt" read "txt.exe"), and the line / paragraph separators.
_INVISIBLE = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
# Markdown's syntax that can act inside a line (CommonMark backslash escapes): link and image brackets, code
# spans, emphasis, strikethrough, table pipes, headings. List markers act only at the start: see md_text.
_MD_SYNTAX = set("\\`*_[]|~#")
_LIST_START = re.compile(r"^(\d+)([.)])")


def visible(text: object) -> str:
    """``text`` with control, bidirectional-control and separator characters shown as ``<U+XXXX>``."""
    return "".join(
        f"<U+{ord(c):04X}>" if ord(c) in _INVISIBLE or unicodedata.category(c) == "Cc" else c for c in str(text)
    )


def md_text(text: object) -> str:
    r"""``text`` as literal Markdown text: every syntax character backslash-escaped, HTML's ``& < >`` as
    entities, invisible characters shown (:func:`visible`). Nothing in it can become a link, an image, a
    table cell, markup or script.

    >>> print(md_text("[x](javascript:alert(1)) <img src=x> a|b"))
    \[x\](javascript:alert(1)) &lt;img src=x&gt; a\|b
    >>> print(md_text("- 1. item"), md_text("1. item"))
    \- 1. item 1\. item
    """
    escaped = "".join("\\" + c if c in _MD_SYNTAX else c for c in visible(text))
    if escaped[:1] in ("+", "-"):
        escaped = "\\" + escaped
    escaped = _LIST_START.sub(r"\1\\\2", escaped)
    return html.escape(escaped, quote=False)


def html_text(text: object) -> str:
    """``text`` as literal HTML text or attribute value (quotes escaped), invisible characters shown."""
    return html.escape(visible(text), quote=True)


_md_cell = md_text


def render_model_markdown(report: Dict[str, object]) -> str:
    """``model.md``: summary, a legend of the columns, then one table row per node in tree order."""
    ms, ts, mass, lo = report["model_settings"], report["training_summary"], report["mass"], report["log_odds"]
    lines = [f"# Model inspection: {md_text(report['model'] or report['method'])}", ""]
    lines.append(
        f"- method: **{report['method']}**; smoothing {ms['smoothing']:g}, unlabelled weight (lambda) "
        f"{ms['unlabeled_weight']}, path weight {ms['path_weight']}, doc_length {ms['doc_length']:g}, "
        f"posterior_top_k {ms['posterior_top_k']}"
    )
    lines.append(
        f"- vocabulary: {report['vocabulary_size']:,} terms; {report['n_components']:,} components; "
        f"{report['nnz_parameters']:,} non-zero word parameters"
    )
    tx = report["taxonomy"]
    lines.append(
        f"- taxonomy: {tx['nodes']} nodes, {tx['leaves']} leaves, depth {tx['depth']}"
        + (f" ({tx['padded_nodes_hidden']} padding nodes hidden)" if tx["padded_nodes_hidden"] else "")
    )
    if ts:
        parts = []
        for key, label in (
            ("n_labeled", "labelled documents"),
            ("n_unlabeled", "unlabelled documents"),
            ("n_iter", "EM iterations"),
            ("converged", "converged"),
            ("final_loglik", "final log-likelihood"),
            ("em_seconds", "EM seconds"),
        ):
            if key in ts:
                v = ts[key]
                parts.append(f"{label} {v:,.1f}" if isinstance(v, float) else f"{label} {v}")
        lines.append("- training: " + ", ".join(parts))
        if ts.get("tuning_chosen"):
            lines.append(f"- cross-validation chose: {ts['tuning_chosen']}")
        cal = ts.get("calibration")
        if cal and cal.get("temperature") is not None:
            ece = (
                f"; out-of-fold node-marginal ECE {cal['ece_uncalibrated']:.3f} -> {cal['ece_calibrated']:.3f}"
                if "ece_calibrated" in cal
                else ""
            )
            kind = str(cal.get("method", "")).partition("+")[2]
            then = f" then {'an' if kind[:1] in 'aeiou' else 'a'} {kind} map" if kind else ""
            spread = (
                f"; uncertain by about +-{cal['probability_spread']:.3f} ("
                f"{'binomial error' if cal.get('probability_spread_basis') == 'binomial' else 'bootstrap'} of "
                f"{cal.get('documents', cal.get('out_of_fold_scored', '?'))} labelled documents)"
                if "probability_spread" in cal
                else ""
            )
            lines.append(f"- probabilities calibrated: temperature {cal['temperature']:.3g}{then}{ece}{spread}")
        elif cal:
            lines.append(f"- probabilities uncalibrated (over-confident): {cal.get('reason')}")
        lines += in_taxonomy_lines(ts.get("in_taxonomy"))
    split = mass["source"] == "training_summary"
    docs_known, exp_docs_known = mass["labeled_documents_known"], mass.get("expected_documents_known", False)
    lines += ["", "Columns:", ""]
    if docs_known:
        lines.append("- **labelled docs**: labelled training documents whose path passes through the node")
    if exp_docs_known:
        lines.append(
            "- **expected docs**: unlabelled training documents expected at the node by the last "
            "E-step (expected mass / lambda)"
        )
    if split:
        lines.append(f"- **labelled mass**, **expected mass**: {mass['note']}")
    else:
        lines.append(f"- **word mass**: {mass['note']}")
    lines.append(
        f"- **prior**: sum of the path priors through the node (sums per depth: "
        f"{', '.join(f'{d}: {p:g}' for d, p in mass['prior_sum_per_depth'].items())})"
    )
    lines.append(
        f"- **top terms vs siblings**, ranked by {lo['ranked_by']}, shown with their log-odds: "
        f"{lo['definition']} (s = {lo['smoothing']:g})"
    )
    weighted = report.get("regression")
    if weighted:
        lines.append(
            f"- **top weighted terms vs siblings** ({weighted['family']} family, generative weight "
            f"{weighted['generative_weight']:g}), shown with their contrast: {weighted['definition']}"
        )
    lines.append("")
    header = (
        ["depth", "node", "parent"]
        + (["labelled docs"] if docs_known else [])
        + (["expected docs"] if exp_docs_known else [])
        + (["labelled mass", "expected mass"] if split else ["word mass"])
        + ["prior", "top terms vs siblings"]
        + (["top weighted terms vs siblings"] if weighted else [])
    )
    lines.append("| " + " | ".join(header) + " |")
    n_text = 2 if weighted else 1  # the term columns, left-aligned
    lines.append("|---|---|---|" + "---:|" * (len(header) - 3 - n_text) + "---|" * n_text)
    for n in report["nodes"]:
        indent = "&nbsp;&nbsp;" * (n["depth"] - 1)
        terms = ", ".join(f"{t['term']} ({t['log_odds']:+.1f})" for t in n["top_terms"]) or (
            "(no siblings)" if n["n_siblings"] == 0 else "(no terms)"
        )
        row = [
            str(n["depth"]),
            indent + _md_cell(n["node"]) + ("" if n["leaf"] else " /"),
            _md_cell(n["parent"] or "–"),
        ]
        if docs_known:
            row.append(_fmt(n["labeled_documents"]))
        if exp_docs_known:
            row.append(_fmt(n["expected_documents"], 0))
        row += [_fmt(n["labeled_mass"]), _fmt(n["expected_mass"])] if split else [_fmt(n["total_mass"], 0)]
        row += [f"{n['prior']:.4f}", _md_cell(terms)]
        if weighted:
            row.append(
                _md_cell(
                    ", ".join(f"{t['term']} ({t['contrast']:+.2f})" for t in n["top_weighted_terms"])
                    or ("(no siblings)" if n["n_siblings"] == 0 else "(no terms)")
                )
            )
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_confusion_markdown(conf: Dict[str, object]) -> str:
    """``confusion.md``: per level, accuracy, the table (rows = true, columns = predicted) and the largest errors."""
    lines = [
        "# Confusion per level",
        "",
        f"{conf['n_scored']:,} predictions with true labels scored"
        + (f"; {conf['n_without_labels']:,} without labels not scored" if conf["n_without_labels"] else "")
        + ". Rows: true node at the level; columns: predicted node (numbered as the rows; "
        f"`{NONE_LABEL}`: the predicted path stops above the level). Only documents whose true path "
        "reaches the level are counted (as `pcem evaluate`'s level accuracy).",
        "",
    ]
    for d, lv in conf["levels"].items():
        acc = "n/a" if lv["accuracy"] is None else f"{100 * lv['accuracy']:.2f}%"
        lines += [f"## Level {d}", "", f"accuracy {acc} ({lv['correct']:,} of {lv['documents']:,})", ""]
        if lv["unknown_nodes"]:
            lines += [f"names not in the taxonomy at this level: {', '.join(map(md_text, lv['unknown_nodes']))}", ""]
        nodes = lv["nodes"]
        cols = [str(i + 1) for i in range(len(nodes))] + [NONE_LABEL]
        lines.append("| true \\ predicted | " + " | ".join(cols) + " | recall |")
        lines.append("|---|" + "---:|" * (len(cols) + 1))
        for i, name in enumerate(nodes):
            row = lv["counts"][i]
            rec = lv["recall"][name]
            cells = [f"**{v}**" if j == i and v else (str(v) if v else "·") for j, v in enumerate(row)]
            lines.append(
                f"| {i + 1}. {_md_cell(name)} | "
                + " | ".join(cells)
                + " | "
                + ("–" if rec is None else f"{100 * rec:.0f}%")
                + " |"
            )
        if lv["largest_errors"]:
            lines += ["", "largest off-diagonal cells:", ""]
            for e in lv["largest_errors"]:
                lines.append(
                    f"- {_md_cell(e['true'])} → {_md_cell(e['predicted'])}: {e['count']:,} "
                    f"({100 * e['share_of_true']:.0f}% of {_md_cell(e['true'])})"
                )
        lines.append("")
    return "\n".join(lines)


_HTML_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} .meta{color:#555;margin:.2em 0}
.tree{margin-top:1em} .row{display:flex;align-items:center;gap:.6em;padding:2px 0;border-bottom:1px solid #f0f0f0}
.name{width:20em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.inner .name{font-weight:600}
.bar{width:24em;height:14px;background:#f4f4f4;position:relative;flex:none}
.bar span{position:absolute;top:0;height:100%}
.lab{background:#1f77b4} .exp{background:#9ecae1}
.num{width:15em;font-variant-numeric:tabular-nums;color:#333;flex:none}
.terms{color:#555;font-size:.92em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;flex:1}
.key span{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 .8em}
"""


def _html_amounts(report: Dict[str, object], n: Dict[str, object]) -> Tuple[float, float, str]:
    """(labelled, expected, unit) of a node for the HTML bars: documents when known, else masses / words."""
    mass = report["mass"]
    if mass["source"] != "training_summary":
        return 0.0, n["total_mass"] or 0.0, "words"
    if mass["labeled_documents_known"] and mass.get("expected_documents_known"):
        return float(n["labeled_documents"] or 0), n["expected_documents"] or 0.0, "docs"
    return n["labeled_mass"] or 0.0, n["expected_mass"] or 0.0, "mass"


def render_html(report: Dict[str, object]) -> str:
    """``taxonomy.html``: an indented tree, one bar per node sized by its training documents (labelled +
    expected; masses when documents are not known) relative to the largest node at its depth, the
    labelled part dark and the expected part light; top terms as text and (with their scores and
    counts) as a tooltip. Self-contained: inline CSS, no script, no external resource."""
    esc = html_text
    nodes = report["nodes"]
    split = report["mass"]["source"] == "training_summary"
    amounts = [_html_amounts(report, n) for n in nodes]
    unit = amounts[0][2] if amounts else "mass"
    max_at: Dict[int, float] = {}
    for n, (lab, exp, _) in zip(nodes, amounts):
        max_at[n["depth"]] = max(max_at.get(n["depth"], 0.0), lab + exp)
    what = {
        "docs": "training documents (labelled + expected unlabelled)",
        "mass": "training mass",
        "words": "word mass",
    }[unit]
    out = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>pcem inspect: {esc(str(report['model'] or report['method']))}</title>",
        f"<style>{_HTML_STYLE}</style></head><body>",
        f"<h1>Model inspection: {esc(str(report['model'] or report['method']))}</h1>",
        f"<p class='meta'>method <b>{esc(report['method'])}</b>, {report['vocabulary_size']:,} terms, "
        f"{report['taxonomy']['nodes']} nodes / {report['taxonomy']['leaves']} leaves, depth "
        f"{report['taxonomy']['depth']}</p>",
        f"<p class='meta'>mass ({esc(report['mass']['unit'])}): {esc(report['mass']['note'])}</p>",
        f"<p class='meta'>bars: {what}, relative to the largest node at the same depth"
        + (
            "<span class='key'><span class='lab'></span>labelled<span class='exp'></span>expected</span>"
            if split
            else ""
        )
        + f"; text: top terms against the siblings (ranked by "
        f"{esc(report['log_odds']['ranked_by'])}, s = {report['log_odds']['smoothing']:g}); hover a row for "
        "their scores and counts</p>",
        "<div class='tree'>",
    ]
    for n, (lab, exp, _) in zip(nodes, amounts):
        scale = max_at[n["depth"]] or 1.0
        width = 100.0 * (lab + exp) / scale
        lab_w = 100.0 * lab / scale
        # A labelled part, however small, stays visible (min 2px).
        bar = (
            f"<span class='lab' style='left:0;width:{lab_w:.2f}%;min-width:2px'></span>" if lab > 0 else ""
        ) + f"<span class='exp' style='left:{lab_w:.2f}%;width:{width - lab_w:.2f}%'></span>"
        if unit == "docs":
            num = f"{_fmt(n['labeled_documents'])} + {_fmt(n['expected_documents'], 0)} docs · p {n['prior']:.3f}"
        elif unit == "mass":
            num = f"{_fmt(n['labeled_mass'])} + {_fmt(n['expected_mass'])} · p {n['prior']:.3f}"
        else:
            num = f"{_fmt(n['total_mass'], 0)} words · p {n['prior']:.3f}"
        terms = ", ".join(t["term"] for t in n["top_terms"]) or (
            "(no siblings)" if n["n_siblings"] == 0 else "(no terms)"
        )
        tip = "\n".join(
            f"{t['term']}: llr {t['llr']:.1f}, log-odds {t['log_odds']:+.2f}, count {t['count']:g} "
            f"vs siblings {t['sibling_count']:g}"
            for t in n["top_terms"]
        )
        cls = "row inner" if not n["leaf"] else "row"
        pad = 1.4 * (n["depth"] - 1)
        out.append(
            f"<div class='{cls}' title='{esc(tip)}'>"
            f"<div class='name' style='padding-left:{pad:.1f}em'>{esc(n['node'])}</div>"
            f"<div class='bar'>{bar}</div><div class='num'>{esc(num)}</div>"
            f"<div class='terms'>{esc(terms)}</div></div>"
        )
    out.append("</div></body></html>")
    return "\n".join(out) + "\n"


def render_png(report: Dict[str, object]) -> Optional[bytes]:
    """``taxonomy.png`` bytes: horizontal bars per node in tree order (each top-level subtree shaded),
    labelled documents (or mass) on the left panel, expected unlabelled documents (or mass) on the
    right, the top 3 terms beside; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: taxonomy.png skipped (pip install matplotlib, the plots extra)")
        return None
    import io

    nodes = report["nodes"]
    split = report["mass"]["source"] == "training_summary"
    names = [visible(n["node"]) for n in nodes]
    y = np.arange(len(nodes))[::-1]
    colours = [f"C{min(n['depth'] - 1, 9)}" for n in nodes]
    height = max(3.0, 0.28 * len(nodes) + 1.2)
    mass = report["mass"]
    if not split:
        panels = [("word mass (no labelled / expected split in this model)", "total_mass")]
    else:
        panels = [
            (
                "labelled documents" if mass["labeled_documents_known"] else "labelled mass",
                "labeled_documents" if mass["labeled_documents_known"] else "labeled_mass",
            ),
            (
                "expected unlabelled documents (last E-step)"
                if mass.get("expected_documents_known")
                else "expected mass",
                "expected_documents" if mass.get("expected_documents_known") else "expected_mass",
            ),
        ]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 3.5, height), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (title, key) in zip(axes, panels):
        vals = np.array([n[key] or 0.0 for n in nodes])
        ax.barh(y, vals, color=colours, height=0.75)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        for yi, v in zip(y, vals):
            ax.text(v, yi, f" {v:,.0f}", va="center", fontsize=7, color="#333")
        ax.set_xlim(0, max(vals.max(initial=0.0), 1e-9) * 1.15)
    # Alternate shading per top-level subtree, so each parent is seen with its children.
    top_rows = [i for i, n in enumerate(nodes) if n["depth"] == 1] + [len(nodes)]
    for g, (a, b) in enumerate(zip(top_rows, top_rows[1:])):
        if g % 2 == 0:
            for ax in axes:
                ax.axhspan(y[b - 1] - 0.5, y[a] + 0.5, color="#f2f2f2", zorder=0)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(names, fontsize=8)
    for label, n in zip(axes[0].get_yticklabels(), nodes):
        if not n["leaf"]:
            label.set_fontweight("bold")
    for ax in axes:
        ax.set_ylim(-0.6, len(nodes) - 0.4)
        ax.set_axisbelow(True)
    last = axes[-1]
    xmax = last.get_xlim()[1]
    for yi, n in zip(y, nodes):
        terms = visible(", ".join(t["term"] for t in n["top_terms"][:3]))
        last.text(xmax * 1.02, yi, terms, va="center", fontsize=7, color="#444", clip_on=False)
    fig.suptitle(
        f"{report['model'] or report['method']} ({report['method']}): training documents per node; "
        "right: top terms vs siblings",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 0.8 if len(panels) > 1 else 0.75, 0.97))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
