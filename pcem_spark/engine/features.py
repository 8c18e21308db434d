"""Text -> term-count vectors with Spark ML transformers.

Tokenisation, in this order, on the executors' JVMs (no Python worker):

1. ``normalize = "nfkc"``: Unicode NFKC, so fullwidth ``ＡＢＣ`` reads ``ABC``,
   ``e`` + combining acute reads ``é``, the ligature ``ﬁ`` reads ``fi`` and
   halfwidth katakana read as fullwidth.
2. ``cjk``: Chinese, Japanese and Korean are written without spaces between
   words, so a run of Han / Hiragana / Katakana / Hangul would otherwise be
   one "word" that occurs in one document only. ``"chars"`` (default) makes
   one token per character (what Lucene's StandardTokenizer does for Han),
   ``"bigrams"`` the overlapping character bigrams of each such run (a lone
   character stays a unigram; Lucene's CJKAnalyzer), ``"none"`` leaves the
   runs whole. docs/TOKENIZATION.md measures the three.
3. Lower-case, word tokens of ``token_pattern`` (letters/digits holding at
   least one letter: purely numeric tokens are dropped), minimum length
   ``min_token_length`` (CJK tokens are exempt: one Han character is a word),
   stop words removed: ``stop_words`` names Spark's list of a language, or
   ``"none"``; the default ``"auto"`` is decided from the labelled documents
   before the vocabulary is fitted
   (:func:`pcem_spark.model.stop_words.resolve_stop_words`: ``"english"``
   unless ``"none"`` is clearly better in a naive-Bayes cross-validation), so
   tokenising with ``"auto"`` still in the settings is a programming error.

Text without CJK characters is tokenised exactly as before these settings
existed, up to what NFKC changes (ligatures, fullwidth forms, ``™``, ...).

Vocabulary: terms in at least ``min_df`` documents and at most ``max_df``
(fraction) of them, the ``vocab_size`` most frequent kept. The fitted
vocabulary is stored in the model, so new documents get the same columns, and
so are these settings: :meth:`FeatureSettings.from_dict` reads a model saved
before a setting existed with the behaviour it was trained with.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import List

import pandas as pd
import pyarrow as pa
from pyspark.ml.feature import CountVectorizer, CountVectorizerModel, RegexTokenizer, StopWordsRemover
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pcem_spark.engine.feature_settings import (  # re-exported: callers look here
    AUTO_STOP_WORDS,
    BIGRAM_REGEX,
    CJK_CHAR,
    CJK_MODES,
    DEFAULT_TOKEN_PATTERN,
    NORMALIZE_MODES,
    STOP_WORD_LANGUAGES,
    FeatureSettings,
    StopWordsChoice,
)
from pcem_spark.errors import InputError

__all__ = [
    "DEFAULT_TOKEN_PATTERN",
    "CJK_CHAR",
    "BIGRAM_REGEX",
    "NORMALIZE_MODES",
    "CJK_MODES",
    "AUTO_STOP_WORDS",
    "STOP_WORD_LANGUAGES",
    "StopWordsChoice",
    "require_resolved_stop_words",
    "FeatureSettings",
    "nfkc",
    "nfkc_python",
    "count_vectorizer_model",
    "split_cjk",
    "tokenize",
    "document_bounds",
    "fit_vocabulary",
    "featurize",
]

log = logging.getLogger(__name__)

# NFKC with ICU4J, which Spark 4 bundles for its collations: Spark SQL has no
# normalize() before 4.4, and reflect() cannot pass java.text.Normalizer's enum
# argument, but ICU's static Normalizer.compose(String, boolean compat) takes
# only a string and a boolean; compat = true is NFKC.
_ICU_NORMALIZER = "com.ibm.icu.text.Normalizer"


def require_resolved_stop_words(settings: FeatureSettings) -> None:
    """Raise ValueError (a bug in the caller, not bad input) when ``settings.stop_words`` is still ``"auto"``.

    ``"auto"`` is decided from the labelled documents before the vocabulary is
    fitted; tokenising with it would have to guess a list, and the vocabulary
    and the model would then silently depend on that guess.
    """
    if settings.stop_words == AUTO_STOP_WORDS:
        raise ValueError(
            'features.stop_words = "auto" reached tokenisation unresolved: decide it from the labelled documents '
            "first (pcem_spark.model.stop_words.resolve_stop_words, which model training and the experiment runner "
            'call) or give "english" / "none"'
        )


def nfkc(text: Column) -> Column:
    """``text`` in Unicode NFKC, computed on the executors' JVMs (null stays null).

    Spark marks reflect() nondeterministic: a column of it cannot sit directly
    inside an aggregate function, and filters are not pushed below it, which
    :func:`tokenize` (a column of its own, read by the tokenizer) never needs.
    """
    # ICU throws on null; reflect() would fail the task, so nulls skip the call.
    return F.when(text.isNotNull(), F.reflect(F.lit(_ICU_NORMALIZER), F.lit("compose"), text, F.lit(True)))


def _nfkc_series(texts: pd.Series) -> pd.Series:
    """NFKC of a pandas Series of strings (None stays None)."""
    return texts.map(lambda t: None if t is None else unicodedata.normalize("NFKC", t))


def nfkc_python(text: Column) -> Column:
    """The same as :func:`nfkc` with Python's ``unicodedata`` in a pandas UDF.

    For sessions that refuse ``reflect()`` (``spark.sql.reflect.allowList``,
    restricted SQL mode): it ships the text to Python workers and back.
    """
    from pyspark.sql.functions import pandas_udf

    return pandas_udf(_nfkc_series, "string")(text)


def _with_nfkc(df: DataFrame, text_col: str, out_col: str) -> DataFrame:
    """``df`` plus ``out_col`` = NFKC of ``text_col``: ICU via reflect(), else the pandas UDF."""
    from pyspark.errors import AnalysisException

    try:
        out = df.withColumn(out_col, nfkc(F.col(text_col)))
        _ = out.schema  # Spark Connect analyses lazily: make a refused reflect() fail here
        return out
    except AnalysisException as exc:
        # Refused (allow list: DATATYPE_MISMATCH.METHOD_NOT_ALLOWED; restricted mode:
        # UNSUPPORTED_FEATURE) or no ICU on the class path; anything else (a missing
        # column, ...) is the caller's error and stays one.
        condition = exc.getCondition() or ""
        if not condition.startswith(("DATATYPE_MISMATCH", "UNSUPPORTED_FEATURE")):
            raise
        log.warning(
            "reflect() is not allowed here (%s); Unicode NFKC runs in a Python UDF instead", str(exc).splitlines()[0]
        )
        return df.withColumn(out_col, nfkc_python(F.col(text_col)))


def split_cjk(text: Column, mode: str) -> Column:
    """Surround each CJK token of ``mode`` ("chars" / "bigrams") with spaces; "none" returns ``text``.

    The token pattern then finds them as words of their own, while text
    without CJK characters passes through unchanged.
    """
    if mode == "chars":
        spaced = F.regexp_replace(text, f"({CJK_CHAR})", " $1 ")
    elif mode == "bigrams":
        spaced = F.regexp_replace(text, BIGRAM_REGEX, " $1$2$3 ")
    else:
        return text
    # The bigram pattern tries three alternatives at every character; one quick
    # scan first lets the (many) documents without CJK skip it.
    return F.when(text.rlike(CJK_CHAR), spaced).otherwise(text)


def _long_enough_or_cjk(tokens: Column, min_length: int) -> Column:
    """Tokens of at least ``min_length`` characters, plus CJK tokens of any length."""

    def keep(t: Column) -> Column:
        # RegexTokenizer counts UTF-16 units, F.length code points: the UTF-16
        # test only runs on the rare short tokens, so non-CJK tokens are kept
        # exactly as RegexTokenizer(minTokenLength) keeps them.
        return (
            (F.length(t) >= min_length)
            | t.rlike(f"^{CJK_CHAR}+$")
            | (F.octet_length(F.encode(t, "UTF-16BE")) >= 2 * min_length)
        )

    return F.filter(tokens, keep)


def tokenize(df: DataFrame, settings: FeatureSettings, text_col: str = "text", tokens_col: str = "tokens") -> DataFrame:
    """Add an array<string> column of tokens (stop words removed); see the module docstring.

    Raises ValueError when ``settings.stop_words`` is still ``"auto"``
    (:func:`require_resolved_stop_words`).
    """
    require_resolved_stop_words(settings)
    source = text_col
    if settings.normalize == "nfkc" or settings.cjk != "none":
        source = "_pcem_text"
        if settings.normalize == "nfkc":
            # First, so halfwidth kana and compatibility ideographs are CJK proper when split.
            df = _with_nfkc(df, text_col, source)
        else:
            df = df.withColumn(source, F.col(text_col))
        df = df.withColumn(source, split_cjk(F.col(source), settings.cjk))
    # With cjk = "none" RegexTokenizer drops short tokens itself, as it always did;
    # otherwise single CJK characters must survive, so the filter comes after.
    exempt_cjk = settings.cjk != "none" and settings.min_token_length > 1
    tok = RegexTokenizer(
        inputCol=source,
        outputCol="_raw_tokens",
        pattern=settings.token_pattern,
        gaps=False,
        toLowercase=True,
        minTokenLength=1 if exempt_cjk else settings.min_token_length,
    )
    out = tok.transform(df)
    if source != text_col:
        out = out.drop(source)
    if exempt_cjk:
        out = out.withColumn("_raw_tokens", _long_enough_or_cjk(F.col("_raw_tokens"), settings.min_token_length))
    if settings.stop_words and settings.stop_words.lower() != "none":
        remover = StopWordsRemover(
            inputCol="_raw_tokens",
            outputCol=tokens_col,
            stopWords=StopWordsRemover.loadDefaultStopWords(settings.stop_words.lower()),
        )
        out = remover.transform(out).drop("_raw_tokens")
    else:
        out = out.withColumnRenamed("_raw_tokens", tokens_col)
    return out


def document_bounds(settings: FeatureSettings, n_docs: int):
    """(least, most) documents a term may occur in, as Spark's CountVectorizer reads min_df / max_df."""
    least = settings.min_df if settings.min_df >= 1 else settings.min_df * n_docs
    most = settings.max_df * n_docs if settings.max_df <= 1 else settings.max_df
    return least, most


