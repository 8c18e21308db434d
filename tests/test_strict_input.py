"""Strict JSON Lines input: every malformed line is a reject with a reason, nothing is coerced.

``tests/data/malformed.jsonl`` is a catalogue with one line per kind of
problem (plus valid lines); ``tests/data/malformed_expected.json`` maps each
rejected line number to the reject's id and a reason substring.
"""

import gzip
import json
import math
import os
import shutil

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.io.documents import DOCUMENT_SCHEMA, DocumentsError, read_documents
from pcem_spark.io.rejects import split_rejects

DATA = os.path.join(os.path.dirname(__file__), "data")
CATALOGUE = os.path.join(DATA, "malformed.jsonl")


def _expected_rejects():
    with open(os.path.join(DATA, "malformed_expected.json"), encoding="utf-8") as fh:
        expected = json.load(fh)
    return {int(line): want for line, want in expected.items() if not line.startswith("_")}


def _raw_lines(path=CATALOGUE):
    with open(path, "rb") as fh:
        return fh.read().splitlines()


@pytest.fixture(scope="module")
def catalogue(spark):
    """(raw, good, rejects) of the catalogue, read once for the module's tests."""
    raw = read_documents(spark, CATALOGUE)
    good, rejects = split_rejects(raw)
    return raw, good, rejects


def test_every_malformed_line_is_rejected_with_its_reason(catalogue):
    _, _, rejects = catalogue
    expected = _expected_rejects()
    got = {r["line"]: r for r in rejects.collect()}
    assert sorted(got) == sorted(expected)
    for line, want in expected.items():
        row = got[line]
        assert want["reason"] in row["reason"], f"line {line}: {row['reason']!r}"
        assert row["id"] == want["id"], f"line {line}: id {row['id']!r}"
        assert row["source_file"].endswith("malformed.jsonl")


def test_a_rejected_line_keeps_its_raw_text(catalogue):
    _, _, rejects = catalogue
    raw = _raw_lines()
    records = {r["line"]: r["record"] for r in rejects.collect()}
    assert records[3] == raw[2].decode()  # both objects, as written
    assert records[21] == ""  # the empty line
    assert records[23] == '{"id": "bad-utf8", "text": "caf\\xe9"}'  # the bad byte, visible
    # Rejected after parsing (duplicate id): the parsed row as JSON.
    assert json.loads(records[28]) == {"id": "dup-id", "text": "one"}


def test_valid_lines_come_through_with_exact_values(spark, catalogue):
    _, good, _ = catalogue
    expected = spark.createDataFrame(
        [
            ("ok-1", "a valid document", ["sci", "sci.space"], "train", None),
            ("ok-2", "unlabelled, with scores", None, None, {"sci": 0.5, "rec": 1.0}),
            ("ok-3", "line one\nline two \u2014 \u00fcn\u00efcode", ["rec"], "test", None),
            ("ok-crlf", "windows line end", ["sci", "sci.space"], None, None),
        ],
        DOCUMENT_SCHEMA,
    )
    # Sorted by id rather than ignore_row_order: chispa's sort cannot hash a map column.
    assert_df_equality(good.orderBy("id"), expected.orderBy("id"), ignore_nullable=True)


def test_rows_in_equal_valid_plus_rejects(catalogue):
    raw, good, rejects = catalogue
    n_lines = len(_raw_lines())
    assert n_lines == 39
    assert raw.count() == n_lines == good.count() + rejects.count()


def test_gzip_input_gives_the_same_verdicts(spark, tmp_path, catalogue):
    _, _, plain_rejects = catalogue
    path = str(tmp_path / "malformed.jsonl.gz")
    with open(CATALOGUE, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    good, rejects = split_rejects(read_documents(spark, path))
    assert good.count() == 4
    assert_df_equality(rejects.drop("source_file"), plain_rejects.drop("source_file"), ignore_row_order=True)


def test_lines_of_a_split_file_are_all_read_once(spark, tmp_path):
    """A plain file split in several parts: every line read once, and the rejects keep their exact line."""
    path = str(tmp_path / "big.jsonl")
    lines = [json.dumps({"id": f"d{i}", "text": "x" * 40}) for i in range(300)]
    lines[0] = lines[-1] = "oops"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        raw = read_documents(spark, path)
        good, rejects = split_rejects(raw)
        assert raw.rdd.getNumPartitions() > 1
        assert raw.count() == good.count() + rejects.count() == 300
        assert good.count() == 298
        assert sorted(r["id"] for r in good.collect()) == sorted(f"d{i}" for i in range(1, 299))
        assert {r["line"] for r in rejects.collect()} == {1, 300}  # in the first split and in the last
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)


