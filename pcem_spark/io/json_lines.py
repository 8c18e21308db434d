"""The strict JSON-lines parser of the documents reader: one line to one document row or one reject.

Stricter than Spark's JSON source on purpose: a repeated key, a wrong type, trailing
data or a lone surrogate is a reject with its line and a reason, never a silently
coerced row. Pure Python, run on the executors by :mod:`pcem_spark.io.documents`.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import List, Optional, Tuple

__all__ = ["RECORD_CHARS"]

log = logging.getLogger(__name__)


RECORD_CHARS = 1000  # how much of a rejected line the rejects table keeps


class _LineReject(Exception):
    """A line that is not a valid document; ``doc_id`` when it parsed far enough to have one."""

    def __init__(self, reason: str, doc_id: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.doc_id = doc_id


def _json_type(value) -> str:
    """The JSON name of a decoded value's type (bool before number: bool is an int in Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _quoted(s: str) -> str:
    """A string as a JSON literal -- unambiguous about whitespace, same form as the Parquet checks.

    A lone surrogate is written as its escape (``\\ud800``): the result goes
    into a reason, which must be encodable as UTF-8.
    """
    return _escape_surrogates(json.dumps(s, ensure_ascii=False))


def _escape_surrogates(s: str) -> str:
    """``s`` with each lone surrogate written as its ``\\udXXX`` escape: always encodable as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _lone_surrogate(s: str) -> Optional[int]:
    """Index of the first lone surrogate in ``s`` (None if there is none).

    A surrogate is the only thing a Python str can hold that UTF-8 -- and so
    Arrow, Spark and Parquet -- cannot encode. Python's ``json`` turns a
    ``\\ud83d\\ude80`` pair into one character but keeps a lone escape such
    as ``\\ud800`` (valid JSON) as a surrogate.
    """
    try:
        s.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return e.start


def _is_padded(s: str) -> bool:
    return s[:1].isspace() or s[-1:].isspace()


def _reject_constant(name: str):
    # json accepts NaN / Infinity / -Infinity by default; RFC 8259 does not.
    raise _LineReject(f"invalid JSON: {name} is not a JSON value")


_JSON_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace only, not Unicode's


def _first_repeated(keys) -> str:
    seen = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("no repeated key")


class _StrictDecoder:
    """``json`` decoding that notes repeated keys instead of letting the last one win."""

    def __init__(self):
        self.duplicates: List[str] = []
        self._decoder = json.JSONDecoder(object_pairs_hook=self._object, parse_constant=_reject_constant)

    def _object(self, pairs):
        obj = dict(pairs)
        # Cheap test first: only an object with a repeated key pays for finding it.
        if len(obj) != len(pairs) and not self.duplicates:
            self.duplicates.append(_first_repeated(k for k, _ in pairs))
        return obj

    def decode_at(self, line: str, pos: int):
        """(value, end) of the JSON value starting at ``pos``; ``_LineReject`` if it is not valid JSON."""
        try:
            return self._decoder.raw_decode(line, pos)
        except json.JSONDecodeError as e:
            raise _LineReject(f"invalid JSON: {e.msg} at column {e.colno}") from None
        except RecursionError:
            raise _LineReject("invalid JSON: nested too deeply") from None
        except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
            raise _LineReject(f"invalid JSON: {e}") from None


def _string_id(value) -> Optional[str]:
    """The ``id`` of a decoded line if it is an object with a string ``id`` (encodable as UTF-8)."""
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        doc_id = value["id"]
        return doc_id if _lone_surrogate(doc_id) is None else None
    return None


def _decode_one_object(decoder: _StrictDecoder, line: str) -> dict:
    """The single JSON object a line holds, or ``_LineReject`` saying why not."""
    start = _JSON_WS.match(line).end()
    if start == len(line):
        raise _LineReject("empty line (one JSON object per line expected)")
    decoder.duplicates.clear()
    value, end = decoder.decode_at(line, start)
    pos = _JSON_WS.match(line, end).end()
    if pos < len(line):
        _reject_trailing(decoder, line, pos, _string_id(value))
    if not isinstance(value, dict):
        raise _LineReject(f"not a JSON object (got {_json_type(value)}); one JSON object per line expected")
    if decoder.duplicates:
        key = decoder.duplicates[0]
        # The id is not trustworthy when it is the repeated key.
        raise _LineReject(f"duplicate key {key!r}", None if key == "id" else _string_id(value))
    return value


def _reject_trailing(decoder: _StrictDecoder, line: str, pos: int, doc_id: Optional[str]) -> None:
    """Reject a line with content after its first value, counting the values if they all parse."""
    n = 1
    while pos < len(line):
        try:
            _, end = decoder.decode_at(line, pos)
        except _LineReject:
            raise _LineReject(
                f"unexpected content after the JSON value at column {pos + 1}: "
                f"{line[pos : pos + 20]!r} (one JSON object per line expected)",
                doc_id,
            ) from None
        n += 1
        pos = _JSON_WS.match(line, end).end()
    raise _LineReject(f"line holds {n} JSON values (one JSON object per line expected)", doc_id)


def _optional_string(obj: dict, field: str) -> Optional[str]:
    value = obj.get(field)
    if value is not None and not isinstance(value, str):
        raise _LineReject(f"field {field!r}: expected a string, got {_json_type(value)}", _string_id(obj))
    return value


def _check_path(path: list, where: str, doc_id: Optional[str]) -> List[str]:
    """One label path: a non-empty array of non-empty, unpadded strings; ``where`` names it in reasons."""
    if not path:
        raise _LineReject(f"{where}: expected a non-empty array of strings (a path), got an empty array", doc_id)
    for i, label in enumerate(path):
        if not isinstance(label, str):
            raise _LineReject(f"{where}[{i}]: expected a non-empty string, got {_json_type(label)}", doc_id)
        if not label:
            raise _LineReject(f"{where}[{i}]: expected a non-empty string, got an empty string", doc_id)
        if _is_padded(label):
            raise _LineReject(f"{where}[{i}]: {_quoted(label)} has leading or trailing whitespace", doc_id)
    return path


def _check_labels(obj: dict) -> Tuple[Optional[List[List[str]]], Optional[bool]]:
    """``labels`` as ``(paths, nested)``: null, one path (an array of strings) or several (an array of them).

    One path is ``[["a", "a1"]], False``; a list of paths ``[...], True``. Each
    path is a non-empty array of non-empty, unpadded strings; a list of paths
    is non-empty and names no path twice (a repeated path would count twice).
    """
    labels = obj.get("labels")
    if labels is None:
        return None, None
    doc_id = _string_id(obj)
    if not isinstance(labels, list):
        raise _LineReject(
            f"field 'labels': expected an array of strings (a path), an array of such arrays (several paths) "
            f"or null, got {_json_type(labels)}",
            doc_id,
        )
    if not labels:
        raise _LineReject(
            "field 'labels': expected a non-empty array of strings (null for unlabelled), got an empty array", doc_id
        )
    if not isinstance(labels[0], list):
        for i, label in enumerate(labels):
            if isinstance(label, list):
                raise _LineReject(
                    f"labels[{i}]: an array in a path of strings (labels[0] is a {_json_type(labels[0])}); expected "
                    "an array of strings (one path) or an array of arrays of strings (several paths)",
                    doc_id,
                )
        return [_check_path(labels, "labels", doc_id)], False
    seen = {}
    for j, path in enumerate(labels):
        if not isinstance(path, list):
            raise _LineReject(
                f"labels[{j}]: expected an array of strings (a path) like labels[0], got {_json_type(path)}", doc_id
            )
        _check_path(path, f"labels[{j}]", doc_id)
        key = tuple(path)
        if key in seen:
            raise _LineReject(f"labels[{j}]: repeats the path of labels[{seen[key]}]", doc_id)
        seen[key] = j
    return labels, True


def _check_similarities(obj: dict) -> Optional[List[Tuple[str, float]]]:
    """``similarities``: null or an object of node -> finite number, as (key, float) pairs."""
    sims = obj.get("similarities")
    if sims is None:
        return None
    doc_id = _string_id(obj)
    if not isinstance(sims, dict):
        raise _LineReject(f"field 'similarities': expected an object of node -> number, got {_json_type(sims)}", doc_id)
    pairs = []
    for node, score in sims.items():
        if _json_type(score) != "number":
            raise _LineReject(f"similarities[{_quoted(node)}]: expected a number, got {_json_type(score)}", doc_id)
        try:
            value = float(score)
        except OverflowError:  # an integer literal beyond double range
            value = math.inf
        if not math.isfinite(value):
            raise _LineReject(f"similarities[{_quoted(node)}]: expected a finite number, got one out of range", doc_id)
        pairs.append((node, value))
    return pairs


def _check_vector(obj: dict, key: str) -> Optional[List[float]]:
    """The document vector under ``key``: null (absent) or an array of finite numbers, as floats; a line with
    anything else is rejected naming the key and the position (its length is checked against the others'
    later, by :func:`pcem_spark.io.rejects.split_rejects`)."""
    vector = obj.get(key)
    if vector is None:
        return None
    doc_id = _string_id(obj)
    if not isinstance(vector, list):
        raise _LineReject(f"field '{key}': expected an array of numbers, got {_json_type(vector)}", doc_id)
    out = []
    for i, value in enumerate(vector):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _LineReject(f"{key}[{i}]: expected a number, got {_json_type(value)}", doc_id)
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            number = math.inf
        if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
            raise _LineReject(f"{key}[{i}]: expected a finite number (float32), got one out of range", doc_id)
        out.append(number)
    return out


_FLOAT32_MAX = 3.4028234663852886e38  # vectors travel as float32 (engine.blocks)


def _document_of(obj: dict) -> tuple:
    """(id, text, labels, split, similarities, nested) of a decoded object, type-checked, never coerced.

    ``labels`` is a list of paths; ``nested`` says whether the line wrote it
    as one (True), as one path (False) or not at all (None).
    """
    doc_id, text = _optional_string(obj, "id"), _optional_string(obj, "text")
    labels, nested = _check_labels(obj)
    return doc_id, text, labels, _optional_string(obj, "split"), _check_similarities(obj), nested


_SURROGATE_ESCAPES = ("\\ud", "\\uD")  # how a surrogate (U+D800..U+DFFF) is written in JSON


_SURROGATE_HELP = (
    "(not encodable as UTF-8; expected a string of Unicode characters, where a \\ud800-\\udbff "
    "escape is always followed by a \\udc00-\\udfff escape)"
)


def _surrogate_reject(where: str, s: str, of: str, doc_id: Optional[str]) -> None:
    """Raise ``_LineReject`` if ``s`` holds a lone surrogate, naming ``where`` it is and its position."""
    i = _lone_surrogate(s)
    if i is not None:
        raise _LineReject(f"{where}: lone surrogate \\u{ord(s[i]):04x} at character {i}{of} {_SURROGATE_HELP}", doc_id)


def _check_encodable(doc: tuple) -> None:
    """Reject a type-checked document whose strings Arrow cannot take (a lone surrogate).

    Checks every string :func:`_parse_line` returns: id, text, each label,
    split and the similarity keys. Keys other than the five are never
    returned, so a surrogate there is ignored like the rest of them.
    """
    doc_id, text, labels, split, sims, nested = doc
    _surrogate_reject("field 'id'", doc_id or "", "", None)
    _surrogate_reject("field 'text'", text or "", "", doc_id)
    for j, path in enumerate(labels or ()):
        for i, label in enumerate(path):
            _surrogate_reject(f"labels[{j}][{i}]" if nested else f"labels[{i}]", label, "", doc_id)
    _surrogate_reject("field 'split'", split or "", "", doc_id)
    for node, _ in sims or ():
        _surrogate_reject(f"similarities[{_quoted(node)}]", node, " of the key", doc_id)


def _parse_line(decoder: _StrictDecoder, data: bytes, first_line: bool, vector_key: Optional[str] = None) -> tuple:
    """One raw line -> (id, text, labels, split, similarities, raw_record, reason, nested), and its document
    vector (:func:`_check_vector`) as a ninth field when ``vector_key`` names one.

    ``raw_record`` and ``reason`` are null for a line that is a well-typed
    document (its id and text may still be missing: :func:`split_rejects`
    decides those). A rejected line has only its id (when known), the first
    :data:`RECORD_CHARS` characters of the raw line and the reason.
    """
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raw = data[: 4 * RECORD_CHARS].decode("utf-8", "backslashreplace")[:RECORD_CHARS]
        return _with_vector(
            (None, None, None, None, None, raw, f"invalid UTF-8 at byte {e.start + 1}", None), vector_key
        )
    if line.startswith("\ufeff"):
        if not first_line:  # e.g. files concatenated with their byte-order marks
            bom = "byte-order mark (U+FEFF) at the start of a line other than line 1"
            return _with_vector((None, None, None, None, None, line[:RECORD_CHARS], bom, None), vector_key)
        line = line[1:]  # a UTF-8 byte-order mark, written by some Windows tools
    try:
        obj = _decode_one_object(decoder, line)
        doc = _document_of(obj)
        vector = _check_vector(obj, vector_key) if vector_key else None
        # Only a line with a surrogate escape can decode to a str that is not valid Unicode text:
        # the others pay one substring search, not an encoding of every string.
        if _SURROGATE_ESCAPES[0] in line or _SURROGATE_ESCAPES[1] in line:
            _check_encodable(doc)
        return _with_vector(doc[:5] + (None, None, doc[5]), vector_key, vector)
    except _LineReject as e:
        # The raw line came from valid UTF-8, so it is encodable; a reason or an id built from decoded
        # strings may hold a lone surrogate (e.g. a repeated key "\ud800"), which Arrow cannot take.
        doc_id = e.doc_id if e.doc_id is None or _lone_surrogate(e.doc_id) is None else None
        reason = _escape_surrogates(e.reason)
        return _with_vector((doc_id, None, None, None, None, line[:RECORD_CHARS], reason, None), vector_key)


def _with_vector(fields: tuple, vector_key: Optional[str], vector: Optional[List[float]] = None) -> tuple:
    """``fields`` with the vector as a ninth field when the line's vectors are read."""
    return fields + (vector,) if vector_key else fields
