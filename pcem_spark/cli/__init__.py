"""The ``pcem`` command line: the top of the import graph.

``parser`` defines the arguments, ``config`` reads ``conf/*.toml`` into
settings objects, ``commands`` holds one function per command (each parses
nothing and calls the library), ``failures`` maps an exception to the exit
code a scheduler acts on, and ``main`` ties them together. ``jobs/*.py`` are
thin spark-submit wrappers over :func:`main`. May import any package.
"""

from pcem_spark.cli.main import (  # noqa: F401
    main,
)

__all__ = [
    "main",
]