def _write_gz(path, docs):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(d) + "\n" for d in docs))


def test_a_folder_of_jsonl_gz_files_is_json(spark, tmp_path):
    folder = tmp_path / "docs"  # no extension on the folder
    folder.mkdir()
    _write_gz(str(folder / "part-0.jsonl.gz"), [{"id": "a", "text": "x"}, {"id": "b", "text": 1}])
    _write_gz(str(folder / "part-1.jsonl.gz"), [{"id": "c", "text": "y"}])
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-0.jsonl.gz.crc").write_bytes(b"\x00\x01")
    good, rejects = split_rejects(read_documents(spark, str(folder)))
    assert sorted(r["id"] for r in good.collect()) == ["a", "c"]
    (bad,) = rejects.collect()
    assert (bad["id"], bad["line"], bad["reason"]) == ("b", 2, "field 'text': expected a string, got number")
    assert bad["source_file"].endswith("part-0.jsonl.gz")


def test_a_folder_of_parquet_files_is_parquet(spark, tmp_path):
    folder = str(tmp_path / "docs")
    spark.createDataFrame([("a", "x", ["sci"])], "id string, text string, labels array<string>").write.parquet(folder)
    good, rejects = split_rejects(read_documents(spark, folder))
    assert [r["id"] for r in good.collect()] == ["a"] and rejects.count() == 0


def test_extensionless_parquet_is_recognised_by_its_magic(spark, tmp_path):
    folder = tmp_path / "docs"
    spark.createDataFrame([("a", "x")], "id string, text string").coalesce(1).write.parquet(str(folder))
    hive = tmp_path / "hive"
    hive.mkdir()
    (part,) = [p for p in folder.iterdir() if p.name.endswith(".parquet")]
    shutil.copy(part, hive / "000000_0")
    good, _ = split_rejects(read_documents(spark, str(hive)))
    assert [r["id"] for r in good.collect()] == ["a"]


def test_a_mixed_folder_is_an_error_naming_it(spark, tmp_path):
    folder = tmp_path / "mixed"
    spark.createDataFrame([("a", "x")], "id string, text string").write.parquet(str(folder))
    _write_gz(str(folder / "more.jsonl.gz"), [{"id": "b", "text": "y"}])
    with pytest.raises(DocumentsError, match=r"mixed'? mixes JSON Lines files .* and Parquet files"):
        read_documents(spark, str(folder))


def test_unknown_files_need_an_explicit_format(spark, tmp_path):
    folder = tmp_path / "txt"
    folder.mkdir()
    (folder / "docs.txt").write_text('{"id": "a", "text": "x"}\n')
    with pytest.raises(DocumentsError, match=r"cannot tell the format of .*docs.txt"):
        read_documents(spark, str(folder))
    good, _ = split_rejects(read_documents(spark, str(folder), fmt="json"))
    assert [r["id"] for r in good.collect()] == ["a"]


def test_parquet_rows_get_the_element_checks_parquet_types_do_not_make(spark, tmp_path):
    path = str(tmp_path / "docs.parquet")
    schema = T.StructType([f for f in DOCUMENT_SCHEMA.fields if f.name != "split"])
    spark.createDataFrame(
        [
            ("ok", "x", ["sci", "sci.space"], {"sci": 0.5}),
            ("null-label", "x", ["sci", None], None),
            ("empty-labels", "x", [], None),
            ("padded", "x", ["sci", "space "], None),
            ("empty-label", "x", ["", "sci"], None),
            ("null-score", "x", None, {"sci": None}),
            ("nan-score", "x", None, {"sci": math.nan}),
            ("", "empty id", None, None),
        ],
        schema,
    ).write.parquet(path)
    raw = read_documents(spark, path)
    good, rejects = split_rejects(raw)
    assert [r["id"] for r in good.collect()] == ["ok"]
    got = {r["id"]: r["reason"] for r in rejects.collect()}
    assert got == {
        "null-label": "labels[1]: expected a non-empty string, got null",
        "empty-labels": "field 'labels': expected a non-empty array of strings (null for unlabelled), "
        "got an empty array",
        "padded": 'labels[1]: "space " has leading or trailing whitespace',
        "empty-label": "labels[0]: expected a non-empty string, got an empty string",
        "null-score": 'similarities["sci"]: expected a finite number, got null',
        "nan-score": 'similarities["sci"]: expected a finite number, got NaN',
        "": "field 'id' is missing or empty",
    }
    assert rejects.where(F.col("line").isNotNull()).count() == 0
    assert raw.count() == good.count() + rejects.count() == 8


