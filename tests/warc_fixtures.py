"""Small WARC files for tests: HTTP responses, files of gzipped records, pages about a few topics.

Records are written by FastWARC itself (:func:`pcem_spark.io.warc_records.record_bytes`);
used by tests/test_warc.py and tests/dags/test_crawl_dag.py.
"""

from __future__ import annotations

import gzip
from typing import Callable, Dict, List, Sequence

from pcem_spark.io.warc_records import record_bytes

# Four leaves under two parents (sport, tech), each with its own words.
TOPIC_WORDS = {
    "football": "goal striker penalty league keeper",
    "tennis": "racket serve volley deuce umpire",
    "phones": "android screen battery handset charger",
    "chips": "silicon wafer transistor fab lithography",
}
PARENT = {"football": "sport", "tennis": "sport", "phones": "tech", "chips": "tech"}


def http_response(body: bytes, content_type="text/html; charset=utf-8", status="200 OK", extra=""):
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}\r\n").encode() + body


def write_warc(path, records, gzipped=True):
    """Records -> a file: one gzip member per record (Common Crawl's layout) or plain."""
    with open(path, "wb") as fh:
        for data in records:
            fh.write(gzip.compress(data) if gzipped else data)
    return str(path)


def page_html(text: str) -> bytes:
    """An HTML page whose main text is ``text``, with a navigation bar around it."""
    return f"<html><body><nav>Navword home</nav><article><p>{text}.</p></article></body></html>".encode()


def topic_pages(
    per_topic: int,
    make_text: Callable[[List[str]], str],
    dates: Sequence[str] = ("2024-03-01T10:00:00Z",),
    prefix: str = "",
    topic_words: Dict[str, str] = TOPIC_WORDS,
) -> List[bytes]:
    """HTTP response records of ``per_topic`` pages per topic, the text of each ``make_text(topic's words)``.

    Page ``i`` of topic ``t``: record id ``<urn:uuid:<prefix><t>-<i>>``, URL
    ``http://<t>.example/<prefix><i>``, ``WARC-Date`` ``dates[i % len(dates)]``.
    """
    return [
        record_bytes(
            "response",
            f"uuid:{prefix}{leaf}-{i}",
            f"http://{leaf}.example/{prefix}{i}",
            http_response(page_html(make_text(words.split()))),
            http=True,
            date=dates[i % len(dates)],
        )
        for leaf, words in topic_words.items()
        for i in range(per_topic)
    ]