def _too_few_documents(settings: FeatureSettings, n_docs: int, which: str) -> ValueError:
    """The error for min_df / max_df that no term can satisfy on ``n_docs`` documents."""
    least, most = document_bounds(settings, n_docs)
    need = ""
    if settings.min_df >= 1 and settings.max_df < 1:
        need = f" (they need at least {int(-(-settings.min_df // settings.max_df))} documents)"
    return ValueError(
        f"{n_docs} {which}documents are too few for features.min_df={settings.min_df:g} and "
        f"features.max_df={settings.max_df:g}{need}: a term would have to occur in at least {least:g} and at "
        f"most {most:g} documents. For a small corpus set features.min_df=1 and features.max_df=1.0 "
        "(--set features.min_df=1 --set features.max_df=1.0; PathEM(minDF=1.0, maxDF=1.0))."
    )


def fit_vocabulary(
    df: DataFrame, settings: FeatureSettings, text_col: str = "text", labels_col: str = "labels"
) -> List[str]:
    """Fit the vocabulary on ``df`` (only the distributed count; the result is V strings).

    With ``vocabulary_docs = "labeled"`` only rows with labels count: the
    vocabulary the authors' reference code used (words of the labelled
    documents), which keeps Laplace smoothing from swamping small classes.

    Raises ValueError, naming the number of documents and the settings to
    change, when min_df / max_df admit no term or the vocabulary is empty.
    """
    from pyspark.errors import IllegalArgumentException

    settings.validate()
    which = ""
    if settings.vocabulary_docs == "labeled":
        df = df.where(F.col(labels_col).isNotNull())
        which = "labelled "
    tokens = tokenize(df, settings, text_col)
    # Spark reads maxDF >= 1 as a document count, so 1.0 would mean "one
    # document"; our max_df <= 1 is always a fraction, and 1.0 means no cap.
    max_df = float(settings.max_df)
    if max_df == 1.0:
        max_df = float(2**63 - 1)
    cv = CountVectorizer(
        inputCol="tokens",
        outputCol="features",
        minDF=float(settings.min_df),
        maxDF=max_df,
        vocabSize=settings.vocab_size if settings.vocab_size > 0 else 1 << 30,
    )
    try:
        vocab = list(cv.fit(tokens).vocabulary)
    except IllegalArgumentException as exc:
        # Spark's "maxDF must be >= minDF" names neither the corpus size nor our settings;
        # counting the documents costs a pass, so only this error path pays it.
        if "maxDF must be >= minDF" not in str(exc):
            raise
        raise _too_few_documents(settings, tokens.count(), which) from None
    if not vocab:
        n_docs = tokens.count()
        hint = "are the documents' texts empty?"
        if settings.cjk == "none":
            hint += ' Chinese / Japanese text needs features.cjk = "bigrams" or "chars".'
        raise InputError(
            f"the vocabulary is empty: no token of the {n_docs} {which}documents passes "
            f"features.min_df={settings.min_df:g}, features.max_df={settings.max_df:g} ({hint})"
        )
    return vocab


