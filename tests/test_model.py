"""Tests for stackedheads.model.transformer: shapes, attention paths, hooks, ensembles, config, FLOPs."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from stackedheads.model import costs
from stackedheads.errors import UsageError
from stackedheads.training.gradclip import clip_grad_norm_per_member_
from stackedheads.model.costs import count_parameters, flops_per_step
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer, broadcast_pattern

# Tiny shapes: N=2 queries, T=10, K=3 -> d_in 6, D=2 -> d_out 6 (IC).
TINY = ModelConfig(d_in=6, d_out=6, n_queries=2, n_layers=2, n_heads=4, d_model=32)
T = 10


def inputs(E: int, B: int = 3, seed: int = 0, cfg: ModelConfig = TINY) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(E, B, T, cfg.d_in, generator=g)


def params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "cfg",
    [
        TINY,
        ModelConfig(
            d_in=6, d_out=6, n_queries=2, n_layers=3, n_heads=1, d_model=32, d_head=8, mlp=False
        ),
        ModelConfig(d_in=6, d_out=3, n_queries=2, n_layers=1, n_heads=3, d_model=32, d_head=5),
    ],
)
def test_shapes_and_parameter_count(cfg: ModelConfig) -> None:
    model = EnsembleTransformer(cfg, seeds=[3, 4])
    out = model(inputs(2, cfg=cfg))
    assert out.shape == (2, 3, cfg.n_queries, cfg.d_out)
    assert model.blocks[0].attn.W_qkv.shape == (2, cfg.d_model, 3 * cfg.n_heads * cfg.head_dim)
    assert model.blocks[0].attn.W_O.shape == (2, cfg.n_heads * cfg.head_dim, cfg.d_model)
    assert model.W_in.shape == (2, cfg.d_in, cfg.d_model)
    assert model.ln_f.weight.shape == (2, cfg.d_model)
    assert (model.blocks[0].mlp is None) == (not cfg.mlp)
    assert sum(p.numel() for p in model.parameters()) == 2 * count_parameters(cfg)


def test_shared_inputs_broadcast_to_every_member() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    x = inputs(1)[0]  # (B, T, d_in)
    torch.testing.assert_close(model(x), model(x.expand(2, -1, -1, -1)))


def test_bad_inputs_raise_usage_error() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    with pytest.raises(UsageError):
        model(inputs(3))  # wrong E
    with pytest.raises(UsageError):
        model(torch.randn(2, 3, T, TINY.d_in + 1))
    with pytest.raises(UsageError):
        model(torch.randn(2, 3, 1, TINY.d_in))  # fewer positions than queries


def test_init_follows_gpt2() -> None:
    model = EnsembleTransformer(ModelConfig(n_layers=4, d_model=64), seeds=[0])
    assert torch.all(model.blocks[0].ln1.weight == 1) and torch.all(model.blocks[0].attn.b_qkv == 0)
    assert model.W_in.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.blocks[1].mlp.W_up.std().item() == pytest.approx(0.02, rel=0.05)
    residual = 0.02 / (2 * 4) ** 0.5
    assert model.blocks[1].mlp.W_down.std().item() == pytest.approx(residual, rel=0.05)
    assert model.blocks[1].attn.W_O.std().item() == pytest.approx(residual, rel=0.05)


# ----------------------------------------------------------------------------- attention paths


def test_fast_path_equals_slow_path() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1, 2])
    x = inputs(3)
    fast = model(x)
    model.slow_attention = True
    slow = model(x)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_only_observed_layers_leave_the_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fused = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model = EnsembleTransformer(TINY, seeds=[0])
    model(inputs(1))
    assert len(calls) == TINY.n_layers
    calls.clear()
    model.run_with_cache(inputs(1), names=["blocks.0.attn.hook_pattern"])
    assert len(calls) == TINY.n_layers - 1
    calls.clear()
    model.run_with_cache(inputs(1), names=lambda n: n.endswith("hook_resid_post"))
    assert len(calls) == TINY.n_layers  # residual hooks do not force the slow path


@pytest.mark.parametrize("slow", [False, True])
def test_causal(slow: bool) -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    model.slow_attention = slow
    x = inputs(2)
    t = 4
    y = x.clone()
    y[:, :, t + 1 :] += torch.randn_like(y[:, :, t + 1 :])
    names = [f"blocks.{l}.hook_resid_post" for l in range(TINY.n_layers)]
    _, cx = model.run_with_cache(x, names=names)
    _, cy = model.run_with_cache(y, names=names)
    for name in names:
        torch.testing.assert_close(cx[name][:, :, : t + 1], cy[name][:, :, : t + 1])
        assert not torch.allclose(cx[name][:, :, t + 1 :], cy[name][:, :, t + 1 :])


def test_cached_patterns_are_causal_distributions() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    out, cache = model.run_with_cache(inputs(2))
    torch.testing.assert_close(out, model(inputs(2)))
    for name in model.pattern_names():
        p = cache[name]
        assert p.shape == (2, 3, TINY.n_heads, T, T)
        assert not p.requires_grad
        assert torch.all(p.triu(diagonal=1) == 0)
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, TINY.n_heads, T))
    assert set(cache) == set(model.hook_points())


# ----------------------------------------------------------------------------- hooks


def uniform_causal(B: int, T: int) -> torch.Tensor:  # (B, T, T): uniform over allowed keys
    lower = torch.ones(T, T).tril()
    return (lower / lower.sum(-1, keepdim=True)).expand(B, T, T)


def test_replacing_a_pattern_with_itself_reproduces_the_output() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    x = inputs(2)
    _, cache = model.run_with_cache(x)
    hooks = [(n, lambda p, hook_name, **_: cache[hook_name]) for n in model.pattern_names()]
    out = model.run_with_hooks(x, fwd_hooks=hooks)
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_replacement_changes_output_and_broadcasts() -> None:
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    x, B, E, H = inputs(2), 3, 2, TINY.n_heads
    name = "blocks.1.attn.hook_pattern"
    base = model(x)
    u = uniform_causal(B, T)
    outs = [
        model.run_with_hooks(x, fwd_hooks=[(name, lambda p, **_: pat)])
        for pat in (u, u[:, None].expand(B, H, T, T), u[None, :, None].expand(E, B, H, T, T))
    ]
    assert not torch.allclose(outs[0], base, atol=1e-4)
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(outs[0], outs[2])
    # identity: every position attends to itself only
    eye = torch.eye(T).expand(B, T, T)
    out = model.run_with_hooks(x, fwd_hooks=[(name, lambda p, **_: eye)])
    assert not torch.allclose(out, base, atol=1e-4)
    # the cache under a replacement holds what the model used
    _, cache = model.run_with_cache(x, names=[name], fwd_hooks=[(name, lambda p, **_: eye)])
    torch.testing.assert_close(cache[name], eye[None, :, None].expand(E, B, H, T, T))


def test_hook_gets_meta_and_name_and_none_keeps() -> None:
    model = EnsembleTransformer(TINY, seeds=[0])
    x, meta, seen = inputs(1), object(), []

    def observe(pattern, meta, hook_name):
        seen.append((pattern.shape, meta, hook_name))
        return None

    out = model.run_with_hooks(x, meta=meta, fwd_hooks=[("blocks.0.attn.hook_pattern", observe)])
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    assert seen == [((1, 3, TINY.n_heads, T, T), meta, "blocks.0.attn.hook_pattern")]


def test_hooks_are_removed_even_after_an_error() -> None:
    model = EnsembleTransformer(TINY, seeds=[0])

    def boom(pattern, **_):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        model.run_with_hooks(inputs(1), fwd_hooks=[("blocks.0.attn.hook_pattern", boom)])
    assert not any(hp._forward_hooks for hp in model.hook_points().values())
    with pytest.raises(UsageError):
        model.run_with_hooks(inputs(1), fwd_hooks=[("blocks.9.attn.hook_pattern", boom)])
    with pytest.raises(UsageError):
        broadcast_pattern(torch.ones(T, T), (1, 3, 4, T, T))
    with pytest.raises(UsageError):
        wrong_batch = lambda p, **_: torch.ones(7, T, T)  # noqa: E731
        model.run_with_hooks(inputs(1), fwd_hooks=[("blocks.0.attn.hook_pattern", wrong_batch)])
    assert not any(hp._forward_hooks for hp in model.hook_points().values())


# ----------------------------------------------------------------------------- ensembles


def test_member_equals_standalone_model() -> None:
    seeds = [11, 22, 33]
    ens = EnsembleTransformer(TINY, seeds)
    x = inputs(3)
    out = ens(x)
    for e, seed in enumerate(seeds):
        alone = EnsembleTransformer(TINY, [seed])
        assert params_equal(ens.member(e), alone)
        torch.testing.assert_close(alone(x[e : e + 1]), out[e : e + 1], atol=1e-6, rtol=1e-5)
    assert not torch.equal(ens.W_in[0], ens.W_in[1])


def test_member_extracts_one_seed() -> None:
    ens = EnsembleTransformer(TINY, [5, 6, 7])
    for i, seed in enumerate((5, 6, 7)):
        assert ens.member(i).seeds == (seed,) and params_equal(ens.member(i), EnsembleTransformer(TINY, [seed]))
    assert params_equal(ens.member(-1), ens.member(2))
    with pytest.raises(UsageError):
        ens.member(3)


def train(model: EnsembleTransformer, xs: torch.Tensor, ys: torch.Tensor) -> list[torch.Tensor]:
    """AdamW (Sec. 7.1 settings); per-member MSE summed over members; per-member clipping."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    losses = []
    for step in range(xs.shape[0]):
        per_member = ((model(xs[step]) - ys[step]) ** 2).mean(dim=(1, 2, 3))  # (E,)
        opt.zero_grad()
        per_member.sum().backward()
        clip_grad_norm_per_member_(model, max_norm=0.5)
        opt.step()
        losses.append(per_member.detach())
    return losses