def test_a_byte_order_mark_is_accepted_on_line_1_only(spark, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "x"}\n\xef\xbb\xbf{"id": "b", "text": "y"}\n')
    good, rejects = split_rejects(read_documents(spark, str(path)))
    assert [r["id"] for r in good.collect()] == ["a"]
    assert [(r["line"], r["reason"]) for r in rejects.collect()] == [
        (2, "byte-order mark (U+FEFF) at the start of a line other than line 1")
    ]


def test_an_id_shared_with_a_malformed_line_is_a_duplicate(spark, tmp_path):
    """No copy is more authoritative: fixing the malformed line must not silently add a duplicate."""
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": 5}\n')
    good, rejects = split_rejects(read_documents(spark, str(path)))
    assert good.count() == 0
    assert sorted((r["line"], r["reason"]) for r in rejects.collect()) == [
        (1, "duplicate id: 2 rows share this id"),
        (2, "field 'text': expected a string, got number"),
    ]


# ---------------------------------------------------------------------------
# Lone surrogates: valid JSON, but not encodable as UTF-8 (so not as an Arrow string)
# ---------------------------------------------------------------------------

_SURROGATE_REASON = "(not encodable as UTF-8"


def test_a_lone_surrogate_is_a_reject_naming_the_field_not_a_failed_job(spark, tmp_path):
    r"""``\ud800`` alone decodes to a str Arrow cannot take: the line is a reject, the rest of the file is read."""
    lines = [
        r'{"id": "ok-1", "text": "before"}',
        r'{"id":"s1","text":"apple \ud800 apricot"}',
        r'{"id": "s-label", "text": "x", "labels": ["sci", "sci.\udc00space"]}',
        r'{"id": "s-split", "text": "x", "split": "tr\uDBFFain"}',
        r'{"id": "s-sims", "text": "x", "similarities": {"ok": 1, "k\ud800": 0.5}}',
        r'{"id": "s\ud800id", "text": "x"}',
        r'{"id": "s-reversed", "text": "\udc00\ud800"}',
        # A surrogate where it is reported by another check: the reason must not carry it raw.
        r'{"id": "s-padded", "text": "x", "labels": [" \ud800"]}',
        r'{"id": "s-sims-type", "text": "x", "similarities": {"\ud800": "high"}}',
        r'{"id": "s-dup", "text": "x", "extra": {"\ud800": 1, "\ud800": 2}}',
        r'{"id": "s\ud800bad-id", "text": 5}',
        # Valid: a surrogate pair is one character; a lone surrogate in an ignored key or value is ignored.
        r'{"id": "ok-pair", "text": "rocket \ud83d\ude80 launch"}',
        r'{"id": "ok-ignored", "text": "y", "extra\ud800": "\udfff", "x": ["\ud800"]}',
        r'{"id": "ok-escaped", "text": "a backslash then \\ud800, not an escape"}',
    ]
    path = tmp_path / "surrogates.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    raw = read_documents(spark, str(path))
    good, rejects = split_rejects(raw)
    expected_good = spark.createDataFrame(
        [
            ("ok-1", "before", None, None, None),
            ("ok-pair", "rocket \U0001f680 launch", None, None, None),
            ("ok-ignored", "y", None, None, None),
            ("ok-escaped", "a backslash then \\ud800, not an escape", None, None, None),
        ],
        DOCUMENT_SCHEMA,
    )
    assert_df_equality(good.orderBy("id"), expected_good.orderBy("id"), ignore_nullable=True)
    got = {r["line"]: r for r in rejects.collect()}
    expected = {
        2: ("s1", r"field 'text': lone surrogate \ud800 at character 6 " + _SURROGATE_REASON),
        3: ("s-label", r"labels[1]: lone surrogate \udc00 at character 4 " + _SURROGATE_REASON),
        4: ("s-split", r"field 'split': lone surrogate \udbff at character 2 " + _SURROGATE_REASON),
        5: ("s-sims", r'similarities["k\ud800"]: lone surrogate \ud800 at character 1 of the key ' + _SURROGATE_REASON),
        6: (None, r"field 'id': lone surrogate \ud800 at character 1 " + _SURROGATE_REASON),
        7: ("s-reversed", r"field 'text': lone surrogate \udc00 at character 0 " + _SURROGATE_REASON),
        8: ("s-padded", r'labels[0]: " \ud800" has leading or trailing whitespace'),
        9: ("s-sims-type", r'similarities["\ud800"]: expected a number, got string'),
        10: ("s-dup", r"duplicate key '\ud800'"),
        11: (None, "field 'text': expected a string, got number"),
    }
    assert sorted(got) == sorted(expected)
    for line, (doc_id, reason) in expected.items():
        row = got[line]
        assert row["reason"].startswith(reason), f"line {line}: {row['reason']!r}"
        assert row["id"] == doc_id, f"line {line}: id {row['id']!r}"
        assert row["record"] == lines[line - 1]  # the raw line: the escape as written, 6 ASCII characters
    assert got[2]["reason"].endswith(")")
    assert raw.count() == good.count() + rejects.count() == len(lines)
    # The rejects table is writable as it is (every string in it is valid UTF-8).
    rejects.write.parquet(str(tmp_path / "rejects"))
    assert spark.read.parquet(str(tmp_path / "rejects")).count() == len(expected)


