"""The Python tokenizer of prediction against Spark ML's featurisation, which it must equal count for count."""

import os
import sys
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.ml.feature import StopWordsRemover

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine import unicode_classes
from pcem_spark.engine.arrow_io import csr_of
from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary, tokenize
from pcem_spark.engine.python_tokens import (
    TextFeaturizer,
    char_class,
    code_point_table,
    code_points,
    reachable_vocabulary,
    supports,
)
from pcem_spark.errors import InputError
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))

# Text that exercises every step: NFKC (ligature, fullwidth, superscript digit, combining accent, halfwidth kana),
# case (Greek final sigma, dotted capital I, German sharp s), scripts whose words carry combining marks
# (Devanagari), CJK runs next to Latin, digits-only and underscore tokens, emoji, an astral letter, NUL, null.
TEXTS = [
    "The ﬁnal ＦＵＬＬＷＩＤＴＨ word² and café (cafe\u0301) — naïve résumé!",
    "ΟΔΥΣΣΕΥΣ ΚΑΙ ΣΟΦΙΑ: ΣΣ σσ Σ. İstanbul IŞIK straße STRASSE",
    "हिन्दी भाषा में शब्द, and mixed हिन्दीword text",
    "東京タワーは高い。ﾃｽﾄ 한국어 문장입니다 abc漢字def 123 4th snake_case __init__ x",
    "emoji 🙂 are not words; 𝐁𝐨𝐥𝐝 math letters and 𐐀𐐨 Deseret; a\x00b nul",
    None,
    "",
    "12345 67 8_9 ___ plain ascii text with the stop words of English",
]


@pytest.fixture(scope="module")
def texts_df(spark):
    # Spark ML's tokenizer fails on a null text (prediction refuses one as bad input before it gets there).
    rows = [(f"d{i}", t) for i, t in enumerate(TEXTS) if t is not None]
    return spark.createDataFrame(rows, "id string, text string")


def _stop_words(settings):
    language = settings.stop_words.lower()
    return [] if language == "none" else StopWordsRemover.loadDefaultStopWords(language)


def _jvm_and_python(df, vocabulary, settings):
    """(JVM, Python) CSR term counts of ``df``'s texts, rows in ``df``'s order."""
    table = featurize(df, vocabulary, settings).toArrow()
    jvm = csr_of(table.column("features").combine_chunks(), len(vocabulary))
    featurizer = TextFeaturizer(vocabulary, settings, _stop_words(settings))
    py = featurizer.matrix(table.column("text").combine_chunks())
    return jvm, py


@pytest.mark.parametrize("cjk", ["chars", "bigrams", "none"])
@pytest.mark.parametrize("normalize", ["nfkc", "none"])
def test_counts_equal_spark_ml_featurisation(spark, texts_df, cjk, normalize):
    settings = FeatureSettings(stop_words="english", cjk=cjk, normalize=normalize, min_df=1, max_df=1.0)
    vocabulary = fit_vocabulary(texts_df, settings)
    jvm, py = _jvm_and_python(texts_df, vocabulary, settings)
    assert jvm.nnz > 40
    assert (jvm != py).nnz == 0
    assert np.array_equal(py.indptr, jvm.indptr) and np.array_equal(py.indices, jvm.indices)


def test_terms_spark_never_emits_are_never_counted(spark, texts_df):
    """A vocabulary from elsewhere may hold stop words, short or letterless terms: Spark ML counts none of them."""
    settings = FeatureSettings(stop_words="english", min_token_length=3, min_df=1, max_df=1.0)
    # All of them occur in TEXTS as word runs; none is a token Spark ML keeps.
    foreign = ["the", "of", "67", "12345", "8_9", "___", "x", "ab", "🙂", "a b"]
    fitted = fit_vocabulary(texts_df, settings)
    assert not set(foreign) & set(fitted)
    vocabulary = fitted + foreign
    jvm, py = _jvm_and_python(texts_df, vocabulary, settings)
    assert (jvm != py).nnz == 0
    assert not {vocabulary[j] for j in py.indices} & set(foreign)
    assert reachable_vocabulary(foreign, settings, _stop_words(settings)) == [None] * len(foreign)


