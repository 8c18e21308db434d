"""JSON read strictly: a repeated key (or a ``NaN`` / ``Infinity`` constant) is an error naming the file and line.

Python's ``json`` keeps the *last* copy of a repeated key without a word: a
taxonomy file with two ``"science"`` entries silently loses the first subtree.
Every JSON text pcem-spark reads from the user or from storage (the taxonomy,
label descriptions, model metadata, completion markers, lease files, ...)
goes through :func:`loads_strict` instead, which raises
:class:`StrictJSONError` (an :class:`~pcem_spark.errors.InputError`: exit 2)
naming the file, the key and the line and column of its second copy.

The C decoder does the work on the happy path (an ``object_pairs_hook`` that
only compares two lengths); only a text with a repeated key or a constant
pays for a second, position-tracking scan that finds its line. A syntax error
is raised as before, as :class:`json.JSONDecodeError` (its message already
names the line and column).
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring
from typing import Any, Dict, List, Optional, Tuple, Union

from pcem_spark.errors import InputError

__all__ = ["StrictJSONError", "loads_strict", "load_strict"]

_CONSTANTS = ("NaN", "Infinity", "-Infinity")
_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace only
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")


class StrictJSONError(InputError):
    """A JSON text that is valid for Python's ``json`` but not strict JSON: a key repeated in one object, or a
    ``NaN`` / ``Infinity`` constant. Bad input (exit 2); the message names ``where``, the key and its line.

    Attributes: ``where``, ``key`` (the repeated key; None for a constant), ``constant`` (the constant's text;
    None for a repeated key), ``line`` and ``column`` (1-based, of the second copy or the constant),
    ``first_line`` and ``first_column`` (of the key's first copy; None for a constant).
    """

    def __init__(
        self,
        where: str,
        line: int,
        column: int,
        key: Optional[str] = None,
        constant: Optional[str] = None,
        first_line: Optional[int] = None,
        first_column: Optional[int] = None,
    ):
        self.where, self.line, self.column = where, line, column
        self.key, self.constant = key, constant
        self.first_line, self.first_column = first_line, first_column
        if key is not None:
            first = f"line {first_line}" if first_line != line else f"column {first_column}"
            message = (
                f"{where}: line {line}, column {column}: repeated key {_quoted(key)} (its first copy is at {first} "
                "of the same object): a key may appear once per object, merge the two copies or rename one"
            )
        else:
            message = f"{where}: line {line}, column {column}: {constant} is not a JSON value (RFC 8259)"
        super().__init__(message)

    def __reduce__(self):  # picklable with its attributes (a Spark worker may raise it)
        return (
            type(self),
            (self.where, self.line, self.column, self.key, self.constant, self.first_line, self.first_column),
        )


class _Found(Exception):
    """Raised inside the C decoder's hooks: the text needs the slow scan."""


def _pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Found
    return obj


def _constant(name: str):
    raise _Found


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)
_DECODER_WITH_CONSTANTS = json.JSONDecoder(object_pairs_hook=_pairs)


def loads_strict(text: Union[str, bytes, bytearray], where: str, *, allow_nan: bool = False) -> Any:
    """``json.loads(text)``, but a key repeated in one object raises :class:`StrictJSONError` naming ``where``
    (the file or setting the text came from), the key, and the line and column of its second copy.

    ``NaN``, ``Infinity`` and ``-Infinity`` are refused the same way unless ``allow_nan`` (for texts that
    pcem-spark's own ``json.dumps`` wrote: its metadata and markers may hold a NaN). A syntax error raises
    :class:`json.JSONDecodeError`, as ``json.loads`` does.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    elif not isinstance(text, str):
        raise TypeError(f"the JSON object must be str or bytes, not {type(text).__name__}")
    decoder = _DECODER_WITH_CONSTANTS if allow_nan else _DECODER
    try:
        return decoder.decode(text)
    except _Found:
        pass
    raise _locate(text, where, allow_nan)


def load_strict(fp, where: Optional[str] = None, *, allow_nan: bool = False) -> Any:
    """:func:`loads_strict` of an open file's content; ``where`` defaults to the file's name."""
    return loads_strict(
        fp.read(), where if where is not None else str(getattr(fp, "name", "JSON")), allow_nan=allow_nan
    )


def _position(text: str, pos: int) -> Tuple[int, int]:
    """(line, column), both 1-based, of the character at ``pos`` (as :class:`json.JSONDecodeError` counts)."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - text.rfind("\n", 0, pos)


def _locate(text: str, where: str, allow_nan: bool) -> StrictJSONError:
    """The error for the first repeated key (by position of its second copy) or refused constant of ``text``.

    A scan of the tokens with a stack of open containers (no recursion, so any depth the C decoder took is
    fine here too): each open object keeps the keys it has seen with their positions.
    """
    stack: List[Optional[Dict[str, int]]] = []  # per open container: an object's keys -> position, None: an array
    key_next = False
    pos, n = 0, len(text)
    while True:
        pos = _WS.match(text, pos).end()
        if pos >= n:
            break
        c = text[pos]
        if c == "{":
            stack.append({})
            key_next = True
            pos += 1
        elif c == "[":
            stack.append(None)
            key_next = False
            pos += 1
        elif c in "}]":
            if stack:
                stack.pop()
            key_next = False
            pos += 1
        elif c == ",":
            key_next = bool(stack) and stack[-1] is not None
            pos += 1
        elif c == ":":
            key_next = False
            pos += 1
        elif c == '"':
            value, end = scanstring(text, pos + 1)  # the key as decoded: "a" and "\u0061" are the same key
            if key_next and stack and stack[-1] is not None:
                seen = stack[-1]
                if value in seen:
                    line, column = _position(text, pos)
                    first_line, first_column = _position(text, seen[value])
                    return StrictJSONError(
                        where, line, column, key=value, first_line=first_line, first_column=first_column
                    )
                seen[value] = pos
            key_next = False
            pos = end
        else:
            m = _SCALAR.match(text, pos)
            if m is None:  # cannot happen after the C decoder's check; stop rather than loop
                break
            if not allow_nan and m.group() in _CONSTANTS:
                line, column = _position(text, pos)
                return StrictJSONError(where, line, column, constant=m.group())
            pos = m.end()
    # Unreachable for a text the hooks flagged; say what is known rather than fail without a message.
    return StrictJSONError(where, 1, 1, constant="a repeated key or a NaN / Infinity constant")


def _quoted(key: str) -> str:
    """A key as a JSON string literal, always encodable as UTF-8 (a lone surrogate as its escape)."""
    s = json.dumps(key, ensure_ascii=False)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
