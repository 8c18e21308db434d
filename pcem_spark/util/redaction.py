"""Secrets never printed or stored: the one redaction every setting, path and message goes through.

:func:`redact` takes a string, or a dict / list / tuple of them (recursively), and returns it with
every secret replaced by Spark's marker :data:`REDACTED` (``*********(redacted)``):

* the value of a setting whose **key** matches Spark's ``spark.redaction.regex`` (default
  :data:`DEFAULT_REDACTION_REGEX`: ``(?i)secret|password|token|access[.]?key``): a dict's string value
  (or list of strings) is replaced whole; in text, ``key=value``, ``key: value`` and ``"key": "value"``
  pairs are (so are URL query parameters: ``?X-Amz-Security-Token=...``, and a presigned URL's
  signature or credential);
* the user information of a URL: ``s3a://KEY:SECRET@bucket/path`` -> ``s3a://*********(redacted)@bucket/path``;
* every secret **value** the process knows (:func:`register_secrets`): the values of ``[spark.conf]``
  entries and of environment variables whose names match, the passwords of URLs seen in paths, wherever
  they appear later (a Java exception's message, a traceback). Values shorter than
  :data:`MIN_SECRET_CHARS` characters, and words such as ``true`` or ``none``, are not registered.

The names pcem uses for a document's word tokens (``tokenizer``, ``token_pattern``,
``min_token_length``, a name with the plural ``tokens`` such as ``names_kept_tokens``) are not
secrets, whatever the pattern.

:func:`configure_redaction` sets the pattern (the user's ``spark.redaction.regex`` in ``[spark.conf]``
is honoured) and registers the secrets of the settings and the environment; ``pcem`` calls it as soon
as its settings are loaded. :class:`RedactingFormatter` redacts a whole formatted log record, traceback
included; :func:`redact_log_handlers` puts it on a logger's handlers. :func:`sql_redactions` gives the
same rules for Spark SQL's ``regexp_replace`` (a table's file column). Everything is compiled once: a
call is a few regular-expression scans of its text.
"""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache
from typing import Any, Iterable, List, Mapping, Optional, Pattern, Tuple
from urllib.parse import quote, unquote

from pcem_spark.errors import InputError

__all__ = [
    "REDACTED",
    "DEFAULT_REDACTION_REGEX",
    "REDACTION_REGEX_KEY",
    "MIN_SECRET_CHARS",
    "redact",
    "is_secret_key",
    "configure_redaction",
    "register_secrets",
    "RedactingFormatter",
    "redact_log_handlers",
    "sql_redactions",
]

REDACTED = "*********(redacted)"  # Spark's own marker (Utils.REDACTION_REPLACEMENT_TEXT)
DEFAULT_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key"  # Spark's default spark.redaction.regex
REDACTION_REGEX_KEY = "spark.redaction.regex"
MIN_SECRET_CHARS = 6  # shorter registered values ("pass", "admin") would mangle ordinary text
# Values that are never secrets even under a secret's name (AWS_SESSION_TOKEN=none, a flag's value).
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "default", "redacted"})

# pcem's words for a document's tokens: removed from a key before the pattern is searched in it.
_WORD_TOKENS = re.compile(
    r"(?i)tokeni[sz](?:ers?|ing|ation|ed|es?)|token_?(?:pattern|length|lists?|col)"
    r"|(?<![a-z])(?:min_?token|(?:kept|raw|n)_?tokens|tokens_?per|tokens(?![a-z]))"
)
# A URL's user information: "user:password@" (the password may hold "/"; ":8080/" is a port) or "token@".
_USERINFO = r"""(?:[^\s/@?#:"'<>]*:(?!\d*/)[^\s@"'<>]*|[^\s/@?#:"'<>]+)"""
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>" + _USERINFO + ")@")
# Query parameters that carry a presigned URL's credential whatever the pattern (S3, GCS, Azure SAS).
_URL_SIGNATURE = re.compile(r"(?i)(?P<name>[?&;](?:x-[a-z]+-(?:signature|credential)|signature|sig)=)[^&#\s\"'<>]+")
# A key (quoted or not) and its separator; the value is matched after it (_VALUE) when the key is a secret's.
_KEY_SEP = re.compile(r"""(?P<q>["']?)(?P<name>[A-Za-z_][\w.\-]*)(?P=q)\s*[=:]\s*""")
_VALUE = re.compile(r"""\*{9}\(redacted\)|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,;&"'<>(){}\[\]=]+""")


