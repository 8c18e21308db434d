"""Text -> term-count CSR blocks in the Python worker, token for token as the JVM tokenizer.

``pcem predict`` spent most of its time in Spark ML's featurisation, not in
scoring: ``RegexTokenizer``, ``StopWordsRemover`` and ``CountVectorizerModel``
on the JVM, then every SparseVector serialised into Arrow for the Python
worker that scores it (docs/BENCHMARKS.md, prediction throughput). A model's
vocabulary is fixed, so prediction only needs, per document, the multiset of
its tokens that are vocabulary terms. :class:`TextFeaturizer` computes it in
the scoring task itself, from the Arrow text column:

1. NFKC (``unicodedata``; ICU on the JVM), only when the text is not
   already normalised;
2. CJK runs split into characters or bigrams by the same regular expression
   as :func:`pcem_spark.engine.features.split_cjk`;
3. lower case (``str.lower``; ``String.toLowerCase`` on the JVM: both apply
   Unicode's default case mapping, final sigma included -- the JVM's under
   its default locale, so an executor in a Turkish locale would differ);
4. the tokens of the default pattern ``(?U)\\b\\w*\\p{L}\\w*\\b`` (maximal runs of
   word characters holding a letter), with the JVM's own ``\\w`` and ``\\p{L}``
   (:mod:`pcem_spark.engine.unicode_classes`, generated from the JVM);
5. one lookup of every distinct token of a block in the vocabulary, counts
   summed per document.

The length and stop-word filters need not run per token: a token they drop is
a vocabulary term only if the vocabulary holds such terms, so those terms are
taken out of the lookup table once instead (:func:`reachable_vocabulary`).
Only the default token pattern is supported (:func:`supports`); any other
pattern keeps the JVM path. ASCII texts take a shortcut with the same
result: one byte-table lookup over their Arrow buffer. tests/test_python_tokens.py
compares the counts with Spark ML's featurisation on a multilingual fixture
and the tokens on every code point; docs/BENCHMARKS.md on all 18,846 posts
of 20 Newsgroups. The one known difference: characters newer than Python's
Unicode database that Spark's ICU normalises (under 256, Unicode 15-16).
"""

from __future__ import annotations

import re
import unicodedata
from typing import List, Optional, Sequence

import numpy as np
import scipy.sparse as sp

from pcem_spark.engine.feature_settings import (  # TOKENIZERS re-exported: where prediction tokenises
    BIGRAM_REGEX,
    CJK_CHAR,
    DEFAULT_TOKEN_PATTERN,
    TOKENIZERS,
    FeatureSettings,
)
from pcem_spark.engine.unicode_classes import CJK, LETTER, WORD

__all__ = [
    "TOKENIZERS",
    "code_points",
    "code_point_table",
    "char_class",
    "supports",
    "reachable_vocabulary",
    "TextFeaturizer",
]


def code_points(ranges: str) -> List[int]:
    """The sorted code points of a :mod:`unicode_classes` string (``"0030-0039 00AA ..."``)."""
    out: List[int] = []
    for run in ranges.split():
        first, _, last = run.partition("-")
        out.extend(range(int(first, 16), int(last or first, 16) + 1))
    return out


def code_point_table(ranges: str) -> np.ndarray:
    """(0x110000,) bool: True at the code points of a :mod:`unicode_classes` string."""
    table = np.zeros(0x110000, dtype=bool)
    for run in ranges.split():
        first, _, last = run.partition("-")
        table[int(first, 16) : int(last or first, 16) + 1] = True
    return table


def char_class(ranges: str) -> str:
    """A Python regex matching one character of ``ranges``, fast on the Basic Multilingual Plane.

    ``re`` compiles a class of BMP characters into a bitmap, but one holding
    any astral code point into a list of ranges tested one by one. So the
    astral part is a second class, tried only after one cheap range test says
    the character is astral.
    """
    bmp, astral = [], []
    for run in ranges.split():
        first, _, last = run.partition("-")
        a, b = int(first, 16), int(last or first, 16)
        if a <= 0xFFFF:
            bmp.append((a, min(b, 0xFFFF)))
        if b > 0xFFFF:
            astral.append((max(a, 0x10000), b))

    def klass(runs):
        return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in runs) + "]"

    if not astral:
        return klass(bmp)
    return f"(?:{klass(bmp)}|(?=[\U00010000-\U0010ffff]){klass(astral)})"


_CJK_CLASS = char_class(CJK)
_CJK_CHARS = re.compile(f"({_CJK_CLASS})")
# features.BIGRAM_REGEX with the Java class replaced by ours; an unmatched group is "" in both engines.
_CJK_BIGRAMS = re.compile(BIGRAM_REGEX.replace(CJK_CHAR, _CJK_CLASS))
# Joins a block's documents into one string: a control character, never a word character, so no token spans
# two documents; NFKC composes nothing with it and lower case keeps it.
_SEP = "\x00"


