"""The N = 4 study (issue 13): which CPU-sized configurations of the paper's task learn x1, x2, ...

Each candidate is a ``train`` run of the paper's task (N = 4 chains, K = 4, IC targets) at a
CPU twin's size; runs resume, so the study can be stopped and restarted. The table goes to
stdout, and from there into ``docs/n4-study.md`` (settings, steps, final partial losses per seed, first step each
position's partial loss falls below 0.5 -- the paper's Figure 4 threshold for N = 4 -- and
wall time). Run it alone on an idle machine for comparable wall times:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/n4_study.py --out /work/runs/n4 [--only NAME]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from stackedheads import presets
from stackedheads.training import TrainConfig, read_metrics, train

THRESHOLD = 0.5  # Sec. 7.2 / Fig. 4 right: a position is learned when its partial loss < 0.5 (N = 4)

BASE = presets.QUICK.override(chains=4)
PLAIN = {"warmup_steps": 0, "schedule": "constant", "grad_clip": 0.0, "decay_exempt": ()}

# name -> (why it is tried, config)
CANDIDATES: dict[str, tuple[str, TrainConfig]] = {
    "d2-plain": ("the first round's recipe: constant lr, no clipping", BASE.override(**PLAIN)),
    "d2-gpt2": ("GPT-2 recipe (warm-up 100, cosine, clip 1.0)", BASE),
    "d2-gpt2-lr3e-3": ("higher peak lr with the warm-up", BASE.override(lr=3e-3)),
    "d2-gpt2-pairpe": ("pair-indexed positional codes (App. B Def. 3)", BASE.override(pe="pair")),
    "d2-gpt2-3k": ("50% more steps", BASE.override(steps=3000)),
    "d2-gpt2-b256": ("batch 256", BASE.override(batch_size=256)),
    "d2-gpt2-lr5e-4": ("lower peak lr: does the plateau lengthen?", BASE.override(lr=5e-4)),
    "d2-gpt2-warm400": ("4x longer warm-up: does the plateau lengthen?", BASE.override(warmup_steps=400)),
    "d3-gpt2-4L-3k": ("D = 3, 4 layers (causal minimum for x3: 3)", BASE.override(depth=3, n_layers=4, steps=3000)),
}


def first_below(rows: list[dict], seed: int, col: str) -> int | None:
    for r in rows:
        if r["seed"] == seed and r[col] < THRESHOLD:
            return r["step"]
    return None


def describe(cfg: TrainConfig) -> str:
    t = cfg.task
    recipe = f"{cfg.optim.schedule}" + (f", warm-up {cfg.optim.warmup_steps}" if cfg.optim.warmup_steps else "") + (f", clip {cfg.optim.grad_clip:g}" if cfg.optim.grad_clip else "")
    return (f"N={t.chains} D={t.depth} K={t.dims} pe={t.pe}; {cfg.model.n_layers}L x {cfg.model.n_heads}H, d={cfg.model.d_model}; "
            f"batch {cfg.batch_size}, lr {cfg.optim.lr:g}, {recipe}")


def row_for(name: str, why: str, cfg: TrainConfig, run: Path) -> str:
    summary = train(cfg, run)
    rows = read_metrics(run)
    parts = [c for c in rows[0] if c.startswith("val_x")]
    finals = "; ".join(
        f"s{seed}: " + " ".join(f"{s['final_partial'][p]:.3f}" for p in parts) for seed, s in summary["seeds"].items()
    )
    learned = "; ".join(
        f"s{seed}: " + " ".join(str(first_below(rows, seed, p) or "-") for p in parts) for seed in cfg.seeds
    )
    return f"| {name} | {why} | {describe(cfg)} | {cfg.steps} | {finals} | {learned} | {summary['wall_s']:.0f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="Folder for the runs (outside the work tree).")
    ap.add_argument("--only", action="append", help="Run only these candidates.")
    args = ap.parse_args()
    names = args.only or list(CANDIDATES)
    lines = []
    for name in names:
        why, cfg = CANDIDATES[name]
        lines.append(row_for(name, why, cfg, args.out / name))
        print(lines[-1], flush=True)
    header = [
        "| run | why | settings | steps | final partial losses x1.. per seed | first step below 0.5, x1.. per seed | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(header + lines))
    print(f"machine: {platform.machine()}, {platform.processor() or '?'}; python {sys.version.split()[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
