"""JSON read strictly (pcem_spark.util.strict_json): a repeated key is an error naming the file, the key and the
line of its second copy, for every JSON text the product reads. No Spark, except the model metadata test."""

import json
import pickle

import pytest

from pcem_spark.cli.failures import EXIT_BAD_INPUT, classify_failure
from pcem_spark.errors import InputError
from pcem_spark.util.strict_json import StrictJSONError, load_strict, loads_strict


def _error(text, where="t.json", **kw):
    with pytest.raises(StrictJSONError) as info:
        loads_strict(text, where, **kw)
    return info.value


# ----------------------------------------------------------------- the helper
@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[]",
        '{"a": 1, "b": [1, 2.5, -3e2, true, false, null, "s"], "c": {"d": {"e": []}}}',
        '[{"k": 1}, {"k": 2}]',
        ' \n\t{"a": "x"}\n',
        '"just a string"',
        '{"": 1, " ": 2}',
    ],
)
def test_valid_json_reads_as_json_loads_reads_it(text):
    assert loads_strict(text, "t.json") == json.loads(text)


def test_a_key_repeated_at_the_top_names_where_the_key_and_both_lines():
    e = _error('{\n  "science": ["physics"],\n  "arts": ["music"],\n  "science": ["biology"]\n}', "tax.json")
    assert (e.where, e.key, e.line, e.column, e.first_line, e.first_column) == ("tax.json", "science", 4, 3, 2, 3)
    assert str(e).startswith('tax.json: line 4, column 3: repeated key "science" (its first copy is at line 2')
    assert isinstance(e, InputError) and isinstance(e, ValueError)


@pytest.mark.parametrize(
    "text,line,column",
    [
        ('{"a": {"b": 1, "b": 2}}', 1, 16),  # depth 2
        ('{"a": [1, {"x": {"y": 0,\n"y": 1}}]}', 2, 1),  # depth 4, inside an array
        ('[[[{"k": 1}, {"k": 2, "k": 3}]]]', 1, 23),  # objects in arrays only
        ('{"a": 1, "b": {"c": {"d": 1}}, "a": 2}', 1, 32),  # the outer object, after a nested one
    ],
)
def test_the_duplicate_is_found_at_any_depth_with_its_line_and_column(text, line, column):
    e = _error(text)
    assert (e.line, e.column) == (line, column)
    assert text.splitlines()[line - 1][column - 1] == '"'  # the column is the key's opening quote


def test_the_first_duplicate_in_the_text_is_reported():
    e = _error('{"a": {"x": 1, "x": 2},\n "b": {"y": 1, "y": 2}}')
    assert (e.key, e.line) == ("x", 1)


def test_a_key_may_repeat_in_different_objects():
    text = '{"a": {"k": 1}, "b": {"k": 2, "a": {"a": 3}}, "c": [{"k": 4}, {"k": 5}]}'
    assert loads_strict(text, "t.json") == json.loads(text)


def test_keys_are_compared_as_decoded_and_escapes_do_not_confuse_the_scan():
    # "\u0061b" is "ab": the same key spelled two ways
    e = _error('{"ab": 1,\n "\\u0061b": 2}')
    assert (e.key, e.line, e.column) == ("ab", 2, 2)
    # quotes, braces, colons and commas inside strings are text, not structure
    text = '{"q\\"{": "}, \\"q\\\\\\"{\\": 2", "x": "{\\"y\\": 1, \\"y\\": 2}", "q\\"{\\u007b": 3}'
    assert loads_strict(text, "t.json") == json.loads(text)
    e = _error('{"q\\"": "x: \\"q\\\\\\"\\", ", "q\\u0022": 2}')
    assert e.key == 'q"' and '"q\\""' in str(e)
    # a non-ASCII key is shown as itself; a lone surrogate as its escape (the message stays valid UTF-8)
    assert '"Ökonomie"' in str(_error('{"Ökonomie": 1, "\\u00d6konomie": 2}'))
    msg = str(_error('{"\\ud800": 1, "\\ud800": 2}'))
    msg.encode("utf-8")
    assert "\\ud800" in msg