def test_text_with_nul_and_null_is_tokenised_per_document():
    featurizer = TextFeaturizer(["ab", "cd", "abcd"], FeatureSettings(stop_words="none"))
    X = featurizer.matrix(pa.array(["ab\x00cd", None, "ab", "", "AB cd ab"], pa.string()))
    assert X.shape == (5, 3)
    assert X.toarray().tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0], [2, 1, 0]]


def test_bigrams_do_not_pair_across_documents():
    featurizer = TextFeaturizer(["東京", "京大", "大学"], FeatureSettings(stop_words="none", cjk="bigrams"))
    X = featurizer.matrix(pa.array(["東京", "大学", "東京大学"], pa.string()))
    assert X.toarray().tolist() == [[1, 0, 0], [0, 0, 1], [1, 1, 1]]


def test_only_the_default_token_pattern_is_supported():
    assert supports(FeatureSettings(stop_words="none"))
    custom = FeatureSettings(stop_words="none", token_pattern=r"\w+")
    assert not supports(custom)
    with pytest.raises(ValueError, match="default token pattern"):
        TextFeaturizer(["a"], custom)


def test_char_class_matches_astral_code_points_by_the_table():
    import re

    ranges = "0041-005A 1D400-1D419"
    pattern = re.compile(char_class(ranges))
    table = code_point_table(ranges)
    for ch in ["A", "Z", "a", "\U0001d400", "\U0001d419", "\U0001d41a", "\U0001f642", "é"]:
        assert bool(pattern.fullmatch(ch)) == bool(table[ord(ch)])
    assert code_points("0041-0043 00AA") == [0x41, 0x42, 0x43, 0xAA]


def _tiny_model(spark, tokenizer_settings):
    """A PCNB-shaped model over the vocabulary of TEXTS with random parameters (2 x 2 leaves)."""
    docs = spark.createDataFrame([(f"d{i}", t) for i, t in enumerate(TEXTS) if t], "id string, text string")
    vocabulary = fit_vocabulary(docs, tokenizer_settings)
    taxonomy = Taxonomy.from_label_paths([["a", "a1"], ["a", "a2"], ["b", "b1"], ["b", "b2"]])
    rng = np.random.default_rng(0)
    log_theta = np.log(rng.dirichlet(np.ones(len(vocabulary)), size=4))
    settings = ModelSettings(method="pcnb")
    return PathModel(taxonomy, vocabulary, np.log(np.full(4, 0.25)), log_theta, tokenizer_settings, settings)


@pytest.mark.parametrize("beam", [0, 2])
def test_transform_python_tokenizer_equals_spark_ml(spark, beam):
    model = _tiny_model(spark, FeatureSettings(stop_words="english", min_df=1, max_df=1.0))
    docs = spark.createDataFrame(
        [(f"d{i}", t or "") for i, t in enumerate(TEXTS * 3)], "id string, text string"
    ).repartition(3)
    assert model.text_featurizer() is not None
    python = model.transform(docs, top_k=3, beam=beam)
    model.tokenizer = "spark"
    assert model.text_featurizer() is None
    jvm = model.transform(docs, top_k=3, beam=beam)
    assert_df_equality(python, jvm, ignore_row_order=True)


def test_unknown_tokenizer_is_refused(spark):
    model = _tiny_model(spark, FeatureSettings(stop_words="none", min_df=1, max_df=1.0))
    model.tokenizer = "fast"
    with pytest.raises(InputError, match="tokenizer = 'fast'"):
        model.text_featurizer()


@pytest.mark.slow
def test_unicode_classes_are_this_jvms(spark):
    """The generated classes equal the JVM's own (scripts/gen_unicode_classes.py --check)."""
    from gen_unicode_classes import jvm_classes

    classes = jvm_classes(spark)
    for name in ("word", "letter", "cjk"):
        assert code_points(getattr(unicode_classes, name.upper())) == classes[name], name


