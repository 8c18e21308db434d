"""Declarative validation of settings: one table of constraints per settings class, one function to check it.

As scikit-learn's ``_parameter_constraints``, a settings class lists what
each field accepts::

    CONSTRAINTS = {
        "method": Options(GENERATIVE),
        "max_iter": Interval(int, 0, None),
        "smoothing": [Interval(float, 0, None, closed="neither"), "auto"],
    }

and :func:`check_constraints` checks an instance against it, field by field
in the table's order. A field's entry is one constraint or a list of them
(the value must satisfy at least one); a plain string stands for that exact
value. The first field that satisfies none raises ``error``
(:class:`~pcem_spark.errors.InputError` by default) saying
``<where>.<field> must be <what is accepted>, got <value>``, e.g.
``model.smoothing must be > 0 or "auto", got -1.0``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping, Optional, Sequence, Type

from pcem_spark.errors import InputError

__all__ = ["Constraint", "Interval", "Options", "ListOf", "check_constraints"]


class Constraint:
    """What one field accepts: :meth:`accepts` tests a value, :meth:`describe` says it in words."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def describe(self, plural: bool = False) -> str:
        """``"> 0"``, ``"one of 'a', 'b'"``; ``plural``: for the items of a list (``"numbers > 0"``)."""
        raise NotImplementedError


class Interval(Constraint):
    """A number of ``kind`` (``int`` or ``float``; ``float`` accepts integers too, neither accepts bool or NaN).

    ``left`` / ``right``: the bounds, None for none; ``closed``: which bounds
    belong to the interval, ``"both"``, ``"left"``, ``"right"`` or
    ``"neither"``. ``note`` is appended to the description, e.g.
    ``"(0 = raw counts)"``.
    """

    def __init__(
        self,
        kind: type,
        left: Optional[float],
        right: Optional[float],
        closed: str = "both",
        note: str = "",
    ):
        if kind not in (int, float):
            raise TypeError(f"Interval kind must be int or float, got {kind!r}")
        if closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"Interval closed must be both, left, right or neither, got {closed!r}")
        self.kind, self.left, self.right, self.closed, self.note = kind, left, right, closed, note

    def accepts(self, value: Any) -> bool:
        number = numbers.Integral if self.kind is int else numbers.Real
        if isinstance(value, bool) or not isinstance(value, number) or math.isnan(value):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if value > self.right or (value == self.right and self.closed in ("left", "neither")):
                return False
        return True

    def describe(self, plural: bool = False) -> str:
        left_open = self.closed in ("right", "neither")
        right_open = self.closed in ("left", "neither")
        if self.left is not None and self.right is not None:
            bound = f"in {'(' if left_open else '['}{self.left:g}, {self.right:g}{')' if right_open else ']'}"
        elif self.left is not None:
            bound = f"{'>' if left_open else '>='} {self.left:g}"
        elif self.right is not None:
            bound = f"{'<' if right_open else '<='} {self.right:g}"
        else:
            bound = ""
        if self.kind is int:
            noun = "integers" if plural else "an integer"
        else:  # a bounded number reads as its bound alone: "> 0", "in [0, 1]"
            noun = "numbers" if plural else ("" if bound else "a number")
        return " ".join(part for part in (noun, bound, self.note) if part)


class Options(Constraint):
    """One of the given values."""

    def __init__(self, values: Sequence[Any]):
        self.values = tuple(values)

    def accepts(self, value: Any) -> bool:
        return any(isinstance(value, type(v)) and value == v for v in self.values)

    def describe(self, plural: bool = False) -> str:
        if plural:
            return " / ".join(repr(v) for v in self.values)
        return "one of " + ", ".join(repr(v) for v in self.values)


class _Exactly(Constraint):
    """The one string ``value`` (a plain string in a constraint table, e.g. ``"auto"``)."""

    def __init__(self, value: str):
        self.value = value

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value == self.value

    def describe(self, plural: bool = False) -> str:
        return f'"{self.value}"'


class ListOf(Constraint):
    """A list (or tuple) whose every item satisfies ``item``; ``non_empty``: of at least one item."""

    def __init__(self, item: Constraint, non_empty: bool = False):
        self.item, self.non_empty = item, non_empty

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)) or (self.non_empty and not value):
            return False
        return all(self.item.accepts(v) for v in value)

    def describe(self, plural: bool = False) -> str:
        return f"{'a non-empty' if self.non_empty else 'a'} list of {self.item.describe(plural=True)}"


def _as_constraints(entry) -> list:
    entries = entry if isinstance(entry, list) else [entry]
    return [_Exactly(c) if isinstance(c, str) else c for c in entries]


def check_constraints(
    obj: Any, constraints: Mapping[str, Any], where: str, error: Type[Exception] = InputError
) -> None:
    """Raise ``error`` for the first field of ``constraints`` whose value on ``obj`` satisfies none of its entries.

    ``where`` names the settings section in the message (``"model"`` ->
    ``model.max_iter must be an integer >= 0, got -1``).
    """
    for name, entry in constraints.items():
        value = getattr(obj, name)
        allowed = _as_constraints(entry)
        if not any(c.accepts(value) for c in allowed):
            raise error(f"{where}.{name} must be {' or '.join(c.describe() for c in allowed)}, got {value!r}")
