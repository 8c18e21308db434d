"""Checks of the training labels that say what is wrong before a long run.

* :func:`require_known_label_paths` -- labels that are not a path of a given
  taxonomy are an error naming up to 10 of them (most frequent first) with
  their document counts, an example document and the nearest known path;
* :func:`label_coverage` / :func:`warn_label_coverage` -- leaves with no or
  very few labelled (or weakly labelled) documents;
* :func:`warn_singleton_leaves` -- with an inferred taxonomy, leaves used by
  exactly one document (a typo becomes a class of its own), with a
  "did you mean" hint.

Everything is computed on Spark; only per-leaf counts (at most M rows) or a
handful of distinct label paths reach the driver, never documents.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Optional, Tuple, Union

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError, closest_name
from pcem_spark.engine.label_columns import one_path_per_row

__all__ = ["require_known_label_paths", "label_coverage", "warn_label_coverage", "warn_singleton_leaves"]

log = logging.getLogger(__name__)

# Fewer labelled documents than this is "very few": below the default number
# of cross-validation folds (tune.folds = 3), a leaf cannot be in every fold, and
# its word distribution rests on one or two documents plus smoothing.
FEW_LABELLED = 3
# Names listed in one warning at most (the total count is always given).
MAX_NAMES = 20
# difflib ratio for "did you mean" on a singleton leaf: high, because a wrong
# hint ("tech" -> "text") is worse than none.
SINGLETON_CUTOFF = 0.8

# Per kind of supervision: what a covered document is called, and what to do about
# leaves with none / with very few.
_KINDS = {
    "labels": (
        "labelled document",
        "Label some documents of each (with --label-rate: raise the rate), or remove those leaves "
        "from the taxonomy file.",
        "Label more documents of each (with --label-rate: raise the rate).",
    ),
    "weak": (
        "document with a weak label",
        "Give them descriptions with words that occur in the corpus and set them apart from their "
        "siblings, or lower supervision.min_similarity.",
        "Add words typical of their documents (and frequent in the corpus) to their descriptions.",
    ),
}


def _prefix(where: Optional[str]) -> str:
    return f"{where}: " if where else ""


def _more(names: List[str]) -> str:
    return f" (+{len(names) - MAX_NAMES} more)" if len(names) > MAX_NAMES else ""


# --------------------------------------------------------------- label paths
def require_known_label_paths(
    docs: DataFrame, taxonomy: Taxonomy, labels_col: str = "labels", max_listed: int = 10, where: Optional[str] = None
) -> None:
    """Raise a :class:`TaxonomyError` when some non-null labels are not a root-to-leaf path of ``taxonomy``.

    Parameters
    ----------
    docs : DataFrame with ``labels_col`` (array<string>, level 1 -> leaf; null =
        unlabelled) and, when present, ``id`` (string) for an example document.
    max_listed : the message lists this many wrong paths, most frequent first;
        it always gives the total number of wrong paths and documents.
    where : names the input (e.g. the documents path) in the message.

    One groupBy over the label paths and an anti-join with the M known paths
    run on Spark; only the wrong paths (at most ``max_listed`` rows plus one
    row of totals) reach the driver. The message keeps
    :meth:`Taxonomy.path_of_labels`'s wording ("document 'x': ...").
    """
    bad = _unknown_label_paths(one_path_per_row(docs, labels_col), taxonomy, labels_col).cache()
    try:
        totals = bad.agg(F.count(F.lit(1)).alias("paths"), F.sum("n").alias("docs")).first()
        if not totals["paths"]:
            return
        top = bad.orderBy(F.desc("n"), F.col(labels_col).cast("string")).limit(max_listed).collect()
    finally:
        bad.unpersist()
    lines = [_describe_wrong_path(taxonomy, row[labels_col], row["example_id"], int(row["n"])) for row in top]
    shown = f" (the {len(top)} most frequent below)" if totals["paths"] > len(top) else ""
    raise TaxonomyError(
        f"{_prefix(where)}labels that are not paths of the taxonomy: {totals['paths']} distinct label "
        f"path(s) on {totals['docs']} document(s){shown}:\n  "
        + "\n  ".join(lines)
        + "\nTo go on: correct these labels in the documents, add the missing nodes to the taxonomy file, "
        "or set those documents' labels to null (they then count as unlabelled)."
    )


def _unknown_label_paths(docs: DataFrame, taxonomy: Taxonomy, labels_col: str) -> DataFrame:
    """Distinct non-null label paths that are not a real path of the taxonomy.

    Columns ``labels_col``, ``n`` (documents), ``example_id`` (smallest id, or null).
    """
    spark = docs.sparkSession
    known = spark.createDataFrame([(taxonomy.real_path(j),) for j in range(taxonomy.n_paths)], "_known array<string>")
    example = F.min("id") if "id" in docs.columns else F.lit(None).cast("string")
    counted = (
        docs.where(F.col(labels_col).isNotNull())
        .groupBy(labels_col)
        .agg(F.count(F.lit(1)).alias("n"), example.alias("example_id"))
    )
    # Arrays compare element-wise; a path with a null element matches nothing, so it is reported.
    return counted.join(F.broadcast(known), F.col(labels_col) == F.col("_known"), "left_anti")


def _describe_wrong_path(taxonomy: Taxonomy, labels, example_id, n: int) -> str:
    """One line: what is wrong with ``labels`` (named by an example document), how often, and the nearest path."""
    try:
        taxonomy.path_of_labels(labels, doc=example_id)
        reason = f"labels {list(labels)} are not a path of the taxonomy"  # not expected: the anti-join said so
    except TaxonomyError as exc:
        reason = str(exc)
    guess = taxonomy.suggest_path(labels) if labels else None
    hint = f"; did you mean {guess}?" if guess else ""
    return f"{list(labels)} on {n} document(s): {reason}{hint}"


# ------------------------------------------------------------ leaf coverage
def _leaf_counts(docs: DataFrame, taxonomy: Taxonomy, labels_col: str) -> List:
    """Rows (leaf, n, example_id) for the leaves that occur in ``labels_col``; at most M rows.

    A leaf counts for a document when it appears at its own depth in the
    array, so the same code reads true label paths (where the leaf is the last
    element) and per-depth ``weak_path`` arrays (where a shallow leaf may be
    followed by a node chosen at a deeper level).
    """
    spark = docs.sparkSession
    leaves = spark.createDataFrame(
        [(leaf, taxonomy.node_depth(leaf)) for leaf in taxonomy.leaves], "_leaf string, _depth int"
    )
    example = F.min("id") if "id" in docs.columns else F.lit(None).cast("string")
    id_col = [F.col("id")] if "id" in docs.columns else []
    docs = one_path_per_row(docs, labels_col)
    exploded = docs.where(F.col(labels_col).isNotNull()).select(
        *id_col, F.posexplode(labels_col).alias("_pos", "_node")
    )
    hits = exploded.join(
        F.broadcast(leaves), (F.col("_node") == F.col("_leaf")) & (F.col("_pos") + 1 == F.col("_depth"))
    )
    return hits.groupBy("_leaf").agg(F.count(F.lit(1)).alias("n"), example.alias("example_id")).collect()


def label_coverage(docs: DataFrame, taxonomy: Taxonomy, labels_col: str = "labels") -> Dict[str, int]:
    """Labelled documents per leaf: dict leaf -> count over every real leaf of ``taxonomy`` (0 included).

    ``docs[labels_col]`` is array<string> (null = unlabelled): the true label
    paths, or the ``weak_path`` of :func:`pcem_spark.model.weak_labels.weak_label` (count
    only rows whose ``node_scores`` is not null there). One groupBy over the
    leaf on Spark; at most M rows are collected.
    """
    counts = {leaf: 0 for leaf in taxonomy.leaves}
    for row in _leaf_counts(docs, taxonomy, labels_col):
        counts[row["_leaf"]] = int(row["n"])
    return counts


def warn_label_coverage(
    counts: Mapping[str, int],
    taxonomy: Taxonomy,
    few: int = FEW_LABELLED,
    where: Optional[str] = None,
    kind: str = "labels",
) -> Tuple[List[str], List[str]]:
    """Log a warning naming the leaves with no and with very few (``< few``) covered documents.

    Parameters
    ----------
    counts : leaf -> count, e.g. from :func:`label_coverage`; a missing leaf counts 0.
    few : a leaf with 1 .. few-1 documents is "very few" (default 3, see ``FEW_LABELLED``).
    where : names the input in the message.
    kind : ``"labels"`` (true labels) or ``"weak"`` (weak labels); picks the wording and the advice.

    Returns
    -------
    (empty, very_few): lists of leaf names, in taxonomy order and by count then name.
    """
    noun, advice_empty, advice_few = _KINDS[kind]
    empty = [leaf for leaf in taxonomy.leaves if counts.get(leaf, 0) == 0]
    very_few = sorted(
        (leaf for leaf in taxonomy.leaves if 0 < counts.get(leaf, 0) < few), key=lambda leaf: (counts[leaf], leaf)
    )
    n_leaves = len(taxonomy.leaves)
    if empty:
        log.warning(
            "%s%d of %d leaves have no %s: %s%s. The model still predicts them, from smoothing and "
            "(pcnb/pcem with path_weight > 0) their ancestors' documents only, so such predictions are "
            "guesses. %s",
            _prefix(where),
            len(empty),
            n_leaves,
            noun,
            empty[:MAX_NAMES],
            _more(empty),
            advice_empty,
        )
    if very_few:
        shown = ", ".join(f"{leaf!r} ({counts[leaf]})" for leaf in very_few[:MAX_NAMES])
        log.warning(
            "%s%d of %d leaves have fewer than %d %ss: %s%s. Their word distributions rest on one or "
            "two documents, and cross-validation cannot put them in every fold. %s",
            _prefix(where),
            len(very_few),
            n_leaves,
            few,
            noun,
            shown,
            _more(very_few),
            advice_few,
        )
    return empty, very_few


def warn_singleton_leaves(
    docs_or_counts: Union[DataFrame, Mapping[str, int]],
    taxonomy: Optional[Taxonomy] = None,
    labels_col: str = "labels",
    where: Optional[str] = None,
    cutoff: float = SINGLETON_CUTOFF,
) -> Dict[str, Optional[str]]:
    """Warn about leaves used by exactly one document: with an inferred taxonomy, probably typos.

    Call it for an inferred taxonomy only, on the full labels (before any
    label-rate sampling, which leaves many leaves with one labelled document
    on purpose). ``docs_or_counts`` is a documents DataFrame (then
    ``taxonomy`` is needed; the message also names the document) or a dict
    leaf -> count as from :func:`label_coverage`.

    Returns a dict singleton leaf -> most similar leaf used by at least two
    documents (difflib ratio >= ``cutoff``), or None. Hints are computed for
    the first ``MAX_NAMES`` singletons only (the ones the warning names).
    """
    examples: Dict[str, str] = {}
    if isinstance(docs_or_counts, DataFrame):
        if taxonomy is None:
            raise ValueError("warn_singleton_leaves: pass the taxonomy with a documents DataFrame")
        counts = {leaf: 0 for leaf in taxonomy.leaves}
        for row in _leaf_counts(docs_or_counts, taxonomy, labels_col):
            counts[row["_leaf"]] = int(row["n"])
            examples[row["_leaf"]] = row["example_id"]
    else:
        counts = dict(docs_or_counts)
    singles = sorted(leaf for leaf, n in counts.items() if n == 1)
    if not singles:
        return {}
    if 2 * len(singles) > len(counts):
        # Most leaves have one labelled document: the fewest-labels case by design, not typos.
        log.info(
            "%s%d of %d leaves have one labelled document each: the fewest-labels case (a leaf's only document "
            "is never held out by the cross-validation); pass --taxonomy FILE to catch label typos",
            _prefix(where),
            len(singles),
            len(counts),
        )
        return {leaf: None for leaf in singles}
    # A typo's intended spelling is the leaf that many documents use.
    common = sorted(leaf for leaf, n in counts.items() if n >= 2)
    hints: Dict[str, Optional[str]] = {leaf: None for leaf in singles}
    for leaf in singles[:MAX_NAMES]:
        hints[leaf] = closest_name(leaf, common, cutoff)
    shown = []
    for leaf in singles[:MAX_NAMES]:
        bits = [f"document {examples[leaf]!r}"] if examples.get(leaf) is not None else []
        if hints[leaf]:
            bits.append(f"did you mean {hints[leaf]!r}?")
        shown.append(f"{leaf!r}" + (f" ({'; '.join(bits)})" if bits else ""))
    log.warning(
        "%s%d of %d leaves are used by exactly one document, probably typos that became classes of "
        "their own: %s%s. Correct the labels of those documents, or pass --taxonomy FILE so that labels "
        "outside it are an error instead of new classes.",
        _prefix(where),
        len(singles),
        len(counts),
        ", ".join(shown),
        _more(singles),
    )
    return hints
