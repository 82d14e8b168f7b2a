"""Training speed: a base commit against this tree, per dtype, eager and compiled, and how far
each step is from this machine's limits.

The base commit is checked out into a temporary git worktree and run from there, so both sides
are the real library of their commit, on the same batches. Each measurement runs in a fresh
worker process (the OpenMP spin policy is read once, when torch loads) and prints one JSON line;
this script starts the workers one at a time and prints tables.

Variants (``--variants``; a name is ``TREE-DTYPE[-compile]``): ``base-float32``,
``base-bfloat16-compile`` (the base commit, ``--base``), ``new-float32``, ``new-bfloat16``,
``new-bfloat16-compile`` (this tree; ``-compile``: ``torch.compile`` as ``train --compile``
does it, inductor's fused C++ on a CPU, its compile time reported apart).

Measurements:

1. ``machine``: the CPU's model and flags, torch's CPU capability, the oneDNN kernel a
   bfloat16 matmul of the sec9 step's shape takes (``ONEDNN_VERBOSE``: ``avx512_core_amx``
   where the tiles are used, ``avx512_core_bf16`` for AVX512-BF16), the matmul peak (2048^3
   products) per dtype and the memory bandwidth (a 512 MiB copy, bytes read + written);
2. ``step``: seconds per training step (the tree's own step: forward, backward, per-member
   clipping, AdamW) plus data generation and its share of evaluation (``n_evals / steps``: every
   ``eval_every`` steps and each of the last ``final_window``), per size and per number of seeds
   in the ensemble (``--seeds 1,2,4,8``; default the preset's), with the MFU against the
   variant's dtype's peak; for a compiled variant the evaluation compiled and eager, and the
   graphs dynamo compiled (the step's, the evaluation's: more means recompiles);
3. ``roofline``: one eager step of the last variant op by op (``stackedheads.model.costs.OpTally``),
   FLOPs and bytes per operator family against the peak and the bandwidth: each family's floor
   ``max(FLOPs / peak, bytes / bandwidth)`` and how near its time comes to it; and the path each
   matmul of that step takes (its aten matmuls by dtype beside oneDNN's logged executions by
   implementation: a matmul oneDNN does not log ran on aten's own path, MKL for float32);
4. ``profile``: where a step's time goes by operator family (torch.profiler, self time; compiled
   kernels with their names), for the first and the last variant;
5. ``sweep``: the quick Figure 4 sweep shortened to ``--sweep-steps`` steps per job (``--sweep``).

Run (idle machine: nothing else heavy running)::

    .venv/bin/python benchmarks/train_throughput.py --sizes sec9 --seeds 4 --threads 2 \
        --variants base-bfloat16,base-bfloat16-compile,new-bfloat16,new-bfloat16-compile
    .venv/bin/python benchmarks/train_throughput.py --sizes sec9 --seeds 1,2,4,8 --variants new-bfloat16-compile
    .venv/bin/python benchmarks/train_throughput.py --sizes quick    # one size, the default variants
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
BASE = "ef895b6"  # the step before the roofline work (bfloat16, compile, explicit CPU attention)
VARIANTS = ("base-float32", "new-float32", "new-bfloat16", "new-bfloat16-compile")
STEPS = {"quick": 20, "sec8": 6, "sec9": 6, "sec8-quick": 20, "sec9-quick": 20}
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
# Inductor names a fused kernel after the ops in it (``cpp_fused__to_copy_add_softmax...``): it is
# matched as fused before any family whose op it names.
FUSED = "compiled kernels (fused)"
MATCH_ORDER = [(FUSED, FAMILIES[FUSED])] + [(k, v) for k, v in FAMILIES.items() if k != FUSED]


def parse_variant(name: str) -> dict:
    tree, dtype, *rest = name.split("-")
    if tree not in ("base", "new") or dtype not in ("float32", "bfloat16") or rest not in ([], ["compile"]):
        raise SystemExit(f"bad variant {name!r}: TREE-DTYPE[-compile], TREE base or new, DTYPE float32 or bfloat16")
    return {"tree": tree, "dtype": dtype, "compile": bool(rest)}


# --------------------------------------------------------------------------- worker side


def _from_tree(name: str, *modules: str):
    """``name`` from the first of ``modules`` this worker's tree has: a worker runs either this
    tree or the base commit, whose modules may sit at other paths."""
    import importlib

    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{name} is in none of {modules}")



def _setup(spec: dict):
    """The preset's config, model, optimizer, step and batches of whichever tree this worker
    imports: the tree's own step and compile where it has them (``training/step.py``)."""
    import torch

    from stackedheads import presets
    from stackedheads.training import loop as t  # the names the loop trains with, in either tree

    _from_tree("keep_freed_memory", "stackedheads.execution.process", "stackedheads.perf")()
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    cfg = presets.get(spec["size"])
    if spec.get("seeds"):  # an ensemble of this many seeds (1: a piece of a result trained in pieces)
        cfg = cfg.override(seeds=tuple(range(spec["seeds"])))
    dtype = getattr(torch, spec["dtype"])
    cfg = cfg.override(dtype=spec["dtype"], compile=spec["compile"])
    model = t.EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds))
    opt = t.make_optimizer(model, cfg)
    try:
        from stackedheads.training.step import compile_model
    except ImportError:  # a tree before it: what its loop did
        compile_model = torch.compile
    forward = compile_model(model) if spec["compile"] else model
    caches = [{} for _ in cfg.seeds]
    try:
        from stackedheads.training.step import make_step

        tree_step = make_step(cfg, model, forward, opt, dtype)

        def step(b) -> None:
            tree_step(b.inputs, b.targets, cfg.optim.lr)
    except ImportError:  # a tree before training/step.py: the step its loop ran
        if hasattr(t, "member_mse"):
            member_mse, clip = t.member_mse, t.clip_grad_norm_per_member_
        else:
            from stackedheads.model import clip_grad_norm_per_member_ as clip  # that tree's path
            from stackedheads.training.evaluate import member_mse

        def step(b) -> None:
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                pred = forward(b.inputs)
            loss = member_mse(pred, b.targets)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            clip(model, cfg.optim.grad_clip or 1.0)
            opt.step()

    step.opt = opt  # the checkpoint's measurement writes its state
    return cfg, t, model, forward, dtype, caches, step


