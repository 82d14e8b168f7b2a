"""Training speed, old path against new path, on an idle machine and beside a busy process.

Issue 17 asked for the training step at the quick, sec8 and sec9 sizes, measured where users run
it: a small CPU that is sometimes busy. Each measurement runs in a fresh worker process (the
OpenMP spin policy is read once, when torch loads) and prints one JSON line; this script starts
the workers, one at a time, and prints the table. Both paths train the same model on the same
batches:

* ``old``: the step before the speed work (``benchmarks/legacy.py``: LayerNorm gain and bias,
  output bias and residual as separate passes, every row of the last block, single-tensor
  AdamW), torch's default threads and OpenMP spin policy, one job after another;
* ``new``: the library as it is (fused LayerNorm affine, residual on the output matmul, query
  rows only in the last block, fused AdamW), ``stackedheads.perf``'s spin policy, and for the
  sweep the local executor's plan (one single-thread worker per core).

Measurements:

1. ``step``: seconds per training step (forward, backward, clipping, AdamW) plus its share of
   evaluation (the preset's evaluations per step times one evaluation), per size; MFU against
   the float32 matmul peak measured in the same run;
2. ``profile``: where a step's time goes, by operator family (torch.profiler), old and new;
3. ``sweep``: the quick Figure 4 sweep (6 jobs) shortened to ``--sweep-steps`` steps per job
   with evaluations scaled to keep their share, wall time, old and new;
4. each of 1 and 3 again with one busy process beside it (``--busy``: a pure-Python loop
   pinned to no core, as a browser tab or another job would be).

Run (idle machine: nothing else heavy running)::

    .venv/bin/python benchmarks/train_throughput.py            # everything, ~15 minutes on 2 cores
    .venv/bin/python benchmarks/train_throughput.py --quick    # steps at the quick size only, ~1 minute

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
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = ("quick", "sec8", "sec9")
# Operator families of the profile (torch.profiler op names, self CPU time).
FAMILIES = {
    "attention": ("scaled_dot_product", "softmax", "masked_fill"),
    "matmuls (projections, MLP)": ("bmm", "baddbmm", "addmm", "aten::mm", "matmul"),
    "MLP activation": ("gelu",),
    "LayerNorm": ("layer_norm", "addcmul"),
    "optimizer": ("adam", "Optimizer"),
}


# --------------------------------------------------------------------------- worker side


def _worker(spec: dict) -> dict:
    sys.path.insert(0, str(HERE))
    import torch

    from stackedheads import presets
    from stackedheads.perf import keep_freed_memory

    keep_freed_memory()
    if spec["path"] == "old":
        import legacy

        legacy.patch_train()
    if spec["kind"] == "sweep":
        return _sweep(spec)
    import stackedheads.training.loop as t  # the names the loop trains with (legacy.py patches them)

    cfg = presets.get(spec["size"])
    if spec["kind"] == "profile":
        return _profile(cfg, t)
    model = t.EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds))
    opt = t.make_optimizer(model, cfg)
    caches = [{} for _ in cfg.seeds]
    batches = [t.member_batches(cfg, i, caches) for i in range(spec["steps"] + 2)]

    def step(b) -> None:
        pred = model(b.inputs)
        loss = t.member_mse(pred, b.targets)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        t.clip_grad_norm_per_member_(model, cfg.optim.grad_clip or 1.0)
        opt.step()

    for b in batches[:2]:  # warm-up: AdamW allocates its state, the allocator its arenas
        step(b)
    t0 = time.perf_counter()
    for b in batches[2:]:
        step(b)
    per_step = (time.perf_counter() - t0) / spec["steps"]
    data0 = time.perf_counter()
    for i in range(3):
        t.member_batches(cfg, 100 + i, caches)
    data = (time.perf_counter() - data0) / 3
    val = t.validation_batch(cfg)
    t.evaluate(model, val, cfg)
    e0 = time.perf_counter()
    t.evaluate(model, val, cfg)
    one_eval = time.perf_counter() - e0
    evals_per_step = len(cfg.eval_steps()) / cfg.steps
    from stackedheads.model import flops_per_step

    flops = flops_per_step(cfg.model_config(), cfg.batch_size, cfg.task.seq_len, len(cfg.seeds))
    return {
        "step_s": per_step, "data_s": data, "eval_s": one_eval, "evals_per_step": evals_per_step,
        "step_with_eval_s": per_step + data + evals_per_step * one_eval,
        "gflops": flops / per_step / 1e9, "threads": torch.get_num_threads(),
    }


def _profile(cfg, t) -> dict:
    from torch.profiler import ProfilerActivity, profile

    model = t.EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds))
    opt = t.make_optimizer(model, cfg)
    caches = [{} for _ in cfg.seeds]
    val = t.validation_batch(cfg)
    times = {"data generation": 0.0, "evaluation (its share per step)": 0.0}

    def step(i: int) -> None:
        d0 = time.perf_counter()
        b = t.member_batches(cfg, i, caches)
        times["data generation"] += time.perf_counter() - d0
        pred = model(b.inputs)
        loss = t.member_mse(pred, b.targets)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        t.clip_grad_norm_per_member_(model, cfg.optim.grad_clip or 1.0)
        opt.step()

    step(0)
    step(1)
    times["data generation"] = 0.0
    n = 3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(2, 2 + n):
            step(i)
    e0 = time.perf_counter()
    t.evaluate(model, val, cfg)
    times["evaluation (its share per step)"] = (time.perf_counter() - e0) * len(cfg.eval_steps()) / cfg.steps
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
    import torch

    from stackedheads import presets
    from stackedheads.executors import LocalExecutor

    steps = spec["steps"]
    s = presets.FIGURE4.get("quick")
    scale = steps / s.base.steps  # evaluations keep their share of the work
    base = s.base.override(steps=steps, warmup_steps=max(1, round(s.base.optim.warmup_steps * scale)),
                           final_window=max(1, round(s.base.final_window * scale)), ckpt_every=steps)
    spec_ = replace(s, base=base)
    out = Path(spec["out"])
    t0 = time.perf_counter()
    if spec["path"] == "old":  # one job after another in this process, default threads
        from stackedheads.training import train

        for job in spec_.jobs():
            train(job.config, out / job.name)
        plan = (1, torch.get_num_threads())
    else:
        ex = LocalExecutor()
        plan = ex.plan(spec_.jobs())
        ex.run(spec_.jobs(), out)
    return {"wall_s": time.perf_counter() - t0, "workers": plan[0], "threads": plan[1] or torch.get_num_threads()}


# --------------------------------------------------------------------------- parent side


def run_worker(spec: dict, busy: bool) -> dict:
    """One measurement in a fresh process; ``busy``: with a CPU-bound process beside it."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if spec["path"] == "new":
        from stackedheads.perf import SPINCOUNT

        env["GOMP_SPINCOUNT"] = SPINCOUNT
    src = str(HERE.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env,
                           capture_output=True, text=True, check=False)
    finally:
        if hog:
            hog.kill()
            hog.wait()
    if r.returncode != 0:
        raise SystemExit(f"worker failed: {spec}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def matmul_peak() -> float:
    import torch

    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(5))
    return 2 * n**3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="step times at the quick size only")
    ap.add_argument("--sweep-steps", type=int, default=500, help="steps per job of the shortened quick sweep")
    ap.add_argument("--no-busy", action="store_true", help="skip the busy-process measurements")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma list of sizes for the step times")
    ap.add_argument("--only-steps", action="store_true", help="step times only (no profile, no sweep)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return

    import torch

    peak = matmul_peak()
    cores = os.cpu_count()
    print(f"{cores} cores, torch {torch.__version__}; float32 matmul peak (2048^3, {torch.get_num_threads()} threads): "
          f"{peak / 1e9:.0f} GFLOP/s")
    result: dict = {"peak_gflops": peak / 1e9, "cores": cores, "steps": {}, "profile": {}, "sweep": {}}
    sizes = ("quick",) if args.quick else tuple(args.sizes.split(","))
    conditions = [False] if args.no_busy else [False, True]

    print("\nstep: seconds per training step + data + its share of evaluation (ratio old/new)")
    print(f"{'size':<6} {'machine':<5} {'old s':>8} {'new s':>8} {'speedup':>8} {'new GFLOP/s':>11} {'MFU':>6}")
    for size in sizes:
        n = {"quick": 20, "sec8": 6, "sec9": 4}[size]
        for busy in conditions:
            old = run_worker({"kind": "step", "path": "old", "size": size, "steps": n}, busy)
            new = run_worker({"kind": "step", "path": "new", "size": size, "steps": n}, busy)
            label = "busy" if busy else "idle"
            result["steps"][f"{size}/{label}"] = {"old": old, "new": new,
                                                  "speedup": old["step_with_eval_s"] / new["step_with_eval_s"]}
            print(f"{size:<6} {label:<5} {old['step_with_eval_s']:>8.3f} {new['step_with_eval_s']:>8.3f}"
                  f" {old['step_with_eval_s'] / new['step_with_eval_s']:>7.2f}x {new['gflops']:>11.1f}"
                  f" {new['gflops'] * 1e9 / peak:>6.1%}", flush=True)
    for size in sizes:
        if not args.no_busy:
            idle, busy = result["steps"][f"{size}/idle"], result["steps"][f"{size}/busy"]
            for path in ("old", "new"):
                kept = idle[path]["step_with_eval_s"] / busy[path]["step_with_eval_s"]
                result["steps"][f"{size}/busy"][f"{path}_kept"] = kept
            print(f"{size}: beside a busy process the old path keeps {result['steps'][f'{size}/busy']['old_kept']:.0%}"
                  f" of its idle speed, the new {result['steps'][f'{size}/busy']['new_kept']:.0%}")
    if args.quick or args.only_steps:
        print(json.dumps(result))
        return

    print("\nprofile: milliseconds per step by operator family (idle)")
    profiles = {p: {s: run_worker({"kind": "profile", "path": p, "size": s}, False) for s in SIZES} for p in ("old", "new")}
    result["profile"] = profiles
    print(f"{'family':<34}" + "".join(f"{s + ' ' + p:>12}" for s in SIZES for p in ("old", "new")))
    for fam in profiles["old"]["quick"]:
        print(f"{fam:<34}" + "".join(f"{profiles[p][s][fam] * 1e3:>12.1f}" for s in SIZES for p in ("old", "new")))

    print(f"\nsweep: the quick Figure 4 sweep, 6 jobs x {args.sweep_steps} steps (wall seconds)")
    for busy in conditions:
        label = "busy" if busy else "idle"
        row = {}
        for path in ("old", "new"):
            with tempfile.TemporaryDirectory() as tmp:
                row[path] = run_worker({"kind": "sweep", "path": path, "steps": args.sweep_steps, "out": tmp}, busy)
        row["speedup"] = row["old"]["wall_s"] / row["new"]["wall_s"]
        result["sweep"][label] = row
        print(f"{label}: old {row['old']['wall_s']:.1f} s ({row['old']['workers']} x {row['old']['threads']} threads), "
              f"new {row['new']['wall_s']:.1f} s ({row['new']['workers']} workers x {row['new']['threads']} thread)"
              f": {row['speedup']:.2f}x", flush=True)
    if not args.no_busy:
        for path in ("old", "new"):
            kept = result["sweep"]["idle"][path]["wall_s"] / result["sweep"]["busy"][path]["wall_s"]
            result["sweep"]["busy"][f"{path}_kept"] = kept
            print(f"sweep beside a busy process: the {path} path keeps {kept:.0%} of its idle throughput")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
