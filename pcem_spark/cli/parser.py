"""The ``pcem`` argument parser: every command, its flags and their help (nothing runs here)."""

from __future__ import annotations

import argparse
import difflib
import logging
import sys

__all__ = ["build_parser"]

# Re-exported: schedulers' wrappers and the tests import them from here.


log = logging.getLogger("pcem")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        help="TOML settings file layered over the package defaults and $PCEM_CONFIG (only the settings it changes)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one setting, e.g. --set model.max_iter=20 (repeatable)",
    )
    p.add_argument(
        "--remote",
        default=None,
        metavar="sc://HOST:PORT",
        help="run as a Spark Connect client of this server (train, predict, evaluate, inspect; "
        "also SPARK_REMOTE); the server's settings decide master and memory",
    )
    p.add_argument("--log-level", default="INFO")


def _int_or_auto(text: str):
    """An integer, or the word ``auto`` (``--beam``)."""
    return text if text == "auto" else int(text)


def _docs_format_flags(p) -> None:
    """--format and the --allow-incomplete-input / --require-success flags: how a command reads its --docs."""
    p.add_argument(
        "--format",
        dest="docs_format",
        choices=["json", "parquet"],
        help="format of --docs (default: from the file names; a folder from the files in it)",
    )
    _incomplete_input_flags(p)


def _incomplete_input_flags(p) -> None:
    """--allow-incomplete-input / --require-success: how a --docs folder from an unfinished job is taken."""
    p.add_argument(
        "--allow-incomplete-input",
        action="store_true",
        help="read a --docs folder although its writer has not finished (a _temporary/ folder, no _SUCCESS) or "
        "left zero-byte Parquet files (left out, counted in a warning); refused by default: exit 75 / 2",
    )
    p.add_argument(
        "--require-success",
        action="store_true",
        help="refuse (exit 75) a --docs folder without the _SUCCESS file its Spark / Hadoop writer leaves when "
        "it finishes (not needed for a pcem-spark output, whose completion marker says more)",
    )


