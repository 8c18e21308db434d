"""A short-text corpus from 20 Newsgroups: each post's subject line, one row per distinct subject.

The no-regret benchmark's short-text corpus (docs/RESULTS.md, docs/guide/training.md): subject lines
are a few words each (median 5), the regime where one misweighted word decides the class. Reads the
JSON Lines that ``pcem ingest-20ng`` writes (its default ``headers = "subject"`` puts the subject on the
text's first line) and writes ``{"id", "text", "labels"}`` rows:

* the subject is the text's first line, with leading ``Re:`` prefixes removed (a reply repeats the
  thread's subject: kept, it would put the same text in train and test);
* one row per distinct subject, compared case-insensitively with runs of spaces collapsed: the first
  post (in the archive's order) of each subject keeps it, with that post's labels and id;
* a post without a subject line is left out (its first line is body text) and counted in the log.

Usage::

    pcem ingest-20ng --archive ../shared/data/20news-bydate.tar.gz --output out/20ng.jsonl.gz
    python scripts/make_subjects.py --docs out/20ng.jsonl.gz --output out/subjects.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys

REPLY_PREFIX = re.compile(r"^\s*((re|fwd?)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)


def subject_of(text: str) -> str:
    """The subject of a post as ``pcem ingest-20ng`` writes it: its first line (when a blank line follows
    it), without reply prefixes; ``""`` when the text has no subject line."""
    first, sep, _ = text.partition("\n\n")
    if not sep or "\n" in first:
        return ""
    return REPLY_PREFIX.sub("", first).strip()


def distinct_subjects(rows):
    """``(kept rows, n without a subject)``: one ``{"id", "text", "labels"}`` row per distinct subject."""
    seen, kept, missing = set(), [], 0
    for row in rows:
        subject = subject_of(row["text"])
        if not subject:
            missing += 1
            continue
        key = " ".join(subject.lower().split())
        if key in seen:
            continue
        seen.add(key)
        kept.append({"id": row["id"], "text": subject, "labels": row["labels"]})
    return kept, missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="pcem ingest-20ng's output (JSON Lines, .gz ok)")
    ap.add_argument("--output", default="out/subjects.jsonl.gz")
    args = ap.parse_args(argv)
    opener = gzip.open if args.docs.endswith(".gz") else open
    with opener(args.docs, "rt", encoding="utf-8") as fh:
        kept, missing = distinct_subjects(json.loads(line) for line in fh if line.strip())
    out_opener = gzip.open if args.output.endswith(".gz") else open
    with out_opener(args.output, "wt", encoding="utf-8") as fh:
        for row in kept:
            fh.write(json.dumps(row) + "\n")
    words = [len(r["text"].split()) for r in kept]
    leaves = {tuple(r["labels"]) for r in kept}
    print(
        f"{len(kept)} distinct subjects (median {statistics.median(words):g} words, {len(leaves)} leaves), "
        f"{missing} posts without a subject line left out -> {args.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
