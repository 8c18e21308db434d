"""Turn the 20news-bydate archive into a documents table.

The archive layout is ``20news-bydate-{train,test}/<newsgroup>/<file>``
(18,846 files, latin-1). Each file becomes one row: ``id`` =
``<newsgroup>/<file>``, ``labels`` = ``[<first dot-component>, <newsgroup>]``,
``split`` = ``train`` / ``test`` (the archive's own date split).

``headers`` controls the mail header block (everything before the first blank
line): ``keep`` it, ``strip`` it, or keep only the ``Subject:`` text
(``subject``, the default). The header's From/Organization/Path lines identify
posters rather than topics; the subject is text the poster wrote.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import tarfile
import zlib
from typing import Dict, Iterator, Tuple

from pcem_spark.errors import InputError

__all__ = ["HEADER_MODES", "clean_message", "iter_20ng", "write_jsonl"]

log = logging.getLogger(__name__)

HEADER_MODES = ("keep", "strip", "subject")


def clean_message(raw: str, headers: str = "subject") -> str:
    """Apply the header policy to one message."""
    if headers == "keep":
        return raw
    if headers not in HEADER_MODES:
        raise InputError(f"headers must be one of {HEADER_MODES}, got {headers!r}")
    head, sep, body = raw.partition("\n\n")
    if not sep:  # no blank line: no header block to speak of
        return raw
    if headers == "strip":
        return body
    subject = ""
    for line in head.splitlines():
        if line.lower().startswith("subject:"):
            subject = line[len("subject:") :].strip()
            break
    return f"{subject}\n\n{body}" if subject else body


def iter_20ng(archive: str, headers: str = "subject") -> Iterator[Dict[str, object]]:
    """Yield one document dict per message file of the archive, in archive order."""
    if not os.path.exists(archive):
        raise FileNotFoundError(
            f"20 Newsgroups archive {archive!r} not found; scripts/fetch_20ng.sh downloads the public copy"
        )
    try:
        yield from _iter_members(archive, headers)
    except (EOFError, zlib.error, gzip.BadGzipFile, tarfile.TarError) as exc:
        # A truncated or damaged download: every retry reads the same bytes.
        raise InputError(
            f"{archive}: damaged or truncated archive ({type(exc).__name__}: {exc}); fetch it "
            "again (scripts/fetch_20ng.sh)"
        ) from None


def _iter_members(archive: str, headers: str) -> Iterator[Dict[str, object]]:
    seen = set()
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            parts = member.name.strip("./").split("/")
            if len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                raise InputError(
                    f"{archive}: unexpected member {member.name!r}; expected "
                    "20news-bydate-{train,test}/<newsgroup>/<file>"
                )
            split_dir, group, fname = parts
            doc_id = f"{group}/{fname}"
            if doc_id in seen:
                raise InputError(f"{archive}: document id {doc_id!r} occurs twice")
            seen.add(doc_id)
            raw = tar.extractfile(member).read().decode("latin-1")
            yield {
                "id": doc_id,
                "text": clean_message(raw, headers),
                "labels": [group.split(".")[0], group],
                "split": split_dir.replace("20news-bydate-", ""),
            }


def write_jsonl(docs, path: str) -> Tuple[int, Dict[str, int]]:
    """Stream documents to JSON Lines (gzip if ``path`` ends in .gz); return counts."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    n = 0
    per_split: Dict[str, int] = {}
    tmp = path + ".tmp"
    with opener(tmp, "wt", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc, ensure_ascii=False))
            fh.write("\n")
            n += 1
            per_split[doc["split"]] = per_split.get(doc["split"], 0) + 1
    os.replace(tmp, path)  # readers never see a half-written file
    return n, per_split
