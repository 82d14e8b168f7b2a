"""Every named configuration in one place.

* ``paper``: Section 7.1 exactly (the Figure 4 runs; the sweep sets D, IC and layers).
* ``sec8``: Section 8.1, transformers A-C: 12 layers, 1 head, d_model 128, D=3, 24k steps,
  batch 128, 262,144 examples.
* ``sec9``: Section 9.1, transformer D: 24 layers, 1 head, d_model 512, no MLP, head size 16,
  D=4, 6,400 steps, batch 256, 262,144 examples, a checkpoint every 80 steps.
* ``quick`` / ``sec8-quick`` / ``sec9-quick``: CPU-sized twins (see the README for how they
  were chosen); ``smoke``, ``sec8-smoke``, ``sec9-smoke``: seconds, for tests.
"""

from __future__ import annotations

from dataclasses import replace

from stackedheads.errors import UsageError
from stackedheads.tasks.vectors import VectorTaskConfig
from stackedheads.train import GPT2_RECIPE, TrainConfig

# Every preset trains with GPT-2's recipe (Sec. 7.1, "following the recipe of Radford et al.
# (2019)"): warm-up, cosine decay to 10%, per-member clipping at 1.0, no decay on norms and
# biases. Without it Transformer D does not learn x2..x4 (README, "Training recipe").
PAPER = TrainConfig(
    task=VectorTaskConfig(chains=4, depth=5, dims=4, ic=True, n_train=2**20, n_val=4096),
    n_layers=4, n_heads=8, d_model=128, batch_size=512, steps=10_000,
    lr=1e-3, weight_decay=0.1, eval_every=100, ckpt_every=1000, keep_checkpoints=False,
    warmup_steps=200, **GPT2_RECIPE,
)

# Measured on the 2-core CPU (README, "Choosing the quick preset"): with N = 4 chains even
# K = 8 and lr 3e-3 stayed on the 1 - 1/N plateau for 2,000 steps, while N = 2 learned x1
# with 2 layers and x1, x2 with 3 layers within 2,000 steps at d_model 64.
QUICK = TrainConfig(
    task=VectorTaskConfig(chains=2, depth=2, dims=4, ic=True, n_train=2**16, n_val=512),
    n_layers=3, n_heads=4, d_model=64, batch_size=128, steps=2000,
    eval_every=50, ckpt_every=500, keep_checkpoints=False, seeds=(0, 1),
    warmup_steps=100, **GPT2_RECIPE,
)

# The paper's task (N = 4, K = 4, IC) at the quick twin's size: the cheapest configuration of
# docs/n4-study.md in which both seeds learn x1 and then x2 (D = 2, 3 layers, 3,000 steps).
# About 3x the cost of QUICK per run, so the demo keeps N = 2 (README, "Choosing the quick preset").
QUICK_N4 = replace(QUICK, task=replace(QUICK.task, chains=4), steps=3000)

SMOKE = TrainConfig(
    task=VectorTaskConfig(chains=2, depth=2, dims=4, ic=True, n_train=4096, n_val=128),
    n_layers=2, n_heads=2, d_model=16, batch_size=32, steps=30,
    eval_every=10, final_window=5, ckpt_every=10, keep_checkpoints=False,
    warmup_steps=5, **GPT2_RECIPE,
)

SEC8 = TrainConfig(
    task=VectorTaskConfig(chains=4, depth=3, dims=4, ic=True, n_train=262_144, n_val=4096),
    n_layers=12, n_heads=1, d_model=128, batch_size=128, steps=24_000,
    eval_every=200, ckpt_every=1000, keep_checkpoints=True, seeds=(0, 1, 2),
    warmup_steps=200, **GPT2_RECIPE,
)

SEC8_QUICK = replace(
    SEC8,
    task=replace(SEC8.task, chains=2, n_train=2**16, n_val=512),
    n_layers=6, d_model=64, steps=3000, eval_every=50, ckpt_every=250, warmup_steps=100,
)

SEC9 = TrainConfig(
    task=VectorTaskConfig(chains=4, depth=4, dims=4, ic=True, n_train=262_144, n_val=4096),
    n_layers=24, n_heads=1, d_model=512, d_head=16, mlp=False, batch_size=256, steps=6400,
    eval_every=80, ckpt_every=80, keep_checkpoints=True,
    warmup_steps=200, steps_per_epoch=8, **GPT2_RECIPE,  # Sec. 9.1: 6,400 steps = 800 epochs
)

SEC9_QUICK = replace(
    SEC9,
    task=replace(SEC9.task, chains=2, depth=3, n_train=2**16, n_val=512),
    n_layers=8, d_model=128, batch_size=128, steps=3000, eval_every=50, ckpt_every=50,
    warmup_steps=100,
)

# Seconds-sized stand-ins for transformers A-C and D, so `reproduce --preset smoke` exercises
# the circuits and emergence stages (one head per layer; several checkpoints to follow).
SEC8_SMOKE = replace(SMOKE, n_layers=3, n_heads=1, steps=40, keep_checkpoints=True, seeds=(0,))
SEC9_SMOKE = replace(SEC8_SMOKE, mlp=False, d_head=8, steps_per_epoch=8)

PRESETS: dict[str, TrainConfig] = {
    "paper": PAPER,
    "quick": QUICK,
    "quick-n4": QUICK_N4,
    "smoke": SMOKE,
    "sec8": SEC8,
    "sec8-quick": SEC8_QUICK,
    "sec9": SEC9,
    "sec9-quick": SEC9_QUICK,
    "sec8-smoke": SEC8_SMOKE,
    "sec9-smoke": SEC9_SMOKE,
}


def get(name: str) -> TrainConfig:
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