class _State:
    """The pattern and the registered secrets of this process (one lock for the writers; readers take a reference)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.source = DEFAULT_REDACTION_REGEX
        self.keys: Pattern[str] = re.compile(DEFAULT_REDACTION_REGEX)
        self.secrets: set = set()
        self.values: Optional[Pattern[str]] = None  # an alternation of the registered secrets, longest first


_STATE = _State()


@lru_cache(maxsize=4096)
def _key_matches(pattern: Pattern[str], key: str) -> bool:
    return pattern.search(_WORD_TOKENS.sub(" ", key)) is not None


def is_secret_key(key: str) -> bool:
    """True when a setting named ``key`` holds a secret: ``spark.redaction.regex`` matches it
    (pcem's own word-token names, such as ``tokenizer``, excepted)."""
    return _key_matches(_STATE.keys, key)


def _compile(regex: str) -> Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise InputError(
            f"{REDACTION_REGEX_KEY} = {regex!r}: not a regular expression pcem can use ({exc}); "
            f"Spark's default is {DEFAULT_REDACTION_REGEX!r}"
        ) from None


def _usable(value: str) -> bool:
    return (
        len(value) >= MIN_SECRET_CHARS
        and value.strip().lower() not in _NOT_SECRET_VALUES
        and value not in REDACTED
        and REDACTED not in value
    )


def _add(values: Iterable[str]) -> None:
    """Register ``values`` (and their URL-encoded forms); rebuild the alternation when one is new."""
    new = set()
    for value in values:
        if not isinstance(value, str):
            continue
        value = value.strip()
        for form in {value, quote(value, safe=""), unquote(value)}:
            if _usable(form) and form not in _STATE.secrets:
                new.add(form)
    if not new:
        return
    with _STATE.lock:
        _STATE.secrets |= new
        ordered = sorted(_STATE.secrets, key=lambda s: (-len(s), s))
        _STATE.values = re.compile("|".join(re.escape(s) for s in ordered))


def _secrets_in(text: str) -> List[str]:
    """The secrets written in ``text``: URL passwords and the values of secret ``key=value`` pairs."""
    found = []
    for m in _URL_USERINFO.finditer(text):
        user, colon, password = m.group("userinfo").partition(":")
        if colon:
            found.append(password)
    for m in _KEY_SEP.finditer(text):
        if is_secret_key(m.group("name")):
            v = _VALUE.match(text, m.end())
            if v and v.group(0):
                found.append(v.group(0).strip("\"'"))
    return found


def register_secrets(
    values: Iterable[str] = (),
    *,
    conf: Optional[Mapping[str, Any]] = None,
    environ: Optional[Mapping[str, str]] = None,
    texts: Iterable[Any] = (),
) -> None:
    """Remember secret values, so that :func:`redact` replaces them wherever they appear.

    ``values``: secrets as they are. ``conf`` (Spark settings) and ``environ`` (environment variables):
    the values of the entries whose names match the pattern, and (``conf``) the URL passwords and secret
    ``key=value`` pairs inside any value (``environ``'s too). ``texts`` (paths, arguments; lists of them too): the URL
    passwords and secret pairs written in them.
    """
    found = list(values)
    for key, value in (conf or {}).items():
        value = "" if value is None else str(value)
        if is_secret_key(str(key)):
            found.append(value)
        found += _secrets_in(value)
    for key, value in (environ or {}).items():
        if is_secret_key(str(key)):
            found.append(str(value))
        found += _secrets_in(str(value))  # SPARK_REMOTE=sc://host/;token=..., a URL with a password
    stack = list(texts)
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found += _secrets_in(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    _add(found)


def configure_redaction(
    regex: Optional[str] = None,
    secrets: Iterable[str] = (),
    *,
    conf: Optional[Mapping[str, Any]] = None,
    environ: Optional[Mapping[str, str]] = None,
    texts: Iterable[Any] = (),
) -> None:
    """Set the pattern of secret names and register the secrets of the settings and the environment.

    The pattern: ``regex``, else ``conf["spark.redaction.regex"]`` (the user's, as Spark reads it), else
    :data:`DEFAULT_REDACTION_REGEX`; an invalid one is an :class:`~pcem_spark.errors.InputError`. The
    secrets already registered stay registered (a secret once known is never printed again); then
    ``secrets``, ``conf``, ``environ`` and ``texts`` are registered as :func:`register_secrets` says.
    """
    if regex is None and conf is not None and conf.get(REDACTION_REGEX_KEY):
        regex = str(conf[REDACTION_REGEX_KEY])
    source = regex if regex else DEFAULT_REDACTION_REGEX
    if source != _STATE.source:
        pattern = _compile(source)
        with _STATE.lock:
            _STATE.source, _STATE.keys = source, pattern
    register_secrets(secrets, conf=conf, environ=environ, texts=texts)


def _redact_pairs(text: str) -> str:
    """``text`` with the value of every ``key=value`` / ``key: value`` pair whose key is a secret's replaced."""
    out: List[str] = []
    pos = 0
    for m in _KEY_SEP.finditer(text):
        if m.start() < pos or not is_secret_key(m.group("name")):
            continue
        v = _VALUE.match(text, m.end())
        if not v or not v.group(0):
            continue
        value = v.group(0)
        quote_char = value[0] if value[0] in "\"'" else ""
        if value.strip("\"'") == REDACTED:
            continue
        out += [text[pos : m.end()], f"{quote_char}{REDACTED}{quote_char}"]
        pos = v.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_text(text: str) -> str:
    if not text:
        return text
    if "@" in text and "://" in text:
        passwords: List[str] = []

        def userinfo(m: "re.Match[str]") -> str:
            _, colon, password = m.group("userinfo").partition(":")
            if colon and password not in _STATE.secrets:
                passwords.append(password)
            return m.group("scheme") + REDACTED + "@"

        text = _URL_USERINFO.sub(userinfo, text)
        if passwords:
            _add(passwords)
    values = _STATE.values
    if values is not None:
        text = values.sub(REDACTED, text)
    if "=" in text or ":" in text:
        if "=" in text:
            text = _URL_SIGNATURE.sub(lambda m: m.group("name") + REDACTED, text)
        text = _redact_pairs(text)
    return text


def _hides(value: Any) -> bool:
    """True for a value a secret's key hides whole: a string, or a list of strings (numbers and tables are
    kept: a category named ``passwords`` keeps its scores, and a nested table has keys of its own)."""
    if isinstance(value, (str, bytes)):
        return len(value) > 0
    return isinstance(value, (list, tuple)) and any(isinstance(v, (str, bytes)) for v in value)


def redact(value: Any, *, keys: bool = True) -> Any:
    """``value`` without secrets: a string redacted; a dict, list, tuple or set redacted item by item (a dict's
    string value whose key is a secret's replaced whole, its keys redacted as text); anything else as it is.

    ``keys=False``: the dict keys are not read as setting names, only the strings redacted as text (URL
    credentials, ``key=value`` pairs, the registered secrets) -- for data compared later, such as a checkpoint's
    fingerprint, whose settings must stay what they are whatever the pattern.

    >>> redact("spark.hadoop.fs.s3a.secret.key=abc123XYZ, spark.sql.shuffle.partitions=8")
    'spark.hadoop.fs.s3a.secret.key=*********(redacted), spark.sql.shuffle.partitions=8'
    >>> redact("s3a://AKIA0000:wJalrXUt/EXAMPLEKEY@bucket/docs.jsonl")
    's3a://*********(redacted)@bucket/docs.jsonl'
    >>> redact({"spark.hadoop.fs.s3a.access.key": "AKIA0000", "tokenizer": "python"})
    {'spark.hadoop.fs.s3a.access.key': '*********(redacted)', 'tokenizer': 'python'}
    """
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, dict):
        return {
            (_redact_text(k) if isinstance(k, str) else k): (
                REDACTED if keys and isinstance(k, str) and _hides(v) and is_secret_key(k) else redact(v, keys=keys)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, keys=keys) for v in value]
    if isinstance(value, tuple):
        items = [redact(v, keys=keys) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, (set, frozenset)):
        return type(value)(redact(v, keys=keys) for v in value)
    return value


class RedactingFormatter(logging.Formatter):
    """A log formatter whose whole output -- message, arguments, traceback -- goes through :func:`redact`.

    ``wrapped``: the formatter whose output it redacts (a handler's own, so its layout is kept); without it,
    this formats as :class:`logging.Formatter` does with ``fmt`` / ``datefmt`` / ``style``.
    """

    def __init__(self, fmt=None, datefmt=None, style="%", *, wrapped: Optional[logging.Formatter] = None):
        super().__init__(fmt, datefmt, style)
        self.wrapped = wrapped

    def format(self, record: logging.LogRecord) -> str:
        text = self.wrapped.format(record) if self.wrapped is not None else super().format(record)
        return _redact_text(text)


def redact_log_handlers(logger: Optional[logging.Logger] = None) -> None:
    """Make every handler of ``logger`` (default: the root logger) redact what it writes: its formatter
    (or the default one) wrapped in a :class:`RedactingFormatter`. Calling it again changes nothing."""
    for handler in (logger or logging.getLogger()).handlers:
        if not isinstance(handler.formatter, RedactingFormatter):
            handler.setFormatter(RedactingFormatter(wrapped=handler.formatter or logging.Formatter()))


def sql_redactions(within: Iterable[str] = ()) -> List[Tuple[str, str]]:
    """(Java regex, replacement) pairs that redact a Spark SQL string column with ``regexp_replace``: a URL's
    user information, then the registered secrets written in ``within`` (the input paths the column's values
    come from; the patterns compile in Java and Python alike). Only those: a secret is never put into a query
    plan (the Spark UI, event logs) unless the plan holds it already, as a path it reads."""
    pairs = [(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)" + _USERINFO + "@", "$1" + REDACTED + "@")]
    values = _STATE.values
    if values is not None:
        found = {m.group(0) for text in within if isinstance(text, str) for m in values.finditer(text)}
        if found:
            pairs.append(("|".join(re.escape(s) for s in sorted(found, key=lambda s: (-len(s), s))), REDACTED))
    return pairs
