"""Small process-level helpers: fault injection for the tests of retries and exit codes
(``faults``), file modes that respect the umask (``filemodes``) and the declarative
validation of settings (``constraints``). Imports only the standard library and
:mod:`pcem_spark.errors`.
"""

__all__: list = []
