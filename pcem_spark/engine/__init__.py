"""The Spark engine: moves blocks of documents, broadcasts parameters and sums statistics.

``session`` builds the SparkSession (only ever from an entry point) and
refuses a Spark Connect one where the classic API is needed; ``features``
turns text into term-count vectors with Spark ML, and ``python_tokens`` the
same counts in a Python worker (prediction; its character classes,
``unicode_classes``, are generated from the JVM); ``arrow_io`` and ``blocks``
pack a partition's rows into CSR blocks through Arrow; ``passes`` runs the
EM loop (settings: ``EMSettings``), one ``sums`` pass per iteration over the
cached blocks (``mapPartitions`` with the parameters broadcast,
``reduceByKey`` of the sums) and the M-step on the driver; ``limits`` and ``progress`` guard and report those jobs. The
arithmetic is :mod:`pcem_spark.core`'s: this package only moves data. It
imports :mod:`pcem_spark.core`, :mod:`pcem_spark.util` and
:mod:`pcem_spark.errors`, never a package above it.
"""

from pcem_spark.engine.arrow_io import (  # noqa: F401
    PredictionLayout,
    PredictionOptions,
    arrow_blocks,
    csr_of,
    label_path_index,
    node_score_rows,
    predicted_path_batches,
    prefix_path_arrays,
    sparse_vector_arrays,
    top_paths_array,
    weak_score_rows,
)
from pcem_spark.engine.blocks import (  # noqa: F401
    RDD_NEEDS,
    Block,
    blocks_from_labels,
    blocks_from_node_scores,
    cache_blocks,
    label_blocks,
    node_score_blocks,
    packed_blocks,
    packed_label_frame,
)
from pcem_spark.engine.frame_sums import frame_sufficient_stats  # noqa: F401
from pcem_spark.engine.limits import (  # noqa: F401
    ResultSizeError,
    check_result_size,
    max_result_size,
)
from pcem_spark.engine.passes import (  # noqa: F401
    EM_MODES,
    EMSettings,
    FitResult,
    em_mode,
    fit,
)
from pcem_spark.engine.sums import (  # noqa: F401
    COALESCE_TO_CORES,
    E_STEP_MAX_CELLS,
    SPARSE_SUMS_MIN_CELLS,
    PassOptions,
    PassSettings,
    sufficient_stats,
)

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
]