def _evals_per_step(cfg) -> float:
    n = cfg.n_evals() if hasattr(cfg, "n_evals") else len(cfg.eval_steps())  # the base has a set
    return n / cfg.steps


def _evaluate(t, forward, val, cfg) -> float:
    """Seconds of one evaluation (the validation set, every member) through ``forward``."""
    t0 = time.perf_counter()
    t.evaluate(forward, val, cfg)
    return time.perf_counter() - t0


def _checkpoint_s(cfg, model, opt) -> float:
    """Seconds to write one checkpoint (weights and the AdamW state after the measured steps) as
    training writes it, in the background on a CPU: it shares the cores with the step. Best of two."""
    from stackedheads.training.checkpoints import save_checkpoint

    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):
            t0 = time.perf_counter()
            save_checkpoint(Path(tmp) / f"step_{i:06d}.safetensors", model, opt, i, cfg)
            best = min(best, time.perf_counter() - t0)
    return best


def _graphs() -> int:
    """Graphs dynamo has compiled in this process (each recompile adds one)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"].get("unique_graphs", 0))


def _worker(spec: dict) -> dict:
    if spec["kind"] == "sweep":
        return _sweep(spec)
    if spec["kind"] == "profile":
        return _profile(spec)
    if spec["kind"] == "roofline":
        return _roofline(spec)
    if spec["kind"] == "paths":
        return _paths(spec)
    if spec["kind"] == "machine":
        return machine(spec)
    import torch

    cfg, t, model, forward, dtype, caches, step = _setup(spec)
    batches = [t.member_batches(cfg, i, caches) for i in range(spec["steps"] + 2)]
    c0 = time.perf_counter()
    for b in batches[:2]:  # warm-up: AdamW allocates its state, the allocator its arenas, inductor compiles
        step(b)
    warmup = time.perf_counter() - c0
    step_graphs = _graphs()
    t0 = time.perf_counter()
    for b in batches[2:]:
        step(b)
    per_step = (time.perf_counter() - t0) / spec["steps"]
    data0 = time.perf_counter()
    for i in range(3):
        t.member_batches(cfg, 100 + i, caches)
    data = (time.perf_counter() - data0) / 3
    val = t.validation_batch(cfg)
    first_eval = _evaluate(t, forward, val, cfg)  # a compiled model compiles its evaluation here
    one_eval = _evaluate(t, forward, val, cfg)
    ckpt = _checkpoint_s(cfg, model, step.opt)
    out = {"seeds": len(cfg.seeds), "step_s": per_step, "data_s": data, "eval_s": one_eval,
           "ckpt_s": ckpt, "ckpts_per_step": 1 / cfg.ckpt_every,
           "first_eval_s": first_eval, "evals_per_step": _evals_per_step(cfg),
           "step_with_eval_s": per_step + data + _evals_per_step(cfg) * one_eval, "warmup_s": warmup,
           "threads": torch.get_num_threads()}
    if spec["compile"]:
        out["graphs_step"] = step_graphs
        out["graphs_total"] = _graphs()
        step(batches[2])
        out["graphs_after_more_steps"] = _graphs()  # the step's graph still serves after an evaluation
        out["eval_eager_s"] = _evaluate(t, model, val, cfg)
    flops_per_step = _from_tree("flops_per_step", "stackedheads.model.costs", "stackedheads.model")
    flops = flops_per_step(cfg.model_config(), cfg.batch_size, cfg.task.seq_len, len(cfg.seeds))
    out["gflops"] = flops / per_step / 1e9
    return out


def _roofline(spec: dict) -> dict:
    """One eager step op by op: FLOPs, bytes and seconds per operator family (this tree's
    ``OpTally``; the step of the tree named in ``spec``)."""
    from stackedheads.model.costs import OpTally

    cfg, t, model, forward, dtype, caches, step = _setup({**spec, "compile": False})
    for i in range(2):
        step(t.member_batches(cfg, i, caches))
    batches = [t.member_batches(cfg, 2 + i, caches) for i in range(2)]
    with OpTally() as tally:
        for b in batches:
            step(b)
    return tally.scaled(1 / len(batches))


MATMULS = ("mm", "bmm", "addmm", "baddbmm", "addbmm", "_scaled_dot_product_flash_attention_for_cpu",
           "add_product_")  # the last: the factored pass's in-place product (it returns nothing)


def onednn_calls(log: str) -> dict[str, list[float]]:
    """``ONEDNN_VERBOSE``'s executions in ``log``, by primitive, implementation and source dtype:
    ``"matmul brg_matmul:avx512_core_amx bf16" -> [calls, milliseconds]``."""
    import re

    out: dict[str, list[float]] = {}
    for line in log.splitlines():
        parts = line.split(",")
        if "exec" not in parts:
            continue
        i = parts.index("exec")
        if len(parts) < i + 4:
            continue
        src = re.search(r"src:(\w+):", line)
        key = f"{parts[i + 2]} {parts[i + 3]} {src.group(1) if src else '?'}"
        row = out.setdefault(key, [0, 0.0])
        row[0] += 1
        try:
            row[1] += float(parts[-1])
        except ValueError:
            pass
    return out


ONEDNN_DTYPES = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}


def path_lines(paths: dict) -> list[str]:
    """Per dtype: the step's matmul calls and how many of them oneDNN executed, with which kernel."""
    lines = []
    for dt in sorted({k.split()[1] for k in paths["aten"]}):
        calls = {k.split()[0]: c for k, c in paths["aten"].items() if k.split()[1] == dt}
        ran = [(k.split()[1], c, ms) for k, (c, ms) in paths["onednn"].items() if ONEDNN_DTYPES.get(k.split()[2]) == dt]
        via = "; ".join(f"{n} through oneDNN {impl} ({ms:.1f} ms)" for impl, n, ms in ran) or \
            "none through oneDNN: aten's own path (MKL)"
        lines.append(f"{dt}: {sum(calls.values())} calls ({', '.join(f'{op} x{c}' for op, c in sorted(calls.items()))}), {via}")
    return lines


