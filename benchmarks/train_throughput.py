"""Training speed: a base commit against this tree, per dtype, eager and compiled.

The CPU step near the chip's limit: bfloat16 activations (the chip's bf16
matmuls run 2.4-3.7x its float32 ones) and fusion, measured against the step of commit
b410c0f in float32. The base commit is checked out into a temporary git worktree and run from
there, so both sides are the real library of their commit, on the same batches. Each
measurement runs in a fresh worker process (the OpenMP spin policy is read once, when torch
loads) and prints one JSON line; this script starts the workers one at a time and prints tables.

Variants (``--variants``; a name is ``TREE-DTYPE[-compile]``):

* ``base-float32``: the base commit (``--base``, default b410c0f), float32;
* ``new-float32``, ``new-bfloat16``: this tree, eager, under autocast for bfloat16;
* ``new-bfloat16-compile``: this tree with ``torch.compile`` (inductor's fused C++ on a CPU);
  its compile time is reported apart, since a run pays it once.

Measurements:

1. ``step``: seconds per training step (forward, backward, per-member clipping, AdamW) plus
   data generation and its share of evaluation, per size; MFU against the float32 and the
   bfloat16 matmul peak measured in the same run (2048^3 products);
2. ``profile``: where a step's time goes, by operator family (torch.profiler), for the first
   and the last variant;
3. ``sweep``: the quick Figure 4 sweep shortened to ``--sweep-steps`` steps per job (6 jobs),
   base float32 against this tree in the dtype of the last variant (with ``--sweep``).

Run (idle machine: nothing else heavy running)::

    .venv/bin/python benchmarks/train_throughput.py                  # steps + profile, ~10 minutes on 2 cores
    .venv/bin/python benchmarks/train_throughput.py --sizes quick    # one size
    .venv/bin/python benchmarks/train_throughput.py --sweep          # and the shortened quick sweep
    .venv/bin/python benchmarks/train_throughput.py --sizes sec8 --variants new-float32,new-bfloat16-compile \
        --no-profile --project --threads 2                             # one seed of sec8: does it fit a piece?

The last line is JSON with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIZES = ("quick", "sec8", "sec9")
BASE = "b410c0f"
VARIANTS = ("base-float32", "new-float32", "new-bfloat16", "new-bfloat16-compile")
STEPS = {"quick": 20, "sec8": 6, "sec9": 6}
# Operator families of the profile (torch.profiler op names, self CPU time).
FAMILIES = {
    "attention": ("scaled_dot_product", "softmax", "masked_fill"),
    "matmuls (projections, MLP)": ("bmm", "baddbmm", "addmm", "aten::mm", "matmul"),
    "MLP activation": ("gelu",),
    "LayerNorm": ("layer_norm", "addcmul"),
    "casts (float32 <-> bfloat16)": ("_to_copy", "aten::to"),
    "optimizer": ("adam", "Optimizer"),
    "compiled kernels (fused)": ("CompiledFunction", "cpp_fused", "Torch-Compiled Region", "graph_"),
}


def parse_variant(name: str) -> dict:
    tree, dtype, *rest = name.split("-")
    if tree not in ("base", "new") or dtype not in ("float32", "bfloat16") or rest not in ([], ["compile"]):
        raise SystemExit(f"bad variant {name!r}: TREE-DTYPE[-compile], TREE base or new, DTYPE float32 or bfloat16")
    return {"tree": tree, "dtype": dtype, "compile": bool(rest)}


# --------------------------------------------------------------------------- worker side


def _setup(spec: dict):
    """The preset's config, model, optimizer and batches of whichever tree this worker imports."""
    import torch

    from stackedheads import presets
    from stackedheads.perf import keep_freed_memory
    from stackedheads.training import loop as t  # the names the loop trains with, in either tree

    keep_freed_memory()
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    cfg = presets.get(spec["size"])
    if spec.get("one_seed"):  # a run of one seed (a piece of a result trained in pieces)
        cfg = cfg.override(seeds=cfg.seeds[:1])
    model = t.EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds))
    opt = t.make_optimizer(model, cfg)
    forward = torch.compile(model) if spec["compile"] else model
    dtype = getattr(torch, spec["dtype"])
    caches = [{} for _ in cfg.seeds]

    # The base tree's loop holds these two; this tree's moved them to evaluate and model.
    if hasattr(t, "member_mse"):
        member_mse, clip = t.member_mse, t.clip_grad_norm_per_member_
    else:
        from stackedheads.model import clip_grad_norm_per_member_ as clip
        from stackedheads.training.evaluate import member_mse

    def step(b) -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            pred = forward(b.inputs)
        loss = member_mse(pred, b.targets)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        clip(model, cfg.optim.grad_clip or 1.0)
        opt.step()

    return cfg, t, model, forward, dtype, caches, step


