"""Benchmark crawl input: records/s per core of WARC/WET parsing and main-text extraction.

Builds (or takes with --input) a Common-Crawl-shaped WARC of N realistic HTML
pages -- 20 Newsgroups texts wrapped in boilerplate (navigation, sidebar,
footer, inline scripts and styles; 10-40 KB a page), one gzip member per
record, a warcinfo record then request / response / metadata per page -- and
the WET of the same pages. Then measures:

1. one process, CPU seconds (``time.process_time``), per library:
   * FastWARC + Resiliparse as ``pcem_spark.io.warc_records.parse_warc_stream`` runs them
     (read, HTTP, charset, ``extract_plain_text(main_content=True)``);
   * warcio + trafilatura (``trafilatura.extract``, default and ``fast=True``)
     on the first ``--trafilatura-pages`` pages;
   * the WET file with each reader (no extraction: the text is already there);
   plus how well each keeps the article and drops the boilerplate;
2. ``pcem ingest-warc`` on local[1] and local[2] (a subprocess each: wall
   seconds, and the CPU seconds of the whole process tree -- driver, JVM,
   Python workers).

    python scripts/bench_warc.py --docs out/20ng.jsonl.gz --pages 2000 --out-dir out/warc_bench

Writes bench.json and bench.md (bench_spark.* with --skip-libraries) to --out-dir. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gzip
import html
import io
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

NAV_WORDS = [
    "Home",
    "World",
    "Politics",
    "Business",
    "Technology",
    "Science",
    "Health",
    "Sports",
    "Travel",
    "Culture",
    "Opinion",
    "Video",
    "Podcasts",
    "Newsletters",
    "Weather",
    "Markets",
    "Careers",
    "Events",
    "Shop",
    "Subscribe",
]
BOILER_MARK = "Boilerplatemarker"  # in every nav / sidebar / footer, never in an article


def load_texts(path: str, n: int, seed: int) -> List[Tuple[str, str]]:
    """(id, text) of n 20NG documents (random order, texts over 200 characters; reused when n is larger)."""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if len(d["text"].strip()) > 200:
                rows.append((d["id"], d["text"]))
    random.Random(seed).shuffle(rows)
    # More pages than texts: the texts again, under new ids (every page and record id stays unique).
    return [
        (f"{rows[i % len(rows)][0]}" + (f"-{i // len(rows)}" if i >= len(rows) else ""), rows[i % len(rows)][1])
        for i in range(n)
    ]


def _script(rng: random.Random, kb: int) -> str:
    parts, size = [], 0
    while size < kb * 1024:
        name = "".join(rng.choice("abcdefghijklmnop") for _ in range(8))
        chunk = (
            f"function {name}(e,t){{var n=document.querySelectorAll('[data-{name}]');for(var i=0;i<n.length;"
            f"i++){{n[i].addEventListener('click',function(x){{window.dataLayer.push({{event:'{name}',"
            f"value:x.target.id}})}})}};return t||e}}\n"
        )
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def _style(rng: random.Random, kb: int) -> str:
    parts, size = [], 0
    while size < kb * 1024:
        cls = "".join(rng.choice("abcdefghij") for _ in range(6))
        chunk = f".{cls}{{margin:0 {rng.randint(0, 40)}px;color:#{rng.randint(0, 0xFFFFFF):06x};display:flex}}\n"
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def make_page(doc_id: str, text: str, rng: random.Random) -> str:
    """A news-site page around ``text``: head with scripts/styles, nav, sidebar, article, footer (10-40 KB)."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    title = html.escape(paragraphs[0].splitlines()[0][:80]) if paragraphs else doc_id
    nav = "".join(
        f"<li><a href='/{w.lower()}/{i}'>{w}</a></li>"
        for i, w in enumerate(rng.sample(NAV_WORDS, 12) + rng.sample(NAV_WORDS, 12))
    )
    sidebar = "".join(
        f"<li><a href='/story/{rng.randint(1, 10**6)}'>{' '.join(rng.sample(NAV_WORDS, 5))} {BOILER_MARK}</a></li>"
        for _ in range(15)
    )
    footer = "".join(f"<a href='/{w.lower()}'>{w}</a> | " for w in NAV_WORDS)
    article = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title} | The Daily Example</title>"
        f"<meta name='viewport' content='width=device-width'><style>{_style(rng, rng.randint(2, 8))}</style>"
        f"<script>{_script(rng, rng.randint(4, 20))}</script></head><body>"
        f"<header><div class='logo'>The Daily Example</div><nav class='menu'><ul>{nav}</ul>"
        f"<span>{BOILER_MARK} menu</span></nav></header>"
        f"<div class='cookie-banner'>We use cookies to improve your experience. {BOILER_MARK} "
        f"<button>Accept all</button></div>"
        f"<div class='layout'><main><article><h1>{title}</h1><div class='byline'>Staff writer</div>"
        f"{article}</article></main>"
        f"<aside class='sidebar'><h3>Most read {BOILER_MARK}</h3><ul>{sidebar}</ul></aside></div>"
        f"<footer><p>{footer}</p><p>&copy; 2024 The Daily Example. All rights reserved. {BOILER_MARK}</p>"
        f"</footer><script>{_script(rng, rng.randint(1, 4))}</script></body></html>"
    )