def test_a_lone_surrogate_in_a_gz_file_is_a_reject_too(spark, tmp_path):
    path = str(tmp_path / "s.jsonl.gz")
    with gzip.open(path, "wt", encoding="ascii") as fh:
        fh.write('{"id": "a", "text": "x"}\n{"id":"s1","text":"apple \\ud800 apricot"}\n')
    good, rejects = split_rejects(read_documents(spark, path))
    assert [r["id"] for r in good.collect()] == ["a"]
    assert [(r["id"], r["line"], r["reason"].split(" (")[0]) for r in rejects.collect()] == [
        ("s1", 2, r"field 'text': lone surrogate \ud800 at character 6")
    ]


# ---------------------------------------------------------------------------
# Line numbers of rejects when a file is read in several splits
# ---------------------------------------------------------------------------


@pytest.fixture
def small_splits(spark):
    """Plain files split every 300 bytes (restored afterwards)."""
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "300")
    try:
        yield 300
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)


def _mixed_lines(prefix):
    """41 lines, 13 of them rejects of different kinds scattered through (first and last line included)."""
    lines = [
        json.dumps({"id": f"{prefix}{i}", "text": f"document {i} " + "w" * (i % 7), "labels": ["sci"]})
        for i in range(1, 42)
    ]
    bad = {
        1: '{"id": "%s-two", "text": "a"}{"id": "%s-x", "text": "b"}' % (prefix, prefix),
        4: '{"id": "%s-trail", "text": "t"} xyz' % prefix,
        7: '{"id": "%s-num", "text": 12345}' % prefix,
        10: '{"id": "%s-broken", "text": ' % prefix,
        13: "",
        16: '{"id": "%s-labels", "text": "x", "labels": "sci/sci.space"}' % prefix,
        19: '{"id": "%s-dup", "text": "one", "labels": ["sci"]}' % prefix,
        22: '[{"id": "%s-arr", "text": "a"}]' % prefix,
        25: '{"id": "%s-dupkey", "text": "a", "text": "b"}' % prefix,
        28: '{"id": "%s-nan", "text": "x", "similarities": {"sci": NaN}}' % prefix,
        31: '{"id": "%s-dup", "text": "two", "labels": ["sci"]}' % prefix,
        35: '{"text": "who am i"}',
        41: '{"id": "%s-notext", "labels": ["sci"]}' % prefix,
    }
    for line, text in bad.items():
        lines[line - 1] = text
    return lines, sorted(bad)


def _file_lines(path):
    """The file's lines as Python enumerates them (``\\n`` or ``\\r\\n``), decompressed if ``.gz``."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return fh.read().decode("utf-8").splitlines()


def _assert_lines_address_rejects(rejects, files):
    """Every reject's ``line`` is exact: it points at the line it came from, and no line is missed."""
    rows = rejects.collect()
    by_file = {}
    for r in rows:
        assert r["line"] is not None, f"{r['source_file']}: {r['reason']!r} has no line number"
        by_file.setdefault(os.path.basename(r["source_file"]), []).append(r)
    assert sorted(by_file) == sorted(files)
    for name, (file_lines, bad) in files.items():
        assert sorted(r["line"] for r in by_file[name]) == bad, name
        for r in by_file[name]:
            text = file_lines[r["line"] - 1]
            # The parser keeps the raw line; rows rejected after parsing keep the parsed row as JSON.
            assert r["record"] == text or json.loads(r["record"]) == json.loads(text), (
                f"{name} line {r['line']}: {r['record']!r} is not {text!r}"
            )


