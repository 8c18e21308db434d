"""The ``pcem`` command: ingest-20ng, ingest-warc, train, predict, evaluate, inspect, experiment, report.

Every command reads the package's default settings, then the TOML files of
``$PCEM_CONFIG`` and ``--config``, then ``--set section.key=value`` overrides
(:mod:`pcem_spark.cli.config`); its first log line names them.
:data:`COMMANDS` maps each command to its function
(:mod:`pcem_spark.cli.commands`, :mod:`pcem_spark.cli.experiment_commands`);
:func:`main` runs one and returns its exit code. Exit codes, for schedulers
(Airflow, cron, spark-submit wrappers), decided by the failure's kind in
:mod:`pcem_spark.cli.failures`:

* 0  done;
* 2  bad input or settings: the request itself is wrong (the message names the
  file, row, field or setting); retrying will not help;
* 75 (``EX_TEMPFAIL``) a runtime failure -- Spark tasks failing after their
  retries, a lost executor or JVM, an I/O error: retry;
* 1  a bug in pcem-spark (a traceback is printed); retrying will not help;
* 130 interrupted (Ctrl-C).

The message on stderr names the root cause (the Python exception raised in a
Spark worker, or the Java cause), never only the py4j call that carried it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

from pcem_spark.cli.commands import (
    cmd_evaluate,
    cmd_ingest,
    cmd_ingest_warc,
    cmd_inspect,
    cmd_quickstart,
    cmd_settings,
    cmd_train,
)
from pcem_spark.cli.config import describe_sources
from pcem_spark.cli.experiment_commands import cmd_experiment, cmd_report

# Re-exported: schedulers' wrappers and the tests import them from here.
from pcem_spark.cli.failures import EXIT_BAD_INPUT, EXIT_BUG, EXIT_TRANSIENT, classify_failure
from pcem_spark.cli.inputs import settings_from_args
from pcem_spark.cli.parser import build_parser
from pcem_spark.cli.predict_command import cmd_predict
from pcem_spark.cli.suggest_command import cmd_suggest_labels
from pcem_spark.io.snapshots import missing_file
from pcem_spark.util.redaction import configure_redaction, redact

__all__ = ["COMMANDS", "main"]

log = logging.getLogger("pcem")


COMMANDS = {
    "ingest-20ng": cmd_ingest,
    "ingest-warc": cmd_ingest_warc,
    "train": cmd_train,
    "predict": cmd_predict,
    "suggest-labels": cmd_suggest_labels,
    "evaluate": cmd_evaluate,
    "inspect": cmd_inspect,
    "experiment": cmd_experiment,
    "report": cmd_report,
    "settings": cmd_settings,
    "quickstart": cmd_quickstart,
}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from pcem_spark.engine.session import setup_logging

    setup_logging(args.log_level)
    from pcem_spark.io import leases
    from pcem_spark.io.output_policy import configure
    from pcem_spark.io.snapshots import replaced_pins
    from pcem_spark.io.versions import new_run_id

    gone: List[str] = []  # pinned inputs a writer replaced during the run
    # Secrets are known before anything is printed: the environment's, the URL credentials of the arguments,
    # then (once loaded) the settings' [spark.conf] and its spark.redaction.regex (pcem_spark.util.redaction).
    arguments = [v for v in vars(args).values() if isinstance(v, (str, list, tuple))]
    try:
        configure_redaction(environ=os.environ, texts=arguments)
        settings = settings_from_args(args)
        configure_redaction(conf=settings.spark.conf, environ=os.environ, texts=arguments)
        log.info("%s", describe_sources(settings))
        configure(settings.output)
        # Every output's lease is taken before any work (cli.inputs.check_outputs) and released here.
        with leases.run(new_run_id(), f"pcem {args.command}"):
            try:
                return COMMANDS[args.command](args, settings)
            finally:
                gone[:] = replaced_pins()
    except KeyboardInterrupt:
        print(f"pcem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # noqa: BLE001 - the one place that turns exceptions into exit codes
        if isinstance(exc, SystemExit):
            raise
        code, message = classify_failure(exc)
        message = redact(message)
        if code == EXIT_BAD_INPUT and gone and missing_file(exc):
            # A file of a pinned input vanished: a writer replaced the input during the run, not bad input.
            code, message = (
                EXIT_TRANSIENT,
                redact(f"a writer replaced {', '.join(gone)} while this run read it; retry ({message})"),
            )
        if code == EXIT_BUG:
            log.exception("unexpected error (a bug in pcem-spark; please report it)")
        else:
            log.error("%s", message)
            log.debug("details", exc_info=exc)
        kind = {EXIT_BAD_INPUT: "error", EXIT_TRANSIENT: "runtime failure (retry)", EXIT_BUG: "internal error"}[code]
        print(f"pcem {args.command}: {kind}: {message}", file=sys.stderr)
        return code
