"""Every module of pcem_spark declares its public API in ``__all__``, and the declaration is true.

For each module (``__main__`` excepted): ``__all__`` exists, has no duplicates,
names only things the module has, and lists every public (non-underscore)
function and class the module itself defines -- unless :data:`EXCLUDED` says
why not. Names a module merely imports are not required (they belong to the
module that defines them). Importing every module also checks that none
starts Spark or needs an optional dependency at import time.
"""

import importlib
import inspect
import pkgutil

import pytest

import pcem_spark

# module -> {name: why it is public (no underscore) but not part of the module's API}.
EXCLUDED = {}

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(pcem_spark.__path__, prefix="pcem_spark.")
    if not info.name.endswith(".__main__")
)


def _defined_here(module):
    """Public functions and classes whose ``__module__`` is ``module`` (not imported ones)."""
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    }


def test_every_module_is_checked():
    assert "pcem_spark.core.estep" in MODULES
    assert "pcem_spark.cli.app" in MODULES
    assert not [name for name in MODULES if name.endswith("__main__")]


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_all(name):
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    declared = list(module.__all__)
    assert len(declared) == len(set(declared)), f"{name}.__all__ lists a name twice"
    missing = [n for n in declared if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what the module does not have: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_public_definitions_are_declared(name):
    module = importlib.import_module(name)
    excluded = EXCLUDED.get(name, {})
    undeclared = sorted(_defined_here(module) - set(module.__all__) - set(excluded))
    assert not undeclared, (
        f"{name} defines public {undeclared} but its __all__ does not list them: "
        "add them to __all__, rename them with a leading underscore, or exclude them in EXCLUDED with a reason"
    )
    stale = sorted(n for n in excluded if n in module.__all__ or not hasattr(module, n))
    assert not stale, f"EXCLUDED[{name!r}] lists names that are declared or gone: {stale}"


def test_the_api_reference_has_a_page_for_every_package():
    """docs/conf.py writes one reference page per entry of PACKAGES, from its ``__all__``:
    a package missing there would be missing from the reference that scripts/build_docs.sh builds."""
    import ast
    import os

    conf = os.path.join(os.path.dirname(__file__), "..", "docs", "conf.py")
    tree = ast.parse(open(conf, encoding="utf-8").read())
    listed = next(
        [element.elts[0].value for element in node.value.elts]
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PACKAGES"
    )
    packages = {info.name for info in pkgutil.iter_modules(pcem_spark.__path__, prefix="pcem_spark.") if info.ispkg}
    assert packages <= set(listed), f"packages with no reference page: {sorted(packages - set(listed))}"
    assert len(listed) == len(set(listed))
    for name in listed:  # each entry imports (a stale name would fail the docs build only in CI)
        importlib.import_module(name)
