"""Sphinx configuration of the user guide and API reference (``bash scripts/build_docs.sh``).

The source folder is the repository root, so that the guide's Markdown files
(README.md, CHANGELOG.md, docs/*.md, read with MyST) keep the relative links
they have on GitHub and each of those links is checked at build time; only the
files named in ``include_patterns`` are read. The API reference (docs/api/)
documents every public name of every package ``__init__`` with autodoc,
autosummary and numpydoc, the convention of pyspark and scikit-learn.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # the checkout's package, whether or not it is installed

import pcem_spark  # noqa: E402

project = "pcem-spark"
author = "the pcem-spark authors"
release = version = pcem_spark.__version__

root_doc = "docs/index"
include_patterns = [
    "README.md",
    "CHANGELOG.md",
    "docs/*.md",
    "docs/guide/*.md",
    "docs/inspect-20ng/*.md",
    "docs/index.rst",
    "docs/api/**",
]
exclude_patterns = ["docs/_build", "build", "out", ".venv-airflow"]

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}

# GitHub-style anchors (#commands, #on-a-cluster) for the Markdown headings, so that the
# links between README.md and docs/*.md resolve here as they do on GitHub.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
# pyspark is imported lazily by the package; nothing here starts a JVM.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set = set()

html_theme = "alabaster"
html_title = f"pcem-spark {version}"

# -- the API reference: one page per package, one per public name ------------
# Written from each package's __all__ at every build, so that the reference can never
# miss a public name nor list one that is gone (docs/api/ is not committed).
PACKAGES = [
    ("pcem_spark.ml", "Estimator and model (pyspark.ml)"),
    ("pcem_spark.evaluation", "Evaluation"),
    ("pcem_spark.model", "Model and settings"),
    ("pcem_spark.core", "The paper's mathematics (numpy / scipy)"),
    ("pcem_spark.engine", "The Spark engine"),
    ("pcem_spark.baselines", "Discriminative baselines"),
    ("pcem_spark.experiment", "The paper's protocol"),
    ("pcem_spark.io", "Inputs and atomic outputs"),
    ("pcem_spark.ops", "Inspection and packaging"),
    ("pcem_spark.util", "Utilities"),
    ("pcem_spark.cli", "The pcem command"),
    ("pcem_spark.errors", "Errors"),
]


def _write_api_pages() -> None:
    import importlib

    api = os.path.join(ROOT, "docs", "api")
    os.makedirs(api, exist_ok=True)
    index = ["API reference", "=============", "", ".. toctree::", "   :maxdepth: 1", ""]
    for name, title in PACKAGES:
        module = importlib.import_module(name)
        public = list(getattr(module, "__all__", None) or [])
        lines = [
            f"``{name}``: {title}",
            "=" * (len(name) + len(title) + 6),
            "",
            f".. automodule:: {name}",
            "   :no-members:",
            "",
        ]
        if name == "pcem_spark.errors":  # a module, not a package: its classes are its public names
            public = sorted(n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == name)
        if public:
            lines += [f".. currentmodule:: {name}", "", ".. autosummary::", "   :toctree: generated", ""]
            lines += [f"   {n}" for n in public]
        else:
            lines += ["This package has no public names: its modules are internal to the package."]
        page = "\n".join(lines) + "\n"
        path = os.path.join(api, f"{name}.rst")
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != page:  # unchanged pages keep their time stamp: an incremental build stays incremental
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(page)
        index.append(f"   {name}")
    with open(os.path.join(api, "index.rst"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(index) + "\n")


_write_api_pages()