def _record(
    warc_type: str,
    rid: str,
    url: str,
    content: bytes,
    http: bool = False,
    content_type: str = None,
    date: str = "2024-03-01T10:00:00Z",
) -> bytes:
    """One gzip member per record, as Common Crawl writes them."""
    from pcem_spark.io.warc_records import record_bytes

    return gzip.compress(record_bytes(warc_type, rid, url, content, http, content_type, date), compresslevel=6)


def build_crawl(docs: Sequence[Tuple[str, str]], out_dir: str, n_files: int, seed: int) -> Dict[str, object]:
    """Write n_files WARC and WET files of the pages; return their paths and sizes."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    warcs, wets, page_bytes, articles = [], [], [], {}
    per_file = (len(docs) + n_files - 1) // n_files
    for f in range(n_files):
        chunk = docs[f * per_file : (f + 1) * per_file]
        warc_path, wet_path = (
            os.path.join(out_dir, f"crawl-{f:02d}.warc.gz"),
            os.path.join(out_dir, f"crawl-{f:02d}.warc.wet.gz"),
        )
        with open(warc_path, "wb") as w, open(wet_path, "wb") as t:
            info = b"software: scripts/bench_warc.py\r\nformat: WARC File Format 1.1\r\n"
            w.write(_record("warcinfo", f"uuid:info-{f}", None, info, content_type="application/warc-fields"))
            t.write(_record("warcinfo", f"uuid:wetinfo-{f}", None, info, content_type="application/warc-fields"))
            for i, (doc_id, text) in enumerate(chunk):
                url = f"http://news.example/{doc_id}"
                page = make_page(doc_id, text, rng).encode("utf-8")
                page_bytes.append(len(page))
                articles[url] = text
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                    f"Content-Length: {len(page)}\r\nServer: nginx\r\n\r\n"
                ).encode()
                w.write(
                    _record(
                        "request",
                        f"uuid:req-{f}-{i}",
                        url,
                        f"GET /{doc_id} HTTP/1.1\r\nHost: news.example\r\nUser-Agent: bench\r\n\r\n".encode(),
                        http=True,
                    )
                )
                w.write(_record("response", f"uuid:resp-{f}-{i}", url, head + page, http=True))
                w.write(
                    _record(
                        "metadata",
                        f"uuid:meta-{f}-{i}",
                        url,
                        b"fetchTimeMs: 120\r\n",
                        content_type="application/warc-fields",
                    )
                )
                # WET: all visible text of the page (Common Crawl's WET keeps the boilerplate too).
                wet_text = extract_plain_text(HTMLTree.parse(page.decode("utf-8")), main_content=False)
                t.write(
                    _record("conversion", f"uuid:wet-{f}-{i}", url, wet_text.encode("utf-8"), content_type="text/plain")
                )
        warcs.append(warc_path)
        wets.append(wet_path)
    page_bytes.sort()
    return {
        "warc": warcs,
        "wet": wets,
        "pages": len(docs),
        "page_kb_median": page_bytes[len(page_bytes) // 2] / 1024,
        "page_kb_min": page_bytes[0] / 1024,
        "page_kb_max": page_bytes[-1] / 1024,
        "warc_mb": sum(os.path.getsize(p) for p in warcs) / 1e6,
        "wet_mb": sum(os.path.getsize(p) for p in wets) / 1e6,
        "articles": articles,
    }


def _quality(texts: Dict[str, str], articles: Dict[str, str]) -> Dict[str, float]:
    """Share of pages whose extract holds the article's longest line, and share leaking boilerplate."""
    kept = leaked = 0
    for url, text in texts.items():
        lines = [ln.strip() for ln in articles[url].splitlines() if ln.strip()]
        probe = " ".join(max(lines, key=len).split())[:60] if lines else ""
        kept += probe in " ".join(text.split())
        leaked += BOILER_MARK in text
    n = max(len(texts), 1)
    return {"article_kept": kept / n, "boilerplate_leaked": leaked / n}


