"""Which documents to label next: ``pcem suggest-labels``.

The unlabelled documents are scored from the model's calibrated path
posteriors (one prediction pass: the cost per document of ``pcem predict``),
then a batch rule picks ``budget`` of them that are not all the same question:

* **criteria** (:data:`CRITERIA`), each a Spark SQL expression over the
  prediction's ``top_paths`` and ``node_probabilities`` (no Python per row):

  - ``margin``: 1 - (p1 - p2), the two most probable paths' probabilities: a
    document the model cannot decide between two paths;
  - ``entropy``: the entropy (nats) of the path posterior over the
    ``candidates`` best paths, the rest of the mass as one more outcome;
  - ``level``: 1 - the smallest marginal probability of a node of the
    predicted path: the level where the model is least sure;
  - ``committee``: the disagreement of ``committee_size`` naive Bayes models
    drawn from the posterior of the model's word distributions
    (:mod:`pcem_spark.core.committee`, McCallum & Nigam 1998): the mean
    Kullback-Leibler divergence (nats) of each member's path posterior from the
    members' mean, over the ``candidates`` best paths of each member (a path
    outside a member's list counts 0 for it). Each member is one more scoring
    of every document (no shuffle: the members' predictions travel with the
    rows), so it costs ``committee_size`` + 1 predictions;

  the reason names the criterion, its value, the two paths and the level
  where they part (``margin`` / ``entropy``) or the weakest level (``level``);

* **density weight** ``density_weight`` (beta >= 0, McCallum & Nigam's density
  weighting): the criterion's value times ``exp(beta * typicality)``, where
  ``typicality`` is -KL (nats) of the document's known words from its
  predicted path's word distribution (:mod:`pcem_spark.core.density`,
  computed in the same prediction task): an outlier the model is unsure of
  only because it is like nothing it knows ranks below a typical document
  it hesitates over. A document with no word the model knows scores 0
  whatever beta: a label on it would teach the model nothing;

* **batch rule** ``spread``: picks go round-robin over the pairs of leaves the
  model hesitates between (the best and second-best path's leaves), the most
  uncertain document of each pair first, so N picks are spread over the
  taxonomy; documents the model reads as the same (the same known words in
  the same counts: :mod:`pcem_spark.core.fingerprints`, computed in the
  prediction task) count once (the most uncertain copy).
  ``none``: the N highest scores.

Ties are broken by a hash of (id, seed) (``spread``: within a pair, by a hash
of (fingerprint, seed)): the ranking is the same for a seed. Bounded work: the
``spread`` window keeps ``budget`` distinct documents per pair, with their
copies, in each partition before its shuffle (Spark's ``WindowGroupLimit``, up
to ``spark.sql.optimizer.windowGroupLimitThreshold`` rows, which ``pcem
suggest-labels`` raises to the budget), and the final ordering is a
``budget``-row top-N; nothing but the N picks is ever in one place.
"""

from __future__ import annotations

import copy
import logging
from typing import List, NamedTuple, Tuple

import numpy as np
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pcem_spark.core.committee import member_seeds, sample_member_parameters
from pcem_spark.errors import InputError
from pcem_spark.model.schema import OutputOptions

__all__ = [
    "CRITERIA",
    "BATCH_RULES",
    "DEFAULT_DENSITY_WEIGHT",
    "Scoring",
    "suggest_labels",
    "uncertainty_columns",
    "committee_models",
    "committee_disagreement",
    "SUGGESTION_COLUMNS",
]

log = logging.getLogger(__name__)

CRITERIA = ("margin", "entropy", "level", "committee")
DEFAULT_COMMITTEE_SIZE = 4
# beta of the density weight exp(beta * typicality); 0 = the criterion alone (see docs/BENCHMARKS.md).
DEFAULT_DENSITY_WEIGHT = 0.0
BATCH_RULES = ("spread", "none")
EXCERPT_CHARS = 300
# The text's head carried to the top-N, where its white space is collapsed and it is cut to EXCERPT_CHARS.
_EXCERPT_HEAD_CHARS = 2 * EXCERPT_CHARS
SUGGESTION_COLUMNS = (
    "id",
    "rank",
    "score",
    "typicality",
    "criterion",
    "level",
    "reason",
    "excerpt",
    "candidates",
    "labels",
)


def _path_text(path: Column) -> Column:
    return F.array_join(path, " / ")


