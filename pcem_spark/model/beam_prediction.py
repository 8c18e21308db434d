"""Prediction by a beam search down the tree: the mapInArrow body of a wide taxonomy's decoder.

:meth:`pcem_spark.model.PathModel.predict_columns` uses it when the decoder
is a beam (:meth:`~pcem_spark.model.PathModel.beam_width` > 0); the beam's
level-by-level tables are built once per model and dtype and broadcast.
"""

from __future__ import annotations

from pcem_spark.core.beam import beam_path_details, beam_scorer, beam_tables
from pcem_spark.core.estep import scoring_tables
from pcem_spark.core.multi_path import with_membership
from pcem_spark.core.path_nodes import path_node_table
from pcem_spark.engine.arrow_io import PredictionLayout, PredictionOptions, predicted_path_batches
from pcem_spark.engine.shipping import ship

__all__ = ["beam_batches"]


def beam_batches(model, spark, real_paths, options: PredictionOptions, batching, doc_length, typical=None):
    """The mapInArrow body of a beam decoder of width ``options.beam``: the beam tables, built here, are broadcast.

    ``batching`` is ``(n_keep, to_matrix, block_size, names)`` and ``typical`` the ``(typicality, in_taxonomy)``
    of :func:`predicted_path_batches`; ``doc_length`` the model's.
    """
    n_keep, to_matrix, block_size, names = batching
    width = options.beam
    temperature = model.effective_temperature
    path_node = model.taxonomy.path_node_matrix(sparse=True)
    dtype = model.model_settings.parameter_dtype
    cached = getattr(model, "_beam_scorer", None)  # (params, dtype, scorer): seconds to build at 10,000 paths
    if cached is None or cached[0] is not model.params or cached[1] != dtype:
        model._beam_scorer = cached = (model.params, dtype, beam_scorer(beam_tables(model.params, path_node), dtype))
    scorer = cached[2]._replace(temperature=temperature, probability_map=model.effective_probability_map)
    nodes = None
    if options.min_probability > 0 or options.node_probabilities:
        nodes = (path_node_table(path_node, model.taxonomy.is_dummy), list(model.taxonomy.nodes))
    # --multi-path: the pairs' word probabilities come from the path tables (core.multi_path).
    path_tables = None
    if options.multi_path > 0:
        path_tables = scoring_tables(model.params, dtype)._replace(temperature=temperature)
    bc = ship(spark, (scorer, real_paths, nodes, path_tables))
    del scorer, path_tables

    def decode(X, scorer, path_nodes, path_tables):
        out = beam_path_details(
            X,
            scorer,
            width,
            doc_length,
            path_nodes,
            options.min_probability,
            options.ranked,
            options.node_probabilities,
        )
        return out if path_tables is None else with_membership(out, X, path_tables, doc_length)

    def predict_batches(batches):
        # Arrow in, Arrow out: each block walks down the tree at once (core.beam), no per-row Python.
        scorer, paths, nodes, path_tables = bc.value
        path_nodes, node_names = nodes if nodes is not None else (None, None)
        return predicted_path_batches(
            batches,
            n_keep,
            to_matrix,
            block_size,
            PredictionLayout(paths, names, node_names, path_nodes),
            lambda X: decode(X, scorer, path_nodes, path_tables),
            options,
            typical,
        )

    return predict_batches
