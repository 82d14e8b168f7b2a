"""Values read from files or given on the command line that become paths or seeds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError

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


def check_seeds(seeds: Any, where: str | Path) -> tuple[int, ...]:
    """Seeds given or read from a file: a non-empty list of integers from 0 to :data:`MAX_SEED`."""
    if (
        not isinstance(seeds, (list, tuple)) or not seeds
        or not all(type(s) is int and 0 <= s <= MAX_SEED for s in seeds)
    ):
        shown = list(seeds) if isinstance(seeds, tuple) else seeds
        raise UsageError(f"{where}: seeds must be a non-empty list of integers from 0 to 2**63-1, got {str(shown)[:60]}")
    return tuple(seeds)
