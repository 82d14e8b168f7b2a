"""The batches a run trains and validates on (Sec. 6-7): every member's training batch in one
generator call, and the held-out set every member is validated on."""

from __future__ import annotations

import torch

from stackedheads.tasks.vectors import Batch, batch_indices, make_batch
from stackedheads.training.config import TrainConfig


def member_batches(cfg: TrainConfig, step: int, caches: list[dict], device: str | None = None) -> Batch:
    """Training batch ``step`` for every member, stacked: inputs ``(E, B, T, 2K)``.

    Member ``e`` draws from the task with its own seed, in its own order; one call generates
    all of them (``device``: on the accelerator itself). ``meta`` is member 0's (training
    never reads it).
    """
    idx = torch.stack([batch_indices(cfg.task.n_train, cfg.batch_size, seed, step, cache)
                       for seed, cache in zip(cfg.seeds, caches)])  # (E, B)
    seeds = torch.tensor(cfg.seeds, dtype=torch.int64)[:, None].expand_as(idx)
    b = make_batch(cfg.task, idx.reshape(-1), "train", seeds=seeds, device=device)
    E, B = idx.shape
    return Batch(
        inputs=b.inputs.view(E, B, *b.inputs.shape[1:]),
        targets=b.targets.view(E, B, *b.targets.shape[1:]),
        symbols=b.symbols.view(E, B, *b.symbols.shape[1:]),
        meta=b.meta[:B],
    )


def validation_batch(cfg: TrainConfig) -> Batch:
    """The fixed held-out set every member is evaluated on."""
    return make_batch(cfg.task, range(cfg.task.n_val), "val")
