"""The ``>>>`` examples in the public docstrings run and print what they say.

The pure numpy modules run under plain :mod:`doctest`; the Spark classes
(``PathEM``, ``PathEMModel``, ``HierarchicalF1Evaluator``, ``PathModel``) get
the session's ``spark`` fixture in their globals and fit on a tiny inline
DataFrame.
"""

import doctest
import importlib

import pytest

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

PURE_MODULES = [
    "pcem_spark.core.decoding",
    "pcem_spark.core.path_nodes",
    "pcem_spark.core.estep",
    "pcem_spark.core.parameters",
    "pcem_spark.core.structure",
    "pcem_spark.ml.tune_settings",
    "pcem_spark.model.path_spread",
]

# (module, the objects in it whose examples need Spark). The objects are named
# explicitly: PathEM / PathEMModel say they live in pcem_spark.ml (their pickled
# and saved name), so doctest's module search would skip them.
SPARK_OBJECTS = [
    ("pcem_spark.ml.estimator", ["PathEM", "PathEMModel"]),
    ("pcem_spark.evaluation.evaluator", ["HierarchicalF1Evaluator"]),
    ("pcem_spark.model.path_model", ["PathModel"]),
]


def _examples(module_name, object_names=None, extraglobs=None):
    """The doctests of a module (its docstring and members), or of the named objects in it."""
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    tests = finder.find(module, module_name, extraglobs=extraglobs)
    for name in object_names or ():
        tests += finder.find(
            getattr(module, name), f"{module_name}.{name}", module=False, globs=vars(module), extraglobs=extraglobs
        )
    unique = {t.name: t for t in tests if t.examples}
    return [unique[name] for name in sorted(unique)]


def _run(test):
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report = []
    result = runner.run(test, out=report.append)
    return result, "".join(report)


@pytest.mark.parametrize("module_name", PURE_MODULES)
def test_pure_examples(module_name):
    tests = _examples(module_name)
    assert tests, f"{module_name} has no examples"
    for test in tests:
        result, report = _run(test)
        assert result.failed == 0, report


@pytest.mark.slow
@pytest.mark.parametrize("module_name, object_names", SPARK_OBJECTS)
def test_spark_examples(spark, module_name, object_names):
    tests = _examples(module_name, object_names, extraglobs={"spark": spark})
    with_examples = {t.name.rsplit(".", 1)[-1] for t in tests}
    assert set(object_names) <= with_examples, f"no examples in {sorted(set(object_names) - with_examples)}"
    for test in tests:
        result, report = _run(test)
        assert result.failed == 0, report