def _token_differences(spark, texts, settings):
    """Indices of ``texts`` whose tokens differ between RegexTokenizer (JVM) and the Python tokenizer."""
    df = spark.createDataFrame([(str(i), t) for i, t in enumerate(texts)], "id string, text string")
    table = tokenize(df, settings).select("id", "text", "tokens").toArrow()
    jvm = table.column("tokens").to_pylist()
    python = TextFeaturizer(["unused"], settings).token_lists(table.column("text").combine_chunks()).to_pylist()
    letter = code_point_table(unicode_classes.LETTER)
    ids = [int(i) for i in table.column("id").to_pylist()]
    # The Python candidates still hold the runs without a letter, which the vocabulary lookup drops.
    return [i for i, j, p in zip(ids, jvm, python) if j != [t for t in p if letter[[ord(c) for c in t]].any()]]


@pytest.mark.slow
@pytest.mark.parametrize("cjk", ["chars", "none"])
def test_every_code_point_tokenises_as_on_the_jvm(spark, cjk):
    """Each code point alone, between letters, doubled and upper-cased: the same tokens as RegexTokenizer.

    Except for the characters Python's Unicode database does not know yet
    (Python 3.11: Unicode 14): Spark's ICU normalises some of those (Unicode
    15-16's Cyrillic modifier letters, outlined alphanumerics, ...).
    """
    import unicodedata

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    settings = FeatureSettings(stop_words="none", min_token_length=1, cjk=cjk)

    def text(cs):
        return " ".join(f"{c} x{c}y {c}{c}9 Q{c.upper()}" for c in cs)

    blocks = [chars[i : i + 64] for i in range(0, len(chars), 64)]
    suspects = [c for b in _token_differences(spark, [text(b) for b in blocks], settings) for c in blocks[b]]
    differing = [suspects[i] for i in _token_differences(spark, [text([c]) for c in suspects], settings)]
    known = [f"U+{ord(c):04X}" for c in differing if unicodedata.category(c) != "Cn"]
    assert not known, f"{len(known)} characters of Python's Unicode {unicodedata.unidata_version} differ: {known[:20]}"
    assert len(differing) < 1000  # Unicode 15-16 additions that ICU maps (under 256 with Spark 4.0)


def test_reachable_vocabulary_keeps_positions():
    settings = replace(FeatureSettings(stop_words="english"), min_token_length=2)
    kept = reachable_vocabulary(["apple", "the", "a", "東", "42", "x_y", "", "\U0001d401", "The"], settings, ["the"])
    # an astral letter is 2 UTF-16 units long, as Java counts; stop words compare in lower case
    assert kept == ["apple", None, None, "東", None, "x_y", None, "\U0001d401", None]


def test_a_term_listed_twice_counts_at_its_last_column_as_in_spark_ml(spark):
    vocabulary = ["cat", "dog", "cat", "the", "the"]
    settings = FeatureSettings(stop_words="english")
    df = spark.createDataFrame([("a", "cat dog cat the")], "id string, text string")
    jvm, py = _jvm_and_python(df, vocabulary, settings)
    assert py.toarray().tolist() == jvm.toarray().tolist() == [[0, 1, 2, 0, 0]]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_ascii_and_unicode_rows_keep_their_order_in_sliced_and_large_columns(kind):
    featurizer = TextFeaturizer(["ab", "cd", "été", "x_1"], FeatureSettings(stop_words="none"))
    texts = pa.array(["zz", "AB cd", "Été ab", None, "x_1 X_1 ab", "cd ÉTÉ été"], kind).slice(1)
    assert featurizer.token_lists(texts).to_pylist() == [
        ["ab", "cd"],
        ["été", "ab"],
        [],
        ["x_1", "x_1", "ab"],
        ["cd", "été", "été"],
    ]
    want = [[1, 1, 0, 0], [1, 0, 1, 0], [0] * 4, [1, 0, 0, 2], [0, 1, 2, 0]]
    assert featurizer.matrix(texts).toarray().tolist() == want


def test_pathem_model_tokenizer_param(spark):
    from pcem_spark.ml import PathEMModel

    model = PathEMModel(_tiny_model(spark, FeatureSettings(stop_words="english", min_df=1, max_df=1.0)))
    docs = spark.createDataFrame([(f"d{i}", t) for i, t in enumerate(TEXTS) if t], "id string, text string")
    assert model.getOrDefault("tokenizer") == "python"
    python = model.transform(docs)
    assert_df_equality(python, model.setTokenizer("spark").transform(docs), ignore_row_order=True)
    with pytest.raises(InputError, match="tokenizer = 'fast'"):
        model.setTokenizer("fast").transform(docs)