def bench_fastwarc(files: Sequence[str]) -> Dict[str, object]:
    """pcem_spark.io.warc_records.parse_warc_stream over the files (bytes already in memory), CPU seconds."""
    from pcem_spark.io.warc import DOCUMENT, FILE_SUMMARY
    from pcem_spark.io.warc_records import parse_warc_stream

    blobs = [(p, open(p, "rb").read()) for p in files]
    texts, records, docs = {}, 0, 0
    t0 = time.process_time()
    for path, data in blobs:
        for row in parse_warc_stream(data, path):
            if row.kind == DOCUMENT:
                docs += 1
                texts[row.url] = row.text
            elif row.kind == FILE_SUMMARY:
                records += row.records_read
    cpu = time.process_time() - t0
    return {
        "records": records,
        "documents": docs,
        "cpu_s": cpu,
        "records_per_s": records / cpu,
        "documents_per_s": docs / cpu,
        "texts": texts,
    }


def bench_warcio(files: Sequence[str], extract: str, max_pages: int) -> Dict[str, object]:
    """warcio reading the same bytes; extract = 'trafilatura', 'trafilatura-fast' or 'none' (WET)."""
    from warcio.archiveiterator import ArchiveIterator

    if extract != "none":
        import trafilatura
    blobs = [(p, open(p, "rb").read()) for p in files]
    texts, records, docs = {}, 0, 0
    t0 = time.process_time()
    for _path, data in blobs:
        for rec in ArchiveIterator(io.BytesIO(data)):
            records += 1
            if rec.rec_type not in ("response", "resource", "conversion"):
                continue
            url = rec.rec_headers.get_header("WARC-Target-URI")
            body = rec.content_stream().read()
            if extract == "none":
                text = body.decode("utf-8")
            else:
                if rec.http_headers is None or not rec.http_headers.get_statuscode().startswith("2"):
                    continue
                ctype = (rec.http_headers.get_header("Content-Type") or "").split(";")[0].strip().lower()
                if ctype not in ("text/html", "application/xhtml+xml"):
                    continue
                text = trafilatura.extract(body, fast=(extract == "trafilatura-fast")) or ""
            docs += 1
            texts[url] = text
            if max_pages and docs >= max_pages:
                break
        if max_pages and docs >= max_pages:
            break
    cpu = time.process_time() - t0
    return {
        "records": records,
        "documents": docs,
        "cpu_s": cpu,
        "records_per_s": records / cpu,
        "documents_per_s": docs / cpu,
        "texts": texts,
    }


