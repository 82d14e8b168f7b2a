"""stackedheads: the paper *Mechanism and Emergence of Stacked Attention Heads in Multi-Layer
Transformers* (Musat, ICLR 2025) as a library and a command line.

The names a notebook needs, loaded on first use (``import stackedheads`` imports no torch, so
the command line can set OpenMP's environment before torch loads)::

    import stackedheads as sh

    cfg = sh.presets.get("smoke").override(steps=50)   # a TrainConfig (Sec. 7.1)
    sh.train(cfg, "runs/smoke")                          # -> a run folder
    q = sh.prompts.generate("kingdoms", depth=3, chains=2, seed=0)   # Sec. 4, App. A
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute or None for the module itself)
_PUBLIC: dict[str, tuple[str, str | None]] = {
    "EnsembleTransformer": ("stackedheads.model.transformer", "EnsembleTransformer"),
    "ModelConfig": ("stackedheads.model.config", "ModelConfig"),
    "OptimConfig": ("stackedheads.training.config", "OptimConfig"),
    "TrainConfig": ("stackedheads.training.config", "TrainConfig"),
    "VectorTaskConfig": ("stackedheads.tasks.vectors", "VectorTaskConfig"),
    "train": ("stackedheads.training.loop", "train"),
    "presets": ("stackedheads.presets", None),
    "prompts": ("stackedheads.tasks.prompts", None),
    "discover": ("stackedheads.circuits.discover", "discover"),
    "emergence": ("stackedheads.emergence.timeline", None),
    "run_bench": ("stackedheads.llm.bench", "run_bench"),
    "claims": ("stackedheads.claims", None),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'stackedheads' has no attribute {name!r}")
    module, attr = _PUBLIC[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
