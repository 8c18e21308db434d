"""The ``typicality`` prediction column: each block's documents against their predicted path's words.

The arithmetic is :func:`pcem_spark.core.density.path_typicality`; this
module ships the word distributions to the executors once.
"""

from __future__ import annotations

from pcem_spark.core.density import path_typicality, ratio_lookup
from pcem_spark.engine.shipping import ship
from pcem_spark.errors import InputError

__all__ = ["typicality_of_blocks"]


# A Python worker unpickles a broadcast once and keeps it for the tasks it runs, while a task's closure is
# unpickled per task: the lookup table is kept here, beside the one broadcast value it was built from.
# Two entries: suggest-labels ships the typicality's and the in_taxonomy score's parameters apart, and each
# block reads both.
_LOOKUP: list = []  # [(log_ratio, its RatioLookup)], the most recent last


def _lookup_of(log_ratio):
    for kept, lookup in _LOOKUP:
        if kept is log_ratio:
            return lookup
    _LOOKUP.append((log_ratio, ratio_lookup(log_ratio)))
    del _LOOKUP[:-2]
    return _LOOKUP[-1][1]


def typicality_of_blocks(spark, model):
    """``typicality(X, best)`` of a block for ``model`` (a PathModel), its word distributions broadcast.

    Refused (InputError) for a model whose components are not one per path:
    the baselines' components are nodes, not paths.
    """
    if model.spec.structure is not None:
        raise InputError(
            f"typicality compares a document with its path's word distribution; a "
            f"{model.model_settings.method} model has no component per path (use pcnb, pcem, flat-nb or flat-em)"
        )
    bc = ship(spark, (model.params.log_base, model.params.log_ratio))

    def typicality(X, best):
        log_base, log_ratio = bc.value
        return path_typicality(X, log_base, log_ratio, best, _lookup_of(log_ratio))

    return typicality