def uncertainty_columns(pred: DataFrame, criterion: str) -> Tuple[Column, Column, Column]:
    """``(score, level, reason)`` of each prediction row for ``criterion``.

    ``pred`` has ``top_paths`` (array of (path, probability), most probable first, at least one) and
    ``node_probabilities`` (the marginal of each node of ``path``). ``score`` is larger for a document
    more worth labelling; ``level`` (1-based) is where the doubt is.
    """
    if criterion not in CRITERIA:
        raise InputError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    first = F.col("top_paths")[0]
    second = F.try_element_at("top_paths", F.lit(2))
    p1, p2 = first["probability"], F.coalesce(second["probability"], F.lit(0.0))
    path1, path2 = first["path"], second["path"]
    # The first level where the two best paths differ (1-based); a path that is a prefix of the other parts
    # below its end; with no second path, at level 1.
    same = F.zip_with(path1, path2, lambda a, b: F.coalesce(a == b, F.lit(False)))
    parting = F.when(path2.isNull(), F.lit(1)).otherwise(
        F.coalesce(F.nullif(F.array_position(same, False), F.lit(0)).cast("int"), F.lit(1) + F.size(path1))
    )
    between = F.concat(
        F.lit(" between "),
        _path_text(path1),
        F.lit(" and "),
        F.coalesce(_path_text(path2), F.lit("(no other path)")),
        F.lit(" (they part at level "),
        parting.cast("string"),
        F.lit(")"),
    )
    if criterion == "margin":
        score = F.lit(1.0) - (p1 - p2)
        reason = F.concat(F.lit("margin "), F.format_number(p1 - p2, 3), between)
        return score, parting, reason
    if criterion == "entropy":
        mass = F.aggregate("top_paths", F.lit(0.0), lambda acc, x: acc + x["probability"])
        rest = F.greatest(F.lit(0.0), F.lit(1.0) - mass)

        def plogp(p: Column) -> Column:
            return F.when(p > 0, p * F.log(p)).otherwise(F.lit(0.0))

        score = -F.aggregate("top_paths", F.lit(0.0), lambda acc, x: acc + plogp(x["probability"])) - plogp(rest)
        reason = F.concat(F.lit("entropy "), F.format_number(score, 3), F.lit(" nats"), between)
        return score, parting, reason
    weakest = F.array_min("node_probabilities")
    level = F.array_position("node_probabilities", weakest).cast("int")
    reason = F.concat(
        F.lit("level "),
        level.cast("string"),
        F.lit(": "),
        F.format_number(weakest, 3),
        F.lit(" sure of "),
        F.element_at(F.col("path"), level),
        F.lit(" on the path "),
        _path_text(F.col("path")),
    )
    return F.lit(1.0) - weakest, level, reason


def committee_models(model, size: int, seed: int = 0) -> list:
    """``size`` copies of ``model`` whose word distributions are drawn from their posterior.

    Everything but the parameters is shared (taxonomy, vocabulary, calibration, a linear family's
    regression); member ``k`` is drawn from the ``k``-th seed spawned from ``seed``.
    """
    if int(size) < 2:
        raise InputError(f"--committee-size must be at least 2 (one model cannot disagree), got {size}")
    smoothing = float(model.model_settings.smoothing)
    members = []
    for member_seed in member_seeds(seed, size):
        member = copy.copy(model)
        member.params = sample_member_parameters(model.params, smoothing, np.random.default_rng(member_seed))
        members.append(member)
    return members


def committee_disagreement(member_cols: List[str]) -> Column:
    """Mean KL divergence (nats) of each member's path posterior from the members' mean.

    Each column of ``member_cols`` is a member's ``top_paths`` (array of (path, probability)). A
    path outside a member's list has probability 0 for it: the mean of a path is the sum of the
    probabilities the members list for it, over the number of members.
    """
    k = len(member_cols)
    entries = F.flatten(
        F.array(
            *[
                F.transform(
                    c, lambda x: F.struct(F.array_join(x["path"], " / ").alias("p"), x["probability"].alias("q"))
                )
                for c in member_cols
            ]
        )
    )

    def mean(p: Column) -> Column:
        listed = F.filter(entries, lambda e: e["p"] == p)
        return F.aggregate(listed, F.lit(0.0), lambda acc, e: acc + e["q"]) / F.lit(float(k))

    def term(x: Column) -> Column:
        return F.when(x["q"] > 0, x["q"] * F.log(x["q"] / mean(x["p"]))).otherwise(F.lit(0.0))

    return F.aggregate(entries, F.lit(0.0), lambda acc, x: acc + term(x)) / F.lit(float(k))


