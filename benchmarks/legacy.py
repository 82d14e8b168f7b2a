"""The training step as it was before the speed work (issue 17), kept to measure against.

Only what changed is here: the block forward (LayerNorm's gain and bias as two extra passes,
the output bias added by its own pass, the residual added by another, every row of the last
block computed), the loss reduction and the single-tensor AdamW. Parameters, initialisation,
data and schedule are the library's, so old and new train the same model.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F
from torch import Tensor

from stackedheads.model import LN_EPS, EnsembleTransformer, broadcast_pattern, ensemble_linear
from stackedheads.training.config import TrainConfig
from stackedheads.training.optim import _exempt


def _layer_norm(self, x: Tensor) -> Tensor:
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
    x = F.layer_norm(x, x.shape[-1:], eps=LN_EPS)
    return x * self.weight.view(shape) + self.bias.view(shape)


def _attention(self, x: Tensor, slow: bool = False) -> Tensor:
    E, B, T, _ = x.shape
    H, dh = self.n_heads, self.d_head
    qkv = ensemble_linear(x, self.W_qkv, self.b_qkv)
    q, k, v = qkv.view(E * B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
    if slow or self.hook_pattern.is_active:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        pattern = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        pattern = broadcast_pattern(self.hook_pattern(pattern.view(E, B, H, T, T)), (E, B, H, T, T))
        z = pattern.reshape(E * B, H, T, T) @ v
    else:
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    z = z.transpose(1, 2).reshape(E, B, T, H * dh)
    return ensemble_linear(z, self.W_O, self.b_O)


def _mlp(self, x: Tensor) -> Tensor:
    h = F.gelu(ensemble_linear(x, self.W_up, self.b_up), approximate="tanh")
    return ensemble_linear(h, self.W_down, self.b_down)


def _block(self, x: Tensor, slow: bool = False) -> Tensor:
    x = x + self.attn(self.ln1(x), slow=slow)
    if self.mlp is not None:
        x = x + self.mlp(self.ln2(x))
    return self.hook_resid_post(x)


def _forward(self, x: Tensor, meta=None) -> Tensor:
    if x.ndim == 3:
        x = x.unsqueeze(0).expand(self.n_members, -1, -1, -1)
    h = ensemble_linear(x, self.W_in, self.b_in)
    for block in self.blocks:
        h = block(h, slow=self.slow_attention)
    h = h[:, :, -self.config.n_queries :]
    return ensemble_linear(self.ln_f(h), self.W_readout, self.b_readout)


def legacy(model: EnsembleTransformer) -> EnsembleTransformer:
    """``model`` with the old forward pass (same parameters)."""
    model.forward = types.MethodType(_forward, model)
    for block in model.blocks:
        block.forward = types.MethodType(_block, block)
        block.attn.forward = types.MethodType(_attention, block.attn)
        for ln in (block.ln1, block.ln2):
            if ln is not None:
                ln.forward = types.MethodType(_layer_norm, ln)
        if block.mlp is not None:
            block.mlp.forward = types.MethodType(_mlp, block.mlp)
    model.ln_f.forward = types.MethodType(_layer_norm, model.ln_f)
    return model


class LegacyEnsemble(EnsembleTransformer):
    """An EnsembleTransformer built with the old forward pass (for ``train``'s constructor)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        legacy(self)


def legacy_optimizer(model: EnsembleTransformer, cfg: TrainConfig) -> torch.optim.AdamW:
    """The old AdamW: the single-tensor implementation (PyTorch's default on the CPU)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if _exempt(name, cfg.optim.decay_exempt) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.optim.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    o = cfg.optim
    return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay, foreach=False)


def legacy_loss(pred: Tensor, y: Tensor) -> Tensor:
    return ((pred.float() - y) ** 2).mean(dim=(1, 2, 3))


def patch_train() -> None:
    """Make ``stackedheads.training.train`` run the old step (in a benchmark worker process only)."""
    import stackedheads.training.loop as t

    t.EnsembleTransformer = LegacyEnsemble
    t.make_optimizer = legacy_optimizer
    t.member_mse = legacy_loss
