"""Training throughput: the ensemble engine against a plain per-model PyTorch loop.

The paper trains 8 seeds per model size (Sec. 7.1). This benchmark does the same work two ways
and reports model-steps per second (one model-step = one AdamW step of one model on one batch):

* ``ensemble`` -- one :class:`~stackedheads.model.transformer.EnsembleTransformer` holding E = 8 seeds and
  one AdamW, stepped exactly as ``stackedheads.training`` does (per-member summed MSE); one
  ensemble step is E model-steps;
* ``loop`` -- a nanoGPT-style implementation of the same model (``nn.Linear``, ``nn.LayerNorm``,
  fused qkv, ``scaled_dot_product_attention``), 8 copies each with its own AdamW, trained one
  model after the other. Each copy starts from the weights of the matching ensemble member, and
  the benchmark checks first that it has the same parameter count and gives the same outputs.

Both engines see the same pre-generated batches (``member_batches``, generated once up front),
so only the model step is timed. Both engines run with the allocator setting that ``train``
applies (``stackedheads.execution.process.keep_freed_memory``: without it, page faults on the activations
cost more than the arithmetic at paper sizes). Sizes: ``presets.QUICK`` (d_model 64, 4 heads,
3 layers, batch 128, D=2, N=2, K=4 -> T=10) and ``presets.PAPER`` (d_model 128, 8 heads, 4 layers, batch 512,
D=5, N=4, K=4 -> T=44); float32 and bfloat16 (``torch.autocast("cpu", dtype=torch.bfloat16)``
around the forward pass for both engines, as in ``train.py``). Warm-up steps are not timed; the
timed steps run in a few rounds that alternate the engines, and each engine keeps its best
round, which damps the noise of a shared machine. ``torch.set_num_threads`` is left alone.

FLOP/s and MFU are for the ensemble. FLOPs come from ``model.flops_per_step``, which counts the
matmuls only, 6 FLOPs per weight per token (forward + backward) plus QK^T and AV over the full
T x T (the causal half the fused kernels skip is still credited, as in PaLM); biases, LayerNorm,
softmax, GELU, the loss and the optimiser are left out (a few percent with the MLP), and W_in's
backward is slightly overcounted. The peak is measured in the same run: the best of a few
2048 x 2048 @ 2048 x 2048 ``torch.matmul`` calls. ``mfu`` is always against the float32 peak
(also for bfloat16 rows, so rows compare with each other); ``mfu_vs_dtype_peak`` divides by
the peak of the row's own dtype (a bfloat16 matmul, AMX where the CPU has it).

Run::

    .venv/bin/python benchmarks/ensemble_vs_loop.py            # quick + paper sizes, a few minutes
    .venv/bin/python benchmarks/ensemble_vs_loop.py --quick    # quick sizes only, fewer steps, < 1 min

``--quick`` skips the paper sizes (one paper-size ensemble step is ~0.9 TFLOP, several seconds
on a small CPU) and times fewer steps. The last line printed is JSON: the headline row (quick
sizes, float32) as ``speedup``, ``ensemble_model_steps_per_s``, ``loop_model_steps_per_s`` and
``mfu``, plus every row in ``rows`` and the measured peaks.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stackedheads import presets
from stackedheads.model.config import ModelConfig
from stackedheads.model.costs import count_parameters, flops_per_step
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.execution.process import keep_freed_memory
from stackedheads.training import DTYPES, TrainConfig, member_batches

N_MEMBERS = 8  # seeds per size in the paper (Sec. 7.1)
PEAK_SIZE = 2048
LN_EPS = 1e-5  # as in stackedheads.model.transformer


# ----------------------------------------------------------------------------- the loop model
# A straightforward nanoGPT-style transformer, one model per instance, with the architecture of
# EnsembleTransformer (linear input projection, pre-LN blocks, readout at the last N positions).


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.head_dim
        d_attn = cfg.n_heads * cfg.head_dim
        self.c_attn = nn.Linear(cfg.d_model, 3 * d_attn)  # fused q, k, v
        self.c_proj = nn.Linear(d_attn, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:  # x: (B, T, d_model)
        B, T, _ = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_head)
        return self.c_proj(z.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=LN_EPS) if cfg.mlp else None
        self.mlp = MLP(cfg) if cfg.mlp else None

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x


class LoopTransformer(nn.Module):
    """One model: (B, T, d_in) -> (B, n_queries, d_out)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_queries = cfg.n_queries
        self.w_in = nn.Linear(cfg.d_in, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.readout = nn.Linear(cfg.d_model, cfg.d_out)

    def forward(self, x: Tensor) -> Tensor:
        h = self.w_in(x)
        for block in self.blocks:
            h = block(h)
        return self.readout(self.ln_f(h[:, -self.n_queries :]))


@torch.no_grad()
def loop_model_from_member(ens: EnsembleTransformer, e: int) -> LoopTransformer:
    """A LoopTransformer with member e's weights (ensemble W is (in, out); nn.Linear's is (out, in))."""

    def linear(dst: nn.Linear, W: Tensor, b: Tensor) -> None:
        dst.weight.copy_(W[e].T)
        dst.bias.copy_(b[e])

    def norm(dst: nn.LayerNorm, src: nn.Module) -> None:
        dst.weight.copy_(src.weight[e])
        dst.bias.copy_(src.bias[e])

    model = LoopTransformer(ens.config)
    linear(model.w_in, ens.W_in, ens.b_in)
    for mine, theirs in zip(model.blocks, ens.blocks):
        norm(mine.ln_1, theirs.ln1)
        linear(mine.attn.c_attn, theirs.attn.W_qkv, theirs.attn.b_qkv)
        linear(mine.attn.c_proj, theirs.attn.W_O, theirs.attn.b_O)
        if mine.mlp is not None:
            norm(mine.ln_2, theirs.ln2)
            linear(mine.mlp.c_fc, theirs.mlp.W_up, theirs.mlp.b_up)
            linear(mine.mlp.c_proj, theirs.mlp.W_down, theirs.mlp.b_down)
    norm(model.ln_f, ens.ln_f)
    linear(model.readout, ens.W_readout, ens.b_readout)
    return model


def check_same_model(ens: EnsembleTransformer, loops: list[LoopTransformer], x: Tensor) -> None:
    """The loop is only a fair baseline if it is the same model: same size, same outputs."""
    n_ens = sum(p.numel() for p in ens.parameters()) // ens.n_members
    n_loop = sum(p.numel() for p in loops[0].parameters())
    if not n_ens == n_loop == count_parameters(ens.config):
        raise AssertionError(f"parameter counts differ: ensemble member {n_ens}, loop model {n_loop}")
    with torch.no_grad():
        want = ens(x[:, :4])
        got = torch.stack([m(x[e, :4]) for e, m in enumerate(loops)])
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        err = (got - want).abs().max().item()
        raise AssertionError(f"loop models disagree with the ensemble members (max error {err:.2e})")


# ----------------------------------------------------------------------------- the two engines


def autocast(dtype: torch.dtype):
    return torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)