class Scoring(NamedTuple):
    """How suggestions are scored: the criterion and its settings (see the module docstring)."""

    criterion: str = "margin"  # one of CRITERIA
    committee_size: int = DEFAULT_COMMITTEE_SIZE  # the members of the committee criterion (>= 2)
    density_weight: float = DEFAULT_DENSITY_WEIGHT  # beta of exp(beta * typicality); 0 = the criterion alone


def suggest_labels(
    model,
    docs: DataFrame,
    budget: int,
    scoring: Scoring = Scoring(),
    batch: str = "spread",
    candidates: int = 3,
    seed: int = 0,
) -> DataFrame:
    """The ``budget`` unlabelled documents of ``docs`` most worth labelling, ranked.

    Parameters
    ----------
    model : a :class:`~pcem_spark.model.path_model.PathModel`.
    docs : documents (``id``, ``text``, ``labels`` or none); labelled ones are not suggested.
    budget : how many to suggest (>= 1).
    scoring : :class:`Scoring`: the criterion, the committee's size, the density weight's beta >= 0
        (``exp(beta * typicality)``; 0 = the criterion alone; a document with no known word scores 0 at
        any beta).
    batch : see the module docstring.
    candidates : the top paths each suggestion shows (>= 2), with their probabilities.
    seed : the ties' order, and the committee's draws.

    Returns
    -------
    DataFrame with :data:`SUGGESTION_COLUMNS`: ``id``, ``rank`` (1 = label first), ``score``,
    ``typicality`` (null with no known word), ``criterion``, ``level``, ``reason``, ``excerpt`` (the
    text's first :data:`EXCERPT_CHARS` characters, white space collapsed), ``candidates`` (array of
    (path, probability)) and ``labels`` (null: for the labeller to fill in; the rows then read back with ``pcem train
    --labels``). At most ``budget`` rows, fewer when fewer documents are unlabelled.
    """
    criterion, committee_size, density_weight = scoring
    if criterion not in CRITERIA:
        raise InputError(f"--criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    if batch not in BATCH_RULES:
        raise InputError(f"--batch must be one of {', '.join(BATCH_RULES)}, got {batch!r}")
    if int(budget) < 1:
        raise InputError(f"--budget must be at least 1, got {budget}")
    if int(candidates) < 2:
        raise InputError(f"--candidates must be at least 2 (the choice shown to a labeller), got {candidates}")
    if isinstance(density_weight, bool) or not isinstance(density_weight, (int, float)) or not density_weight >= 0:
        raise InputError(f"--density-weight must be a number >= 0 (0 = no density weight), got {density_weight!r}")
    unlabelled = docs.where(F.col("labels").isNull()) if "labels" in docs.columns else docs
    # The text's head travels with each row through the prediction (a kept column: no join of the texts
    # back to the predictions); its white space is collapsed on the picked rows only, after the top-N (a
    # regular expression over every document cost more than the prediction).
    rows = unlabelled.select(
        "id",
        "text",
        F.lit(None).cast("array<string>").alias("labels"),
        F.substring("text", 1, _EXCERPT_HEAD_CHARS).alias("_excerpt"),
        *(["embedding"] if "embedding" in unlabelled.columns else []),  # a model fitted with vectors reads them
    )
    kept = ["_excerpt"]
    if criterion == "committee":
        # Each member scores the rows it is handed and passes them on with its top paths: a chain of
        # narrow mapInArrow stages over the same partitions, no join.
        # The text travels as _text ("text" is a name the predictions reserve).
        rows = rows.withColumnRenamed("text", "_text")
        for k, member in enumerate(committee_models(model, committee_size, seed)):
            scored_by = member.transform(
                rows, top_k=int(candidates), keep_columns=["_text", *kept], input_cols=("id", "_text", "labels")
            )
            kept.append(f"_member{k}")
            rows = scored_by.select("id", "_text", "labels", *kept[:-1], F.col("top_paths").alias(kept[-1]))
    pred = model.transform_outputs(
        rows,
        OutputOptions(top_k=int(candidates), node_probabilities=True, typicality=True, fingerprint=batch == "spread"),
        keep_columns=kept,
        input_cols=("id", "_text" if criterion == "committee" else "text", "labels"),
    )
    if criterion == "committee":
        members = kept[1:]
        _, level, model_margin = uncertainty_columns(pred, "margin")
        score = committee_disagreement(members)
        votes = F.array_join(F.array(*[_path_text(F.col(c)[0]["path"]) for c in members]), ", ")
        reason = F.concat(
            F.lit("committee disagreement "),
            F.format_number(score, 3),
            F.lit(f" nats; the {len(members)} members' best paths: "),
            votes,
            F.lit("; the model's "),
            model_margin,
        )
    else:
        score, level, reason = uncertainty_columns(pred, criterion)
    typical = F.col("typicality")
    # exp(beta * typicality) <= 1; a document with no known word (null typicality) 0.
    density = F.coalesce(F.exp(F.lit(float(density_weight)) * typical), F.lit(0.0))
    # The reason is a string per row: built on the picked rows only, from the columns carried to them.
    reason = F.concat(
        reason,
        F.coalesce(
            F.concat(F.lit("; typicality "), F.format_number(typical, 3), F.lit(" nats")),
            F.lit("; no word the model knows"),
        ),
    )
    best, runner_up = F.col("top_paths")[0]["path"], F.try_element_at("top_paths", F.lit(2))["path"]
    pair = F.array_join(
        F.array_sort(F.array(F.element_at(best, -1), F.coalesce(F.element_at(runner_up, -1), F.lit("")))), " | "
    )
    # What the reason and the output need, and no more: every row is sorted for the batch rule's windows.
    carried = ["id", "typicality", "top_paths", "_excerpt", *kept[1:]]
    if criterion == "level":
        carried += ["path", "node_probabilities"]
    # The spread rule's keys: the pair, and documents the model reads as the same count once (each one with no
    # known word is its own).
    spread_keys = [
        pair.alias("_pair"),
        F.coalesce(F.col("bag_fingerprint"), F.xxhash64(F.col("id"))).alias("_fingerprint"),
    ]
    scored = pred.select(
        *carried,
        # Rounded: the copies of a document score the same up to the last bits of a block's BLAS product.
        F.round(score * density, 12).alias("_score"),
        level.alias("_level"),
        *(spread_keys if batch == "spread" else []),
        F.xxhash64(F.col("id"), F.lit(int(seed))).alias("_tie"),
    )
    # At equal scores (0 at the extremes) a document the model can read comes first.
    head = [F.desc("_score"), F.asc(F.col("typicality").isNull())]
    order = [*head, F.asc("_tie"), F.asc("id")]
    if batch == "spread":
        # A document's fingerprint fixes its prediction (up to rounding), so its copies share a pair and a
        # score: each pair's turns are its distinct fingerprints (dense_rank), and a filter on them is a group
        # limit that Spark applies in each partition before the shuffle
        # (spark.sql.optimizer.windowGroupLimitThreshold must be >= budget: the CLI sets it; the copies of a
        # kept fingerprint travel too). Then the best copy of each fingerprint, in the same partitions.
        by_copy = [*head, F.asc(F.xxhash64("_fingerprint", F.lit(int(seed)))), F.asc("_fingerprint")]
        turns = scored.withColumn("_turn", F.dense_rank().over(Window.partitionBy("_pair").orderBy(*by_copy)))
        turns = turns.where(F.col("_turn") <= int(budget))
        once = turns.withColumn(
            "_copy", F.row_number().over(Window.partitionBy("_pair", "_fingerprint").orderBy(*order))
        ).where(F.col("_copy") == 1)
        picked = once.orderBy(F.asc("_turn"), *order).limit(int(budget))
        final_order = [F.asc("_turn"), *order]
    else:
        picked = scored.orderBy(*order).limit(int(budget))
        final_order = order
    ranked = picked.withColumn("rank", F.row_number().over(Window.orderBy(*final_order)))
    return ranked.select(
        "id",
        "rank",
        F.col("_score").alias("score"),
        "typicality",
        F.lit(criterion).alias("criterion"),
        F.col("_level").alias("level"),
        reason.alias("reason"),
        F.substring(F.trim(F.regexp_replace("_excerpt", r"\s+", " ")), 1, EXCERPT_CHARS).alias("excerpt"),
        F.col("top_paths").alias("candidates"),
        F.lit(None).cast("array<string>").alias("labels"),
    )