def _evals_per_step(cfg) -> float:
    n = cfg.n_evals() if hasattr(cfg, "n_evals") else len(cfg.eval_steps())  # the base has a set
    return n / cfg.steps


def _evaluate(t, forward, val, cfg, dtype) -> None:
    import torch

    cfg = cfg.override(dtype="bfloat16" if dtype == torch.bfloat16 else "float32")
    t.evaluate(forward, val, cfg)


def _worker(spec: dict) -> dict:
    if spec["kind"] == "sweep":
        return _sweep(spec)
    if spec["kind"] == "profile":
        return _profile(spec)
    import torch

    cfg, t, model, forward, dtype, caches, step = _setup(spec)
    batches = [t.member_batches(cfg, i, caches) for i in range(spec["steps"] + 2)]
    c0 = time.perf_counter()
    for b in batches[:2]:  # warm-up: AdamW allocates its state, the allocator its arenas, inductor compiles
        step(b)
    warmup = time.perf_counter() - c0
    t0 = time.perf_counter()
    for b in batches[2:]:
        step(b)
    per_step = (time.perf_counter() - t0) / spec["steps"]
    data0 = time.perf_counter()
    for i in range(3):
        t.member_batches(cfg, 100 + i, caches)
    data = (time.perf_counter() - data0) / 3
    val = t.validation_batch(cfg)
    _evaluate(t, forward, val, cfg, dtype)
    e0 = time.perf_counter()
    _evaluate(t, forward, val, cfg, dtype)
    one_eval = time.perf_counter() - e0
    from stackedheads.model import flops_per_step

    flops = flops_per_step(cfg.model_config(), cfg.batch_size, cfg.task.seq_len, len(cfg.seeds))
    return {
        "step_s": per_step, "data_s": data, "eval_s": one_eval, "evals_per_step": _evals_per_step(cfg),
        "step_with_eval_s": per_step + data + _evals_per_step(cfg) * one_eval,
        "warmup_s": warmup, "gflops": flops / per_step / 1e9, "threads": torch.get_num_threads(),
    }


def _profile(spec: dict) -> dict:
    from torch.profiler import ProfilerActivity, profile

    cfg, t, model, forward, dtype, caches, step = _setup(spec)
    val = t.validation_batch(cfg)
    times = {"data generation": 0.0}

    def timed_step(i: int) -> None:
        d0 = time.perf_counter()
        b = t.member_batches(cfg, i, caches)
        times["data generation"] += time.perf_counter() - d0
        step(b)

    timed_step(0)
    timed_step(1)
    times["data generation"] = 0.0
    n = 3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(2, 2 + n):
            timed_step(i)
    e0 = time.perf_counter()
    _evaluate(t, forward, val, cfg, dtype)
    times["evaluation (its share per step)"] = (time.perf_counter() - e0) * _evals_per_step(cfg)
    fam = {k: 0.0 for k in FAMILIES}
    other = 0.0
    for ev in prof.key_averages():
        if ev.key.startswith(("ProfilerStep", "autograd::", "Optimizer.zero_grad")):
            continue
        secs = ev.self_cpu_time_total / 1e6 / n
        for k, needles in FAMILIES.items():
            if any(s in ev.key for s in needles):
                fam[k] += secs
                break
        else:
            other += secs
    times["data generation"] /= n
    return {**fam, "elementwise, copies, reductions": other, **times}


