"""AdamW with decoupled weight decay (Loshchilov 2017), as Sec. 7.1 prescribes, and the
parameter families exempt from decay (GPT-2/nanoGPT exempt norms and biases)."""

from __future__ import annotations

import torch

from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.training.config import TrainConfig


def _exempt(name: str, exempt: tuple[str, ...]) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    if "norm" in exempt and (".ln" in f".{name}" and leaf in ("weight", "bias")):
        return True
    if "bias" in exempt and (leaf.startswith("b_") or (leaf == "bias" and ".ln" not in f".{name}")):
        return True
    return "embed" in exempt and leaf in ("W_in", "W_pos")  # the input projection (and a position table) stand in for GPT-2's embeddings


def make_optimizer(model: EnsembleTransformer, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (decoupled decay, Loshchilov 2017) with ``cfg.optim.decay_exempt`` families undecayed."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if _exempt(name, cfg.optim.decay_exempt) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.optim.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    # fused: one kernel per step instead of a Python loop over tensors (measured 5-10% of a
    # CPU step at the sec9 and quick sizes, benchmarks/train_throughput.py).
    if cfg.cuda_graph:  # replayed by a CUDA graph: no host sync, and an lr the graph reads from the device
        device = next(model.parameters()).device
        return torch.optim.AdamW(groups, lr=torch.tensor(cfg.optim.lr, device=device), betas=tuple(cfg.optim.betas),
                                 weight_decay=cfg.optim.weight_decay, fused=True, capturable=True)
    return torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=tuple(cfg.optim.betas), weight_decay=cfg.optim.weight_decay, fused=True)
