"""Values as data: a file format for Python values that reading can never turn into code.

pcem-spark writes some of its own values to storage and reads them back: a
train's checkpoint (:mod:`pcem_spark.io.checkpoints`) and, over Spark
Connect, large values staged for the executors (:mod:`pcem_spark.engine.shipping`).
Those folders sit on shared storage that other jobs and people may write, so
what is read there must be data only. A pickle is not: unpickling runs
whatever callable the bytes name. This format is:

* an ``.npz`` archive (numpy's zip of ``.npy`` arrays), read with
  ``allow_pickle=False``, so an array of Python objects is refused by numpy
  itself;
* whose entry ``tree`` is UTF-8 JSON describing the value: ``None``, bools,
  ints, floats, strings, lists, and tagged objects for tuples, dicts (any
  keys of those kinds), sets, bytes, numpy arrays and scalars (by reference
  to an entry of the archive), scipy sparse matrices (their arrays), and
  instances of the classes the *caller* allows (``types``): named tuples,
  dataclasses and plain classes, rebuilt from their fields.

Reading resolves a class name only among the classes the reader passes in;
any other name, an unknown tag or an object array is :class:`UnsafeValueError`.
Rebuilding an allowed class calls no method of it but ``__setstate__`` where
the class defines one (the class's own code, never one the file names).
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from typing import Any, Dict, Iterable, Mapping

import numpy as np
import scipy.sparse as sp

__all__ = ["UnsafeValueError", "dumps", "loads", "type_name"]

_TREE = "tree"
# numpy dtype kinds an array may have: bool, ints, floats, complex, bytes, str, datetimes (never objects).
_ARRAY_KINDS = set("biufcSUmM")
_SPARSE = {
    "csr_matrix": sp.csr_matrix,
    "csc_matrix": sp.csc_matrix,
    "csr_array": sp.csr_array,
    "csc_array": sp.csc_array,
}


class UnsafeValueError(ValueError):
    """Bytes that are not a value this format may hold (a class not allowed, an object array, a bad tree)."""


def type_name(cls: type) -> str:
    """How a class is named in the tree: ``module.QualName``."""
    return f"{cls.__module__}.{cls.__qualname__}"


class _Writer:
    def __init__(self, types: Iterable[type]):
        self.allowed = {type_name(t): t for t in types}
        self.arrays: Dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray) -> str:
        if a.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"an array of dtype {a.dtype} cannot be stored as data")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = a
        return name

    def tree(self, v: Any) -> Any:  # noqa: C901 - one branch per kind of value, in one place
        if v is None or isinstance(v, (bool, str)) or type(v) is int:
            return v
        if type(v) is float:
            return {"$": "float", "v": repr(v)} if not np.isfinite(v) else v
        if isinstance(v, np.generic):
            return {"$": "scalar", "a": self.array(np.asarray(v))}
        if isinstance(v, np.ndarray):
            return {"$": "array", "a": self.array(np.ascontiguousarray(v))}
        if sp.issparse(v):
            kind = type(v).__name__
            if kind not in _SPARSE:
                v, kind = v.tocsr(), "csr_array" if isinstance(v, sp.sparray) else "csr_matrix"
            return {
                "$": kind,
                "shape": list(v.shape),
                "data": self.array(v.data),
                "indices": self.array(v.indices),
                "indptr": self.array(v.indptr),
            }
        if isinstance(v, (bytes, bytearray)):
            return {"$": "bytes", "a": self.array(np.frombuffer(bytes(v), dtype=np.uint8))}
        if type(v) is list:
            return [self.tree(x) for x in v]
        if type(v) is tuple:
            return {"$": "tuple", "v": [self.tree(x) for x in v]}
        if type(v) in (set, frozenset):
            return {"$": type(v).__name__, "v": [self.tree(x) for x in sorted(v, key=repr)]}
        if type(v) is dict:
            return {"$": "dict", "k": [self.tree(k) for k in v], "v": [self.tree(x) for x in v.values()]}
        name = type_name(type(v))
        if name not in self.allowed:
            raise TypeError(f"{name} is not among the types this file may hold ({sorted(self.allowed)})")
        if isinstance(v, tuple) and hasattr(type(v), "_fields"):
            return {"$": "namedtuple", "t": name, "v": [self.tree(x) for x in v]}
        if dataclasses.is_dataclass(v):
            fields = {f.name: self.tree(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return {"$": "dataclass", "t": name, "f": fields}
        state = v.__getstate__()
        if not isinstance(state, dict):
            raise TypeError(f"{name}: only objects whose state is a dict of attributes can be stored")
        return {"$": "object", "t": name, "s": self.tree(state)}


class _Reader:
    def __init__(self, arrays: Mapping[str, np.ndarray], types: Iterable[type]):
        self.arrays = arrays
        self.allowed = {type_name(t): t for t in types}

    def array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name == _TREE or name not in self.arrays:
            raise UnsafeValueError(f"the tree names an array {name!r} that the file does not hold")
        return self.arrays[name]

    def cls(self, name: Any) -> type:
        if name not in self.allowed:
            raise UnsafeValueError(f"the file names the type {name!r}, which is not one it may hold")
        return self.allowed[name]

    def value(self, t: Any) -> Any:  # noqa: C901 - the inverse of _Writer.tree
        if t is None or isinstance(t, (bool, str, int, float)):
            return t
        if isinstance(t, list):
            return [self.value(x) for x in t]
        if not isinstance(t, dict) or not isinstance(t.get("$"), str):
            raise UnsafeValueError(f"not a value of this format: {str(t)[:80]}")
        tag = t["$"]
        if tag == "float":
            return float(t["v"])
        if tag == "scalar":
            a = self.array(t["a"])
            return a[()] if a.ndim == 0 else a
        if tag == "array":
            return self.array(t["a"])
        if tag in _SPARSE:
            data, indices, indptr = (self.array(t[k]) for k in ("data", "indices", "indptr"))
            matrix = _SPARSE[tag]((data, indices, indptr), shape=tuple(int(n) for n in t["shape"]))
            matrix.check_format(full_check=True)  # indices in bounds: scipy's products trust them
            return matrix
        if tag == "bytes":
            return self.array(t["a"]).tobytes()
        if tag in ("tuple", "set", "frozenset"):
            items = [self.value(x) for x in t["v"]]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict":
            keys, values = t["k"], t["v"]
            if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
                raise UnsafeValueError("a dict whose keys and values do not pair up")
            return {self.value(k): self.value(v) for k, v in zip(keys, values)}
        if tag == "namedtuple":
            cls = self.cls(t["t"])
            return cls(*[self.value(x) for x in t["v"]])
        if tag == "dataclass":
            cls = self.cls(t["t"])
            names = {f.name for f in dataclasses.fields(cls)}
            given = t["f"]
            if not isinstance(given, dict) or set(given) != names:
                raise UnsafeValueError(f"{t['t']}: fields {sorted(given)} where the class has {sorted(names)}")
            obj = cls.__new__(cls)
            for key, x in given.items():
                object.__setattr__(obj, key, self.value(x))  # frozen dataclasses too, without __init__
            return obj
        if tag == "object":
            cls = self.cls(t["t"])
            state = self.value(t["s"])
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise UnsafeValueError(f"{t['t']}: its state is not a dict of attributes")
            obj = cls.__new__(cls)
            if "__setstate__" in vars(cls):
                obj.__setstate__(state)
            else:
                obj.__dict__.update(state)
            return obj
        raise UnsafeValueError(f"unknown tag {tag!r}")


def dumps(value: Any, types: Iterable[type] = ()) -> bytes:
    """``value`` as the bytes of this format. TypeError for anything it cannot hold as data (a class not in
    ``types``, a function, an object array)."""
    writer = _Writer(types)
    tree = json.dumps(writer.tree(value), separators=(",", ":"), allow_nan=False).encode("utf-8")
    out = io.BytesIO()
    np.savez(out, **writer.arrays, **{_TREE: np.frombuffer(tree, dtype=np.uint8)})
    return out.getvalue()


def loads(data: bytes, types: Iterable[type] = ()) -> Any:
    """The value of bytes written by :func:`dumps`; :class:`UnsafeValueError` for anything else (a pickle, an
    object array, a class not in ``types``)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays: Dict[str, np.ndarray] = {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise UnsafeValueError(f"not an archive of plain arrays ({type(exc).__name__}: {exc})") from None
    tree = arrays.get(_TREE)
    if tree is None or tree.dtype != np.uint8 or tree.ndim != 1:
        raise UnsafeValueError("the archive has no tree entry")
    try:
        parsed = json.loads(tree.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UnsafeValueError(f"its tree is not JSON ({exc})") from None
    try:
        return _Reader(arrays, types).value(parsed)
    except UnsafeValueError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError, MemoryError) as exc:
        raise UnsafeValueError(f"its tree does not describe a value ({type(exc).__name__}: {exc})") from None
