"""When to turn stop words off, and what ``features.stop_words = "auto"`` decides: a measured example.

Builds a short-text corpus whose class is carried by function words -- the
questions in 20 Newsgroups' own posts, labelled by their first word on a
2-level taxonomy (``wh`` -> what / which / who / where / when / why / how;
``polar`` -> is / are / do / does / did / can / could / will / would /
should / has / have) -- and runs ``scripts/bench_noregret.py`` on it twice,
with ``features.stop_words = "english"`` and ``"none"``, the scikit-learn
peers with the same choice. The same comparison on 20NG's topical posts
(``--topical-seeds``; ``--topical-taxonomies 20ng,dotted`` adds the
dotted-name tree) shows the other side: there the list costs nothing or
helps.

The ``auto`` arm (``--arms``) runs the decision of ``stop_words = "auto"``
(:func:`pcem_spark.model.stop_words.resolve_stop_words`) on each split's
labelled documents -- the split ``bench_noregret`` makes, so the same
documents -- and records the choice, its cross-validation scores and its
cost in ``OUT/auto_decisions.csv``. Its F1 rows are those of the arm it
picked on that split (a fixed arm is run for that split if it was not):
``auto`` changes nothing but the list.

The question text is kept whole (its first word included): a bag of words
does not know which word came first, and a question often holds other
function words ("How do I ...", "What does ..."), so this is not a lookup.

    pip install -e ".[bench]"
    python scripts/bench_stopwords.py --docs out/20ng.jsonl.gz --out out/stopwords

Rows: ``OUT/results.csv`` (bench_noregret's columns + ``stop_words``);
``OUT/summary.md`` the means and the decisions. Resumable like bench_noregret.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import os
import re
import sys
from typing import Dict, Iterable, Iterator, List

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

QUESTION_FORMS: Dict[str, List[str]] = {
    "wh": ["what", "which", "who", "where", "when", "why", "how"],
    "polar": ["is", "are", "do", "does", "did", "can", "could", "will", "would", "should", "has", "have"],
}
_FORM_OF = {w: form for form, words in QUESTION_FORMS.items() for w in words}
# A sentence ending in "?": no ". ! ?" inside, may wrap over single newlines (not blank lines).
_QUESTION = re.compile(r"[^.!?\n]*(?:\n(?![ \t]*\n)[^.!?\n]*)*\?")
_WORD = re.compile(r"[A-Za-z']+")


def questions_of(doc_id: str, text: str, min_words: int = 5, max_words: int = 25) -> Iterator[dict]:
    """The questions of one post that start with a word of :data:`QUESTION_FORMS`.

    Quoted lines (``>``, ``|``, ``:``) are skipped: they repeat other posts.
    Yields documents ``{"id": "<doc_id>#q<k>", "text", "labels": [form, word]}``.
    """
    body = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith((">", "|", ":")))
    k = 0
    for m in _QUESTION.finditer(body):
        sentence = " ".join(m.group(0).split())
        words = _WORD.findall(sentence)
        if not min_words <= len(words) <= max_words:
            continue
        first = words[0].lower()
        if first not in _FORM_OF:
            continue
        yield {"id": f"{doc_id}#q{k}", "text": sentence, "labels": [_FORM_OF[first], first]}
        k += 1


def question_corpus(docs: Iterable[dict]) -> List[dict]:
    """Questions of every document, the first copy of each (case-insensitive) text only."""
    seen = set()
    out = []
    for d in docs:
        for q in questions_of(d["id"], d["text"]):
            key = q["text"].lower()
            if key not in seen:
                seen.add(key)
                out.append(q)
    return out


DECISION_FIELDS = [
    "taxonomy",
    "rate",
    "seed",
    "choice",
    "n_sampled",
    "cv_english",
    "cv_none",
    "gain_of_none",
    "standard_error",
    "vocabulary_english",
    "vocabulary_none",
    "seconds",
]


def auto_decisions(name: str, docs_path: str, rates: List[float], seeds: List[int], config: str) -> List[dict]:
    """The ``stop_words = "auto"`` decision on each (rate, seed) split of ``bench_noregret`` (same roles)."""
    import time

    from pyspark.sql import functions as F

    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects
    from pcem_spark.model.stop_words import resolve_stop_words

    settings = load_settings(config, ['features.stop_words="auto"'])
    spark = build_session(settings.spark)
    docs = split_rejects(read_documents(spark, docs_path))[0]
    docs = docs.where(F.col("labels").isNotNull()).select("id", "text", "labels")
    if name == "dotted":  # bench_noregret.dotted_labels as a column: the prefixes of the dotted group name
        parts = F.split(F.element_at("labels", -1), r"\.")
        docs = docs.withColumn(
            "labels",
            F.transform(F.sequence(F.lit(1), F.size(parts)), lambda i: F.array_join(F.slice(parts, 1, i), ".")),
        )
    docs = docs.cache()
    taxonomy = Taxonomy.from_label_paths([r[0] for r in docs.select("labels").distinct().collect()])
    out = []
    for rate in rates:
        for seed in seeds:
            roled = assign_roles(docs, seed, 0.2, rate)
            masked = roled.where(F.col("role") != "test").select(
                "id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels")
            )
            masked = masked.cache()
            masked.count()  # the split exists before the clock starts, as in training
            t0 = time.perf_counter()
            fs, info = resolve_stop_words(masked, taxonomy, settings.features, seed)
            seconds = time.perf_counter() - t0
            masked.unpersist()
            scores = info.get("scores", {})
            out.append(
                {
                    "taxonomy": name,
                    "rate": rate,
                    "seed": seed,
                    "choice": fs.stop_words,
                    "n_sampled": info.get("n_sampled"),
                    "cv_english": round(100 * scores.get("english", {}).get("mean", float("nan")), 2),
                    "cv_none": round(100 * scores.get("none", {}).get("mean", float("nan")), 2),
                    "gain_of_none": round(100 * info.get("gain_of_none", float("nan")), 2),
                    "standard_error": round(100 * info.get("standard_error", float("nan")), 2),
                    "vocabulary_english": scores.get("english", {}).get("vocabulary"),
                    "vocabulary_none": scores.get("none", {}).get("vocabulary"),
                    "seconds": round(seconds, 2),
                }
            )
            print(json.dumps(out[-1]), flush=True)
    docs.unpersist()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="20NG documents (pcem ingest-20ng output)")
    ap.add_argument("--out", default="out/stopwords")
    ap.add_argument("--rates", default="0.1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--variants",
        default="pcem-default,pcem-paper,pcnb-flat:pcem:unlabeled_weight=0;path_weight=0",
        help="as bench_noregret's; pcnb-flat = no EM, own path only (λ 0, γ 0)",
    )
    ap.add_argument("--sklearn", default="sk-lr,sk-mnb,sk-selftrain")
    ap.add_argument("--mllib", default="mllib-lr", help="as bench_noregret's ('' for none)")
    ap.add_argument("--topical-seeds", default="0", help="seeds of the 20NG (topical) comparison ('' for none)")
    ap.add_argument(
        "--topical-taxonomies", default="20ng", help="taxonomies of the topical comparison: 20ng and/or dotted"
    )
    ap.add_argument(
        "--arms",
        default="english,none,auto",
        help="stop-word arms: english, none, auto (the decision on each split, scored as the arm it picks)",
    )
    ap.add_argument("--config", default=None, help="settings file (as bench_noregret's)")
    args = ap.parse_args(argv)
    import bench_noregret

    # bench_noregret's dotted-name UDF is pickled by reference to its module: Python workers must find it.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    arms = [a for a in args.arms.split(",") if a]
    bad = [a for a in arms if a not in ("english", "none", "auto")]
    if bad:
        ap.error(f"--arms: unknown {bad}; known: english, none, auto")

    os.makedirs(args.out, exist_ok=True)
    qpath = os.path.join(args.out, "questions.jsonl.gz")
    opener = gzip.open if args.docs.endswith(".gz") else open
    with opener(args.docs, "rt", encoding="utf-8") as fh:
        corpus = question_corpus(json.loads(line) for line in fh if line.strip())
    tmp = qpath + ".tmp"
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        for q in corpus:
            fh.write(json.dumps(q) + "\n")
    os.replace(tmp, qpath)
    counts = collections.Counter(q["labels"][1] for q in corpus)
    print(f"{len(corpus)} questions, {len(counts)} classes: {counts.most_common()}", flush=True)

    runs = [("questions", qpath, args.seeds)]
    if args.topical_seeds:
        runs += [(t, args.docs, args.topical_seeds) for t in args.topical_taxonomies.split(",") if t]

    def run_arm(name: str, docs: str, stop: str, rates: str, seeds: str) -> None:
        bench_noregret.main(
            [
                "--docs",
                docs,
                "--out",
                os.path.join(args.out, f"{name}-{stop}"),
                "--taxonomies",
                name,
                "--rates",
                rates,
                "--seeds",
                seeds,
                "--variants",
                args.variants,
                "--sklearn",
                args.sklearn,
                "--mllib",
                args.mllib,
                "--emmc-rates",
                "",
                "--sk-stop-words",
                stop,
                "--config",
                args.config,
                "--set",
                f'features.stop_words="{stop}"',
            ]
        )

    for stop in [a for a in arms if a != "auto"]:
        for name, docs, seeds in runs:
            run_arm(name, docs, stop, args.rates, seeds)
    decisions: List[dict] = []
    if "auto" in arms:
        rates = [float(r) for r in args.rates.split(",")]
        for name, docs, seeds in runs:
            decisions += auto_decisions(name, docs, rates, [int(x) for x in seeds.split(",")], args.config)
        with open(os.path.join(args.out, "auto_decisions.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=DECISION_FIELDS)
            w.writeheader()
            w.writerows(decisions)
        for d in decisions:  # the picked arm on that split, if the fixed arms did not run it
            if d["choice"] not in arms:
                run_arm(
                    d["taxonomy"],
                    dict((n, p) for n, p, _ in runs)[d["taxonomy"]],
                    d["choice"],
                    str(d["rate"]),
                    str(d["seed"]),
                )

    rows = []
    for stop in ("english", "none"):
        for name, _, _ in runs:
            path = os.path.join(args.out, f"{name}-{stop}", "results.csv")
            if os.path.exists(path):
                with open(path, newline="") as fh:
                    rows += [{**r, "stop_words": stop} for r in csv.DictReader(fh)]
    picked = {(d["taxonomy"], float(d["rate"]), int(d["seed"])): d["choice"] for d in decisions}
    auto_rows = [
        {**r, "stop_words": "auto"}
        for r in rows
        if picked.get((r["taxonomy"], float(r["rate"]), int(r["seed"]))) == r["stop_words"]
    ]
    rows = [r for r in rows if r["stop_words"] in arms] + auto_rows
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=bench_noregret.FIELDS + ["stop_words"])
        w.writeheader()
        w.writerows(rows)
    # Summary: one table per corpus, the stop-word arms side by side as "taxonomy" names.
    summary_path = os.path.join(args.out, "summary.md")
    bench_noregret.write_summary(
        [{**r, "taxonomy": f"{r['taxonomy']}, stop_words={r['stop_words']}"} for r in rows], summary_path
    )
    if decisions:
        lines = [
            "",
            '### The "auto" decisions (5-fold naive Bayes on the labelled documents; mean of micro and macro F1, %)',
            "",
            "| " + " | ".join(DECISION_FIELDS) + " |",
            "|" + "---|" * len(DECISION_FIELDS),
        ]
        lines += ["| " + " | ".join(str(d[k]) for k in DECISION_FIELDS) + " |" for d in decisions]
        with open(summary_path, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(open(summary_path).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
