"""TODO docstring (cli)."""

from __future__ import annotations

import logging
import sys
from typing import List, Optional

from pcem_spark.cli.commands import (
    _settings,
    cmd_evaluate,
    cmd_experiment,
    cmd_ingest,
    cmd_ingest_warc,
    cmd_inspect,
    cmd_predict,
    cmd_report,
    cmd_train,
)

# Re-exported: schedulers' wrappers and the tests import them from here.
from pcem_spark.cli.failures import EXIT_BAD_INPUT, EXIT_BUG, EXIT_TRANSIENT, classify_failure
from pcem_spark.cli.parser import build_parser

log = logging.getLogger("pcem")


COMMANDS = {
    "ingest-20ng": cmd_ingest,
    "ingest-warc": cmd_ingest_warc,
    "train": cmd_train,
    "predict": cmd_predict,
    "evaluate": cmd_evaluate,
    "inspect": cmd_inspect,
    "experiment": cmd_experiment,
    "report": cmd_report,
}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from pcem_spark.engine.session import setup_logging

    setup_logging(args.log_level)
    try:
        settings = _settings(args)
        return COMMANDS[args.command](args, settings)
    except KeyboardInterrupt:
        print(f"pcem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # noqa: BLE001 - the one place that turns exceptions into exit codes
        if isinstance(exc, SystemExit):
            raise
        code, message = classify_failure(exc)
        if code == EXIT_BUG:
            log.exception("unexpected error (a bug in pcem-spark; please report it)")
        else:
            log.error("%s", message)
            log.debug("details", exc_info=exc)
        kind = {EXIT_BAD_INPUT: "error", EXIT_TRANSIENT: "runtime failure (retry)", EXIT_BUG: "internal error"}[code]
        print(f"pcem {args.command}: {kind}: {message}", file=sys.stderr)
        return code
