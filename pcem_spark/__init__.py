"""pcem-spark: path cost-sensitive naive Bayes / EM (Xiao, Liu & Song, WWW'19) on Apache Spark.

Packages, from the bottom of the import graph to the top (a module imports
only from its own package or one below it; ``tests/test_architecture.py``
checks this, lazy imports included, and docs/ARCHITECTURE.md draws it)::

    errors      the exception types every layer raises
    util        fault injection, file modes (standard library only)
    core        the paper's mathematics on numpy/scipy (no pyspark)
    engine      the Spark engine: session, featurising, blocks, EM passes
    io          documents in, atomic outputs out, paths checked
    evaluation  hierarchical F1, as metrics and as a pyspark.ml Evaluator
    model       ModelSettings, PathModel, fitting one method on blocks
    ml          PathEM / PathEMModel and training orchestration (tuning)
    baselines   the discriminative baselines (LR, SVM, HierCost)
    experiment  the paper's protocol and report
    ops         pcem inspect, packaging for clusters
    cli         the pcem command

Importing the package never starts Spark; entry points build the session.
"""

__version__ = "0.1.0"
