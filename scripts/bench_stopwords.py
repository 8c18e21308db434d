"""When to turn stop words off: a measured example (issue 9, item 5).

Builds a short-text corpus whose class is carried by function words -- the
questions in 20 Newsgroups' own posts, labelled by their first word on a
2-level taxonomy (``wh`` -> what / which / who / where / when / why / how;
``polar`` -> is / are / do / does / did / can / could / will / would /
should / has / have) -- and runs ``scripts/bench_noregret.py`` on it twice,
with ``features.stop_words = "english"`` (the default) and ``"none"``, the
scikit-learn peers with the same choice. The same comparison on 20NG's
topical posts (``--topical-seeds``) shows the other side: there the list
costs nothing or helps.

The question text is kept whole (its first word included): a bag of words
does not know which word came first, and a question often holds other
function words ("How do I ...", "What does ..."), so this is not a lookup.

    pip install -e ".[bench]"
    python scripts/bench_stopwords.py --docs out/20ng.jsonl.gz --out out/stopwords

Rows: ``OUT/results.csv`` (bench_noregret's columns + ``stop_words``);
``OUT/summary.md`` the means. Resumable like bench_noregret.
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
    args = ap.parse_args(argv)
    import bench_noregret

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
        runs.append(("20ng", args.docs, args.topical_seeds))
    for stop in ("english", "none"):
        for name, docs, seeds in runs:
            bench_noregret.main(
                [
                    "--docs",
                    docs,
                    "--out",
                    os.path.join(args.out, f"{name}-{stop}"),
                    "--taxonomies",
                    name,
                    "--rates",
                    args.rates,
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
                    "--set",
                    f'features.stop_words="{stop}"',
                ]
            )

    rows = []
    for stop in ("english", "none"):
        for name, _, _ in runs:
            path = os.path.join(args.out, f"{name}-{stop}", "results.csv")
            if os.path.exists(path):
                with open(path, newline="") as fh:
                    rows += [{**r, "stop_words": stop} for r in csv.DictReader(fh)]
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=bench_noregret.FIELDS + ["stop_words"])
        w.writeheader()
        w.writerows(rows)
    # Summary: one table per corpus, the two stop-word settings side by side as "taxonomy" names.
    bench_noregret.write_summary(
        [{**r, "taxonomy": f"{r['taxonomy']}, stop_words={r['stop_words']}"} for r in rows],
        os.path.join(args.out, "summary.md"),
    )
    print(open(os.path.join(args.out, "summary.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
