"""The package structure docs/ARCHITECTURE.md describes, checked from the code's own imports.

Every ``import`` in ``pcem_spark`` -- at module level, inside functions (lazy) and under
``TYPE_CHECKING`` alike -- is an edge of the import graph. The graph must have no cycle, and
no module may import from a package above its own in ``LAYERS``. ``core`` is pure numpy/scipy
and ``util`` the standard library only. No test here needs Spark.
"""

import ast
import os
import sys

import pytest

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pcem_spark")

# Bottom to top: a module may import its own package and the packages before it.
LAYERS = [
    "errors",
    "util",
    "core",
    "engine",
    "io",
    "evaluation",
    "model",
    "ml",
    "baselines",
    "experiment",
    "ops",
    "cli",
]
MAX_MODULE_LINES = 600
# core's promise: the mathematics without Spark (or anything that starts a JVM).
CORE_FORBIDDEN = ("pyspark", "py4j", "pandas", "pyarrow")


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))[: -len(".py")].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def library_modules():
    """{module name: path} of every .py file in the package."""
    found = {}
    for root, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                found[_module_name(path)] = path
    return found


def _resolve_relative(module: str, is_package: bool, level: int, target) -> str:
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: str, modules) -> set:
    """Modules ``module`` imports (every ``import`` statement anywhere in the file)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_package = path.endswith("__init__.py")
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
            # "from package import submodule" imports the submodule; "from module import name" the module.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        edges.update(t for t in targets if t == "pcem_spark" or t.startswith("pcem_spark."))
    edges.discard(module)
    return edges


def external_imports_of(path: str) -> set:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def import_graph():
    modules = library_modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pcem_spark"


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_package_is_a_layer():
    packages = {layer_of(m) for m in library_modules()} - {"pcem_spark"}
    assert packages <= set(LAYERS), f"packages without a layer in LAYERS: {sorted(packages - set(LAYERS))}"


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_a_package_above_its_own():
    upward = []
    for module, targets in import_graph().items():
        if module == "pcem_spark":
            continue
        rank = LAYERS.index(layer_of(module))
        for target in targets:
            if target == "pcem_spark" or LAYERS.index(layer_of(target)) > rank:
                upward.append(f"{module} imports {target}")
    assert not upward, "imports that point up the layers:\n" + "\n".join(sorted(upward))


def test_core_needs_no_spark_and_util_only_the_standard_library():
    offenders = []
    for module, path in library_modules().items():
        external = external_imports_of(path) - {"pcem_spark", "__future__"}
        if layer_of(module) == "core":
            offenders += [f"{module} imports {name}" for name in sorted(external & set(CORE_FORBIDDEN))]
        elif layer_of(module) in ("util", "errors"):
            offenders += [f"{module} imports {name}" for name in sorted(external - set(sys.stdlib_module_names))]
    assert not offenders, "\n".join(offenders)


def test_modules_stay_small():
    long = {
        m: n
        for m, p in library_modules().items()
        if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_no_module_shadows_the_standard_library():
    shadows = {m for m in library_modules() if m.split(".")[-1] in sys.stdlib_module_names - {"io"}}
    # pcem_spark.io is a package only ever imported by its full name (absolute imports throughout).
    assert not shadows, f"modules named like a standard library module: {sorted(shadows)}"


MAX_PARAMETERS = 8
# A parameter that is a settings object (annotated with one of these, or named like one) does not count:
# grouping many values into one typed, validated object is how a long list is kept short.
SETTINGS_TYPES = ("Settings", "Options", "Plan", "Layout", "Weights")
SETTINGS_NAMES = ("settings", "options", "plan", "tune")


def _counted_parameters(fn) -> list:
    args = fn.args
    counted = []
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        annotation = ast.unparse(arg.annotation) if arg.annotation else ""
        if arg.arg in ("self", "cls") or any(t in annotation for t in SETTINGS_TYPES):
            continue
        if arg.arg in SETTINGS_NAMES or arg.arg.endswith("_settings"):
            continue
        counted.append(arg.arg)
    return counted + [f"*{a.arg}" for a in (args.vararg, args.kwarg) if a is not None]


def test_no_function_takes_more_than_eight_parameters():
    """Settings objects aside; pyspark's @keyword_only Estimator constructors (one keyword per Param) too."""
    long = []
    for module, path in library_modules().items():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(isinstance(d, ast.Name) and d.id == "keyword_only" for d in node.decorator_list):
                continue
            counted = _counted_parameters(node)
            if len(counted) > MAX_PARAMETERS:
                long.append(f"{module}.{node.name}: {len(counted)} ({', '.join(counted)})")
    assert not long, "functions with more than 8 parameters (group them into a settings object):\n" + "\n".join(long)


# The checker itself, on made-up graphs: it must see what it is there to see.
@pytest.mark.parametrize(
    "graph, cyclic",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
        ({"a": {"a2"}, "a2": {"a"}}, True),
    ],
)
def test_find_cycle_on_small_graphs(graph, cyclic):
    assert (find_cycle(graph) is not None) == cyclic


def test_lazy_and_relative_imports_are_edges(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from pcem_spark.cli.app import main\nfrom . import sibling\nfrom .sub import thing\n")
    modules = {"pcem_spark.core.m", "pcem_spark.core.sibling", "pcem_spark.cli.app"}
    assert imports_of("pcem_spark.core.m", str(src), modules) == {
        "pcem_spark.cli.app",
        "pcem_spark.core.sibling",
        "pcem_spark.core.sub",
    }