def supports(settings: FeatureSettings) -> bool:
    """True when these settings tokenise here exactly as on the JVM (the default token pattern)."""
    return settings.token_pattern == DEFAULT_TOKEN_PATTERN


def _utf32(text: str) -> np.ndarray:
    """The code points of ``text`` as a (len(text),) uint32 array."""
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def reachable_vocabulary(vocabulary: Sequence[str], settings: FeatureSettings, stop_words: Sequence[str] = ()):
    """``vocabulary`` with None for each term the JVM tokenizer can never emit under ``settings``.

    A token of the default pattern is a run of word characters holding a
    letter; StopWordsRemover drops the stop words (compared in lower case) and
    RegexTokenizer the tokens shorter than ``min_token_length`` UTF-16 units
    (CJK tokens exempt unless ``cjk = "none"``). A fitted vocabulary holds no
    such term; a vocabulary from elsewhere might. Keeping the positions keeps
    the column indices of the model.
    """
    terms = list(vocabulary)
    lengths = np.fromiter((len(t) for t in terms), dtype=np.int64, count=len(terms))
    codes = _utf32("".join(terms))
    # Per term, over its run of code points (empty terms are left out of the reductions, never kept).
    nonempty = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[nonempty]

    def per_term(values: np.ndarray, reduce) -> np.ndarray:
        out = np.zeros(len(terms), dtype=values.dtype)
        if starts.size:
            out[nonempty] = reduce.reduceat(values, starts)
        return out

    all_word = per_term(code_point_table(WORD)[codes], np.logical_and)
    any_letter = per_term(code_point_table(LETTER)[codes], np.logical_or)
    all_cjk = per_term(code_point_table(CJK)[codes], np.logical_and)
    utf16 = lengths + per_term((codes > 0xFFFF).astype(np.int64), np.add)  # Java's String.length()
    stops = {w.lower() for w in stop_words}
    short_ok = all_cjk & (settings.cjk != "none")
    keep = nonempty & all_word & any_letter & ((utf16 >= settings.min_token_length) | short_ok)
    out: List[Optional[str]] = [t if k and t.lower() not in stops else None for t, k in zip(terms, keep.tolist())]
    return out


# ASCII bytes as the JVM tokenizer sees them: NFKC changes none, (?U)\w is [A-Za-z0-9_] among them, and lower
# case maps A-Z to a-z; every other byte becomes a space. A bytes.translate table: 3x faster than numpy's take.
_ASCII_MAP = np.full(256, 0x20, dtype=np.uint8)
for _b in b"abcdefghijklmnopqrstuvwxyz0123456789_":
    _ASCII_MAP[_b] = _b
for _b in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _ASCII_MAP[_b] = _b + 32
_ASCII_TRANSLATION = _ASCII_MAP.tobytes()