def test_ensemble_training_matches_models_trained_alone() -> None:
    seeds, steps, B = [0, 1, 2], 20, 4
    g = torch.Generator().manual_seed(123)
    xs = torch.randn(steps, 3, B, T, TINY.d_in, generator=g)  # different data per member
    ys = xs[..., -TINY.n_queries :, :] ** 2  # learnable: square the query inputs
    ens = EnsembleTransformer(TINY, seeds)
    ens_losses = torch.stack(train(ens, xs, ys))  # (steps, E)
    assert ens_losses[-1].mean() < ens_losses[0].mean()
    for e, seed in enumerate(seeds):
        alone = EnsembleTransformer(TINY, [seed])
        alone_losses = torch.stack(train(alone, xs[:, e : e + 1], ys[:, e : e + 1]))[:, 0]
        torch.testing.assert_close(alone_losses, ens_losses[:, e], atol=1e-5, rtol=1e-5)
        for (name, p), q in zip(alone.named_parameters(), ens.member(e).parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=name)


def test_clip_grad_norm_per_member() -> None:
    ens = EnsembleTransformer(TINY, [0, 1])
    x = inputs(2)
    (ens(x) * torch.tensor([1.0, 100.0]).view(2, 1, 1, 1)).sum().backward()
    before = clip_grad_norm_per_member_(ens, max_norm=1.0)
    assert before[1] > 10 * before[0]
    after = clip_grad_norm_per_member_(ens, max_norm=1e9)
    torch.testing.assert_close(after, torch.minimum(before, torch.ones(2)), rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- nnsight


def test_nnsight_traces_the_model_unchanged() -> None:
    nnsight = pytest.importorskip("nnsight")
    model = EnsembleTransformer(TINY, seeds=[0, 1])
    x = inputs(2)
    traced = nnsight.NNsight(model)
    with traced.trace(x):
        out = traced.output.save()
    torch.testing.assert_close(out, model(x))
    model.slow_attention = True  # patterns exist only on the slow path
    with traced.trace(x):
        pattern = traced.blocks[1].attn.hook_pattern.output.save()
    _, cache = model.run_with_cache(x, names=["blocks.1.attn.hook_pattern"])
    torch.testing.assert_close(pattern, cache["blocks.1.attn.hook_pattern"])


# ----------------------------------------------------------------------------- config and FLOPs


def test_config_json_round_trip() -> None:
    for cfg in (TINY, ModelConfig(n_layers=24, n_heads=1, d_model=512, d_head=16, mlp=False)):
        again = ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
        assert again == cfg
    assert ModelConfig().head_dim == 16
    assert ModelConfig(n_heads=1, d_model=512, d_head=16).head_dim == 16


@pytest.mark.parametrize(
    "kwargs",
    [
        {"d_model": 130, "n_heads": 8},
        {"n_layers": 0},
        {"n_heads": 0},
        {"d_head": 0},
        {"d_in": -1},
        {"n_queries": 0},
        {"n_layers": 2.5},
        {"n_layers": True},
        {"mlp": "yes"},
    ],
)
def test_bad_config_raises_usage_error(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        ModelConfig(**kwargs)


def test_other_usage_errors() -> None:
    ModelConfig(d_model=130, n_heads=8, d_head=16)  # explicit d_head lifts divisibility
    with pytest.raises(UsageError):
        ModelConfig.from_dict({"n_layer": 2})
    with pytest.raises(UsageError):
        EnsembleTransformer(TINY, seeds=[])


@pytest.mark.parametrize("mlp", [True, False])
@pytest.mark.parametrize("members, seq_len", [(1, 10), (3, 40)])
def test_flops_per_step_counts_the_matmuls_of_a_step(mlp: bool, members: int, seq_len: int) -> None:
    """``flops_per_step`` against torch's own count of the matmul FLOPs of one forward and
    backward. The explicit attention (``slow_attention``) computes every row of every layer and
    the full T x T scores, as the estimate counts them; what the estimate leaves out (biases,
    W_in's input gradient, LayerNorm's folding) is below 1%."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = ModelConfig(**{**TINY.to_dict(), "mlp": mlp})
    model = EnsembleTransformer(cfg, seeds=range(members))
    model.slow_attention = True
    x = torch.randn(members, 8, seq_len, cfg.d_in, generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(x).square().sum().backward()
    assert counter.get_total_flops() == pytest.approx(flops_per_step(cfg, 8, seq_len, n_members=members), rel=0.01)


def test_flops_per_step_is_close_to_six_flops_per_parameter_and_token() -> None:
    # matmul weights are most of the parameters: 6 * params * tokens is a close lower bound
    assert 0.9 < 6 * count_parameters(TINY) * 8 / flops_per_step(TINY, 8, 1) < 1.1


@pytest.mark.parametrize("members", [1, 3])
def test_layer_norm_folded_into_the_linear_matches_torch(members: int) -> None:
    """``LayerNorm.linear``: the gain and bias folded into the next linear give the values and
    gradients (input, gain, bias, weight, bias of the linear) of torch's own LayerNorm followed
    by the linear, member by member; ``forward`` gives the normalised activations themselves."""
    from stackedheads.model.transformer import LayerNorm

    gen = torch.Generator().manual_seed(0)
    d, d_out = 64, 24
    x = torch.randn(members, 8, 50, d, generator=gen, dtype=torch.float64)
    grad = torch.randn(members, 8, 50, d_out, generator=gen, dtype=torch.float64)
    ln = LayerNorm(members, d).double()
    W = torch.randn(members, d, d_out, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(members, d_out, generator=gen, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        ln.weight.copy_(torch.randn(members, d, generator=gen))
        ln.bias.copy_(torch.randn(members, d, generator=gen))
    xi = x.clone().requires_grad_(True)
    ln.linear(xi, W, b).backward(grad)
    for e in range(members):
        ref = torch.nn.LayerNorm(d, dtype=torch.float64, eps=1e-5)
        with torch.no_grad():
            ref.weight.copy_(ln.weight[e])
            ref.bias.copy_(ln.bias[e])
        xe, We, be = (t[e].detach().clone().requires_grad_(True) for t in (x, W, b))
        normed = ref(xe)
        assert torch.allclose(ln(x)[e], normed, atol=1e-12)
        (normed @ We + be).backward(grad[e])
        assert torch.allclose(xi.grad[e], xe.grad, atol=1e-10)
        assert torch.allclose(ln.weight.grad[e], ref.weight.grad, atol=1e-9)
        assert torch.allclose(ln.bias.grad[e], ref.bias.grad, atol=1e-9)
        assert torch.allclose(W.grad[e], We.grad, atol=1e-9)
        assert torch.allclose(b.grad[e], be.grad, atol=1e-9)


@pytest.mark.parametrize("width_in", [16, 256])  # the bias in the matmul (narrow input) or added after
def test_residual_linear_is_resid_plus_affine(width_in: int) -> None:
    from stackedheads.model.transformer import residual_linear

    gen = torch.Generator().manual_seed(1)
    E, d = 2, 64
    resid, x = torch.randn(E, 3, 5, d, generator=gen, dtype=torch.float64), torch.randn(E, 3, 5, width_in, generator=gen, dtype=torch.float64)
    W = torch.randn(E, width_in, d, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(E, d, generator=gen, dtype=torch.float64, requires_grad=True)
    out = residual_linear(resid, x, W, b)
    ref_W, ref_b = W.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    ref = resid + torch.einsum("ebti,eio->ebto", x, ref_W) + ref_b[:, None, None]
    assert torch.allclose(out, ref, atol=1e-12)
    grad = torch.randn_like(ref)
    out.backward(grad)
    ref.backward(grad)
    assert torch.allclose(W.grad, ref_W.grad, atol=1e-10) and torch.allclose(b.grad, ref_b.grad, atol=1e-10)


@pytest.mark.parametrize("queries", [None, 3])  # every row (the usual causal mask) or the last layer's query rows
def test_cpu_low_precision_attention_matches_fused_attention(queries: int | None) -> None:
    """The CPU's bfloat16 attention (float32 scores with the mask as an additive bias): the
    values and the gradients of q, k and v of float64 SDPA within bfloat16's rounding, and in
    float32 within float32's; masked keys get no weight."""
    from stackedheads.model.transformer import _attention, _explicit_attention

    gen = torch.Generator().manual_seed(3)
    B, H, T, dh = 6, 2, 9, 8
    Tq = T if queries is None else queries
    q, k, v = (torch.randn(B, H, n, dh, generator=gen, dtype=torch.float64) for n in (Tq, T, T))
    grad = torch.randn(B, H, Tq, dh, generator=gen, dtype=torch.float64)
    mask = torch.ones(Tq, T, dtype=torch.bool).tril(T - Tq)
    ref_in = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, attn_mask=mask)
    ref.backward(grad)
    for dtype, tol in ((torch.bfloat16, 3e-2), (torch.float32, 1e-5)):
        ins = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
        fn = _attention if dtype == torch.bfloat16 else _explicit_attention  # the CPU takes it in bfloat16
        out = fn(*ins, None if queries is None else mask)
        assert out.dtype == dtype
        out.backward(grad.to(dtype))
        scale = ref.abs().max().item()
        assert (out.double() - ref).abs().max().item() <= tol * scale, dtype
        for a, r in zip(ins, ref_in):
            assert (a.grad.double() - r.grad).abs().max().item() <= tol * r.grad.abs().max().item(), dtype
    # A key after a query's position moves nothing: change it and the query's output stays.
    v2 = v.clone()
    v2[:, :, -1] += 10.0
    out1 = _explicit_attention(q.float(), k.float(), v.float(), mask)
    out2 = _explicit_attention(q.float(), k.float(), v2.float(), mask)
    assert torch.equal(out1[:, :, :-1], out2[:, :, :-1]) and not torch.equal(out1[:, :, -1], out2[:, :, -1])


# ----------------------------------------------------------------------------- measured costs (roofline)


def test_tally_counts_matmul_flops_and_bytes_moved():
    a, b = torch.randn(3, 8, 16), torch.randn(3, 16, 5)
    x = torch.randn(64, 32)
    with costs.OpTally() as tally:
        torch.bmm(a, b)
        x.t()  # a view: nothing moves
        x + x  # reads 2, writes 1
    mm, other = tally.rows["matmuls"], tally.rows[costs.OTHER_FAMILY]
    assert mm["flops"] == 2 * 3 * 8 * 16 * 5 and mm["calls"] == 1
    assert mm["bytes"] == 4 * (a.numel() + b.numel() + 3 * 8 * 5)
    assert other["bytes"] == 3 * x.numel() * 4 and other["flops"] == 0
    assert other["calls"] == 2 and all(r["seconds"] >= 0 for r in tally.rows.values())


def test_tally_counts_the_factored_pass_in_place_product():
    """``stackedheads::add_product_`` (model/factored.py: g += A^T D in place) is a matmul to the
    tally, with its FLOPs, and adds into g."""
    import stackedheads.model.factored  # noqa: F401  (registers the op)

    g, A, D = torch.randn(2, 7, 11), torch.randn(2, 5, 7), torch.randn(2, 5, 11)
    expected = g + A.transpose(1, 2) @ D
    with costs.OpTally() as tally:
        torch.ops.stackedheads.add_product_(g, A, D)
    assert torch.allclose(g, expected)
    assert tally.rows["matmuls"]["calls"] == 1 and tally.rows["matmuls"]["flops"] == 2 * 2 * 5 * 7 * 11


def test_tally_sees_the_backward_and_an_expanded_tensor_by_its_storage():
    w = torch.randn(4, 6, requires_grad=True)
    shared = torch.randn(1, 6).expand(100, 6)  # 6 floats in memory, 600 in the view
    with costs.OpTally() as tally:
        (shared @ w.t()).sum().backward()
    assert tally.rows["matmuls"]["calls"] >= 2  # the forward's product and the weight's gradient
    assert tally.rows["matmuls"]["flops"] >= 2 * (2 * 100 * 6 * 4)
    halved = tally.scaled(0.5)
    assert halved["matmuls"]["flops"] == tally.rows["matmuls"]["flops"] / 2


@pytest.mark.parametrize("name,family", [("aten.bmm.default", "matmuls"), ("aten.baddbmm.default", "matmuls"),
                                         ("aten.native_layer_norm_backward.default", "LayerNorm"),
                                         ("aten._softmax.default", "attention (softmax, mask)"),
                                         ("aten._to_copy.default", "casts (float32 <-> bfloat16)"),
                                         ("aten._fused_adamw_.default", "optimizer"),
                                         ("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention (softmax, mask)"), ("aten.add_.Tensor", costs.OTHER_FAMILY)])
def test_op_family(name: str, family: str) -> None:
    assert costs.op_family(name) == family


def test_matmul_flops_of_other_ops_is_zero():
    assert costs.matmul_flops("aten.add.Tensor", [(3, 4), (3, 4)]) == 0
    assert costs.matmul_flops("aten.addmm.default", [(5,), (2, 3), (3, 5)]) == 2 * 2 * 3 * 5


def test_roofline_names_the_bound_and_the_distance_to_it():
    rows = {"matmuls": {"calls": 1, "seconds": 2.0, "flops": 100.0, "bytes": 10.0},
            "LayerNorm": {"calls": 1, "seconds": 1.0, "flops": 0.0, "bytes": 40.0}}
    roof = costs.roofline(rows, peak_flops=100.0, bandwidth=20.0)
    assert roof["matmuls"]["bound"] == "compute" and roof["matmuls"]["floor_s"] == 1.0
    assert roof["matmuls"]["of_floor"] == 0.5
    assert roof["LayerNorm"]["bound"] == "memory" and roof["LayerNorm"]["floor_s"] == 2.0
    assert roof["step"]["floor_s"] == 3.0 and roof["step"]["seconds"] == 3.0 and roof["step"]["bound"] == "memory"