def test_a_duplicate_deeper_than_python_recursion_is_still_located():
    depth = 400
    text = '{"a": ' * depth + '{"k": 1, "k": 2}' + "}" * depth
    e = _error(text)
    assert (e.key, e.line, e.column) == ("k", 1, 6 * depth + 10)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_with_their_line_unless_allowed(constant):
    text = '{"a": [1,\n  ' + constant + "]}"
    e = _error(text)
    assert (e.constant, e.key, e.line, e.column) == (constant, None, 2, 3)
    assert f"{constant} is not a JSON value" in str(e)
    assert repr(loads_strict(text, "t.json", allow_nan=True)["a"][1]) == repr(float(constant))
    # allowed constants do not hide a repeated key
    assert _error('{"x": NaN, "x": 1}', allow_nan=True).key == "x"


def test_a_syntax_error_is_still_a_json_decode_error_and_bytes_are_read_as_json_loads_reads_them():
    with pytest.raises(json.JSONDecodeError):
        loads_strict('{"a": 1,}', "t.json")
    assert loads_strict('{"é": 1}'.encode("utf-16"), "t.json") == {"é": 1}
    assert _error(b'{"a": 1, "a": 2}').key == "a"


def test_load_strict_names_the_file_by_default(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"a": 1,\n"a": 2}', encoding="utf-8")
    with open(path, encoding="utf-8") as fh, pytest.raises(StrictJSONError, match=f"^{path}: line 2, column 1"):
        load_strict(fh)


def test_the_error_survives_pickling_and_is_bad_input():
    e = _error('{"a": 1, "a": 2}', "conf.json")
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) and again.key == "a"
    code, message = classify_failure(e)
    assert code == EXIT_BAD_INPUT and "conf.json" in message and '"a"' in message and "line 1" in message