def _paths(spec: dict) -> dict:
    """The path each matmul of one eager step takes: oneDNN's executions, logged by its verbose
    mode for that step alone (``brg_matmul:avx512_core_amx`` on AMX tiles, ``avx512_core_bf16`` on
    AVX512-BF16), beside the step's aten matmuls by op and output dtype. Matmuls oneDNN does not
    log ran on aten's own path (MKL for float32 on x86)."""
    import ctypes

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    cfg, t, model, forward, dtype, caches, step = _setup({**spec, "compile": False})
    for i in range(2):
        step(t.member_batches(cfg, i, caches))
    batch = t.member_batches(cfg, 2, caches)
    aten: dict[str, int] = {}

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in MATMULS:
                first = args[0] if out is None else out[0] if isinstance(out, tuple) else out
                key = f"{name} {str(first.dtype).removeprefix('torch.')}"
                aten[key] = aten.get(key, 0) + 1
            return out

    sys.stdout.flush()
    with tempfile.TemporaryFile(mode="w+") as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), _Count():
                step(batch)
        finally:
            ctypes.CDLL(None).fflush(None)  # oneDNN's lines into the log, not after the JSON
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        return {"onednn": onednn_calls(log.read()), "aten": aten}


def _profile(spec: dict) -> dict:
    from torch.profiler import ProfilerActivity, profile

    if spec["compile"]:  # inductor's fused kernels by name in the profile, not one opaque region
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
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
    _evaluate(t, forward, val, cfg)  # a compiled model compiles its evaluation here
    times["evaluation (its share per step)"] = _evaluate(t, forward, val, cfg) * _evals_per_step(cfg)
    fam = {k: 0.0 for k in FAMILIES}
    other = 0.0
    for ev in prof.key_averages():
        if ev.key.startswith(("ProfilerStep", "autograd::", "Optimizer.zero_grad")):
            continue
        secs = ev.self_cpu_time_total / 1e6 / n
        for k, needles in MATCH_ORDER:
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

    LocalExecutor = _from_tree("LocalExecutor", "stackedheads.execution.executors", "stackedheads.executors")

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
    from stackedheads.execution.process import openmp_env

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


