"""Prediction throughput: ``pcem predict`` end to end at 20, 1,000 and 10,000 leaves, exact and beam.

For each taxonomy of ``--shapes`` (children per node at each depth, as
``scripts/bench_large_taxonomy.py``: ``4,5`` = 20 leaves, ``10,10,10`` =
1,000, ``10,10,100`` = 10,000) a synthetic PCNB model is built in numpy:
every node of the tree has a 200-word topic (random terms of a vocabulary of
``2**--vocab-bits`` terms ``w0, w1, ...``), a document of a path draws each
topic token from the topic of one of the path's nodes (a uniform depth: the
siblings of a leaf share most of its words) and the rest from a Zipf
background over the whole vocabulary. ``--train-per-leaf`` documents of 100
tokens (60 topic + 40 background, like bench_large_taxonomy.py) per leaf give
the path counts (Lidstone smoothing 1); ``--docs`` documents of
``--topic-tokens`` + ``--background-tokens`` tokens (~150 distinct terms with
the defaults) are written as Parquet (or JSON Lines, ``--format json``) with
their generating path as ``labels``.

Then ``pcem predict`` (``pcem_spark.cli.main``, in this process) runs on them
with ``--set predict.beam=B`` for B = 0 (exact) and every ``--beams`` width,
and ``--set predict.tokenizer=T`` for every ``--tokenizers`` value (``python``:
tokenised in the scoring task; ``spark``: Spark ML's featurisation).
The SparkSession is started before the clock; everything else the command
does is timed: reading and checking the documents, the rejects table, loading
the model, building (beam) and broadcasting the scoring tables, tokenising,
scoring, writing the Parquet predictions and their marker, counting them.
Each decoder also runs on the first ``--base-docs`` documents: a command
has a fixed cost whatever its size (starting the jobs, loading the model and
sending its vocabulary to the JVM, building and broadcasting the tables), so
besides documents/s of the whole command (median of ``--repeats``) the
*marginal* documents/s -- the documents between the two runs over the
seconds between them -- is the pipeline's rate per document. Also reported:
the share of documents whose path equals the exact run's, and the share
whose path is the generating one. ``--crawl-copies N`` also times one command
per decoder on the documents N times over (distinct ids): the whole-command
rate at a crawl's size, where the fixed cost no longer counts.

Beside it, measured in the same run and process:

* ``scipy reference``: a fixed product, CSR (4,096 x 16,384, 150 non-zeros per
  row) times a dense (16,384 x 256) array, on one core, as rows/s, measured
  just before and after each decoder's runs (their mean); the throughputs
  are also given as ratios to it, so runs on other machines (or under other
  load) compare;
* ``core docs/s``: the decoder alone (``core.predict_paths`` /
  ``core.beam_path_details``) on the same documents as one CSR matrix, one
  core, in blocks of the model's ``block_size`` (building the scoring or
  beam tables is reported apart, ``core_tables_seconds``) -- the limit of
  prediction per core when reading, tokenising and writing cost nothing --
  with its own agreement and accuracy.

``--in-taxonomy-cost N`` also times what the ``in_taxonomy`` column costs:
``pcem predict`` (exact decoder) with the model saved without its corpus
counts (no score, no unknown-token counting: a model saved before the
score) and with them, N pairs run alternately (before-after, after-before,
...) on the ``--crawl-copies`` input when given, so the machine's drift falls
on both; the table gives the median docs/s of each and the change per pair.

``--core-only`` measures only the latter (no Spark): quick, and light on a
shared machine. Output: ``OUT/bench_predict.md`` (a Markdown table) and
``OUT/bench_predict.json``. Examples::

    python scripts/bench_predict.py --shapes 4,5 --docs 2000 --beams 2 --out out/bench_predict_smoke
    python scripts/bench_predict.py --core-only --docs 8192 --out out/bench_predict_core
    python scripts/bench_predict.py --shapes "4,5;10,10,10;10,10,100" --docs 20000 --beams 2,3,5 \\
        --out out/bench_predict
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import scipy
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_large_taxonomy import build_taxonomy  # noqa: E402

TOPIC_WORDS = 200


# ----------------------------------------------------------------------------- pure generators
class Generator:
    """Documents of the paths of a taxonomy: topic tokens from the path's nodes' topics, the rest Zipf background."""

    def __init__(self, path_nodes: np.ndarray, n_nodes: int, vocab_size: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        self.path_nodes = np.asarray(path_nodes, dtype=np.int64)  # (M, D) node ids of each path
        self.topics = rng.integers(0, vocab_size, size=(n_nodes, TOPIC_WORDS))
        cdf = np.cumsum(1.0 / np.arange(1, vocab_size + 1))
        self.zipf_cdf = cdf / cdf[-1]
        self.vocab_size = vocab_size

    def tokens(self, rng, paths: np.ndarray, n_topic: int, n_background: int) -> np.ndarray:
        """(n, n_topic + n_background) term ids of documents of ``paths``."""
        n, depth = len(paths), self.path_nodes.shape[1]
        node = self.path_nodes[paths[:, None], rng.integers(depth, size=(n, n_topic))]
        topic = self.topics[node, rng.integers(TOPIC_WORDS, size=(n, n_topic))]
        background = np.minimum(np.searchsorted(self.zipf_cdf, rng.random((n, n_background))), self.vocab_size - 1)
        return np.concatenate([topic, background], axis=1)

    def counts(self, tokens: np.ndarray) -> sp.csr_matrix:
        """(n, V) term counts of token rows."""
        n, length = tokens.shape
        X = sp.csr_matrix(
            (np.ones(tokens.size), (np.repeat(np.arange(n), length), tokens.ravel())), shape=(n, self.vocab_size)
        )
        X.sum_duplicates()
        return X


def synthetic_model(shape, vocab_bits: int, train_per_leaf: int, seed: int = 7):
    """(taxonomy, PathParameters, Generator) of a PCNB model of ``train_per_leaf`` documents per leaf."""
    from pcem_spark import core

    taxonomy = build_taxonomy(shape)
    M, V = taxonomy.n_paths, 1 << vocab_bits
    path_nodes = core.path_node_table(taxonomy.path_node_matrix(sparse=True), np.zeros(taxonomy.n_nodes, bool))
    gen = Generator(path_nodes, taxonomy.n_nodes, V, seed)
    rng = np.random.default_rng(seed + 1)
    leaves = np.repeat(np.arange(M), train_per_leaf)
    X = gen.counts(gen.tokens(rng, leaves, 60, 40))
    S = sp.csr_matrix((np.ones(len(leaves)), (leaves, np.arange(len(leaves)))), shape=(M, len(leaves)))
    params = core.sparse_log_parameters(S @ X, np.full(M, float(train_per_leaf)), 1.0)
    gen.training_counts = np.asarray(X.sum(axis=0)).ravel()  # the in_taxonomy score's corpus (corpus_counts)
    return taxonomy, params, gen


def with_corpus_counts(model, gen, n_documents: int):
    """``model`` with the corpus counts of its synthetic training documents (every one labelled, no unknown
    token), as a train records them: its predictions then carry the in_taxonomy score, at its cost."""
    from pcem_spark.core.in_taxonomy import CorpusCounts

    tokens = float(gen.training_counts.sum())
    model.corpus = CorpusCounts(gen.training_counts, tokens, 0.0, tokens, 0.0, n_documents, n_documents)
    return model


def scipy_reference(repeats: int = 5) -> dict:
    """Rows/s of a fixed one-core product: CSR (4,096 x 16,384, 150 non-zeros per row) @ dense (16,384 x 256)."""
    rng = np.random.default_rng(0)
    n, V, R, nnz = 4096, 1 << 14, 256, 150
    cols = np.arange(nnz) * (V // nnz) + rng.integers(0, V // nnz, size=(n, nnz))  # distinct, sorted per row
    X = sp.csr_matrix((rng.integers(1, 4, n * nnz).astype(float), cols.ravel(), np.arange(n + 1) * nnz), (n, V))
    W = rng.standard_normal((V, R))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        X @ W
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    what = "CSR (4,096 x 16,384, 150 nnz/row) @ dense (16,384 x 256), 1 core"
    return {"what": what, "seconds": s, "rows_per_s": n / s}


# ----------------------------------------------------------------------------- the run
def _write_docs(spark, path: str, fmt: str, ids, texts, labels) -> None:
    if fmt == "json":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            for i, t, lab in zip(ids, texts, labels):
                fh.write(json.dumps({"id": i, "text": t, "labels": lab}) + "\n")
        return
    spark.createDataFrame(list(zip(ids, texts, labels)), "id string, text string, labels array<string>").write.mode(
        "overwrite"
    ).parquet(path)


def _core_run(X, model, beam: int):
    """(documents/s, predicted paths) of the decoder alone on one core, in blocks of the model's block size."""
    from pcem_spark import core

    ms = model.model_settings
    t0 = time.perf_counter()
    if beam:
        scorer = core.beam_scorer(
            core.beam_tables(model.params, model.taxonomy.path_node_matrix(sparse=True)), ms.parameter_dtype
        )
        run = lambda B: core.beam_path_details(B, scorer, beam, ms.doc_length).best  # noqa: E731
    else:
        tables = core.scoring_tables(model.params, ms.parameter_dtype)
        run = lambda B: core.predict_paths(B, None, None, None, ms.doc_length, tables=tables)[0]  # noqa: E731
    prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    best = np.concatenate([run(X[start : start + ms.block_size]) for start in range(0, X.shape[0], ms.block_size)])
    return X.shape[0] / (time.perf_counter() - t0), best, prep


