"""A short-text, many-leaf corpus from installed Python packages: each function's or class's docstring summary.

A benchmark corpus of another domain than news, with a two-level taxonomy of a hundred or more leaves and
texts of about ten words (the regime of queries and titles). Every ``.py`` file of the named packages in this
interpreter's site-packages is parsed with :mod:`ast` (nothing is imported or run); each public function,
method or class with a docstring gives one document:

* ``text``: the docstring's first sentence (up to the first blank line or ``". "``), at least 3 words;
* ``labels``: ``[package, package.subpackage]`` -- ``["scipy", "scipy.sparse"]`` for
  ``scipy/sparse/linalg/_isolve.py``, ``["numpy", "numpy.(top)"]`` for a module directly in the package (a
  node name is unique in a taxonomy, so the leaf's name holds its package's);
* one row per distinct text (case-insensitive): a summary copied across modules (``"See help(type(self))"``)
  stays once, with the first module's label;
* leaves with fewer than ``--min-per-leaf`` documents are left out, and a leaf keeps at most
  ``--max-per-leaf`` (the first ones in file order), so no package's size decides the corpus.

Usage::

    python scripts/make_docstrings.py --output out/docstrings.jsonl.gz
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import statistics
import sys
import sysconfig
from typing import Dict, Iterator, List, Tuple

PACKAGES = (
    "numpy",
    "scipy",
    "pandas",
    "sklearn",
    "pyspark",
    "pyarrow",
    "matplotlib",
    "setuptools",
    "pip",
    "docutils",
    "sphinx",
    "jinja2",
    "pygments",
    "_pytest",
    "coverage",
)
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]`'\"])\.\s")


def summary(docstring: str) -> str:
    """The first sentence of a docstring, on one line."""
    head = docstring.strip().split("\n\n", 1)[0]
    head = " ".join(head.split())
    match = _SENTENCE_END.search(head)
    return (head[: match.start() + 1] if match else head).strip()


def documents_of(source: str) -> Iterator[Tuple[int, str]]:
    """(line, summary) of each public function, method or class with a docstring in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc:
                yield node.lineno, summary(doc)


def label_of(package: str, relative: str) -> List[str]:
    """``[package, package.subpackage]`` of a file's path relative to the package's folder."""
    parts = relative.split(os.sep)
    sub = parts[0] if len(parts) > 1 else "(top)"
    return [package, f"{package}.{sub.lstrip('_') or sub}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--packages", default=",".join(PACKAGES))
    ap.add_argument("--min-per-leaf", type=int, default=25)
    ap.add_argument("--max-per-leaf", type=int, default=150)
    ap.add_argument("--min-words", type=int, default=3)
    args = ap.parse_args(argv)
    site = sysconfig.get_paths()["purelib"]
    seen, by_leaf = set(), {}  # type: ignore[var-annotated]
    for package in args.packages.split(","):
        root = os.path.join(site, package)
        if not os.path.isdir(root):
            print(f"{package}: not installed, skipped", file=sys.stderr)
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in ("tests", "test", "testing", "__pycache__"))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    source = fh.read()
                label = label_of(package, os.path.relpath(path, root))
                for line, text in documents_of(source):
                    key = text.lower()
                    if len(re.findall(r"[A-Za-z]+", text)) < args.min_words or key in seen:
                        continue
                    seen.add(key)
                    rel = os.path.relpath(path, site)
                    by_leaf.setdefault(tuple(label), []).append({"id": f"{rel}:{line}", "text": text, "labels": label})
    rows: List[Dict[str, object]] = []
    for leaf in sorted(by_leaf):
        docs = by_leaf[leaf]
        if len(docs) >= args.min_per_leaf:
            rows += docs[: args.max_per_leaf]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with gzip.open(args.output, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    leaves = {tuple(r["labels"]) for r in rows}
    words = statistics.median(len(str(r["text"]).split()) for r in rows) if rows else 0
    top = {leaf[0] for leaf in leaves}
    print(
        f"{len(rows)} documents, {len(leaves)} leaves under {len(top)} packages (median {words} words) -> {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