def memory_bandwidth() -> float:
    """Bytes per second a copy of 512 MiB moves (read + written), best of five: far beyond the
    caches, into a buffer already paged in (the allocator keeps freed memory, as training does)."""
    import torch

    src = torch.ones(2**27)  # 512 MiB of float32
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
    return 2 * src.numel() * src.element_size() / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def cpu_model() -> tuple[str, list[str]]:
    """The CPU's model name and which of :data:`CPU_FLAGS` it has (Linux's /proc/cpuinfo)."""
    import platform

    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name in ("", platform.machine(), platform.processor()):
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return name, [f for f in CPU_FLAGS if f in flags]


def onednn_path(dtype_name: str) -> str:
    """The oneDNN implementation a ``dtype_name`` batched matmul of the sec9 step's shape (4
    members x 9,216 rows x 512 -> 48, the qkv projection) takes in a fresh process, from
    ``ONEDNN_VERBOSE``: e.g. ``brg_matmul:avx512_core_amx`` (AMX tiles) or
    ``brg_matmul:avx512_core_bf16`` (AVX512-BF16); "aten" when oneDNN is not called."""
    code = ("import torch; d = getattr(torch, %r); a = torch.randn(4, 9216, 512, dtype=d); "
            "b = torch.randn(4, 512, 48, dtype=d); torch.bmm(a, b)") % dtype_name
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    for key in onednn_calls(r.stdout):
        kind, impl, _ = key.split()
        if kind == "matmul":
            return impl
    return "aten (MKL or its own; no oneDNN call)"