def _write_copies(spark, docs: str, out: str, copies: int) -> None:
    """``docs`` (Parquet) ``copies`` times over, each copy's ids suffixed ``-k`` (still unique)."""
    from pyspark.sql import functions as F

    src = spark.read.parquet(docs)
    copy = spark.range(copies).withColumnRenamed("id", "_copy")
    src.crossJoin(copy).select(
        F.concat(F.col("id"), F.lit("-"), F.col("_copy").cast("string")).alias("id"), "text", "labels"
    ).write.mode("overwrite").parquet(out)


def _pcem_predict(
    spark, model_dir: str, docs: str, out: str, beam: int, args, tokenizer: str = "python", repeats=None
) -> list:
    """Wall times of ``pcem predict --set predict.beam=BEAM --set predict.tokenizer=T`` (``args.repeats`` runs)."""
    from pcem_spark.cli import main as pcem

    argv = ["predict", "--config", args.config, "--model", model_dir, "--docs", docs, "--output", out, "--overwrite"]
    times = []
    for _ in range(args.repeats if repeats is None else repeats):
        t0 = time.perf_counter()
        settings = ["--set", f"predict.beam={beam}", "--set", f"predict.tokenizer={tokenizer}"]
        rc = pcem(argv + settings + ["--log-level", "WARN"])
        times.append(time.perf_counter() - t0)
        if rc != 0:
            raise SystemExit(f"pcem predict exited {rc}")
    return times


