"""Values checked on input, in one line naming what is wrong: config fields by their annotated
types (every config dataclass runs :func:`check_types` first in its ``__post_init__``, whether
built by the command line, the Python API or read from a config.json: ``steps="10"``,
``steps=True`` or ``steps=nan`` are refused before any training or run folder), and the values
read from files or given on the command line that become paths or seeds."""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, brief

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def safe_component(value: Any, what: str) -> str:
    """``str(value)`` if it is one harmless path component (no ``/``, ``..``, NUL, leading dot)."""
    text = str(value)
    if not _SAFE.match(text) or ".." in text:
        raise UsageError(f"{what} {text[:60]!r} cannot name a folder (letters, digits, . _ + - only)")
    return text


# Seeds name folders (``seed{s}``) and become int64 tensors and generator seeds: one rule for
# every command and file.
MAX_SEED = 2**63 - 1


def check_seeds(seeds: Any, where: str | Path, field: str | None = None) -> tuple[int, ...]:
    """Seeds given or read from a file: a non-empty list of integers from 0 to :data:`MAX_SEED`.
    ``field``: the setting that gave them (``"seeds"``), which the error names (``fields=``);
    None for seeds read from a file ``where`` names."""
    if (
        not isinstance(seeds, (list, tuple)) or not seeds
        or not all(type(s) is int and 0 <= s <= MAX_SEED for s in seeds)
    ):
        raise UsageError(f"{where}: seeds must be a non-empty list of integers from 0 to 2**63-1, got {brief(seeds, 60)}",
                         fields=(field,) if field else ())
    return tuple(seeds)

@cache
def _checkers(cls: type) -> tuple:
    """``(field name, its type, a predicate)`` per field, built once per class (grids build
    tens of thousands of configs)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], _checker(hints[f.name])) for f in fields(cls))


def _describe(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_describe(a) for a in inner) + " or None"
    if origin is tuple:
        items = {int: "whole numbers", float: "finite numbers", str: "texts"}.get(args[0] if args else None, "values")
        return f"a list of {items}" if len(args) == 2 and args[1] is Ellipsis else f"a list of {len(args)} {items}"
    return {int: "a whole number", float: "a finite number", bool: "true or false", str: "a text"}.get(
        tp, f"a {getattr(tp, '__name__', tp)}")


def _checker(tp):
    """A predicate: whether a value is of the annotated type ``tp`` (bool is no number; a float is
    finite)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_checker(a) for a in args]
        return lambda v: any(c(v) for c in options)
    if tp is type(None):
        return lambda v: v is None
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker(args[0])
            return lambda v: isinstance(v, (tuple, list)) and all(item(x) for x in v)
        items = [_checker(a) for a in args]
        return lambda v: isinstance(v, (tuple, list)) and len(v) == len(items) and all(c(x) for c, x in zip(items, v))
    if tp is bool:
        return lambda v: v is True or v is False
    if tp is int:
        return lambda v: type(v) is int or (isinstance(v, int) and not isinstance(v, bool))
    if tp is float:
        return lambda v: (type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))) and math.isfinite(v)
    if isinstance(tp, type):
        return lambda v: isinstance(v, tp)
    return lambda v: True  # an annotation this check does not know: the class's own checks judge it


def check_types(obj) -> None:
    """Refuse, naming the field, a field of the dataclass ``obj`` whose value is not of its
    annotated type."""
    for name, tp, ok in _checkers(type(obj)):
        value = getattr(obj, name)
        if not ok(value):
            shown = repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise UsageError(f"'{name}' must be {_describe(tp)}, got {shown}", fields=(name,))
