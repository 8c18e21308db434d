"""Write pcem_spark/engine/unicode_classes.py: the JVM tokenizer's character classes, read from the JVM itself.

The Python tokenizer of ``pcem predict`` (pcem_spark.engine.python_tokens) must
split text exactly as Spark's RegexTokenizer does with the default token
pattern, ``(?U)\\b\\w*\\p{L}\\w*\\b``, and as the CJK splitter's
``\\p{IsHan}``-style classes do. Python's ``re`` has its own idea of ``\\w``
(no combining marks) and no ``\\p{..}``, so the three classes are read from
the JVM, one Spark job over every code point, and written as ranges:

    python scripts/gen_unicode_classes.py            # rewrite the module
    python scripts/gen_unicode_classes.py --check    # exit 1 if the JVM disagrees with it

tests/test_python_tokens.py runs the ``--check`` comparison against the JVM
the tests run on.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGET = os.path.join(os.path.dirname(HERE), "pcem_spark", "engine", "unicode_classes.py")


def jvm_classes(spark):
    """{name: sorted list of code points} of the JVM's word, letter and CJK classes (surrogates excluded)."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import functions as F

    from pcem_spark.engine.features import CJK_CHAR

    codes = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF], dtype=np.int64)
    chars = pa.array([chr(c) for c in codes], pa.string())
    df = spark.createDataFrame(pa.table({"code": codes, "ch": chars}))
    flags = df.select(
        "code",
        F.col("ch").rlike(r"(?U)^\w$").alias("word"),
        F.col("ch").rlike(r"^\p{L}$").alias("letter"),
        F.col("ch").rlike(f"^{CJK_CHAR}$").alias("cjk"),
    ).toArrow()
    code = flags.column("code").to_numpy()
    return {
        name: code[np.asarray(flags.column(name).to_numpy(zero_copy_only=False), dtype=bool)].tolist()
        for name in ("word", "letter", "cjk")
    }


def ranges_of(points):
    """[(first, last)] runs of consecutive code points."""
    out = []
    for p in points:
        if out and out[-1][1] == p - 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return [tuple(r) for r in out]


def encode(ranges) -> str:
    """``"0030-0039 0041-005A 00AA ..."``: hex runs, a lone code point without its dash."""
    return " ".join(f"{a:04X}" if a == b else f"{a:04X}-{b:04X}" for a, b in ranges)


def render(classes, java_version: str) -> str:
    parts = [
        'r"""Character classes of the JVM tokenizer, as code-point ranges (generated; do not edit).',
        "",
        "Written by ``python scripts/gen_unicode_classes.py`` from the JVM's own regex",
        f"engine (Java {java_version}): ``WORD`` is ``(?U)\\w``, ``LETTER`` is ``\\p{{L}}``, ``CJK`` is",
        "pcem_spark.engine.features.CJK_CHAR. Each string holds hex runs ``A-B`` or",
        "single code points ``A``, space separated. tests/test_python_tokens.py checks",
        "them against the JVM the tests run on.",
        '"""',
        "",
        '__all__ = ["WORD", "LETTER", "CJK"]',
        "",
    ]
    for name, constant in (("word", "WORD"), ("letter", "LETTER"), ("cjk", "CJK")):
        lines = textwrap.wrap(encode(ranges_of(classes[name])), 100, break_on_hyphens=False)
        parts.append(f"{constant} = (")
        parts += [f'    "{line} "' for line in lines]
        parts += [")", ""]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the module instead of writing it")
    args = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").appName("gen_unicode_classes").getOrCreate()
    classes = jvm_classes(spark)
    java_version = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    spark.stop()
    if args.check:
        from pcem_spark.engine import unicode_classes as uc
        from pcem_spark.engine.python_tokens import code_points

        bad = [n for n in classes if code_points(getattr(uc, n.upper())) != classes[n]]
        print("differs: " + ", ".join(bad) if bad else "the module matches this JVM")
        return 1 if bad else 0
    with open(TARGET, "w", encoding="utf-8") as fh:
        fh.write(render(classes, java_version))
    print(f"wrote {TARGET}: " + ", ".join(f"{n} {len(classes[n])} code points" for n in classes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
