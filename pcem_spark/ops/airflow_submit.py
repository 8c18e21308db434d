"""The spark-submit tasks of pcem's Airflow DAGs (``dags/*.py``): the operator, its settings templates.

It imports Airflow and its apache-spark provider, so only DAG files import it, never the rest of the package.
Importing the module itself needs neither: Airflow is imported when a DAG first asks for
``PcemSparkSubmitOperator`` (``from pcem_spark.ops.airflow_submit import PcemSparkSubmitOperator``,
or :func:`operator_class`). The package can then be installed without the ``airflow`` extra on
the Spark executors, and be imported there or by the rest of pcem-spark without Airflow.

* :class:`Settings`: each DAG setting as Jinja that reads, in this order, the run's param
  ``<name>`` (``airflow dags trigger DAG --conf '{"data_root": "/data/pcem"}'``), the Airflow
  Variable ``pcem_<name>``, or the default; a default may follow another setting
  (:class:`Follows`). :meth:`Settings.required` names the settings a task cannot run without,
  for the operator's ``pcem_required``.
* ``PcemSparkSubmitOperator``: ``SparkSubmitOperator`` with its connection, env archive, driver
  Python and extra ``--conf`` settings taken from templates, options added only when their
  value is set, required values checked before anything runs, and pcem's exit codes: 2 (bad
  input) and 1 (a bug) fail the task for good (``AirflowFailException``), every other failure
  (75, a lost connection) is left to Airflow's retries.
* :func:`installed_cli_main`: ``pcem_spark/cli/__main__.py`` of the installed package, a
  spark-submit application that runs ``pcem <command> ...`` given the command as its first argument.
* :func:`template_filters`: the DAG's ``pcem_expand`` filter, which renders a setting's value as
  a template once more, so that a Variable such as ``/crawl/{{ ds }}`` names the run's own day.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from typing import Mapping, Union

from pcem_spark.util.redaction import redact
from pcem_spark.util.strict_json import StrictJSONError, loads_strict

__all__ = [
    "DEFAULT_CONN_ID",
    "VARIABLE_PREFIX",
    "EXIT_BUG",
    "EXIT_BAD_INPUT",
    "EXIT_TRANSIENT",
    "NOT_RETRIED",
    "Follows",
    "Settings",
    "installed_cli_main",
    "template_filters",
    "submit_returncode",
    "parse_spark_conf",
    "operator_class",
    # PcemSparkSubmitOperator is importable by name too (module __getattr__), but is not listed here:
    # listing it would make ``from ... import *`` and API checks import Airflow.
]

DEFAULT_CONN_ID = "pcem_spark"
VARIABLE_PREFIX = "pcem_"
# pcem_spark.cli.failures (a layer above ops): EXIT_BUG and EXIT_BAD_INPUT (not retried), EXIT_TRANSIENT (retried).
EXIT_BUG, EXIT_BAD_INPUT, EXIT_TRANSIENT = 1, 2, 75
NOT_RETRIED = {EXIT_BUG: "a bug in pcem-spark", EXIT_BAD_INPUT: "bad input or settings"}


@dataclass(frozen=True)
class Follows:
    """A default that follows another setting: ``<base><suffix>``, and empty while ``base`` is empty."""

    base: str
    suffix: str


Default = Union[str, Follows]


class Settings:
    """A DAG's settings as Jinja: run param ``<name>``, else Variable ``<prefix><name>``, else the default.

    ``defaults`` maps each name to a literal default (``""``: none) or a :class:`Follows`. Every
    name must also be a param of the DAG (:meth:`params` makes them: empty by default, so an
    empty param means "not given").
    """

    def __init__(self, defaults: Mapping[str, Default], prefix: str = VARIABLE_PREFIX):
        for name, default in defaults.items():
            if isinstance(default, Follows) and default.base not in defaults:
                raise ValueError(f"setting {name} follows {default.base!r}, which is not a setting")
        self.defaults = dict(defaults)
        self.prefix = prefix

    def variable(self, name: str) -> str:
        return self.prefix + name

    def _fallback(self, name: str) -> str:
        default = self.defaults[name]
        if isinstance(default, Follows):
            base = self.expression(default.base)
            return f"(({base}) ~ {default.suffix!r} if ({base}) else '')"
        return repr(default)

    def expression(self, name: str) -> str:
        """The Jinja expression (no braces) of setting ``name``."""
        return (
            f"(params.{name} if params.{name} not in (None, '') "
            f"else var.value.get({self.variable(name)!r}, {self._fallback(name)}))"
        )

    def template(self, name: str, expand: bool = False) -> str:
        """``{{ ... }}`` of setting ``name``; ``expand``: its value is rendered once more (``pcem_expand``)."""
        return "{{ " + self.expression(name) + (" | pcem_expand" if expand else "") + " }}"

    def describe(self, name: str) -> str:
        """The default as the docs write it: ``<repo>/jobs``, ``'pcem_spark'``, or ``(none)``."""
        default = self.defaults[name]
        if isinstance(default, Follows):
            return f"<{default.base}>{default.suffix}"
        return repr(default) if default else "(none)"

    def required(self, *names: str) -> dict:
        """``{message: template}`` for the operator's ``pcem_required``: each setting must not be empty."""
        out = {}
        for name in names:
            how = f"set the run param {name} or the Airflow Variable {self.variable(name)}"
            default = self.defaults[name]
            if isinstance(default, Follows):
                how += f" (its default, <{default.base}>{default.suffix}, follows the setting {default.base})"
            out[f"the setting {name} is empty: {how}"] = self.template(name)
        return out

    def params(self, object_valued=("spark_conf",)) -> dict:
        """One Airflow ``Param`` per setting, empty by default (then the Variable, then the default apply)."""
        try:  # Airflow 3
            from airflow.sdk import Param
        except ImportError:  # Airflow 2
            from airflow.models.param import Param

        return {
            name: Param(
                "",
                type=["null", "string"] + (["object"] if name in object_valued else []),
                description=f"empty: Variable {self.variable(name)}, else {self.describe(name)}",
            )
            for name in self.defaults
        }