def _tree_cpu_seconds(root: int) -> Dict[int, float]:
    """utime + stime (s) of ``root`` and every process below it, from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(frontier)
    return {p: cpu[p] for p in tree if p in cpu}


def run_measured(cmd: List[str], cwd: str, every: float = 0.25):
    """Run cmd; return (CompletedProcess-like stderr, wall s, CPU s of its whole process tree).

    The tree (driver, JVM, Python workers) is sampled every ``every`` seconds; a
    process's last sample counts, so at most ``every`` s of each is missed.
    """
    seen: Dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import threading

    err: List[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    reader.start()
    while proc.poll() is None:
        for pid, c in _tree_cpu_seconds(proc.pid).items():
            seen[pid] = max(seen.get(pid, 0.0), c)
        time.sleep(every)
    reader.join()
    proc.stdout.read()
    return proc.returncode, "".join(err), time.perf_counter() - t0, sum(seen.values())


def bench_spark(files: Sequence[str], cores: int, out_dir: str, records: int, documents: int) -> Dict[str, object]:
    """`pcem ingest-warc` in a subprocess on local[cores]: wall and process-tree CPU seconds."""
    out = os.path.join(out_dir, f"docs_local{cores}")
    cmd = [
        sys.executable,
        "-m",
        "pcem_spark.cli",
        "ingest-warc",
        "--input",
        ",".join(files),
        "--output",
        out,
        "--overwrite",
        "--set",
        f"spark.master=local[{cores}]",
        "--set",
        f"spark.conf.spark.default.parallelism={cores}",
    ]
    code, stderr, wall, cpu = run_measured(cmd, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{stderr[-3000:]}")
    m = re.search(r"ingest-warc: .* in ([0-9.]+)s \(", stderr)
    command_s = float(m.group(1)) if m else float("nan")
    with open(os.path.join(out, "_PCEM_COMPLETE"), encoding="utf-8") as fh:
        marker = json.load(fh)
    assert marker["records_read"] == records and marker["documents"] == documents, marker
    return {
        "cores": cores,
        "wall_s": wall,
        "command_s": command_s,
        "tree_cpu_s": cpu,
        "records_per_s": records / command_s,
        "records_per_s_per_core": records / command_s / cores,
        "documents_per_s_per_core": documents / command_s / cores,
        "records_per_cpu_s": records / cpu,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="20NG documents (JSON Lines) for the pages")
    ap.add_argument(
        "--input",
        help="existing WARC files (comma-separated) instead of generated ones: "
        "only the library and Spark timings, no quality figures",
    )
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--files", type=int, default=4, help="WARC (and WET) files to spread the pages over")
    ap.add_argument("--trafilatura-pages", type=int, default=300)
    ap.add_argument("--spark-cores", default="1,2")
    ap.add_argument("--skip-libraries", action="store_true", help="only the Spark runs (e.g. with --input)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default="out/warc_bench")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    data_dir = os.path.join(args.out_dir, "data")
    if args.input:
        crawl = {"warc": args.input.split(","), "wet": [], "articles": None}
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
        t0 = time.perf_counter()
        crawl = build_crawl(load_texts(args.docs, args.pages, args.seed), data_dir, args.files, args.seed)
        print(
            f"built {crawl['pages']} pages ({crawl['page_kb_min']:.0f}-{crawl['page_kb_max']:.0f} KB, "
            f"median {crawl['page_kb_median']:.0f} KB) in {len(crawl['warc'])} WARC ({crawl['warc_mb']:.1f} MB) "
            f"+ WET ({crawl['wet_mb']:.1f} MB) files in {time.perf_counter() - t0:.0f}s",
            flush=True,
        )
    results: Dict[str, object] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "crawl": {k: v for k, v in crawl.items() if k != "articles"},
    }
    lib: Dict[str, Dict[str, object]] = {}
    lib["fastwarc+resiliparse (WARC, main text)"] = bench_fastwarc(crawl["warc"])
    if args.skip_libraries:
        crawl["wet"], lib_runs = [], False
    else:
        lib_runs = True
    if lib_runs:
        lib["warcio+trafilatura (WARC, main text)"] = bench_warcio(crawl["warc"], "trafilatura", args.trafilatura_pages)
        lib["warcio+trafilatura fast=True (WARC, main text)"] = bench_warcio(
            crawl["warc"], "trafilatura-fast", args.trafilatura_pages
        )
    if crawl["wet"]:
        lib["fastwarc (WET)"] = bench_fastwarc(crawl["wet"])
        lib["warcio (WET)"] = bench_warcio(crawl["wet"], "none", 0)
    for name, r in lib.items():
        if crawl["articles"] and "main text" in name:
            r.update(_quality(r["texts"], crawl["articles"]))
        r.pop("texts")
        print(
            f"{name}: {r['documents']} documents, {r['documents_per_s']:.1f} documents/s per core "
            f"({r['records_per_s']:.1f} records/s)"
            + (
                f", article kept {r['article_kept']:.1%}, boilerplate leaked {r['boilerplate_leaked']:.1%}"
                if "article_kept" in r
                else ""
            ),
            flush=True,
        )
    results["single_process"] = lib
    ref = lib["fastwarc+resiliparse (WARC, main text)"]
    spark_runs = []
    for cores in [int(c) for c in args.spark_cores.split(",") if c]:
        r = bench_spark(crawl["warc"], cores, args.out_dir, ref["records"], ref["documents"])
        spark_runs.append(r)
        print(
            f"pcem ingest-warc local[{cores}]: {r['command_s']:.1f}s in the command ({r['wall_s']:.1f}s with JVM "
            f"start), {r['records_per_s_per_core']:.0f} records/s per core, "
            f"{r['documents_per_s_per_core']:.0f} documents/s per core, "
            f"{r['records_per_cpu_s']:.0f} records per CPU-second of the process tree",
            flush=True,
        )
    results["spark"] = spark_runs
    results["machine"]["loadavg_end"] = os.getloadavg()
    out_name = "bench_spark" if args.skip_libraries else "bench"
    with open(os.path.join(args.out_dir, out_name + ".json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    lines = [
        "| reader | documents | documents/s per core | records/s per core | article kept | boilerplate leaked |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in lib.items():
        lines.append(
            f"| {name} | {r['documents']} | {r['documents_per_s']:.1f} | {r['records_per_s']:.1f} | "
            + (f"{r['article_kept']:.1%} | {r['boilerplate_leaked']:.1%} |" if "article_kept" in r else "- | - |")
        )
    lines += [
        "",
        "| pcem ingest-warc | command s | records/s per core | documents/s per core | "
        "records per CPU-s (whole process tree) |",
        "|---|---|---|---|---|",
    ]
    for r in spark_runs:
        lines.append(
            f"| local[{r['cores']}] | {r['command_s']:.1f} | {r['records_per_s_per_core']:.0f} | "
            f"{r['documents_per_s_per_core']:.0f} | {r['records_per_cpu_s']:.0f} |"
        )
    with open(os.path.join(args.out_dir, out_name + ".md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
