"""Small process-level helpers with no pcem_spark dependency: fault injection for the
tests of retries and exit codes (``faults``) and file modes that respect the umask
(``filemodes``). Imports only the standard library.
"""

__all__: list = []