def installed_cli_main() -> str:
    """``pcem_spark/cli/__main__.py`` of the installed package (found with ``importlib.util.find_spec``).

    Run as a script (spark-submit's application), it is ``pcem``: ``__main__.py train --docs ...``
    is ``pcem train --docs ...``. Located from the package this Python imports, never from a DAG
    file's location, so it needs no checkout of pcem-spark on the Airflow worker.
    """
    spec = importlib.util.find_spec("pcem_spark")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pcem_spark is not installed in this Python: pip install pcem-spark on the Airflow workers")
    return os.path.join(list(spec.submodule_search_locations)[0], "cli", "__main__.py")


def template_filters() -> dict:
    """``user_defined_filters`` of a DAG: ``pcem_expand`` renders a value as a template once more.

    Airflow renders a field once, so a Variable or param whose value holds ``{{ ds }}`` would
    reach the task as those very characters; ``{{ <setting> | pcem_expand }}`` renders them
    with the run's context (``ds``, ``data_interval_start``, ``macros``, ``params``, ``var`` ...).
    """
    import jinja2

    @jinja2.pass_context
    def pcem_expand(context, value):
        text = "" if value is None else str(value)
        if "{{" not in text and "{%" not in text:
            return text
        return context.environment.from_string(text).render(context.get_all())

    return {"pcem_expand": pcem_expand}


def _airflow_exceptions():
    try:  # Airflow >= 3.1 (the same classes the provider raises; airflow.exceptions re-exports them)
        from airflow.sdk.exceptions import AirflowException, AirflowFailException
    except ImportError:
        from airflow.exceptions import AirflowException, AirflowFailException
    return AirflowException, AirflowFailException


def submit_returncode(hook, error: BaseException):
    """The exit code of the hook's spark-submit process, or None when it did not run to an exit.

    The provider keeps the process as ``hook._submit_sp`` (a Popen) and names
    the code in its error ("... Error code is: 2."); the message is the fallback.
    """
    proc = getattr(hook, "_submit_sp", None)
    code = getattr(proc, "returncode", None)
    if isinstance(code, int):
        return code
    match = re.search(r"Error code is: (-?\d+)", str(error))
    return int(match.group(1)) if match else None