class EnsembleEngine:
    """E models in one module and one optimizer; the step of stackedheads.training."""

    def __init__(self, model: EnsembleTransformer, cfg: TrainConfig, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def step(self, x: Tensor, y: Tensor) -> None:  # x: (E, B, T, d_in), y: (E, B, N, d_out)
        with autocast(self.dtype):
            pred = self.model(x)
        per_member = ((pred.float() - y) ** 2).mean(dim=(1, 2, 3))  # sum of per-member losses
        self.opt.zero_grad(set_to_none=True)
        per_member.sum().backward()
        self.opt.step()

    def run(self, data: list[tuple[Tensor, Tensor]], steps: int) -> None:
        for s in range(steps):
            self.step(*data[s % len(data)])


class LoopEngine:
    """E separate models, each with its own AdamW, trained one after the other."""

    def __init__(self, models: list[LoopTransformer], cfg: TrainConfig, dtype: torch.dtype) -> None:
        self.models, self.dtype = models, dtype
        self.opts = [
            torch.optim.AdamW(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) for m in models
        ]

    def step(self, e: int, x: Tensor, y: Tensor) -> None:  # x: (B, T, d_in), y: (B, N, d_out)
        with autocast(self.dtype):
            pred = self.models[e](x)
        loss = ((pred.float() - y) ** 2).mean()
        self.opts[e].zero_grad(set_to_none=True)
        loss.backward()
        self.opts[e].step()

    def run(self, data: list[tuple[Tensor, Tensor]], steps: int) -> None:
        for e in range(len(self.models)):  # model e sees member e's batches, as in the ensemble
            for s in range(steps):
                x, y = data[s % len(data)]
                self.step(e, x[e], y[e])


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Size:
    name: str
    cfg: TrainConfig
    warmup: int  # untimed steps per model (the first AdamW step also allocates its state)
    steps: int  # timed steps per model and round
    rounds: int  # timed rounds, alternating engines; each engine keeps its best


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def matmul_peak(dtype: torch.dtype, repeats: int = 5) -> float:
    """FLOP/s of the best of a few large square matmuls: the practical peak of this CPU."""
    n = PEAK_SIZE
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up
    best = min(timed(lambda: torch.matmul(a, b)) for _ in range(repeats))
    return 2 * n**3 / best


def make_data(cfg: TrainConfig, n: int) -> list[tuple[Tensor, Tensor]]:
    """n training batches for every member, generated once so no timed step generates data."""
    caches = [{} for _ in cfg.seeds]
    out = []
    for step in range(n):
        batch = member_batches(cfg, step, caches)
        out.append((batch.inputs.contiguous(), batch.targets.contiguous()))
    return out


def measure(size: Size, dtype_name: str, peaks: dict[str, float]) -> dict:
    cfg, dtype = size.cfg, DTYPES[dtype_name]
    mcfg = cfg.model_config()
    data = make_data(cfg, min(size.warmup + size.steps, 4))  # a few batches, cycled

    # Fresh models per row, so the bf16 row does not start from fp32-trained weights.
    ens = EnsembleTransformer(mcfg, seeds=list(cfg.seeds))
    loops = [loop_model_from_member(ens, e) for e in range(ens.n_members)]
    check_same_model(ens, loops, data[0][0])
    engines = {"ensemble": EnsembleEngine(ens, cfg, dtype), "loop": LoopEngine(loops, cfg, dtype)}

    for engine in engines.values():
        engine.run(data, size.warmup)
    best = {name: math.inf for name in engines}
    for _ in range(size.rounds):
        for name, engine in engines.items():
            best[name] = min(best[name], timed(lambda: engine.run(data, size.steps)))

    E, T = len(cfg.seeds), cfg.task.seq_len
    model_steps = E * size.steps  # per round, for both engines
    ens_rate, loop_rate = model_steps / best["ensemble"], model_steps / best["loop"]
    flops = flops_per_step(mcfg, cfg.batch_size, T, n_members=1)  # one model-step
    ens_flops = flops * ens_rate
    return {
        "size": size.name,
        "dtype": dtype_name,
        "n_members": E,
        "n_layers": mcfg.n_layers,
        "d_model": mcfg.d_model,
        "n_heads": mcfg.n_heads,
        "batch": cfg.batch_size,
        "seq_len": T,
        "params_per_model": count_parameters(mcfg),
        "warmup_steps": size.warmup,
        "timed_steps": size.steps,
        "rounds": size.rounds,
        "ensemble_model_steps_per_s": ens_rate,
        "loop_model_steps_per_s": loop_rate,
        "speedup": ens_rate / loop_rate,
        "flops_per_model_step": flops,
        "ensemble_gflops": ens_flops / 1e9,
        "loop_gflops": flops * loop_rate / 1e9,
        "mfu": ens_flops / peaks["float32"],
        "mfu_vs_dtype_peak": ens_flops / peaks[dtype_name],
    }


def sizes(quick: bool) -> list[Size]:
    seeds = tuple(range(N_MEMBERS))
    quick_cfg = presets.QUICK.override(seeds=seeds)
    paper_cfg = presets.PAPER.override(seeds=seeds)  # n_layers 4, the preset's
    if quick:
        return [Size("quick", quick_cfg, warmup=1, steps=2, rounds=2)]
    # A paper-size ensemble step is ~0.9 TFLOP (seconds on a CPU), so one timed step per
    # round there is already long enough to time well.
    return [
        Size("quick", quick_cfg, warmup=1, steps=5, rounds=3),
        Size("paper", paper_cfg, warmup=1, steps=1, rounds=2),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="quick sizes only, fewer steps (< 1 min)")
    ap.add_argument("--default-malloc", action="store_true", help="skip keep_freed_memory (to see what it saves)")
    args = ap.parse_args()
    if not args.default_malloc:
        keep_freed_memory()

    peaks = {name: matmul_peak(DTYPES[name]) for name in ("float32", "bfloat16")}
    print(
        f"E={N_MEMBERS} seeds, {torch.get_num_threads()} threads; matmul peak ({PEAK_SIZE}^3): "
        f"float32 {peaks['float32'] / 1e9:.0f} GFLOP/s, bfloat16 {peaks['bfloat16'] / 1e9:.0f} GFLOP/s"
    )
    header = (
        f"{'size':<6} {'dtype':<9} {'L':>2} {'d':>4} {'B':>4} {'T':>3}  {'ensemble/s':>10}"
        f" {'loop/s':>8} {'speedup':>7}  {'GFLOP/s':>7} {'MFU':>6} {'MFU(dt)':>7}"
    )
    print("model-steps per second; GFLOP/s and MFU of the ensemble; MFU vs the float32 peak,")
    print("MFU(dt) vs the peak of the row's dtype")
    print(header)
    print("-" * len(header))
    rows = []
    for size in sizes(args.quick):
        for dtype_name in ("float32", "bfloat16"):
            r = measure(size, dtype_name, peaks)
            rows.append(r)
            print(
                f"{r['size']:<6} {r['dtype']:<9} {r['n_layers']:>2} {r['d_model']:>4} {r['batch']:>4}"
                f" {r['seq_len']:>3}  {r['ensemble_model_steps_per_s']:>10.2f}"
                f" {r['loop_model_steps_per_s']:>8.2f} {r['speedup']:>6.2f}x"
                f"  {r['ensemble_gflops']:>7.1f} {r['mfu']:>6.1%} {r['mfu_vs_dtype_peak']:>7.1%}",
                flush=True,
            )

    head = next(r for r in rows if r["size"] == "quick" and r["dtype"] == "float32")
    result = {
        "speedup": head["speedup"],
        "ensemble_model_steps_per_s": head["ensemble_model_steps_per_s"],
        "loop_model_steps_per_s": head["loop_model_steps_per_s"],
        "mfu": head["mfu"],
        "matmul_peak_gflops": peaks["float32"] / 1e9,
        "matmul_peak_bf16_gflops": peaks["bfloat16"] / 1e9,
        "threads": torch.get_num_threads(),
        "quick": args.quick,
        "keep_freed_memory": not args.default_malloc,
        "rows": rows,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
