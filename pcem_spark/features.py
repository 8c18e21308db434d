"""Text -> term-count vectors with Spark ML transformers.

Tokenisation: lower-case, word tokens of letters/digits that contain at least
one letter (purely numeric tokens are dropped), minimum length 2, English stop
words removed. Vocabulary: terms in at least ``min_df`` documents and at most
``max_df`` (fraction) of them, the ``vocab_size`` most frequent kept. The fitted
vocabulary is stored in the model, so new documents get the same columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from pyspark.ml.feature import CountVectorizer, CountVectorizerModel, RegexTokenizer, StopWordsRemover
from pyspark.sql import DataFrame

# Java regex: a run of word characters holding at least one letter.
DEFAULT_TOKEN_PATTERN = r"(?U)\b\w*\p{L}\w*\b"


@dataclass
class FeatureSettings:
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    min_token_length: int = 2
    stop_words: str = "english"        # a StopWordsRemover language, or "none"
    min_df: float = 3.0                # >= 1: document count; < 1: fraction
    max_df: float = 0.5                # fraction of documents (<= 1) or count (> 1)
    vocab_size: int = 20000            # keep the most frequent terms (0 = no cap)
    vocabulary_docs: str = "all"       # fit the vocabulary on "all" training docs or only "labeled" ones

    def validate(self) -> None:
        if self.min_token_length < 1:
            raise ValueError(f"features.min_token_length must be >= 1, got {self.min_token_length}")
        if self.min_df <= 0:
            raise ValueError(f"features.min_df must be > 0, got {self.min_df}")
        if self.max_df <= 0:
            raise ValueError(f"features.max_df must be > 0, got {self.max_df}")
        if self.vocabulary_docs not in ("all", "labeled"):
            raise ValueError(f"features.vocabulary_docs must be 'all' or 'labeled', got {self.vocabulary_docs!r}")
        if self.vocab_size < 0:
            raise ValueError(f"features.vocab_size must be >= 0, got {self.vocab_size}")


def tokenize(df: DataFrame, settings: FeatureSettings, text_col: str = "text",
             tokens_col: str = "tokens") -> DataFrame:
    """Add an array<string> column of tokens (stop words removed)."""
    tok = RegexTokenizer(inputCol=text_col, outputCol="_raw_tokens", pattern=settings.token_pattern,
                         gaps=False, toLowercase=True, minTokenLength=settings.min_token_length)
    out = tok.transform(df)
    if settings.stop_words and settings.stop_words.lower() != "none":
        remover = StopWordsRemover(
            inputCol="_raw_tokens", outputCol=tokens_col,
            stopWords=StopWordsRemover.loadDefaultStopWords(settings.stop_words.lower()))
        out = remover.transform(out).drop("_raw_tokens")
    else:
        out = out.withColumnRenamed("_raw_tokens", tokens_col)
    return out


def fit_vocabulary(df: DataFrame, settings: FeatureSettings, text_col: str = "text",
                   labels_col: str = "labels") -> List[str]:
    """Fit the vocabulary on ``df`` (only the distributed count; the result is V strings).

    With ``vocabulary_docs = "labeled"`` only rows with labels count: the
    vocabulary the authors' reference code used (words of the labelled
    documents), which keeps Laplace smoothing from swamping small classes.
    """
    settings.validate()
    if settings.vocabulary_docs == "labeled":
        from pyspark.sql import functions as F
        df = df.where(F.col(labels_col).isNotNull())
    tokens = tokenize(df, settings, text_col)
    # Spark reads maxDF >= 1 as a document count, so 1.0 would mean "one
    # document"; our max_df <= 1 is always a fraction, and 1.0 means no cap.
    max_df = float(settings.max_df)
    if max_df == 1.0:
        max_df = float(2 ** 63 - 1)
    cv = CountVectorizer(inputCol="tokens", outputCol="features", minDF=float(settings.min_df),
                         maxDF=max_df, vocabSize=settings.vocab_size if settings.vocab_size > 0 else 1 << 30)
    vocab = list(cv.fit(tokens).vocabulary)
    if not vocab:
        raise ValueError(
            f"the vocabulary is empty: no token passes min_df={settings.min_df}, "
            f"max_df={settings.max_df} (are the documents' texts empty?)")
    return vocab


def featurize(df: DataFrame, vocabulary: List[str], settings: FeatureSettings,
              text_col: str = "text", features_col: str = "features") -> DataFrame:
    """Add a SparseVector column of term counts over ``vocabulary`` (other columns kept)."""
    tokens = tokenize(df, settings, text_col)
    cvm = CountVectorizerModel.from_vocabulary(vocabulary, inputCol="tokens", outputCol=features_col)
    return cvm.transform(tokens).drop("tokens")
