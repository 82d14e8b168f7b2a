"""Vector data generation speed vs one training step of a 1-layer paper-size model.

Paper sizes (Section 7.1): N=4, K=4, batch 512; D=5 (the IC sweep of Figure 4); the model has
8 heads and a 128-wide residual stream. Data generation must be far from the bottleneck:
the ratio printed last is (time of one training step) / (time to generate one batch).

    .venv/bin/python benchmarks/datagen.py [--batch 512] [--depth 5] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.execution.process import keep_freed_memory
from stackedheads.tasks.vectors import VectorTaskConfig, batch_indices, make_batch


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    keep_freed_memory()  # as a training process does (perf.configure_process: the CLI, the workers)

    task = VectorTaskConfig(depth=args.depth)
    cache: dict = {}
    step = iter(range(10**9))

    def gen():
        return make_batch(task, batch_indices(task.n_train, args.batch, task.seed, next(step), cache))

    t_gen = best_of(gen, args.repeats)

    cfg = ModelConfig(d_in=task.d_in, d_out=task.d_out, n_queries=task.chains, n_layers=1, n_heads=8, d_model=128)
    model = EnsembleTransformer(cfg, seeds=[0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batch = gen()
    x, y = batch.inputs[None], batch.targets[None]

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    t_step = best_of(train_step, args.repeats)
    result = {
        "batch": args.batch,
        "depth": args.depth,
        "threads": torch.get_num_threads(),
        "datagen_ms_per_batch": round(t_gen * 1e3, 3),
        "datagen_sequences_per_s": round(args.batch / t_gen),
        "train_step_ms_1layer": round(t_step * 1e3, 3),
        "step_over_datagen_ratio": round(t_step / t_gen, 2),
    }
    print(f"data generation: {result['datagen_sequences_per_s']:,} sequences/s ({result['datagen_ms_per_batch']} ms per batch)")
    print(f"1-layer training step: {result['train_step_ms_1layer']} ms")
    print(f"one training step costs {result['step_over_datagen_ratio']}x the generation of its batch")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
