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
    # One kernel per gradient (a float32 norm per member row), not a cast, a square and a sum:
    # a small model's step is bound by such per-op overhead (sec8-quick: 60 gradients).
    E = grads[0].shape[0]
    per = torch.stack([torch.linalg.vector_norm(g.reshape(E, -1), dim=1, dtype=torch.float32) for g in grads])  # (P, E)
    norms = per.pow(2).sum(dim=0).sqrt()  # (E,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype).view(-1, *([1] * (g.ndim - 1))))
    return norms

