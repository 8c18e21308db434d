"""``pcem experiment`` (the paper's protocol: every method x label rate x seed) and ``pcem report``."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import List, Tuple

from pcem_spark.cli.inputs import DocsOptions, check_outputs, read_valid_documents, taxonomy_for
from pcem_spark.errors import InputError
from pcem_spark.util.redaction import redact

__all__ = ["cmd_experiment", "cmd_report", "experiment_plan"]

log = logging.getLogger("pcem")


def experiment_plan(args, exp) -> Tuple[List[str], List[float], List[int], List[str]]:
    """(methods, label rates, seeds, settings) of ``pcem experiment``: its flags, else ``[experiment]`` (``exp``).

    Raises :class:`~pcem_spark.errors.InputError` naming the flag or setting
    when a value is invalid or the plan holds no run.
    """
    from pcem_spark.core.methods import check_methods

    # Every setting that decides the planned runs is checked before Spark starts: a plan of no runs
    # (--seeds 0, no rates, no methods) is a mistake, not an empty result (exit 2, naming the setting).

    def flag(name: str, raw: str) -> str:  # how a message names a command-line value
        return f"--{name} {raw if raw.strip() else repr(raw)}"

    def plan_error(where: str, what: str) -> InputError:
        return InputError(f"{where}: {what} (pcem experiment runs every method x label rate x seed)")

    if args.methods is not None:
        methods, where_m = [m.strip() for m in args.methods.split(",")], flag("methods", args.methods)
    else:
        methods, where_m = list(exp.methods), "[experiment] methods"
    if not any(methods):
        raise plan_error(where_m, "no methods, so no runs; name at least one, e.g. pcnb,pcem")
    if "" in methods:
        raise plan_error(where_m, "an empty method name (a stray comma?)")
    try:
        check_methods(methods)
    except InputError as exc:
        raise plan_error(where_m, str(exc)) from None
    if args.rates is not None:
        where_r = flag("rates", args.rates)
        parts = [r.strip() for r in args.rates.split(",")]
        if any(parts) and "" in parts:
            raise plan_error(where_r, "an empty label rate (a stray comma?)")
        try:
            rates = [float(r) for r in parts if r]
        except ValueError:
            raise plan_error(where_r, "expected comma-separated label rates in (0, 1], e.g. 0.01,0.05") from None
    else:
        rates, where_r = list(exp.rates), "[experiment] rates"
    if not rates:
        raise plan_error(where_r, "no label rates, so no runs; give at least one in (0, 1], e.g. 0.01")
    bad = [r for r in rates if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1]
    if bad:
        raise plan_error(
            where_r,
            f"label rates must be in (0, 1] (the share of each leaf's training documents "
            f"that keeps its labels), got {bad}",
        )
    if args.seeds is not None:
        # "5" means five seeds 0..4; "3,7" means exactly those seeds.
        where_s = flag("seeds", args.seeds)
        try:
            numbers = [int(p) for p in args.seeds.split(",")]
        except ValueError:
            raise plan_error(
                where_s, "expected a number of seeds (e.g. 5: seeds 0..4) or comma-separated seeds (e.g. 0,1,2)"
            ) from None
        if len(numbers) == 1:
            if numbers[0] < 1:
                raise plan_error(
                    where_s,
                    f"{numbers[0]} seeds plan no runs; give a count >= 1 (e.g. 5: seeds "
                    "0..4) or the seeds themselves (e.g. 0,1,2)",
                )
            seeds = list(range(numbers[0]))
        else:
            seeds = numbers
    else:
        seeds, where_s = list(exp.seeds), "[experiment] seeds"
        if not seeds:
            raise plan_error(where_s, "no seeds, so no runs; give at least one, e.g. [0, 1, 2]")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise plan_error(where_s, f"seeds must be integers >= 0, got {bad}")
    if args.setting is not None:
        setting_list, where_st = args.setting.split(","), flag("setting", args.setting)
    else:
        setting_list, where_st = list(exp.settings), "[experiment] settings"
    for st in setting_list:
        if st not in ("labeled", "dataless"):
            raise plan_error(where_st, f"expected labeled, dataless or labeled,dataless, got {st!r}")
    return methods, rates, seeds, setting_list


def cmd_experiment(args, settings) -> int:
    from pcem_spark.engine.session import build_session
    from pcem_spark.experiment.protocol import run_experiment

    exp = settings.experiment
    methods, rates, seeds, setting_list = experiment_plan(args, exp)
    sup = settings.supervision
    weak_mode = args.weak_mode or sup.weak_mode
    min_similarity = sup.min_similarity if args.min_similarity is None else args.min_similarity
    desc_path = args.descriptions or sup.descriptions
    if "dataless" in setting_list and not desc_path:
        raise InputError(
            "the dataless setting needs --descriptions FILE (JSON node -> description) "
            "or [supervision] descriptions in the settings"
        )
    given_taxonomy = taxonomy_for(args) if args.taxonomy else None
    # The results folder is resumed by design (files in it are replaced one by one); it may not be, or lie
    # inside, an input, nor be a model or other output; its rejects table is rewritten by every run.
    from pcem_spark.io.output_paths import Output

    inputs = [("--docs", args.docs), ("--taxonomy", args.taxonomy), ("--descriptions", desc_path)]
    rejects_path = os.path.join(args.output_dir, "rejects")
    check_outputs(None, [Output("--output-dir", args.output_dir, None)], inputs, False)
    check_outputs(None, [Output("--output-dir (its rejects)", rejects_path, "rejects", source=args.docs)], inputs, True)
    spark = build_session(settings.spark)
    os.makedirs(args.output_dir, exist_ok=True)
    counts: dict = {}
    docs = read_valid_documents(spark, args.docs, rejects_path, None, counts, DocsOptions.of(args))
    taxonomy = given_taxonomy or taxonomy_for(args, docs, counts)
    descriptions = None
    if "dataless" in setting_list:
        from pcem_spark.io.descriptions import load_descriptions

        descriptions = load_descriptions(desc_path, taxonomy)
    rows = run_experiment(
        docs,
        taxonomy,
        replace(exp, methods=methods, rates=rates, seeds=seeds, settings=setting_list),  # the flags win
        settings.features,
        settings.model,
        args.output_dir,
        supervision=replace(sup, weak_mode=weak_mode, min_similarity=min_similarity),
        descriptions=descriptions,
        tune=settings.tune,
        resume=not args.no_resume,
    )
    from pcem_spark.experiment.report import table2

    print(table2(rows, exp.report_rate))
    return 0


def cmd_report(args, settings) -> int:
    from pcem_spark.experiment.protocol import read_csv
    from pcem_spark.experiment.report import PAPERS, table2, write_report

    rows = read_csv(args.results)
    if not rows:
        raise InputError(f"{args.results}: no results (expected results.csv of pcem experiment)")
    out_dir = args.output_dir or os.path.dirname(os.path.abspath(args.results))
    os.makedirs(out_dir, exist_ok=True)
    rate = settings.experiment.report_rate if args.rate is None else args.rate
    written = write_report(rows, out_dir, rate, PAPERS.get(settings.experiment.paper_reference))
    print(table2(rows, rate))
    print(redact("written: " + ", ".join(os.path.join(out_dir, w) for w in written)))
    return 0