def _agreement(spark, out: str, exact_out: str):
    """(share of paths equal to the exact run's, share equal to the generating path) of a predictions table."""
    from pyspark.sql import functions as F

    pred = spark.read.parquet(out).select("id", "path", "labels")
    exact = spark.read.parquet(exact_out).select("id", F.col("path").alias("exact"))
    row = pred.join(exact, "id").select(
        F.avg((F.col("path") == F.col("exact")).cast("double")).alias("agree"),
        F.avg((F.col("path") == F.col("labels")).cast("double")).alias("accuracy"),
    )
    r = row.first()
    return r["agree"], r["accuracy"]


def in_taxonomy_cost(spark, model_dir: str, before_dir: str, docs: str, n_docs: int, out: str, args) -> dict:
    """The in_taxonomy score's cost: ``pcem predict`` (exact) with the model without corpus counts (before: no
    score, no unknown-token counting) and with them (after), ``args.in_taxonomy_cost`` pairs run alternately
    (before-after, after-before, ...) so that the machine's drift falls on both alike, after one untimed run of
    each (a model's first command reads it cold). The change is the median of the pairs' changes."""
    times = {"before": [], "after": []}
    dirs = {"before": before_dir, "after": model_dir}
    for which in ("before", "after"):
        _pcem_predict(spark, dirs[which], docs, f"{out}_{which}", 0, args, repeats=1)
    for r in range(args.in_taxonomy_cost):
        for which in ("before", "after") if r % 2 == 0 else ("after", "before"):
            times[which] += _pcem_predict(spark, dirs[which], docs, f"{out}_{which}", 0, args, repeats=1)
    before, after = statistics.median(times["before"]), statistics.median(times["after"])
    pairs = [b / a for b, a in zip(times["before"], times["after"])]  # throughput after / before, per pair
    return {
        "docs": n_docs,
        "seconds_before": times["before"],
        "seconds_after": times["after"],
        "docs_per_s_before": n_docs / before,
        "docs_per_s_after": n_docs / after,
        "throughput_change": statistics.median(pairs) - 1.0,
        "pair_changes": [p - 1.0 for p in pairs],
    }