class _Parser(argparse.ArgumentParser):
    """``pcem``'s parser: an unknown option is reported by its command's parser (that command's usage) with the
    closest known options, before a missing required option can hide it (``--modle`` -> "did you mean
    --model?"; ``--label_rate`` -> ``--label-rate``)."""

    def error(self, message):
        from pcem_spark.util.redaction import redact

        super().error(redact(message))  # an argument may be a path with credentials

    def parse_known_args(self, args=None, namespace=None):
        if self._subparsers is not None:  # the top-level parser: check the command's options first
            self._check_options(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def _check_options(self, argv) -> None:
        commands = next(a for a in self._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
        at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
        if at is None or argv[at] not in commands.choices:
            if at is not None:
                close = difflib.get_close_matches(argv[at], list(commands.choices), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                self.error(f"unknown command {argv[at]!r}{hint} (commands: {', '.join(commands.choices)})")
            return
        command = commands.choices[argv[at]]
        known = [o for action in command._actions for o in action.option_strings]
        for token in argv[at + 1 :]:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if not name.startswith("--") or name in known or any(o.startswith(name) for o in known):
                continue  # known, or an abbreviation argparse resolves (or reports as ambiguous)
            close = difflib.get_close_matches(name.replace("_", "-"), known, n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else f"; see pcem {argv[at]} --help"
            command.error(f"unrecognized option {name}{hint}")


def build_parser() -> argparse.ArgumentParser:
    # The version's one home is pcem_spark.__version__; the root package is always loaded before this module
    # (a parent is imported before its children), so it is read from there rather than imported upwards.
    version = sys.modules["pcem_spark"].__version__
    parser = _Parser(prog="pcem", description="Path cost-sensitive NB/EM on Spark")
    parser.add_argument("--version", action="version", version=f"pcem-spark {version}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest-20ng", help="20news-bydate archive -> documents table (JSON Lines or Parquet)")
    p.add_argument("--archive", default="../shared/data/20news-bydate.tar.gz")
    p.add_argument("--output", required=True, help="*.jsonl[.gz] (no Spark needed) or a Parquet directory")
    p.add_argument(
        "--headers",
        default="subject",
        choices=["keep", "strip", "subject"],
        help="mail headers: keep, strip, or keep only the Subject text (default)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    _common(p)

    p = sub.add_parser("ingest-warc", help="WARC / WET / ARC files (a crawl) -> documents table (Parquet) + rejects")
    p.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="PATHS",
        help="WARC, WET or ARC files: paths, globs or directories, any Hadoop URI (hdfs://, s3a://, ...); "
        "repeatable or comma-separated (plain, .gz, .zst, .lz4; ARC plain or .gz)",
    )
    p.add_argument("--output", required=True, help="documents table (Parquet directory)")
    p.add_argument("--rejects", help="where to write rejected records (default: OUTPUT_rejects)")
    p.add_argument(
        "--id",
        dest="id_field",
        default="record",
        choices=["record", "url"],
        help="document id: the WARC-Record-ID (default) or the WARC-Target-URI; every copy of a "
        "repeated id is rejected ('duplicate id')",
    )
    p.add_argument(
        "--min-text-chars",
        type=int,
        default=1,
        help="reject texts shorter than this many characters (after stripping; default 1: keep every "
        "non-empty text; an empty text is always rejected)",
    )
    p.add_argument(
        "--keep-crawler-records",
        action="store_true",
        help="keep the crawler's own records (metadata://, dns: and filedesc:// URIs: wget's log, DNS lookups) "
        "and robots.txt files as documents; by default they are skipped and counted",
    )
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("train", help="fit PCNB / PCEM / flat NB / flat EM and save the model")
    p.add_argument("--docs", required=True, help="documents table (Parquet or JSON Lines)")
    _docs_format_flags(p)
    p.add_argument("--model", required=True, help="output model directory")
    p.add_argument("--taxonomy", help="taxonomy file (TSV parent<TAB>child or JSON); inferred from labels if omitted")
    p.add_argument(
        "--labels",
        metavar="LABELS",
        help='labels merged by id: JSON Lines or Parquet rows {"id": ..., "labels": [...]} that give (or replace) '
        "the labels of the --docs documents with the same id; a row with an unknown id or path is rejected "
        "(MODEL_labels_rejects). The taxonomy comes from --taxonomy, --init-model or --docs' labels "
        "(from --labels' when no document is labelled)",
    )
    p.add_argument(
        "--method",
        help="pcnb | pcem | flat-nb | flat-em | nbmc | emmc | tdnb | tdem | wdnb | wdem (overrides model.method)",
    )
    p.add_argument("--split", help="train only on documents with this split value")
    p.add_argument(
        "--label-rate",
        type=float,
        help="keep the labels of this stratified fraction per leaf (>= 1 per leaf), hide the rest",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --label-rate")
    p.add_argument(
        "--supervision",
        default=None,
        choices=["labels", "descriptions", "similarities"],
        help="labels: the documents' true label paths; descriptions: weak labels from "
        "--descriptions; similarities: weak labels from the documents' own "
        "'similarities' map column (node -> score). The weak kinds need --taxonomy "
        "when the documents have no labels (default: [supervision] kind)",
    )
    p.add_argument("--descriptions", help="JSON node -> description text (default: [supervision] descriptions)")
    p.add_argument(
        "--node-embeddings",
        help="JSON node -> vector from the documents' encoder: the category names' vectors, evidence beside "
        "their words (documents with vectors; used when model.names uses the names)",
    )
    p.add_argument("--weak-mode", default=None, choices=["argmax", "soft", "path"])
    p.add_argument("--min-similarity", type=float, default=None)
    p.add_argument("--rejects", help="where to write rejected rows (default: MODEL_rejects)")
    p.add_argument(
        "--tune",
        action="store_true",
        help="also cross-validate the [tune] grid (e.g. tune.grid.smoothing = [0.03, 0.1, 0.3]) on "
        'the labelled documents; settings left at "auto" are always cross-validated',
    )
    p.add_argument(
        "--init-model",
        metavar="PREVIOUS",
        help="warm start: start EM from this saved model (same taxonomy and method; terms mapped by "
        'name, new terms start from the smoothing prior). Settings left at "auto" take its '
        "values (--tune cross-validates the weights again); the taxonomy defaults to its. A "
        "batch without labelled documents is then allowed",
    )
    p.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep the train's checkpoint in DIR (as NAME.pcem-checkpoint) instead of beside the model "
        "(.NAME.pcem-checkpoint); the same command run again resumes from it ([checkpoint] settings)",
    )
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="start afresh even when a checkpoint of the same inputs and settings is there (it is replaced)",
    )
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser(
        "suggest-labels",
        help="rank the unlabelled documents most worth labelling next (Parquet or JSON Lines for a labelling tool)",
    )
    p.add_argument("--model", required=True)
    p.add_argument("--docs", required=True, help="documents table; its unlabelled documents are ranked")
    _docs_format_flags(p)
    p.add_argument("--output", required=True, help="output directory (Parquet, or JSON Lines with --output-format)")
    p.add_argument("--budget", type=int, required=True, help="how many documents to suggest")
    p.add_argument(
        "--output-format",
        choices=["parquet", "jsonl"],
        default="parquet",
        help="parquet (default) or jsonl: one JSON Lines part file in rank order, whose rows read back with "
        "pcem train --labels once a labeller fills in 'labels'",
    )
    p.add_argument(
        "--criterion",
        choices=["margin", "entropy", "level", "committee"],
        default="margin",
        help="margin: the two best paths' probabilities are close (default); entropy: of the path posterior; "
        "level: the predicted path's least sure node; committee: models drawn from the posterior of the "
        "word distributions disagree (costs --committee-size more predictions)",
    )
    p.add_argument(
        "--committee-size",
        type=int,
        default=4,
        help="members of the committee criterion (default 4, at least 2)",
    )
    p.add_argument(
        "--density-weight",
        type=float,
        default=0.0,
        metavar="BETA",
        help="weight each score by exp(BETA * typicality), -KL (nats) of the document's known words from its "
        "predicted path's word distribution, so that outliers rank lower (default 0: the criterion alone); a "
        "document with no known word is never ranked above one with",
    )
    p.add_argument(
        "--batch",
        choices=["spread", "none"],
        default="spread",
        help="spread: round-robin over the pairs of leaves the model hesitates between, documents with the "
        "same known words in the same counts once (default); none: the highest scores",
    )
    p.add_argument("--candidates", type=int, default=3, help="top paths shown with each suggestion (default 3)")
    p.add_argument("--seed", type=int, default=0, help="order of ties")
    p.add_argument("--split", help="rank only documents with this split value")
    p.add_argument("--rejects", help="where to write rejected rows (default: OUTPUT_rejects)")
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("predict", help="write predictions (Parquet) with a saved model")
    p.add_argument("--model", required=True)
    p.add_argument("--docs", required=True)
    _docs_format_flags(p)
    p.add_argument("--output", required=True, help="Parquet output directory")
    p.add_argument("--split", help="predict only documents with this split value")
    p.add_argument("--rejects", help="where to write rejected rows (default: OUTPUT_rejects)")
    p.add_argument(
        "--min-probability",
        type=float,
        default=None,
        metavar="P",
        help="abstain: stop each path at its deepest node whose marginal probability is >= P, in "
        "[0, 1]; adds path_probability (default [predict] min_probability = 0: full paths)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="add top_paths: the K most probable paths with their probabilities "
        "(default [predict] top_k = 0: no such column)",
    )
    p.add_argument(
        "--min-in-taxonomy",
        default=None,
        metavar="T",
        help="out of the taxonomy: a document whose in_taxonomy score (nats per token) is below T gets an empty "
        "path and a null leaf; 'suggested' = the model's threshold (keeps 95%% of its labelled documents, each "
        "scored as if held out); "
        "default [predict] min_in_taxonomy = 'none': every document gets a path",
    )
    p.add_argument(
        "--beam",
        type=_int_or_auto,
        default=None,
        metavar="N",
        help="decode by a beam search of width N down the tree (0 = the exact argmax over every path, "
        'auto = exact up to 5,000 paths, a beam of 5 above; default [predict] beam = "auto")',
    )
    p.add_argument(
        "--multi-path",
        type=float,
        default=None,
        metavar="P",
        help="add paths: every path the document belongs to with probability >= P (one path, or the predicted "
        "path mixed with a runner-up), the predicted path first (default [predict] multi_path = 0: one path)",
    )
    p.add_argument(
        "--node-probabilities",
        action="store_true",
        default=None,
        help="add node_probabilities: the marginal probability of each node of the path, root first "
        "(default [predict] node_probabilities = false); pcem inspect --predictions draws their reliability",
    )
    p.add_argument(
        "--keep-columns",
        default=None,
        metavar="COLS",
        help="copy these input columns (comma-separated, Parquet documents) into the predictions, e.g. "
        "url,crawl_date (default [predict] keep_columns = [])",
    )
    p.add_argument(
        "--partition-by",
        default=None,
        metavar="COL",
        help="write the predictions partitioned by a kept column, or by level1 (the first node of the "
        'predicted path) (default [predict] partition_by = "": not partitioned)',
    )
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("evaluate", help="hierarchical micro/macro F1 and per-level accuracy")
    p.add_argument("--predictions", required=True)
    p.add_argument("--model", help="model directory (for its taxonomy)")
    p.add_argument("--taxonomy", help="taxonomy file, instead of --model")
    p.add_argument("--output", help="write the metrics as JSON here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    _common(p)

    p = sub.add_parser(
        "inspect",
        help="per node: training mass, prior, top terms vs siblings; taxonomy view; "
        "with --predictions a per-level confusion table (Markdown/JSON/HTML/PNG)",
    )
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument(
        "--output",
        required=True,
        help="local output directory (model.md, model.json, taxonomy.html, taxonomy.png, confusion.md/json)",
    )
    p.add_argument(
        "--predictions", help="predictions table with true labels (pcem predict): adds the per-level confusion tables"
    )
    p.add_argument("--top-terms", type=int, default=10, help="top terms per node (default 10)")
    p.add_argument(
        "--rank-terms",
        default="llr",
        choices=["llr", "log-odds"],
        help="order the top terms by the signed log-likelihood ratio against the siblings (default: "
        "frequent distinctive words first) or by the log-odds itself (favours rare exclusive terms)",
    )
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("experiment", help="the paper's protocol: methods x settings x label rates x seeds")
    p.add_argument("--docs", required=True)
    _docs_format_flags(p)
    p.add_argument(
        "--output-dir",
        required=True,
        help="results.csv (resumed: runs already in it are skipped), results.md, table2.md, "
        "efficiency.md and the PNG figures",
    )
    p.add_argument("--taxonomy")
    p.add_argument(
        "--methods",
        help="comma-separated (default from [experiment]); generative: pcnb, pcem, "
        "flat-nb, flat-em, nbmc, emmc, tdnb, tdem, wdnb, wdem; discriminative: "
        "lr, svm, hiercost",
    )
    p.add_argument("--rates", help="comma-separated label rates, e.g. 0.01,0.05")
    p.add_argument("--seeds", help="comma-separated seeds or a count, e.g. 5")
    p.add_argument(
        "--setting",
        help="labeled, dataless or labeled,dataless (default from [experiment] settings). labeled: "
        "the sample keeps its true labels; dataless: it gets weak labels from --descriptions",
    )
    p.add_argument("--descriptions", help="JSON node -> description (dataless setting)")
    p.add_argument(
        "--weak-mode",
        choices=["argmax", "soft", "path"],
        help="argmax: the paper's per-depth rule; soft: per-depth normalised similarities; "
        "path: the path with the largest summed similarity (default from [supervision])",
    )
    p.add_argument(
        "--min-similarity", type=float, help="no weak label when the best similarity at some depth is not above this"
    )
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="recompute the planned runs even if results.csv already has them (its other runs "
        "are kept unless they were made with other settings)",
    )
    _common(p)

    p = sub.add_parser("report", help="rebuild table2.md, efficiency.md and the figures from a results.csv")
    p.add_argument("--results", required=True, help="results.csv written by pcem experiment")
    p.add_argument("--output-dir", help="where to write (default: the CSV's directory)")
    p.add_argument("--rate", type=float, help="label rate of the Table-2 columns (default [experiment] report_rate)")
    _common(p)

    p = sub.add_parser(
        "quickstart",
        help="write the quick start's sample documents (train.jsonl, test.jsonl: six categories) into a folder",
    )
    p.add_argument("--output", required=True, help="the folder to write them into (created)")
    p.add_argument("--overwrite", action="store_true", help="replace the files if they exist")
    _common(p)

    p = sub.add_parser(
        "settings",
        help="print the effective settings as JSON (package defaults, $PCEM_CONFIG, --config, --set); starts no Spark",
    )
    _common(p)
    return parser
