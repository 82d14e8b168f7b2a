"""The attention-only forward pass without a residual stream (model/factored.py) against the
dense one: the same outputs and gradients to float64 rounding, taken only where nothing observes
the stream, and a bfloat16 step that trains as the float32 one does."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from stackedheads import presets
from stackedheads.model.transformer import EnsembleTransformer


def _model(name: str, **changes) -> tuple[EnsembleTransformer, torch.Tensor]:
    cfg = presets.get(name)
    mc = replace(cfg.model_config(), **changes)
    model = EnsembleTransformer(mc, seeds=[0, 1]).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # away from the init, where biases are zero and gains one
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    x = torch.randn(2, 8, cfg.task.seq_len, mc.d_in, generator=gen, dtype=torch.float64)
    return model, x


@pytest.mark.parametrize("name, changes", [
    ("sec9-smoke", {}),
    ("sec9-smoke", {"pos_embed": "learned", "n_ctx": 64}),
    ("sec9-smoke", {"n_heads": 2, "d_head": 4}),
    ("sec9", {"n_layers": 3}),
])
def test_the_factored_pass_is_the_dense_pass_in_float64(name: str, changes: dict) -> None:
    model, x = _model(name, **changes)
    assert model.factorable
    params = list(model.parameters())
    factored = model(x)
    dense = model.run_from(model.embed(x))  # the blocks one by one, the stream materialised
    assert factored.shape == dense.shape
    assert torch.allclose(factored, dense, rtol=1e-10, atol=1e-12)
    g_factored = torch.autograd.grad(factored.square().sum(), params)
    g_dense = torch.autograd.grad(model.run_from(model.embed(x)).square().sum(), params)
    for p, a, b in zip(params, g_factored, g_dense):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12 * b.abs().max().item()), p.shape


def test_a_listener_or_an_mlp_takes_the_dense_pass() -> None:
    model, x = _model("sec9-smoke")
    with model.hooks([("blocks.0.hook_resid_post", lambda a, **_: None)]):
        assert not model.factorable
    model.slow_attention = True
    assert not model.factorable
    assert not EnsembleTransformer(presets.get("sec8-smoke").model_config(), seeds=[0]).factorable


def test_a_replaced_pattern_changes_the_output_as_in_the_dense_pass() -> None:
    """A pattern hook (App. E's ablations) runs the dense pass: the factored one never skips it."""
    model, x = _model("sec9-smoke")
    uniform = lambda p, **_: torch.tril(torch.ones_like(p)) / torch.tril(torch.ones_like(p)).sum(-1, keepdim=True)  # noqa: E731
    ablated = model.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern", uniform)])
    assert not torch.allclose(ablated, model(x))


def test_bfloat16_factored_training_follows_float32() -> None:
    """Forty steps of the sec9-smoke shape: bfloat16 (the factors and their products in bfloat16,
    the norms in float32) stays within 5% of float32's loss at every step, and the loss falls."""
    from stackedheads.training.evaluate import member_mse
    from stackedheads.training.data import member_batches

    cfg = presets.get("sec9-smoke")
    losses = {}
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = EnsembleTransformer(cfg.model_config(), seeds=[0, 1])
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        caches = [{}, {}]
        for step in range(40):
            b = member_batches(cfg.override(seeds=(0, 1)), step, caches)
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                pred = model(b.inputs)
            loss = member_mse(pred, b.targets).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.setdefault(dtype, []).append(loss.item())
    f32, bf16 = losses[torch.float32], losses[torch.bfloat16]
    assert f32[-1] < 0.9 * f32[0]
    assert max(abs(b - f) / f for f, b in zip(f32, bf16)) <= 0.05
