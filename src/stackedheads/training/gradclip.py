"""Gradient clipping per ensemble member: each member's norm on its own, as if trained alone."""

from __future__ import annotations

import torch
from torch import Tensor, nn


@torch.no_grad()
def clip_grad_norm_per_member_(model: nn.Module, max_norm: float) -> Tensor:
    """Clip each member's gradient to ``max_norm`` on its own; returns the norms before, (E,).

    ``torch.nn.utils.clip_grad_norm_`` on the ensemble would take one norm over all members
    and couple them; this keeps member e identical to a model trained alone.
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(model.n_members)
    sq = torch.stack([_member_sum(g.float().pow(2)) for g in grads])  # (P, E)
    norms = sq.sum(dim=0).sqrt()  # (E,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype).view(-1, *([1] * (g.ndim - 1))))
    return norms


def _member_sum(t: Tensor) -> Tensor:
    """Sum of everything but the member axis, ``(E,)``."""
    return t.flatten(1).sum(dim=1)
