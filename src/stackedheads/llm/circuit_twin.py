"""``llm-circuit``'s method on the project's own twins, to check it against App. E's discovery.

The twins (:class:`~stackedheads.model.transformer.EnsembleTransformer` on the vector task of Sec. 6) have
one attention head per layer in Sec. 8-9, so a head's output is its layer's attention output:
patching it is replacing what the layer's attention adds to the residual stream. Counterfactual
``k`` changes one link of query slot 0's chain, as for the language models: the second token of
pair ``k`` (``x_k`` after ``x_{k-1}``) takes the symbol of another chain's ``x_k``. The metric is
the prediction at query slot 0 projected on how the counterfactual moves it, so a head's effect
is the share of that move its output carries (1: all of it).

A head carries hop k when patching it alone from counterfactual k moves at least
:data:`~stackedheads.llm.circuit.HEAD_MIN` of the change; :func:`agreement` compares the heads
that carry some hop with those App. E's discovery finds useful
(:meth:`~stackedheads.circuits.discover.Discovery.summary`'s ``useful_heads``).
"""

from __future__ import annotations

from typing import Any

import torch

from stackedheads.errors import UsageError
from stackedheads.llm.circuit import HEAD_MIN
from stackedheads.tasks.vectors import SECOND, Batch

__all__ = ["agreement", "counterfactual_batch", "twin_head_effects"]


def counterfactual_batch(batch: Batch, k: int, dims: int) -> Batch:
    """``batch`` with link ``k`` of query slot 0's chain pointing into the next chain (mod N)."""
    meta = batch.meta
    B = batch.inputs.shape[0]
    chains = batch.symbols.shape[1]
    c = meta.query_chain[:, 0]  # (B,)
    other = (c + 1) % chains
    inputs = batch.inputs.clone()
    rows = torch.arange(B)
    at = (meta.pair == k) & (meta.role == SECOND) & (meta.chain == c[:, None])  # one position per row
    pos = at.float().argmax(dim=1)
    inputs[rows, pos, :dims] = batch.symbols[rows, other, k]
    return Batch(inputs, batch.targets, batch.symbols, meta)


class _Layers:
    """Forward hooks on every layer's attention: ``saved[l]`` what it adds to the stream,
    ``patches[l]`` a replacement for it."""

    def __init__(self, model) -> None:
        self.saved: dict[int, torch.Tensor] = {}
        self.patches: dict[int, torch.Tensor] = {}
        self.handles = [b.attn.register_forward_hook(self._hook(l)) for l, b in enumerate(model.blocks)]

    def _hook(self, l: int):
        def hook(module, args, out):
            resid = args[0][:, :, -out.shape[2]:]
            self.saved[l] = (out - resid).detach()
            if l in self.patches:
                return resid + self.patches[l][:, :, -out.shape[2]:]
            return None
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def twin_head_effects(model, batch: Batch, dims: int) -> dict[int, dict[tuple[int, int], float]]:
    """``{k: {(layer, 0): effect}}``: each head's output patched alone from counterfactual k, as
    a share of the counterfactual's move of query slot 0's prediction (one-head-per-layer twins,
    one ensemble member)."""
    if model.config.n_heads != 1 or model.n_members != 1:
        raise UsageError("the twin check patches one-head-per-layer twins, one member at a time (model.member(e))")
    D = int(batch.meta.pair.max())
    hooks = _Layers(model)
    try:
        def run(b: Batch) -> torch.Tensor:
            return model.run_with_hooks(b.inputs, b.meta)[0, :, 0]  # (B, d_out): query slot 0

        with torch.no_grad():
            clean = run(batch)
            clean_out = dict(hooks.saved)
            out: dict[int, dict[tuple[int, int], float]] = {}
            for k in range(1, D + 1):
                cfb = counterfactual_batch(batch, k, dims)
                cf = run(cfb)
                cf_out = dict(hooks.saved)
                d = clean - cf

                def metric(pred: torch.Tensor) -> float:
                    return float((pred * d).sum())

                total = metric(clean) - metric(cf)
                effects = {}
                for l in range(model.config.n_layers):
                    hooks.patches = {l: cf_out[l]}
                    effects[(l, 0)] = (metric(clean) - metric(run(batch))) / total if total > 0 else 0.0
                    hooks.patches = {}
                out[k] = effects
            del clean_out
        return out
    finally:
        hooks.close()


def agreement(effects: dict[int, dict[tuple[int, int], float]], useful: list[list[int]] | list[tuple[int, int]],
              head_min: float = HEAD_MIN) -> dict[str, Any]:
    """The heads carrying some hop (effect >= ``head_min``) against App. E's useful heads."""
    carriers = sorted({h for per in effects.values() for h, v in per.items() if v >= head_min})
    found = {tuple(h) for h in carriers}
    known = {tuple(h) for h in useful}
    both = found & known
    return {
        "carriers": [list(h) for h in carriers], "useful": sorted(list(h) for h in known),
        "both": sorted(list(h) for h in both), "only_patching": sorted(list(h) for h in found - known),
        "only_discovery": sorted(list(h) for h in known - found),
        "jaccard": len(both) / len(found | known) if found | known else 1.0,
        "effects": {str(k): {f"L{l}H{h}": round(v, 4) for (l, h), v in per.items()} for k, per in effects.items()},
    }