def _sweep(spec: dict) -> dict:
    from dataclasses import replace

    from stackedheads import presets
    from stackedheads.executors import LocalExecutor

    steps = spec["steps"]
    s = presets.FIGURE4.get("quick")
    scale = steps / s.base.steps  # evaluations keep their share of the work
    base = s.base.override(steps=steps, warmup_steps=max(1, round(s.base.optim.warmup_steps * scale)),
                           final_window=max(1, round(s.base.final_window * scale)), ckpt_every=steps,
                           dtype=spec["dtype"])
    spec_ = replace(s, base=base)
    ex = LocalExecutor()
    t0 = time.perf_counter()
    ex.run(spec_.jobs(), Path(spec["out"]))
    return {"wall_s": time.perf_counter() - t0, "plan": list(ex.plan(spec_.jobs()))}


# --------------------------------------------------------------------------- parent side


def run_worker(spec: dict, trees: dict[str, Path], busy: bool = False) -> dict:
    """One measurement in a fresh process on ``spec['tree']``'s source."""
    from stackedheads.perf import openmp_env

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env.update(openmp_env())
    env["PYTHONPATH"] = str(trees[spec["tree"]] / "src")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env,
                           capture_output=True, text=True, check=False, cwd=trees[spec["tree"]])
    finally:
        if hog:
            hog.kill()
            hog.wait()
    if r.returncode != 0:
        raise SystemExit(f"worker failed: {spec}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def project(size: str, r: dict, budget_h: float, dtype: str) -> dict:
    """One seed's whole run at the measured step (evaluation's share included), against a piece's
    budget: a seed starts only where it fits, and never in an emulated bfloat16."""
    from stackedheads import presets
    from stackedheads.training.config import native_dtype

    hours = presets.get(size).steps * r["step_with_eval_s"] / 3600
    emulated = dtype == "bfloat16" and native_dtype("cpu") != "bfloat16"
    fits = hours <= budget_h and not emulated
    why = "bfloat16 is emulated on this CPU (no AVX512-BF16 or AMX)" if emulated else (
        f"{'within' if fits else 'over'} a {budget_h:g} h piece")
    return {"hours": hours, "fits": fits,
            "text": f"one seed, {presets.get(size).steps:,} steps: {hours:.2f} h; {'start it' if fits else 'do not start'}: {why}"}


def matmul_peak(dtype_name: str) -> float:
    """FLOP/s of a 2048^3 product in ``dtype_name``, best of five."""
    import torch

    dtype = getattr(torch, dtype_name)
    n = 2048
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(5))
    return 2 * n**3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def base_tree(commit: str, where: Path) -> Path:
    """A worktree of ``commit`` (its own source, untouched by this tree's changes)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), commit],
                   check=True, capture_output=True)
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--base", default=BASE, help=f"the commit to measure against (default {BASE})")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma list of preset sizes")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of TREE-DTYPE[-compile]")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile")
    ap.add_argument("--no-steps", action="store_true", help="skip the step times (profile and sweep only)")
    ap.add_argument("--busy", action="store_true", help="also measure the steps beside a busy process")
    ap.add_argument("--sweep", action="store_true", help="also time the shortened quick Figure 4 sweep")
    ap.add_argument("--sweep-steps", type=int, default=500, help="steps per job of the shortened quick sweep")
    ap.add_argument("--project", action="store_true",
                    help="measure one seed per run and project its whole run (the preset's steps) on this machine")
    ap.add_argument("--budget-h", type=float, default=2.25, help="a piece's budget in hours for --project (default 2.25)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in each worker (default: torch's)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return

    import torch

    sys.path.insert(0, str(ROOT / "src"))
    variants = {v: parse_variant(v) for v in args.variants.split(",")}
    sizes = tuple(args.sizes.split(","))
    # Only the variants' dtypes: an emulated bfloat16 product (no AVX512-BF16 or AMX) takes minutes.
    peaks = {d: matmul_peak(d) for d in dict.fromkeys(["float32"] + [v["dtype"] for v in variants.values()])}
    cores = os.cpu_count()
    shown = ", ".join(f"{d} {p / 1e9:.0f} GFLOP/s" for d, p in peaks.items())
    if "bfloat16" in peaks:
        shown += f" ({peaks['bfloat16'] / peaks['float32']:.2f}x)"
    print(f"{cores} cores, torch {torch.__version__}; matmul peak (2048^3, {torch.get_num_threads()} threads): {shown}")
    result: dict = {"peak_gflops": {k: v / 1e9 for k, v in peaks.items()}, "cores": cores, "base": args.base,
                    "steps": {}, "profile": {}, "sweep": {}}

    with tempfile.TemporaryDirectory() as tmp:
        trees = {"new": ROOT}
        if any(v["tree"] == "base" for v in variants.values()):
            trees["base"] = base_tree(args.base, Path(tmp) / "base")
        try:
            _measure(args, variants, sizes, peaks, trees, result)
        finally:
            if "base" in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["base"])],
                               check=False, capture_output=True)
    print(json.dumps(result))


def _measure(args, variants: dict, sizes: tuple, peaks: dict, trees: dict, result: dict) -> None:
    first = next(iter(variants))
    print("\nstep: seconds per training step + data + its share of evaluation; speedup against "
          f"{first}; MFU against the matmul peak of the variant's dtype")
    print(f"{'size':<6} {'machine':<5} {'variant':<22} {'s/step':>8} {'speedup':>8} {'GFLOP/s':>8} {'MFU':>6} {'warm-up s':>9}")
    conditions = [False, True] if args.busy else [False]
    for size in () if args.no_steps else sizes:
        for busy in conditions:
            label = "busy" if busy else "idle"
            rows = {}
            for name, v in variants.items():
                spec = {"kind": "step", "size": size, "steps": STEPS[size], "one_seed": args.project,
                        "threads": args.threads, **v}
                rows[name] = r = run_worker(spec, trees, busy)
                r["speedup"] = rows[first]["step_with_eval_s"] / r["step_with_eval_s"]
                r["mfu"] = r["gflops"] * 1e9 / peaks[v["dtype"]]
                print(f"{size:<6} {label:<5} {name:<22} {r['step_with_eval_s']:>8.3f} {r['speedup']:>7.2f}x"
                      f" {r['gflops']:>8.1f} {r['mfu']:>6.1%} {r['warmup_s']:>9.1f}", flush=True)
                if args.project:
                    r["projection"] = project(size, r, args.budget_h, v["dtype"])
                    print(f"{'':<6} {'':<5} {'':<22} {r['projection']['text']}", flush=True)
            result["steps"][f"{size}/{label}"] = rows

    if not args.no_profile:
        last = list(variants)[-1]
        pair = (first, last) if last != first else (first,)
        print(f"\nprofile: milliseconds per step by operator family (idle), {' vs '.join(pair)}")
        prof = {p: {s: run_worker({"kind": "profile", "size": s, **variants[p]}, trees) for s in sizes} for p in pair}
        result["profile"] = prof
        print(f"{'family':<34}" + "".join(f"{s + ' ' + p.split('-', 1)[0]:>14}" for s in sizes for p in pair))
        for fam in prof[first][sizes[0]]:
            print(f"{fam:<34}" + "".join(f"{prof[p][s][fam] * 1e3:>14.1f}" for s in sizes for p in pair))

    if args.sweep:
        last = variants[list(variants)[-1]]
        print(f"\nsweep: the quick Figure 4 sweep, 6 jobs x {args.sweep_steps} steps (wall seconds)")
        row = {}
        for tree, dtype in (("base", "float32"), ("new", last["dtype"])):
            with tempfile.TemporaryDirectory() as tmp:
                row[f"{tree}-{dtype}"] = run_worker({"kind": "sweep", "tree": tree, "dtype": dtype,
                                                     "steps": args.sweep_steps, "out": tmp}, trees)
        a, b = row.values()
        row["speedup"] = a["wall_s"] / b["wall_s"]
        result["sweep"] = row
        print("  ".join(f"{k} {v['wall_s']:.1f} s" for k, v in row.items() if k != "speedup") + f": {row['speedup']:.2f}x")


if __name__ == "__main__":
    main()
