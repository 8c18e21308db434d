"""The Spark engine: moves blocks of documents, broadcasts parameters and sums statistics.

``session`` builds the SparkSession (only ever from an entry point) and
refuses a Spark Connect one where the classic API is needed; ``features``
turns text into term-count vectors with Spark ML, and ``python_tokens`` the
same counts in a Python worker (prediction; its character classes,
``unicode_classes``, are generated from the JVM); ``arrow_io`` and ``blocks``
pack a partition's rows into CSR blocks through Arrow; ``passes`` runs the
EM loop (settings: ``EMSettings``), one ``sums`` pass per iteration over the
cached blocks (``mapPartitions`` with the parameters broadcast,
the sums summed per key) and the M-step on the driver; ``limits`` and ``progress`` guard and report those jobs. The
arithmetic is :mod:`pcem_spark.core`'s: this package only moves data. It
imports :mod:`pcem_spark.core`, :mod:`pcem_spark.util` and
:mod:`pcem_spark.errors`, never a package above it.
"""

from pcem_spark.util.lazy import lazy_exports

# Each public name and the module that defines it, imported on first use (pcem_spark.util.lazy).
_EXPORTS = {
    "labeled_rows": "pcem_spark.engine.softmax_pass",
    "block_terms": "pcem_spark.engine.softmax_pass",
    "softmax_terms_pass": "pcem_spark.engine.softmax_pass",
    "fit_softmax_on_blocks": "pcem_spark.engine.softmax_pass",
    "PredictionLayout": "pcem_spark.engine.arrow_io",
    "PredictionOptions": "pcem_spark.engine.arrow_io",
    "arrow_blocks": "pcem_spark.engine.arrow_io",
    "csr_of": "pcem_spark.engine.arrow_io",
    "label_path_index": "pcem_spark.engine.arrow_io",
    "node_score_rows": "pcem_spark.engine.arrow_io",
    "predicted_path_batches": "pcem_spark.engine.arrow_io",
    "prefix_path_arrays": "pcem_spark.engine.arrow_io",
    "sparse_vector_arrays": "pcem_spark.engine.arrow_io",
    "top_paths_array": "pcem_spark.engine.arrow_io",
    "weak_score_rows": "pcem_spark.engine.arrow_io",
    "RDD_NEEDS": "pcem_spark.engine.blocks",
    "Block": "pcem_spark.engine.blocks",
    "blocks_from_labels": "pcem_spark.engine.blocks",
    "blocks_from_node_scores": "pcem_spark.engine.blocks",
    "cache_blocks": "pcem_spark.engine.blocks",
    "label_blocks": "pcem_spark.engine.blocks",
    "node_score_blocks": "pcem_spark.engine.blocks",
    "packed_blocks": "pcem_spark.engine.blocks",
    "packed_label_frame": "pcem_spark.engine.blocks",
    "frame_sufficient_stats": "pcem_spark.engine.frame_sums",
    "ResultSizeError": "pcem_spark.engine.limits",
    "check_result_size": "pcem_spark.engine.limits",
    "max_result_size": "pcem_spark.engine.limits",
    "EM_MODES": "pcem_spark.engine.passes",
    "EMSettings": "pcem_spark.engine.passes",
    "FitResult": "pcem_spark.engine.passes",
    "em_mode": "pcem_spark.engine.passes",
    "fit": "pcem_spark.engine.passes",
    "COALESCE_TO_CORES": "pcem_spark.engine.sums",
    "E_STEP_MAX_CELLS": "pcem_spark.engine.sums",
    "SPARSE_SUMS_MIN_CELLS": "pcem_spark.engine.sums",
    "PassOptions": "pcem_spark.engine.sums",
    "PassSettings": "pcem_spark.engine.sums",
    "sufficient_stats": "pcem_spark.engine.sums",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "SPARSE_SUMS_MIN_CELLS",
    "E_STEP_MAX_CELLS",
    "COALESCE_TO_CORES",
    "EM_MODES",
    "em_mode",
    "EMSettings",
    "FitResult",
    "PassOptions",
    "PassSettings",
    "sufficient_stats",
    "fit",
    "RDD_NEEDS",
    "Block",
    "blocks_from_labels",
    "blocks_from_node_scores",
    "cache_blocks",
    "label_blocks",
    "node_score_blocks",
    "packed_blocks",
    "packed_label_frame",
    "frame_sufficient_stats",
    "sparse_vector_arrays",
    "arrow_blocks",
    "csr_of",
    "PredictionLayout",
    "PredictionOptions",
    "predicted_path_batches",
    "prefix_path_arrays",
    "top_paths_array",
    "label_path_index",
    "node_score_rows",
    "weak_score_rows",
    "ResultSizeError",
    "check_result_size",
    "max_result_size",
    "labeled_rows",
    "block_terms",
    "softmax_terms_pass",
    "fit_softmax_on_blocks",
]