def run_shape(spark, shape, args) -> list:
    """Every decoder on one taxonomy; ``spark`` None: the in-process decoders only (``--core-only``)."""
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    t0 = time.perf_counter()
    taxonomy, params, gen = synthetic_model(shape, args.vocab_bits, args.train_per_leaf)
    M = taxonomy.n_paths
    vocabulary = [f"w{i}" for i in range(1 << args.vocab_bits)]
    settings = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0)
    model = PathModel(taxonomy, vocabulary, None, params, FeatureSettings(stop_words="none"), settings)
    if not args.no_in_taxonomy:
        with_corpus_counts(model, gen, M * args.train_per_leaf)
    rng = np.random.default_rng(99)
    truth = rng.integers(M, size=args.docs)
    tokens = gen.tokens(rng, truth, args.topic_tokens, args.background_tokens)
    X = gen.counts(tokens)
    base = os.path.join(args.out, f"leaves_{M}")
    if spark is not None:
        model_dir = os.path.join(base, "model")
        model.save(model_dir, overwrite=True)
        texts = [" ".join(f"w{t}" for t in row) for row in tokens]
        if args.unknown_tokens:  # words the vocabulary does not hold (rare words, names, typos), mostly distinct
            extra = rng.integers(0, 1 << 30, size=(len(texts), args.unknown_tokens))
            texts = [t + " " + " ".join(f"x{u}" for u in row) for t, row in zip(texts, extra)]
        labels = [list(taxonomy.real_path(int(j))) for j in truth]
        ids = [f"d{i}" for i in range(args.docs)]
        docs, small = (os.path.join(base, n + (".jsonl" if args.format == "json" else "")) for n in ("docs", "small"))
        _write_docs(spark, docs, args.format, ids, texts, labels)
        n0 = args.base_docs
        _write_docs(spark, small, args.format, ids[:n0], texts[:n0], labels[:n0])
        _pcem_predict(spark, model_dir, small, os.path.join(base, "warm_up"), 0, args)  # untimed: a warm JVM
        crawl = os.path.join(base, "crawl")
        if args.crawl_copies:
            _write_copies(spark, docs, crawl, args.crawl_copies)
        if args.in_taxonomy_cost and not args.no_in_taxonomy:
            before_dir = os.path.join(base, "model_before")
            plain = PathModel(taxonomy, vocabulary, None, params, FeatureSettings(stop_words="none"), settings)
            plain.save(before_dir, overwrite=True)
            source, n_docs = (crawl, args.docs * args.crawl_copies) if args.crawl_copies else (docs, args.docs)
            cost = in_taxonomy_cost(spark, model_dir, before_dir, source, n_docs, os.path.join(base, "cost"), args)
            args.cost_rows.append(dict(cost, leaves=M))
            print(json.dumps(args.cost_rows[-1]), flush=True)
    setup = time.perf_counter() - t0
    rows = []
    exact_best = None
    for beam in [0] + [b for b in args.beams if b]:
        before = scipy_reference(3)["rows_per_s"]
        core_rate, best, prep = _core_run(X, model, beam)
        exact_best = best if exact_best is None else exact_best
        core = {
            "leaves": M,
            "shape": list(shape),
            "decoder": "exact" if beam == 0 else f"beam {beam}",
            "beam": beam,
            "docs": args.docs,
            "distinct_terms_per_doc": X.nnz / X.shape[0],
            "nonzero_parameters": int(params.log_ratio.nnz),
            "setup_seconds": setup,
            "core_docs_per_s": core_rate,
            "core_tables_seconds": prep,
            "core_agreement_with_exact": float(np.mean(best == exact_best)),
            "core_path_accuracy": float(np.mean(best == truth)),
        }
        for tokenizer in args.tokenizers if spark is not None else ["-"]:
            row = dict(core, tokenizer=tokenizer)
            if spark is not None:
                out = os.path.join(base, f"pred_beam{beam}_{tokenizer}")
                small_seconds = statistics.median(
                    _pcem_predict(spark, model_dir, small, out + "_small", beam, args, tokenizer)
                )
                times = _pcem_predict(spark, model_dir, docs, out, beam, args, tokenizer)
                exact_out = os.path.join(base, f"pred_beam0_{args.tokenizers[0]}")
                agree, accuracy = _agreement(spark, out, exact_out)
                seconds = statistics.median(times)
                row.update(
                    {
                        "seconds": seconds,
                        "all_seconds": times,
                        "docs_per_s": args.docs / seconds,
                        # what a command costs whatever its size (model, vocabulary, tables, jobs), and the rate
                        "base_docs": args.base_docs,
                        "base_seconds": small_seconds,
                        # None when the machine's noise exceeds the difference (use more --docs)
                        "marginal_docs_per_s": (args.docs - args.base_docs) / (seconds - small_seconds)
                        if seconds > small_seconds
                        else None,
                        "agreement_with_exact": agree,
                        "path_accuracy": accuracy,
                    }
                )
            if spark is not None and args.crawl_copies and tokenizer == args.tokenizers[0]:
                # The crawl scale: the same documents --crawl-copies times over (distinct ids), one command.
                n_crawl = args.docs * args.crawl_copies
                seconds = _pcem_predict(spark, model_dir, crawl, out + "_crawl", beam, args, tokenizer, repeats=1)[0]
                row.update({"crawl_docs": n_crawl, "crawl_seconds": seconds, "crawl_docs_per_s": n_crawl / seconds})
            rows.append(row)
        # The reference just before and after this decoder's runs: the machine's speed while they ran.
        reference = (before + scipy_reference(3)["rows_per_s"]) / 2
        for row in rows:
            if row["beam"] == beam:
                row["reference_rows_per_s"] = reference
                row["core_ratio_to_reference"] = core_rate / reference
                if spark is not None:
                    row["docs_per_s_to_reference"] = row["docs_per_s"] / reference
                    row["ratio_to_reference"] = (row["marginal_docs_per_s"] or 0.0) / reference
                    if "crawl_docs_per_s" in row:
                        row["crawl_docs_per_s_to_reference"] = row["crawl_docs_per_s"] / reference
                print(json.dumps(row), flush=True)
    return rows