def machine(spec: dict) -> dict:
    """What the numbers are relative to, measured in a worker like the steps (same threads)."""
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    from stackedheads.execution.process import keep_freed_memory

    keep_freed_memory()
    name, flags = cpu_model()
    return {"cpu": name, "flags": flags, "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
            "peak_gflops": {d: matmul_peak(d) / 1e9 for d in spec["dtypes"]},
            "bandwidth_gbs": memory_bandwidth() / 1e9,
            "onednn": {d: onednn_path(d) for d in spec["dtypes"]}}


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
    ap.add_argument("--seeds", default=None, help="comma list of ensemble sizes, e.g. 1,2,4,8 (default: the preset's seeds)")
    ap.add_argument("--rounds", type=int, default=1, help="measure every variant this many times, interleaved; the fastest round counts")
    ap.add_argument("--no-roofline", action="store_true", help="skip the roofline (one eager step op by op)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return

    sys.path.insert(0, str(ROOT / "src"))
    variants = {v: parse_variant(v) for v in args.variants.split(",")}
    sizes = tuple(args.sizes.split(","))
    seeds = [int(n) for n in args.seeds.split(",")] if args.seeds else [None]
    if args.project:
        seeds = [1]
    # Only the variants' dtypes: an emulated bfloat16 product (no AVX512-BF16 or AMX) takes minutes.
    dtypes = list(dict.fromkeys(["float32"] + [v["dtype"] for v in variants.values()]))
    m = run_worker({"kind": "machine", "tree": "new", "dtypes": dtypes, "threads": args.threads}, {"new": ROOT})
    peaks = {d: g * 1e9 for d, g in m["peak_gflops"].items()}
    shown = ", ".join(f"{d} {p / 1e9:.0f} GFLOP/s" for d, p in peaks.items())
    if "bfloat16" in peaks:
        shown += f" ({peaks['bfloat16'] / peaks['float32']:.2f}x)"
    print(f"{m['cpu']} ({', '.join(m['flags']) or 'no AVX2'}; torch's CPU capability {m['capability']}), "
          f"{m['cores']} cores, {m['threads']} threads, torch {m['torch']}")
    print(f"matmul peak (2048^3): {shown}; memory bandwidth (512 MiB copy): {m['bandwidth_gbs']:.1f} GB/s")
    print("oneDNN matmul kernel at the sec9 qkv shape: " + ", ".join(f"{d} {k}" for d, k in m["onednn"].items()))
    result: dict = {"machine": m, "peak_gflops": m["peak_gflops"], "cores": m["cores"], "base": args.base,
                    "steps": {}, "roofline": {}, "profile": {}, "sweep": {}}

    with tempfile.TemporaryDirectory() as tmp:
        trees = {"new": ROOT}
        if any(v["tree"] == "base" for v in variants.values()):
            trees["base"] = base_tree(args.base, Path(tmp) / "base")
        try:
            _measure(args, variants, sizes, seeds, peaks, trees, result)
        finally:
            if "base" in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["base"])],
                               check=False, capture_output=True)
    print(json.dumps(result))