def featurize(
    df: DataFrame,
    vocabulary: List[str],
    settings: FeatureSettings,
    text_col: str = "text",
    features_col: str = "features",
) -> DataFrame:
    """Add a SparseVector column of term counts over ``vocabulary`` (other columns kept)."""
    tokens = tokenize(df, settings, text_col)
    cvm = count_vectorizer_model(tokens.sparkSession, vocabulary, features_col)
    return cvm.transform(tokens).drop("tokens")


def count_vectorizer_model(spark, vocabulary: List[str], features_col: str = "features") -> CountVectorizerModel:
    """A CountVectorizerModel over ``vocabulary`` (input column ``tokens``), built without one py4j call per term.

    ``CountVectorizerModel.from_vocabulary`` fills the JVM's ``String[]`` one
    element per py4j round trip: 28-48 s at 2^18 terms, paid by every
    ``pcem predict``. A classic session ships the list as one Arrow row of a
    DataFrame instead (read by the JVM, one small job) and hands the JVM
    array to the model's constructor. Spark Connect sends the list in one
    message already, so it keeps ``from_vocabulary``.
    """
    if not vocabulary:
        raise ValueError("the vocabulary is empty")
    from pcem_spark.engine.session import is_spark_connect

    if is_spark_connect(spark):
        return CountVectorizerModel.from_vocabulary(list(vocabulary), inputCol="tokens", outputCol=features_col)
    gateway = spark.sparkContext._gateway
    # An Arrow table is read by the JVM itself: no Python worker, one batch.
    table = pa.table({"vocabulary": pa.array([list(vocabulary)], pa.list_(pa.string()))})
    row = spark.createDataFrame(table)._jdf.first()
    # List.toArray() is an Object[]; the model's constructor takes a String[] (py4j will not pick the
    # generic toArray(T[]) overload), so copy it into one by the array class's name.
    objects = row.getList(0).toArray()
    string_array = gateway.jvm.java.lang.Class.forName("[Ljava.lang.String;")
    jarray = gateway.jvm.java.util.Arrays.copyOf(objects, len(objects), string_array)
    model = CountVectorizerModel._create_from_java_class("org.apache.spark.ml.feature.CountVectorizerModel", jarray)
    model.setInputCol("tokens")
    model.setOutputCol(features_col)
    model._set(vocabSize=len(vocabulary))
    return model
