"""The ``[features]`` settings and the token patterns they name: pure values, no Spark, so reading settings
(``pcem settings``, the checks before Spark starts) does not import pyspark.ml."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict

from pcem_spark.errors import InputError
from pcem_spark.util.constraints import Constraint, Interval, Options, check_constraints

__all__ = [
    "DEFAULT_TOKEN_PATTERN",
    "NORMALIZE_MODES",
    "CJK_MODES",
    "AUTO_STOP_WORDS",
    "STOP_WORD_LANGUAGES",
    "CJK_CHAR",
    "BIGRAM_REGEX",
    "TOKENIZERS",
    "StopWordsChoice",
    "FeatureSettings",
]

# Where pcem predict tokenises (predict.tokenizer): in the scoring task (engine.python_tokens) or by Spark ML.
TOKENIZERS = ("python", "spark")

# Java regex: a run of word characters holding at least one letter.
DEFAULT_TOKEN_PATTERN = r"(?U)\b\w*\p{L}\w*\b"

NORMALIZE_MODES = ("nfkc", "none")
CJK_MODES = ("bigrams", "chars", "none")

# features.stop_words: decided from the labelled documents (pcem_spark.model.stop_words).
AUTO_STOP_WORDS = "auto"
# The languages of Spark's StopWordsRemover.loadDefaultStopWords (Spark 3.0 - 4.x).
STOP_WORD_LANGUAGES = (
    "danish",
    "dutch",
    "english",
    "finnish",
    "french",
    "german",
    "hungarian",
    "italian",
    "norwegian",
    "portuguese",
    "russian",
    "spanish",
    "swedish",
    "turkish",
)

# One character of a script written without spaces between words. U+30FC / U+FF70
# (the katakana prolonged sound mark "ー" and its halfwidth form) belong to the
# Common script, but occur only inside kana words, so they count as CJK too.
# Every such character is at or above U+1100 (Hangul Jamo), so the leading range
# changes nothing but speed: Java tests it first and stops there for Latin text,
# where the script lookups alone made the bigram pass 7x slower on 20NG.
CJK_CHAR = r"[\x{1100}-\x{10FFFF}&&[\p{IsHan}\p{IsHiragana}\p{IsKatakana}\p{IsHangul}\x{30FC}\x{FF70}]]"

# Overlapping bigrams in one regexp_replace; its alternatives, tried in order at each character:
#   groups 1, 2: a CJK char followed by another -> " $1$2 ", the bigram starting here;
#   group 3: a CJK char with no CJK neighbour -> " $3 ", kept as a unigram;
#   else the last char of a run (its bigram was made one step earlier) -> " ".
# Groups that did not take part are replaced by "" (java.util.regex.Matcher).
BIGRAM_REGEX = f"({CJK_CHAR})(?=({CJK_CHAR}))|(?<!{CJK_CHAR})({CJK_CHAR})(?!{CJK_CHAR})|{CJK_CHAR}"

# Keys that older models' metadata lacks, mapped to the behaviour of the version
# that wrote them (FeatureSettings.from_dict): their vocabulary was fitted so.
# stop_words was always saved; "english" was its default before "auto".
_BEFORE_SETTING_EXISTED: Dict[str, Any] = {
    "normalize": "none",
    "cjk": "none",
    "stop_words": "english",
    "embedding": "none",
    "embedding_model": "",
}


class StopWordsChoice(Constraint):
    """``"none"`` or a language of Spark's stop-word lists, in any case (``"English"`` works as before)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value.lower() in ("none",) + STOP_WORD_LANGUAGES

    def describe(self, plural: bool = False) -> str:
        return '"none" or a language of Spark\'s StopWordsRemover (' + ", ".join(STOP_WORD_LANGUAGES) + ")"


@dataclass
class FeatureSettings:
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    min_token_length: int = 2  # CJK tokens are exempt (one Han character is a word)
    # "auto" (decided from the labelled documents before the vocabulary is fitted:
    # pcem_spark.model.stop_words), a StopWordsRemover language, or "none"
    stop_words: str = AUTO_STOP_WORDS
    min_df: float = 2.0  # >= 1: document count; < 1: fraction (2: short texts keep their words)
    max_df: float = 0.5  # fraction of documents (<= 1) or count (> 1)
    vocab_size: int = 20000  # keep the most frequent terms (0 = no cap)
    vocabulary_docs: str = "all"  # fit the vocabulary on "all" training docs or only "labeled" ones
    normalize: str = "nfkc"  # Unicode normalisation before tokenising: "nfkc" or "none"
    cjk: str = "chars"  # Han/kana/Hangul: one token per "chars", "bigrams", or "none" (whole runs)
    # The documents' vector column (pcem_spark.io.embeddings): "auto" = a column named "embedding" when there
    # is one, "none", or a column name; a model records the column it was fitted with (or "none").
    embedding: str = "auto"
    # The encoder that made the vectors, recorded in the model; predict refuses vectors named otherwise.
    embedding_model: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "FeatureSettings":
        """Settings saved in a model's metadata (``asdict`` of an instance).

        Keys missing from ``d`` -- a model saved before the setting existed --
        get the behaviour of that older version, not today's default, so the
        model keeps tokenising exactly as when it was trained. Unknown keys (a
        model from a newer version) raise ValueError.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InputError(
                f"unknown feature settings {unknown} (a model from a newer pcem-spark?); known: {sorted(known)}"
            )
        settings = cls(**{**_BEFORE_SETTING_EXISTED, **d})
        settings.validate()
        return settings

    # What each setting accepts (pcem_spark.util.constraints), checked in this order by validate().
    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "min_token_length": Interval(int, 1, None),
        "stop_words": [AUTO_STOP_WORDS, StopWordsChoice()],
        "min_df": Interval(float, 0, None, closed="neither"),
        "max_df": Interval(float, 0, None, closed="neither"),
        "vocabulary_docs": Options(("all", "labeled")),
        "vocab_size": Interval(int, 0, None),
        "normalize": Options(NORMALIZE_MODES),
        "cjk": Options(CJK_MODES),
    }

    def validate(self) -> None:
        check_constraints(self, self.CONSTRAINTS, "features")