def _measure(args, variants: dict, sizes: tuple, seeds: list, peaks: dict, trees: dict, result: dict) -> None:
    first = next(iter(variants))
    print("\nstep: seconds per training step + data + its share of evaluation; speedup against "
          f"{first}; MFU against the matmul peak of the variant's dtype; eval: one evaluation's seconds "
          "(compiled / eager for -compile); graphs: dynamo's (step / after evaluating); ckpt ms: a checkpoint's "
          "write per step (1 / ckpt_every of one; not in s/step: training writes them in the background)")
    print(f"{'size':<10} {'seeds':>5} {'machine':<5} {'variant':<22} {'s/step':>8} {'s/seed':>7} {'speedup':>8} "
          f"{'GFLOP/s':>8} {'MFU':>6} {'eval s':>13} {'graphs':>6} {'ckpt ms':>7} {'warm-up s':>9}")
    conditions = [False, True] if args.busy else [False]
    for size in () if args.no_steps else sizes:
        for n in seeds:
            for busy in conditions:
                label = "busy" if busy else "idle"
                rounds: dict[str, list] = {name: [] for name in variants}
                for _ in range(args.rounds):  # interleaved: a drift of the machine's speed hits every variant
                    for name, v in variants.items():
                        spec = {"kind": "step", "size": size, "steps": STEPS.get(size, 6), "seeds": n,
                                "threads": args.threads, **v}
                        rounds[name].append(run_worker(spec, trees, busy))
                rows = {}
                for name, v in variants.items():
                    r = dict(min(rounds[name], key=lambda x: x["step_with_eval_s"]))  # the least disturbed round
                    r["rounds_s"] = [x["step_with_eval_s"] for x in rounds[name]]
                    rows[name] = r
                    r["speedup"] = rows[first]["step_with_eval_s"] / r["step_with_eval_s"]
                    r["mfu"] = r["gflops"] * 1e9 / peaks[v["dtype"]]
                    ev = f"{r['eval_s']:.2f}" + (f" / {r['eval_eager_s']:.2f}" if "eval_eager_s" in r else "")
                    graphs = f"{r['graphs_step']}/{r['graphs_total']}" if "graphs_step" in r else "-"
                    print(f"{size:<10} {r['seeds']:>5} {label:<5} {name:<22} {r['step_with_eval_s']:>8.3f} "
                          f"{r['step_with_eval_s'] / r['seeds']:>7.3f} {r['speedup']:>7.2f}x {r['gflops']:>8.1f} "
                          f"{r['mfu']:>6.1%} {ev:>13} {graphs:>6} {r['ckpt_s'] * r['ckpts_per_step'] * 1e3:>7.1f} {r['warmup_s']:>9.1f}", flush=True)
                    if args.project:
                        r["projection"] = project(size, r, args.budget_h, v["dtype"])
                        print(f"{'':<10} {'':>5} {'':<5} {'':<22} {r['projection']['text']}", flush=True)
                result["steps"][f"{size}/{rows[first]['seeds']}/{label}"] = rows
        if len(seeds) > 1 and not args.busy:
            print(f"{size}: seconds per seed-step against one seed's (below 1.00: the ensemble makes seeds cheaper)")
            for name in variants:
                per = {k.split("/")[1]: r[name]["step_with_eval_s"] / r[name]["seeds"]
                       for k, r in result["steps"].items() if k.startswith(size + "/")}
                one = per.get("1")
                if one:
                    print(f"  {name:<22} " + "  ".join(f"{e} seeds {v / one:.2f}" for e, v in per.items()))

    if not args.no_roofline:
        last = list(variants)[-1]
        v = variants[last]
        n = max(x or 0 for x in seeds) or None
        print(f"\nroofline: one eager step of new-{v['dtype']} op by op"
              f"{f' ({n} seeds)' if n else ''}, per step; floor = max(FLOPs / {v['dtype']} peak, bytes / bandwidth)")
        bw = result["machine"]["bandwidth_gbs"] * 1e9
        from stackedheads.model.costs import roofline

        for size in sizes:
            rows = run_worker({"kind": "roofline", "size": size, "seeds": n, "threads": args.threads,
                               **{**v, "tree": "new", "compile": False}}, trees)
            roof = roofline(rows, peaks[v["dtype"]], bw)
            result["roofline"][size] = roof
            print(f"{size:<10} {'family':<34} {'GFLOP':>8} {'GB':>7} {'FLOP/B':>7} {'ms':>9} {'floor ms':>9} {'bound':>8} {'of floor':>8}")
            for fam, r in sorted(roof.items(), key=lambda kv: (kv[0] == "step", -kv[1]["seconds"])):
                print(f"{'':<10} {fam:<34} {r['flops'] / 1e9:>8.1f} {r['bytes'] / 1e9:>7.2f} {r['intensity']:>7.1f} "
                      f"{r['seconds'] * 1e3:>9.1f} {r['floor_s'] * 1e3:>9.1f} {r['bound']:>8} {r['of_floor']:>8.1%}")
            balance = peaks[v["dtype"]] / bw
            step = roof["step"]
            print(f"{'':<10} machine balance {balance:.1f} FLOP/byte against the step's {step['intensity']:.1f}: "
                  f"the eager step's floor is {step['floor_s'] * 1e3:.0f} ms, bound by {step['bound']}")
            for key, rs in result["steps"].items():
                if key.startswith(f"{size}/{n or ''}".rstrip("/")) and key.endswith("/idle"):
                    print(f"{'':<10} " + "  ".join(f"{name} {r['step_s'] * 1e3:.0f} ms ({step['floor_s'] / r['step_s']:.0%} of the floor)"
                                                   for name, r in rs.items()))
            paths = run_worker({"kind": "paths", "size": size, "seeds": n, "threads": args.threads,
                                **{**v, "tree": "new", "compile": False}}, trees)
            result.setdefault("paths", {})[size] = paths
            print(f"{'':<10} matmul paths in that step (aten's calls by output dtype; oneDNN's executions from its log):")
            for line in path_lines(paths):
                print(f"{'':<10}   {line}")

    if not args.no_profile:
        last = list(variants)[-1]
        pair = (first, last) if last != first else (first,)
        print(f"\nprofile: milliseconds per step by operator family (idle), {' vs '.join(pair)}")
        prof = {p: {s: run_worker({"kind": "profile", "size": s, "seeds": seeds[-1], "threads": args.threads,
                                   **variants[p]}, trees) for s in sizes} for p in pair}
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
