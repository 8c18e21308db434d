"""The exception kinds that decide a run's exit code (see ``pcem_spark.cli.failures.classify_failure``).

:class:`InputError` is what pcem-spark raises when the request itself is
wrong: a bad document, taxonomy, model or setting, an output path that would
destroy data. The command exits with 2 (do not retry). Every validation in the
package raises it (or one of its subclasses: ``ConfigError``,
``DocumentsError``, ``TaxonomyError``, ...); a plain :class:`ValueError` that
reaches the command line is a bug in pcem-spark (exit 1), not bad input.

It subclasses :class:`ValueError` so that library users who catch
``ValueError`` around ``PathEM.fit`` (the pyspark.ml convention for bad Params)
keep working.

:class:`TransientError` is the opposite: the request is right but cannot be
served *now* -- another run is writing the same output, a writer replaced an
input while it was read, an upstream job has not finished its output. The
command exits with 75 (``EX_TEMPFAIL``): the same request, retried later, passes.
"""

from __future__ import annotations

__all__ = ["InputError", "OutputPathError", "TransientError"]


class InputError(ValueError):
    """The input or the settings are wrong; retrying the same request cannot help (exit 2)."""


class OutputPathError(InputError):
    """An output path would replace the run's own input or model, or data of another kind."""


class TransientError(RuntimeError):
    """The request is right but cannot be served now (another writer, an unfinished input): retry (exit 75)."""
