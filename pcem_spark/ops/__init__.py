"""Operations tooling: ``pcem inspect`` and packaging for clusters.

``inspection`` builds the report of a model (per-node masses, priors, top
terms) and of a predictions table (confusion) and writes it atomically;
``rendering`` turns it into Markdown, HTML and PNG; ``packaging`` builds the
``--py-files`` zip and the executors' environment archive. Imports
:mod:`pcem_spark.model`, :mod:`pcem_spark.io`, :mod:`pcem_spark.core` and below.
"""

__all__: list = []