def parse_spark_conf(value) -> dict:
    """The ``spark_conf`` setting (a JSON object, or a dict param rendered as a Python literal) as a dict."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    text = str(value or "").strip() or "{}"
    repeated = None
    try:
        parsed = loads_strict(text, "spark_conf")
    except StrictJSONError as exc:  # a setting given twice: which one was meant is unknown
        parsed, repeated = None, str(exc)
    except ValueError:
        try:
            parsed = ast.literal_eval(text)
            repeated = _repeated_literal_key(text)
        except (ValueError, SyntaxError):
            parsed = None
    if repeated or not isinstance(parsed, dict):
        _, AirflowFailException = _airflow_exceptions()
        message = repeated or f"spark_conf must be a JSON object of Spark settings, got {text!r}"
        raise AirflowFailException(redact(message))  # its values may be credentials
    return {str(k): str(v) for k, v in parsed.items()}


def _repeated_literal_key(text: str) -> str:
    """The error for a key given twice in a Python dict literal ("" when there is none)."""
    tree = ast.parse(text, mode="eval").body
    seen = set()
    for key in tree.keys if isinstance(tree, ast.Dict) else ():
        value = key.value if isinstance(key, ast.Constant) else None
        if value in seen:
            return f"spark_conf: line {key.lineno}, column {key.col_offset + 1}: repeated key {value!r}"
        if value is not None:
            seen.add(value)
    return ""


_OPERATOR = None


def operator_class():
    """``PcemSparkSubmitOperator``, defined on first use (this imports Airflow's Spark provider)."""
    global _OPERATOR
    if _OPERATOR is None:
        _OPERATOR = _define_operator()
    return _OPERATOR


def __getattr__(name: str):
    # PEP 562: "from pcem_spark.ops.airflow_submit import PcemSparkSubmitOperator" defines it then.
    if name == "PcemSparkSubmitOperator":
        return operator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define_operator():
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    AirflowException, AirflowFailException = _airflow_exceptions()

    class PcemSparkSubmitOperator(SparkSubmitOperator):
        """``SparkSubmitOperator`` that takes its connection and env archive from templates and knows pcem's exit codes.

        * ``pcem_conn_id`` (templated) replaces ``conn_id``;
        * ``pcem_env_archive`` (templated): when not empty, adds
          ``--archives <it>#environment`` and ``spark.pyspark.python=./environment/bin/python``;
        * ``pcem_driver_python`` (templated): in client mode, ``spark.pyspark.driver.python``;
          with an env archive it defaults to this worker's Python (``./environment`` exists
          only on the executors), without one Spark's own choice applies
          (PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON, python3);
        * ``pcem_spark_conf`` (templated JSON object): extra ``--conf`` settings;
        * ``pcem_optional_args`` (templated ``{option: value}``): ``option value`` appended to the
          application's arguments when the value is not empty, left out when it is;
        * ``pcem_required`` (templated ``{message: value}``): a value that renders empty fails the
          task before spark-submit runs, with its message, and is not retried (``AirflowFailException``);
        * spark-submit exit code 2 (bad input) or 1 (a bug) -> ``AirflowFailException``: no retry.
        """

        template_fields = tuple(SparkSubmitOperator.template_fields) + (
            "pcem_conn_id",
            "pcem_env_archive",
            "pcem_driver_python",
            "pcem_spark_conf",
            "pcem_optional_args",
            "pcem_required",
        )

        def __init__(
            self,
            *,
            pcem_conn_id: str = DEFAULT_CONN_ID,
            pcem_env_archive: str = "",
            pcem_driver_python: str = "",
            pcem_spark_conf: str = "{}",
            pcem_optional_args: dict | None = None,
            pcem_required: dict | None = None,
            **kwargs,
        ):
            super().__init__(**kwargs)
            self.pcem_conn_id = pcem_conn_id
            self.pcem_env_archive = pcem_env_archive
            self.pcem_driver_python = pcem_driver_python
            self.pcem_spark_conf = pcem_spark_conf
            self.pcem_optional_args = pcem_optional_args or {}
            self.pcem_required = pcem_required or {}

        def _apply_rendered(self) -> None:
            """Fold the rendered pcem_* fields into what the parent operator hands its hook."""
            for message, value in (self.pcem_required or {}).items():
                if not str(value if value is not None else "").strip():
                    raise AirflowFailException(f"{self.task_id}: {message} (not retried)")
            extra = []
            for option, value in (self.pcem_optional_args or {}).items():
                text = str(value if value is not None else "").strip()
                if text:
                    extra += [option, text]
            self.application_args = list(self.application_args or []) + extra
            self.pcem_optional_args = {}  # folded in: applying the fields again adds nothing twice
            self._conn_id = str(self.pcem_conn_id or "").strip() or DEFAULT_CONN_ID
            conf = dict(self.conf or {})
            conf.update(parse_spark_conf(self.pcem_spark_conf))
            # A driver JVM out of heap exits (the task fails and is retried) instead of hanging
            # with a dead result-getter thread until the task's timeout.
            conf.setdefault("spark.driver.extraJavaOptions", "-XX:+ExitOnOutOfMemoryError")
            env_archive = str(self.pcem_env_archive or "").strip()
            driver_python = str(self.pcem_driver_python or "").strip()
            if env_archive:
                self._archives = env_archive if "#" in env_archive else env_archive + "#environment"
                conf.setdefault("spark.pyspark.python", "./environment/bin/python")
                # ./environment exists only where the archive is unpacked (the executors; the driver
                # too in cluster deploy mode): a client-mode driver runs here, with this Python.
                driver_python = driver_python or sys.executable
            if driver_python:
                self.conf = conf
                if self._get_hook()._connection["deploy_mode"] != "cluster":
                    conf.setdefault("spark.pyspark.driver.python", driver_python)
            self.conf = conf
            self._hook = None  # rebuilt by execute() from the values above

        def execute(self, context):
            self._apply_rendered()
            try:
                return super().execute(context)
            except AirflowFailException:
                raise
            except AirflowException as exc:
                code = submit_returncode(self._hook, exc)
                if code in NOT_RETRIED:
                    # the hook's message holds the spark-submit command line: its --conf values redacted
                    raise AirflowFailException(
                        redact(f"{self.task_id}: spark-submit exited {code} ({NOT_RETRIED[code]}; not retried): {exc}")
                    ) from exc
                raise

    PcemSparkSubmitOperator.__module__ = __name__
    PcemSparkSubmitOperator.__qualname__ = "PcemSparkSubmitOperator"
    return PcemSparkSubmitOperator