def _n_splits(spark, path):
    return spark.read.text(path).select(F.input_file_block_start()).distinct().count()


@pytest.mark.slow
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["LF", "CRLF"])
def test_every_reject_of_a_split_file_has_its_exact_line(spark, tmp_path, small_splits, newline):
    path = str(tmp_path / "mixed.jsonl")
    lines, bad = _mixed_lines("d")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(newline.join(lines) + newline)
    file_lines = _file_lines(path)
    assert file_lines == lines and len(file_lines) == 41
    assert _n_splits(spark, path) > 5  # ~3 KB in 300-byte splits
    raw = read_documents(spark, path)
    good, rejects = split_rejects(raw)
    assert good.count() + rejects.count() == raw.count() == spark.read.text(path).count() == len(file_lines)
    assert rejects.count() == len(bad) == 13
    _assert_lines_address_rejects(rejects, {"mixed.jsonl": (file_lines, bad)})


def test_line_numbers_count_per_file_in_a_folder_of_split_and_gz_files(spark, tmp_path, small_splits):
    folder = tmp_path / "docs"
    folder.mkdir()
    files = {}
    for name, prefix, newline in [("a.jsonl", "a", "\n"), ("b.jsonl.gz", "b", "\n"), ("c.jsonl", "c", "\r\n")]:
        lines, bad = _mixed_lines(prefix)
        path = str(folder / name)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8", newline="") as fh:
            fh.write(newline.join(lines) + newline)
        files[name] = (_file_lines(path), bad)
    assert _n_splits(spark, str(folder / "b.jsonl.gz")) == 1  # gzip is never split
    assert _n_splits(spark, str(folder / "a.jsonl")) > 5
    raw = read_documents(spark, str(folder))
    good, rejects = split_rejects(raw)
    assert good.count() + rejects.count() == raw.count() == 3 * 41
    # "{"text": "who am i"}" has no id: the same line in each file is one reject each, not a duplicate.
    assert rejects.count() == 3 * 13
    _assert_lines_address_rejects(rejects, files)


def _catalogue_copy(tmp_path):
    path = str(tmp_path / "docs.jsonl")
    shutil.copy(CATALOGUE, path)
    return path


def test_an_input_replaced_while_it_is_read_is_transient_and_a_count_that_disagrees_is_not(
    spark, tmp_path, monkeypatch
):
    """The parse and the stored count disagree because the writer appended rows between them: exit 75
    (a retry reads one version); when a fresh read still disagrees, a RuntimeError (exit 1)."""
    import pcem_spark.io.documents as documents
    from pcem_spark.cli.failures import EXIT_BUG, EXIT_TRANSIENT, classify_failure
    from pcem_spark.cli.inputs import DocsOptions, _read_checked
    from pcem_spark.errors import TransientError

    real_count = documents.count_input_rows
    path = _catalogue_copy(tmp_path)
    n = len(_raw_lines(path))
    # The catalogue reads consistently as it is.
    assert _read_checked(spark, path, DocsOptions())[4] == n

    def count_after_the_writer_appends(spark, *args, **kwargs):
        if not os.path.exists(path + ".appended"):
            with open(path, "a", encoding="utf-8") as fh:
                fh.write('{"id": "late1", "text": "appended"}\n{"id": "late2", "text": "appended"}\n')
            open(path + ".appended", "w").close()
        return real_count(spark, *args, **kwargs)

    monkeypatch.setattr(documents, "count_input_rows", count_after_the_writer_appends)
    with pytest.raises(
        TransientError,
        match=f"changed while this run read it: {n} rows parsed, then {n + 2} stored \\(its files. sizes changed\\)",
    ) as err:
        _read_checked(spark, path, DocsOptions())
    assert classify_failure(err.value)[0] == EXIT_TRANSIENT

    # A count that never matches the parser, the input unchanged: not a retry's business.
    monkeypatch.setattr(documents, "count_input_rows", lambda spark, *a, **k: real_count(spark, *a, **k) + 1)
    with pytest.raises(RuntimeError, match="rows stored but") as err:
        _read_checked(spark, path, DocsOptions())
    assert not isinstance(err.value, TransientError) and classify_failure(err.value)[0] == EXIT_BUG
