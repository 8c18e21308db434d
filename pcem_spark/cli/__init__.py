"""The ``pcem`` command line: the top of the import graph.

``parser`` defines the arguments, ``config`` layers the package defaults,
``$PCEM_CONFIG``, ``--config`` and ``--set`` into settings objects, ``commands``
and ``experiment_commands`` hold one function per command (each parses nothing and calls the library), ``inputs`` the
checks and reads of inputs and outputs they share, ``failures`` maps an
exception to the exit code a scheduler acts on, and ``app`` (:func:`main`) ties them
together. ``jobs/*.py`` are
thin spark-submit wrappers over :func:`main`. May import any package.
"""

__all__ = ["main"]


def __getattr__(name):
    # ``from pcem_spark.cli import main`` without importing every command at package import:
    # ``python -m pcem_spark.cli.failures`` (the README's exit-code table) then runs its module
    # once, not after an import of it through ``main``.
    if name == "main":
        from pcem_spark.cli.app import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