# ----------------------------------------------------------------- the readers
def test_a_taxonomy_file_with_a_repeated_node_is_refused_by_pcem_train(tmp_path, capsys):
    from pcem_spark.cli import main

    tax = tmp_path / "tax.json"
    tax.write_text('{\n  "ROOT": ["a", "b"],\n  "a": ["a1", "a2"],\n  "b": ["b1"],\n  "a": ["a3"]\n}\n')
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "d1", "text": "x", "labels": ["a", "a1"]}\n')
    code = main(["train", "--docs", str(docs), "--taxonomy", str(tax), "--model", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert str(tax) in err and 'repeated key "a"' in err and "line 5" in err
    assert not (tmp_path / "m").exists()


def test_load_descriptions_refuses_a_node_described_twice(tmp_path):
    from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
    from pcem_spark.io.descriptions import load_descriptions

    path = tmp_path / "desc.json"
    path.write_text('{"a": "apples and pears",\n "b": "cars",\n "a": "fruit"}', encoding="utf-8")
    with pytest.raises(TaxonomyError, match=r'desc\.json: line 3, column 2: repeated key "a"'):
        load_descriptions(str(path), Taxonomy({"R": ["a", "b"]}))
    path.write_bytes(b'{"a": "\xff"}')  # not UTF-8: bad input naming the file, not a crash
    with pytest.raises(TaxonomyError, match="cannot read label descriptions"):
        load_descriptions(str(path), Taxonomy({"R": ["a", "b"]}))


def test_the_pathem_descriptions_param_with_a_repeated_key_is_bad_input(spark):
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.ml import PathEM

    docs = spark.createDataFrame([("d1", "apples")], "id string, text string")
    est = PathEM(
        supervision="descriptions",
        taxonomy=Taxonomy({"R": ["a", "b"]}).to_json(),
        descriptions='{"a": "apples", "b": "cars", "a": "fruit"}',
    )
    with pytest.raises(StrictJSONError, match='PathEM descriptions Param: line 1, column 30: repeated key "a"'):
        est.fit(docs)


def test_a_marker_with_a_repeated_key_reads_as_not_complete(tmp_path):
    from pcem_spark.io.arrow_fs import ArrowFS
    from pcem_spark.io.versions import marker_at, parse_marker

    assert parse_marker('{"complete": true, "kind": "model"}') == {"complete": True, "kind": "model"}
    assert parse_marker('{"complete": true, "kind": "model", "kind": "predictions"}') is None
    assert parse_marker('{"complete": false, "complete": true}') is None
    assert parse_marker('{"complete": true, "rows": NaN}') is not None  # what json.dumps writes for a NaN
    out = tmp_path / "out"
    out.mkdir()
    (out / "_PCEM_COMPLETE").write_text('{"complete": true, "kind": "model",\n "run_id": "a", "run_id": "b"}')
    assert marker_at(ArrowFS(str(out)), str(out)) is None


def test_a_superseded_stamp_with_a_repeated_key_starts_its_time_again(tmp_path):
    from pcem_spark.io.arrow_fs import ArrowFS
    from pcem_spark.io.versions import SUPERSEDED, collect_superseded, version_path

    path = str(tmp_path / "out")
    version = version_path(path, "run-a")
    (tmp_path / version.rsplit("/", 1)[1]).mkdir()
    stamp = tmp_path / version.rsplit("/", 1)[1] / SUPERSEDED
    stamp.write_text('{"superseded_at": 1, "superseded_at": 2}')  # as if replaced in 1970: would be collected
    assert collect_superseded(ArrowFS(path), path, keep_seconds=3600) == []
    assert json.loads(stamp.read_text())["superseded_at"] > 1e9  # stamped again, now


def test_a_lease_file_with_a_repeated_key_has_no_known_owner(tmp_path):
    from pcem_spark.io import leases
    from pcem_spark.io.arrow_fs import ArrowFS

    lease_file = tmp_path / ".out.pcem-lease-000000000000"
    lease_file.write_text('{"run_id": "a", "host": "h", "pid": 1, "pid": 2}')
    assert leases._owner(ArrowFS(str(tmp_path / "out")), str(lease_file)) is None
    lease_file.write_text('{"run_id": "a", "host": "h", "pid": 1}')
    assert leases._owner(ArrowFS(str(tmp_path / "out")), str(lease_file))["pid"] == 1


def test_model_metadata_with_a_repeated_key_is_a_damaged_model(spark, tmp_path):
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.model.path_model import PathModel

    path = str(tmp_path / "m")
    meta = '{"format_version": 2, "class": "pcem_spark.model.PathModel", "format_version": 1}'
    with atomic_output(spark, path, "model") as staged:
        spark.createDataFrame([(meta,)], "value string").coalesce(1).write.text(f"{staged.tmp}/metadata")
        spark.createDataFrame([(0, "w")], "index int, term string").write.parquet(f"{staged.tmp}/vocabulary")
        spark.createDataFrame([(0,)], "path_index int").write.parquet(f"{staged.tmp}/parameters")
    with pytest.raises(StrictJSONError) as info:
        PathModel.load(path)
    column = meta.rindex('"format_version"') + 1
    assert str(info.value).startswith(f'{path}/metadata: line 1, column {column}: repeated key "format_version"')
    assert classify_failure(info.value)[0] == EXIT_BAD_INPUT


def test_airflow_spark_conf_with_a_repeated_setting_fails_the_task(monkeypatch):
    from pcem_spark.ops import airflow_submit

    class Fail(Exception):
        pass

    monkeypatch.setattr(airflow_submit, "_airflow_exceptions", lambda: (Exception, Fail))
    assert airflow_submit.parse_spark_conf('{"spark.a": 1, "spark.b": "x"}') == {"spark.a": "1", "spark.b": "x"}
    with pytest.raises(Fail, match=r'spark_conf: line 2, column 2: repeated key "spark\.a"'):
        airflow_submit.parse_spark_conf('{"spark.a": 1,\n "spark.a": 2}')
    # a dict param rendered as a Python literal: the same check
    assert airflow_submit.parse_spark_conf("{'spark.a': 1}") == {"spark.a": "1"}
    with pytest.raises(Fail, match=r"spark_conf: line 1, column 17: repeated key 'spark\.a'"):
        airflow_submit.parse_spark_conf("{'spark.a': 1,  'spark.a': 2}")


def test_a_damaged_env_manifest_is_rebuilt_not_trusted(tmp_path, monkeypatch, capsys):
    from pcem_spark.ops import packaging

    (tmp_path / packaging.ENV_ARCHIVE_NAME).write_bytes(b"old archive")
    (tmp_path / packaging.ENV_MANIFEST_NAME).write_text('{"python": "x", "python": "y"}')
    monkeypatch.setattr(packaging.shutil, "which", lambda name: str(tmp_path / "no-venv-pack"))
    with pytest.raises(SystemExit, match="venv-pack not found"):  # went on to rebuild: the manifest was not trusted
        packaging.build_env_archive(str(tmp_path), pins=["numpy==2.0"])
    assert 'repeated key "python"' in capsys.readouterr().err
