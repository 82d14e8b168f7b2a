"""Losses and validation (Sec. 7.1): the per-member training loss, the partial loss per chain
position, and the evaluation of every member on the held-out set."""

from __future__ import annotations

import torch

from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.tasks.vectors import Batch, VectorTaskConfig
from stackedheads.training.config import DTYPES, TrainConfig


def partial_losses(pred: torch.Tensor, target: torch.Tensor, cfg: VectorTaskConfig) -> torch.Tensor:
    """MSE per member and chain position: ``(E, D)`` for IC, ``(E, 1)`` (``x_D``) otherwise.

    Summed per sequence first, then over sequences: a reduction to few outputs from many
    inputs is split per thread by PyTorch, which would make the bits depend on the thread count.
    """
    err = (pred.float() - target.float()) ** 2  # (E, B, N, d_out)
    E, B, N, _ = err.shape
    positions = cfg.depth if cfg.ic else 1
    return err.view(E, B, N, positions, cfg.dims).sum(dim=(2, 4)).sum(dim=1) / (B * N * cfg.dims)


def member_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each member's mean squared error, ``(E,)``: the training loss (summed over members, each
    gradient is its member's own). Reduced per sequence, then over sequences (thread-invariant,
    as :func:`partial_losses`)."""
    err = (pred.float() - target.float()) ** 2  # (E, B, N, d_out)
    return err.sum(dim=(2, 3)).sum(dim=1) / err[0].numel()


@torch.no_grad()
def evaluate(model: EnsembleTransformer, val: Batch, cfg: TrainConfig, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """``(val_loss (E,), partial (E, D))`` on the validation batch."""
    E = len(cfg.seeds)
    dev, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    sums, n = None, 0
    for i in range(0, val.inputs.shape[0], chunk):
        x = val.inputs[i : i + chunk].to(dev)
        y = val.targets[i : i + chunk].to(dev)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            pred = model(x.expand(E, *x.shape))
        part = partial_losses(pred, y.expand(E, *y.shape), cfg.task) * x.shape[0]
        sums = part if sums is None else sums + part
        n += x.shape[0]
    partial = (sums / n).cpu()
    return partial.mean(dim=1), partial