def _maybe(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def markdown(rows: list, reference: dict) -> str:
    lines = [
        f"scipy reference: {reference['what']}, measured before and after each decoder's runs "
        "(rows/s column); ÷ reference = (marginal or core) docs/s divided by it. pcem predict s: the "
        f"command on all the documents, (fixed s) on the first {rows[0].get('base_docs', 0):,}; marginal "
        "docs/s = the documents between the two / the seconds between them.",
        "",
    ]
    spark = all("docs_per_s" in r for r in rows)
    head = "| leaves | decoder | tokenizer | reference rows/s |"
    if spark:
        head += " pcem predict s (fixed s) | docs/s | ÷ reference | marginal docs/s | ÷ reference |"
    crawl = all("crawl_docs_per_s" in r for r in rows)
    if crawl:
        head += " crawl docs | crawl s | crawl docs/s | ÷ reference |"
    head += " core docs/s (1 core) | ÷ reference | agreement with exact | path accuracy |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = f"| {r['leaves']:,} | {r['decoder']} | {r['tokenizer']} | {r['reference_rows_per_s']:,.0f} |"
        if spark:
            marginal = r["marginal_docs_per_s"]
            line += (
                f" {r['seconds']:.1f} ({r['base_seconds']:.1f}) | {r['docs_per_s']:,.0f} |"
                f" {r['docs_per_s_to_reference']:.2f} |"
                f" {_maybe(marginal, ',.0f')} | {_maybe(marginal and r['ratio_to_reference'], '.2f')} |"
            )
        if crawl:
            line += (
                f" {r['crawl_docs']:,} | {r['crawl_seconds']:.1f} | {r['crawl_docs_per_s']:,.0f} |"
                f" {r['crawl_docs_per_s_to_reference']:.2f} |"
            )
        agree, accuracy = (
            (r["agreement_with_exact"], r["path_accuracy"])
            if spark
            else (r["core_agreement_with_exact"], r["core_path_accuracy"])
        )
        line += (
            f" {r['core_docs_per_s']:,.0f} | {r['core_ratio_to_reference']:.3f} |"
            f" {100 * agree:.1f}% | {100 * accuracy:.1f}% |"
        )
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4,5;10,10,10;10,10,100", help="taxonomy shapes, ';'-separated")
    ap.add_argument("--vocab-bits", type=int, default=18)
    ap.add_argument("--train-per-leaf", type=int, default=10)
    ap.add_argument("--docs", type=int, default=20000, help="documents to predict per taxonomy")
    ap.add_argument(
        "--base-docs", type=int, default=500, help="also predict the first this many (the per-command fixed cost)"
    )
    ap.add_argument("--topic-tokens", type=int, default=60)
    ap.add_argument("--background-tokens", type=int, default=110)
    ap.add_argument("--beams", default="2,3,5", help="beam widths besides the exact decoder")
    ap.add_argument(
        "--tokenizers", default="python", help="predict.tokenizer values, ','-separated (the first is the reference)"
    )
    ap.add_argument(
        "--crawl-copies",
        type=int,
        default=0,
        help="also time one command per decoder on the documents this many times over (a crawl-sized input)",
    )
    ap.add_argument("--format", choices=["parquet", "json"], default="parquet")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--config", default=None, help="the settings file pcem predict reads (its [spark])")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--out", default="out/bench_predict")
    ap.add_argument("--core-only", action="store_true", help="only the in-process decoders: no Spark, no pcem predict")
    ap.add_argument(
        "--unknown-tokens",
        type=int,
        default=0,
        help="add this many tokens the vocabulary does not hold to each predicted document (0: none)",
    )
    ap.add_argument(
        "--in-taxonomy-cost",
        type=int,
        default=0,
        help="also time this many alternated pairs of pcem predict without and with the in_taxonomy score "
        "(on the --crawl-copies input when given)",
    )
    ap.add_argument(
        "--no-in-taxonomy",
        action="store_true",
        help="a model without corpus counts (as saved before the in_taxonomy score): its in_taxonomy is null",
    )
    args = ap.parse_args(argv)
    args.beams = [int(b) for b in args.beams.split(",") if b.strip()]
    args.tokenizers = [t.strip() for t in args.tokenizers.split(",") if t.strip()]
    args.cost_rows = []
    os.makedirs(args.out, exist_ok=True)

    spark = None
    if not args.core_only:
        from pcem_spark.cli.config import load_settings
        from pcem_spark.engine.session import SparkSettings, build_session

        # no settings file: pcem's defaults, and its 8 shuffle partitions
        if args.config is None or not os.path.exists(args.config):
            args.config = os.path.join(args.out, "bench.toml")
            with open(args.config, "w") as fh:
                fh.write('[spark.conf]\n"spark.sql.shuffle.partitions" = "8"\n')
        # The session pcem predict would start from the same settings file (started before any clock).
        conf = dict(load_settings(args.config).spark.conf)
        conf.update({"spark.driver.memory": args.driver_memory, "spark.ui.showConsoleProgress": "false"})
        spark = build_session(SparkSettings(master=args.master, app_name="pcem-bench-predict", conf=conf))
        spark.range(1).count()
    reference = scipy_reference()
    rows = []
    for text in args.shapes.split(";"):
        rows += run_shape(spark, tuple(int(x) for x in text.split(",")), args)
    reference_after = scipy_reference()
    env = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pyspark": __import__("pyspark").__version__,
        "cpus": os.cpu_count(),
        "master": args.master,
        "load_average": os.getloadavg(),
    }
    with open(os.path.join(args.out, "bench_predict.json"), "w") as fh:
        json.dump(
            {"args": vars(args), "env": env, "reference": reference, "reference_after": reference_after, "runs": rows},
            fh,
            indent=2,
        )
    table = markdown(rows, reference)
    if args.cost_rows:
        table += (
            "\n\nThe in_taxonomy score's cost (pcem predict, exact decoder, alternated pairs: median docs/s of each, "
            "median of the pairs' changes)\n\n"
            "| leaves | docs | without | with | change | per pair |\n|---|---|---|---|---|---|\n"
        )
        for c in args.cost_rows:
            pairs = " ".join(f"{100 * p:+.1f}%" for p in c["pair_changes"])
            table += (
                f"| {c['leaves']:,} | {c['docs']:,} | {c['docs_per_s_before']:,.0f} | {c['docs_per_s_after']:,.0f} "
                f"| {100 * c['throughput_change']:+.1f}% | {pairs} |\n"
            )
    with open(os.path.join(args.out, "bench_predict.md"), "w") as fh:
        fh.write(table)
    print(table)
    if spark is not None:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
