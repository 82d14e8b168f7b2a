"""One registry pattern for every extension point: formulations, LLM backends, attention rules,
claim sections and named presets.

A :class:`Registry` maps names to things of one kind. Built-in entries register themselves
where they are defined (a decorator or a call), so adding one is one new file or one new
definition; code outside the package registers its own the same way before use::

    from stackedheads.tasks.formulations import FORMULATIONS, Formulation

    MINE = Formulation(name="my-formulation", ...)
    FORMULATIONS.register(MINE.name, MINE)

Lookups of unknown names raise :class:`~stackedheads.errors.UsageError` with the known names,
so a typo on the command line is one line, not a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Generic, TypeVar

from stackedheads.errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind, in registration order.

    Args:
        kind: what an entry is, for messages ("formulation", "backend", ...).
        package: a package whose submodules hold the built-in entries; they are imported on
            first use, so a new built-in is a new file in that package and nothing else.
    """

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind, self.package = kind, package
        self._entries: dict[str, T] = {}
        self._loaded = package is None

    def register(self, name: str, entry: T | None = None, *, replace: bool = False):
        """``registry.register(name, entry)``, or ``@registry.register(name)`` on a class or
        function. Registering a taken name is an error unless ``replace``."""

        def add(obj: T) -> T:
            if name in self._entries and not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add(entry) if entry is not None else add

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # before importing: the modules register into this very registry
        module = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(module.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise UsageError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self._entries)}")
        return self._entries[name]

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        self._load()
        return tuple(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"

