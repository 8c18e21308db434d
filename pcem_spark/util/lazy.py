"""A package's public names, imported on first use (PEP 562): ``import pcem_spark.cli`` to read settings or
print an error does not pay for pandas, scipy and pyspark.ml, which the commands load when they run."""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Dict[str, str]) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to the module defining it.

    The first access imports the module and caches the value in the package,
    so later accesses are plain attribute reads.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