def _ascii_token_lists(texts) -> "pa.ListArray":  # noqa: F821
    """The word runs of an Arrow string array of ASCII texts (no nulls), lower-cased, per row.

    One table lookup over the array's UTF-8 bytes (no Python string per
    document), then Arrow's split on the spaces. Only the array's own bytes
    are mapped: a slice of a larger batch shares the batch's whole buffer.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    large = pa.types.is_large_string(texts.type)
    _, offset_buffer, data = texts.buffers()[:3]
    # The slice's n + 1 offsets, into the (possibly shared) data buffer.
    offsets = np.frombuffer(offset_buffer, dtype=np.int64 if large else np.int32)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64)
    start, end = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
    own = data[start:end].to_pybytes() if data is not None and end > start else b""
    rebased = (offsets - start).astype(np.int64 if large else np.int32)
    kind = pa.LargeStringArray if large else pa.StringArray
    spaced = kind.from_buffers(len(texts), pa.py_buffer(rebased), pa.py_buffer(own.translate(_ASCII_TRANSLATION)))
    return pc.ascii_split_whitespace(spaced)


class TextFeaturizer:
    """Term counts over a fixed vocabulary, computed as :func:`pcem_spark.engine.features.featurize` would.

    Built on the driver and shipped to the executors with the scoring
    closure; :meth:`matrix` runs on an Arrow text column there.

    Parameters
    ----------
    vocabulary : sequence of str, length V
        The model's vocabulary; column j of the result counts term j.
    settings : FeatureSettings
        The model's feature settings (resolved stop words, default token pattern).
    stop_words : sequence of str
        The stop-word list ``settings.stop_words`` names ([] for "none").
    """

    def __init__(self, vocabulary: Sequence[str], settings: FeatureSettings, stop_words: Sequence[str] = ()):
        if not supports(settings):
            raise ValueError(f"the Python tokenizer supports only the default token pattern, not {settings!r}")
        self.vocab_size = len(vocabulary)
        self.normalize = settings.normalize == "nfkc"
        self.cjk = settings.cjk
        self.terms = reachable_vocabulary(vocabulary, settings, stop_words)
        # What makes a token one the vocabulary could hold (unknown_counts): the same test as the terms'.
        self._token_settings, self._stop_words = settings, list(stop_words)
        self._tables = None  # the code-point tables and the Arrow vocabulary, built once per Python worker

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tables"] = None
        return state

    def _lookup(self):
        """(word table, CJK table, {term: column}): built once per Python worker, not shipped."""
        if self._tables is None:
            import pandas as pd

            # pandas keeps the hash table of an Index: built once, probed by every block. An unreachable term
            # becomes " j" (a space is never inside a token), which keeps every other term at its column; of a
            # term listed twice the last occurrence counts, as in Spark's CountVectorizerModel.
            last = {term: j for j, term in enumerate(self.terms)}
            keys = [term if term is not None and last[term] == j else f" {j}" for j, term in enumerate(self.terms)]
            index = pd.Index(keys, dtype=object)
            index.get_indexer([" "])  # build the hash table now, once
            self._tables = (code_point_table(WORD), code_point_table(CJK), index)
        return self._tables

    def _split_cjk(self, text: str, cjk_table: np.ndarray) -> str:
        """``text`` (a block's documents joined) with its CJK tokens set apart by spaces, as the JVM does."""
        if self.cjk == "none" or text.isascii() or not cjk_table[_utf32(text)].any():
            return text
        pattern, template = (_CJK_CHARS, r" \1 ") if self.cjk == "chars" else (_CJK_BIGRAMS, r" \1\2\3 ")
        # Per document: a bigram must not pair the last character of one with the first of the next.
        return _SEP.join(pattern.sub(template, doc) for doc in text.split(_SEP))

    def token_lists(self, texts) -> "pa.ListArray":  # noqa: F821
        """Arrow list<string> of each text's candidate tokens (nulls: empty lists).

        The tokens are the word runs of the JVM tokenizer; those holding no
        letter, short ones and stop words are still there (the vocabulary
        lookup drops them, :func:`reachable_vocabulary`).
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        lists = self._candidate_lists(texts)
        flat = lists.flatten()
        keep = np.asarray(pc.not_equal(flat, "").to_numpy(zero_copy_only=False), dtype=bool)
        rows = np.repeat(np.arange(len(lists)), np.diff(np.asarray(lists.offsets, dtype=np.int64)))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=len(lists)))])
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat.filter(pa.array(keep)))

    def _candidate_lists(self, texts) -> "pa.ListArray":  # noqa: F821
        """:meth:`token_lists` plus empty strings where a text starts or ends with a non-word character.

        ASCII texts are mapped byte by byte in their Arrow buffer
        (:func:`_ascii_token_lists`), the others go through
        :meth:`_unicode_token_lists`. Rows keep their order.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        texts = texts.fill_null("")
        ascii_rows = np.asarray(pc.string_is_ascii(texts).to_numpy(zero_copy_only=False), dtype=bool)
        if ascii_rows.all():
            return _ascii_token_lists(texts)
        if not ascii_rows.any():
            return self._unicode_token_lists(texts)
        parts = [
            (rows, lists)
            for rows, lists in (
                (np.flatnonzero(ascii_rows), _ascii_token_lists(texts.filter(pa.array(ascii_rows)))),
                (np.flatnonzero(~ascii_rows), self._unicode_token_lists(texts.filter(pa.array(~ascii_rows)))),
            )
        ]
        # Back in row order: each row's tokens are a run of the two parts' values, one take over both.
        n = len(texts)
        lengths, starts, flats, base = np.zeros(n, np.int64), np.zeros(n, np.int64), [], 0
        for rows, lists in parts:
            offsets = np.asarray(lists.offsets, dtype=np.int64)
            lengths[rows] = np.diff(offsets)
            starts[rows] = offsets[:-1] - offsets[0] + base
            flat = lists.flatten()
            flats.append(flat)
            base += len(flat)
        row_offsets = np.concatenate([[0], np.cumsum(lengths)])
        take = np.repeat(starts - row_offsets[:-1], lengths) + np.arange(row_offsets[-1], dtype=np.int64)
        values = pa.concat_arrays(flats).take(pa.array(take, pa.int64()))
        return pa.ListArray.from_arrays(pa.array(row_offsets.astype(np.int32), pa.int32()), values)

    def _unicode_token_lists(self, texts) -> "pa.ListArray":  # noqa: F821
        """:meth:`token_lists` of any text (no nulls).

        The whole block is one string for lower case, the CJK split and the
        word test (a numpy table of code points), so the Python work per
        document is a few C calls.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        word_table, cjk_table, _ = self._lookup()
        docs = [t.replace(_SEP, " ") if _SEP in t else t for t in texts.to_pylist()]
        if self.normalize:
            # Per document: one text that needs NFKC would otherwise make the whole block pay for it.
            docs = [t if unicodedata.is_normalized("NFKC", t) else unicodedata.normalize("NFKC", t) for t in docs]
        # Lower case per document, so ASCII ones stay in CPython's fast one-byte form. The JVM lowers after
        # the CJK split, but that only adds spaces around characters that have no case and are not case-ignorable.
        text = self._split_cjk(_SEP.join([t.lower() for t in docs]), cjk_table)
        codes = _utf32(text).copy()
        codes[~word_table[codes] & (codes != 0)] = 0x20  # every non-word character becomes a space
        spaced = codes.tobytes().decode("utf-32-le").split(_SEP)
        # Only ASCII spaces separate tokens now, and UTF-8 puts no ASCII byte inside a multi-byte character.
        return pc.ascii_split_whitespace(pa.array(spaced, texts.type))

    def matrix(self, texts) -> sp.csr_matrix:
        """(n, V) CSR term counts of an Arrow string column (nulls are empty rows); indices sorted."""
        return self.matrix_and_unknown(texts, unknown=False)[0]

    def _word_mask(self, tokens) -> np.ndarray:
        """(n,) bool: which of the Arrow strings ``tokens`` the tokenizer keeps as words, as
        :func:`reachable_vocabulary` decides. ASCII tokens are tested by Arrow's kernels (a token is then a
        word when it holds a letter, is long enough and is not a stop word: every ASCII candidate is a run of
        word characters); the others, rarer, one by one."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not hasattr(self, "_stop_set"):  # built once per worker: the stop words in lower case
            self._stop_set = pa.array(sorted({w.lower() for w in self._stop_words}), pa.string())
        ascii_rows = np.asarray(pc.string_is_ascii(tokens).to_numpy(zero_copy_only=False), dtype=bool)
        kept = np.zeros(len(tokens), dtype=bool)
        if ascii_rows.any():
            words = tokens.filter(pa.array(ascii_rows))
            ok = pc.and_(
                pc.match_substring_regex(words, r"^\w*[A-Za-z]\w*$"),
                pc.greater_equal(pc.binary_length(words), max(1, int(self._token_settings.min_token_length))),
            )
            ok = pc.and_(ok, pc.invert(pc.is_in(pc.utf8_lower(words), value_set=self._stop_set)))
            kept[ascii_rows] = np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)
        if not ascii_rows.all():
            rest = tokens.filter(pa.array(~ascii_rows)).to_pylist()
            reachable = reachable_vocabulary(rest, self._token_settings, self._stop_words)
            kept[~ascii_rows] = [t is not None for t in reachable]
        return kept

    def matrix_and_unknown(self, texts, unknown: bool = True):
        """:meth:`matrix` and, with ``unknown``, each row's *unknown* tokens (n,) float64, else None.

        An unknown token is one the tokenizer keeps as a word (a run of word characters holding a letter,
        long enough, not a stop word: what a fitted vocabulary's terms are) that is not a term: words the
        vocabulary left out (rare ones, another language's). Counted in the same pass as the terms.
        """
        import pyarrow.compute as pc

        _, _, index = self._lookup()
        lists = self._candidate_lists(texts)  # "" is never a key of the index
        n = len(lists)
        lengths = np.diff(np.asarray(lists.offsets, dtype=np.int64))
        # A block repeats its words: look up each distinct token once, in an index built once per worker
        # (Arrow's index_in would rebuild a hash table of the whole vocabulary for every block: 2x slower).
        encoded = pc.dictionary_encode(lists.flatten())
        column_of = index.get_indexer(encoded.dictionary.to_numpy(zero_copy_only=False)).astype(np.int64)
        cols = column_of[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        hit = cols >= 0
        # One key per (row, term); unique sorts them, so each row's indices come out sorted.
        keys, counts = np.unique(rows[hit] * self.vocab_size + cols[hit], return_counts=True)
        indptr = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * self.vocab_size)
        X = sp.csr_matrix(
            (counts.astype(np.float64), (keys % self.vocab_size).astype(np.int32), indptr),
            shape=(n, self.vocab_size),
        )
        if not unknown:
            return X, None
        # Each distinct token the vocabulary lacks, tested once: is it a word the vocabulary could hold?
        absent = np.flatnonzero(column_of < 0)
        missing = np.zeros(len(column_of), dtype=bool)
        if absent.size:
            missing[absent] = self._word_mask(encoded.dictionary.take(absent))
        per_token = missing[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
        return X, np.bincount(rows[per_token], minlength=n).astype(np.float64)
