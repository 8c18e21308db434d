"""How many word parameters ``path_weight`` > 0 makes, estimated before anything is fitted.

With γ > 0, Eq. 2 gives a labelled document a share of every path that
shares a node with its own, so its words become non-zero parameters of every
path under its level-1 node: about 1,000 paths each in a 10 × 10 × 100
taxonomy. With many labelled documents on a wide taxonomy the sparse
parameters then outgrow any machine (10,000 labelled documents at 10,000
leaves: ~750 M non-zeros; the refit's Python worker was killed at 11 GB),
while γ = 0 keeps each word on its own path. :func:`spread_parameters`
bounds the count from the labelled documents' distinct terms per level-1
node: the automatic tuning leaves γ > 0 out of its grid above
``tune.max_parameters`` (:func:`pcem_spark.ml.tuning.resolve_auto`).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.arrow_io import sparse_vector_arrays
from pcem_spark.engine.label_columns import one_path_per_row

__all__ = ["spread_parameters", "labelled_terms_per_top"]


def spread_parameters(terms_per_top: Dict[str, int], taxonomy: Taxonomy) -> int:
    """Word parameters of the labelled documents' spread: Σ over level-1 nodes of distinct terms × paths below.

    >>> t = Taxonomy.from_label_paths([["a", "a1"], ["a", "a2"], ["a", "a3"], ["b", "b1"]])
    >>> spread_parameters({"a": 100, "b": 7}, t)
    307
    """
    paths_below = Counter(path[0] for path in taxonomy.paths)
    return int(sum(n_terms * paths_below.get(top, 0) for top, n_terms in terms_per_top.items()))


def labelled_terms_per_top(
    feats: DataFrame, vocab_size: int, labels_col: str = "labels", features_col: str = "features"
) -> Dict[str, int]:
    """{level-1 node: distinct terms of its labelled documents} of ``feats`` (term-count SparseVectors).

    One pass over the labelled rows; each task sends its distinct
    (node, term) pairs, Spark removes the duplicates and counts per node, and
    the driver receives one row per level-1 node.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def pairs(batches):
        for batch in batches:
            top = pc.list_element(batch.column(0), 0).dictionary_encode()
            indptr, indices, _ = sparse_vector_arrays(batch.column(1))
            rows = np.repeat(np.arange(batch.num_rows), np.diff(indptr))
            codes = np.asarray(top.indices.to_numpy(zero_copy_only=False), dtype=np.int64)[rows]
            keys = np.unique(codes * vocab_size + indices)
            yield pa.RecordBatch.from_arrays(
                [top.dictionary.take(pa.array(keys // vocab_size)), pa.array(keys % vocab_size, pa.int64())],
                names=["top", "term"],
            )

    # A document with several paths counts its terms under each path's top-level node.
    labelled = one_path_per_row(feats.where(F.col(labels_col).isNotNull()).select(labels_col, features_col), labels_col)
    counted = labelled.mapInArrow(pairs, "top string, term long").distinct().groupBy("top").count()
    return {r["top"]: int(r["count"]) for r in counted.collect()}
