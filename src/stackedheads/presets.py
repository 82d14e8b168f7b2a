"""Every named configuration in one place: training runs, the Figure 4 grids, the depth grids
and the ``reproduce`` presets. Each kind has its :class:`~stackedheads.registry.Registry`; the
command line's ``--preset`` looks names up here and nowhere else.

Training (``TRAIN``; ``stackedheads train --preset NAME``):

* ``paper``: Section 7.1 exactly (the Figure 4 runs; the sweep sets D, IC and layers).
* ``sec8``: Section 8.1, transformers A-C: 12 layers, 1 head, d_model 128, D=3, 24k steps,
  batch 128, 262,144 examples.
* ``sec9``: Section 9.1, transformer D: 24 layers, 1 head, d_model 512, no MLP, head size 16,
  D=4, 6,400 steps, batch 256, 262,144 examples, a checkpoint every 80 steps.
* ``quick`` / ``quick-n4`` / ``sec8-quick`` / ``sec9-quick``: CPU-sized twins (docs/training.md says
  how they were chosen); ``smoke``, ``sec8-smoke``, ``sec9-smoke``: seconds, for tests.

Grids: ``FIGURE4`` (``sweep figure4``: paper, quick, smoke) and ``DEPTH`` (``sweep depth``:
paper, quick, quick-n4, smoke). Whole runs: ``REPRODUCE`` (``reproduce``: paper, quick, smoke).
Recipes (``train --recipe``, applied by :func:`get`): :mod:`stackedheads.recipes`.

A new preset is one more ``TRAIN.register("name", TrainConfig(...))`` (or the grid's) here,
or in user code before the command runs.
"""

from __future__ import annotations

from stackedheads import recipes
from stackedheads.sweeps.depth import DepthSpec
from stackedheads.model.config import ModelConfig
from stackedheads.recipes import PAPER_CURRICULUM, RECIPES, Recipe  # noqa: F401  (presets' names for them)
from stackedheads.registry import Registry
from stackedheads.reproduce import LLMChoice, LLMStage, ReproducePreset
from stackedheads.sweeps.figure4 import Figure4Spec
from stackedheads.tasks.vectors import VectorTaskConfig
from stackedheads.training.config import GPT2_RECIPE, OptimConfig, TrainConfig

TRAIN: Registry[TrainConfig] = Registry("training preset")
FIGURE4: Registry[Figure4Spec] = Registry("figure4 preset")
DEPTH: Registry[DepthSpec] = Registry("depth preset")
REPRODUCE: Registry[ReproducePreset] = Registry("reproduce preset")

# Every preset trains with GPT-2's recipe (Sec. 7.1, "following the recipe of Radford et al.
# (2019)"): warm-up, cosine decay to 10% (the A-C and D twins: the first half of it), per-member
# clipping at 1.0, no decay on norms and biases. Without it Transformer D does not learn x2..x4
# (docs/training.md, "Training recipe").
PAPER = TRAIN.register("paper", TrainConfig(
    task=VectorTaskConfig(chains=4, depth=5, dims=4, ic=True, n_train=2**20, n_val=4096),
    model=ModelConfig(n_layers=4, n_heads=8, d_model=128),
    optim=OptimConfig(lr=1e-3, weight_decay=0.1, warmup_steps=200, **GPT2_RECIPE),
    batch_size=512, steps=10_000, eval_every=100, ckpt_every=1000, keep_checkpoints=False,
))

# Measured on the 2-core CPU (docs/training.md, "Choosing the quick preset"): with N = 4 chains even
# K = 8 and lr 3e-3 stayed on the 1 - 1/N plateau for 2,000 steps, while N = 2 learned x1
# with 2 layers and x1, x2 with 3 layers within 2,000 steps at d_model 64.
QUICK = TRAIN.register("quick", TrainConfig(
    task=VectorTaskConfig(chains=2, depth=2, dims=4, ic=True, n_train=2**16, n_val=512),
    model=ModelConfig(n_layers=3, n_heads=4, d_model=64),
    optim=OptimConfig(warmup_steps=100, **GPT2_RECIPE),
    batch_size=128, steps=2000, eval_every=50, ckpt_every=500, keep_checkpoints=False, seeds=(0, 1),
))

# The paper's task (N = 4, K = 4, IC) at the quick twin's size: the cheapest configuration of
# docs/n4-study.md in which both seeds learn x1 and then x2 (D = 2, 3 layers, 3,000 steps).
# About 3x the cost of QUICK per run, so the demo keeps N = 2 (docs/training.md, "Choosing the quick preset").
QUICK_N4 = TRAIN.register("quick-n4", QUICK.override(chains=4, steps=3000))

SMOKE = TRAIN.register("smoke", TrainConfig(
    task=VectorTaskConfig(chains=2, depth=2, dims=4, ic=True, n_train=4096, n_val=128),
    model=ModelConfig(n_layers=2, n_heads=2, d_model=16),
    optim=OptimConfig(warmup_steps=5, **GPT2_RECIPE),
    batch_size=32, steps=30, eval_every=10, final_window=5, ckpt_every=10, keep_checkpoints=False,
))

SEC8 = TRAIN.register("sec8", TrainConfig(
    task=VectorTaskConfig(chains=4, depth=3, dims=4, ic=True, n_train=262_144, n_val=4096),
    model=ModelConfig(n_layers=12, n_heads=1, d_model=128),
    optim=OptimConfig(warmup_steps=200, **GPT2_RECIPE),
    batch_size=128, steps=24_000, eval_every=200, ckpt_every=1000, keep_checkpoints=True, seeds=(0, 1, 2),
))

# The CPU twins of transformers A-C and D: the paper's task (N = 4, K = 4, IC, D = 3) at 6 layers x
# 1 head, d_model 64, with MLPs, chosen by the twin search of docs/n4-study.md ("The twins"): all 4
# seeds learned x1, x2, x3 in that order, every partial loss <= 0.13 by step 1,500 of a 4,000-step
# cosine schedule, while a 2,000-step schedule decays too soon (2 of 4) and no MLP (at d_model 64
# or 128, head size 16) left 7 of 8 seeds on the plateau. The twins train the first 2,000 steps of
# the 4,000-step schedule, in bfloat16 where the CPU computes it.
SEC8_QUICK = TRAIN.register("sec8-quick", SEC8.override(
    n_train=2**16, n_val=512, n_layers=6, d_model=64, steps=2000, decay_steps=4000, eval_every=50,
    ckpt_every=250, warmup_steps=100, dtype="auto",
))

SEC9 = TRAIN.register("sec9", TrainConfig(
    task=VectorTaskConfig(chains=4, depth=4, dims=4, ic=True, n_train=262_144, n_val=4096),
    model=ModelConfig(n_layers=24, n_heads=1, d_model=512, d_head=16, mlp=False),
    optim=OptimConfig(warmup_steps=200, **GPT2_RECIPE),
    batch_size=256, steps=6400, eval_every=80, ckpt_every=80, keep_checkpoints=True,
    steps_per_epoch=8,  # Sec. 9.1: 6,400 steps = 800 epochs
))

# Transformer D's twin is the A-C twin with a checkpoint every 10 steps and Sec. 9.1's epoch of 8
# steps (Sec. 9.1 removes the MLPs for speed only; without them the twin does not learn within the budget).
# Every 10, not 50: E3 orders the positions by the checkpoint at which each one's last path crosses,
# and at 50 the demo's x2 and x3 (about 24 steps apart in one cell) shared a checkpoint in bfloat16
# on one thread, a tie (INCONCLUSIVE) where the other three cells read FAIL.
SEC9_QUICK = TRAIN.register("sec9-quick", SEC8_QUICK.override(ckpt_every=10, seeds=(0,), steps_per_epoch=8))

# Seconds-sized stand-ins for transformers A-C and D, so `reproduce --preset smoke` exercises
# the circuits and emergence stages (one head per layer; several checkpoints to follow).
SEC8_SMOKE = TRAIN.register("sec8-smoke", SMOKE.override(n_layers=3, n_heads=1, steps=40, keep_checkpoints=True, seeds=(0,)))
SEC9_SMOKE = TRAIN.register("sec9-smoke", SEC8_SMOKE.override(mlp=False, d_head=8, steps_per_epoch=8))


def get(name: str, recipe: str | None = None) -> TrainConfig:
    """A training preset by name (one line naming the known ones when it does not exist), with a
    recipe's changes applied (:func:`stackedheads.recipes.recipe`: a name, several joined by "+",
    an old name or paper-curriculum with a line on stderr; None: the preset's own)."""
    cfg = TRAIN.get(name)
    return cfg if recipe is None else cfg.override(**recipes.recipe(recipe).changes)


# --- the Figure 4 grids (Sec. 7) ----------------------------------------------------------------

# C2 needs crossings one evaluation apart to order them (two in one interval are a tie): the
# presets' eval intervals (paper 100 of 10k steps, quick 50 of 2k) are refined to 25 steps,
# 0.25% of the paper's run, for the sweep.
C2_EVAL_EVERY = 25
FIGURE4.register("paper", Figure4Spec(
    "paper", PAPER.override(eval_every=C2_EVAL_EVERY), 5, 3, tuple(range(1, 9)), tuple(range(8))))
# IC at D=2 needs 2 layers for x1 and 3 for x2 (causal theory): layers 1-3 show both steps. The
# runs train the first 2,000 steps of a 4,000-step cosine, as the A-C and D twins: decayed over
# their own 2,000, the lr is near its floor when x2 starts to fall at 3 layers, and x2 was learned
# or not with the rounding (C0, C2 and C3 flipped with the dtype). In bfloat16 where the CPU
# computes it, as the twins: the demo's four dtype x thread cells (docs/notes/demo-matrix/) give
# C0-C3 the same verdicts in float32 and bfloat16, and a bfloat16 step of the quick size takes
# 0.048 s against float32's 0.067 (docs/speed.md).
FIGURE4.register("quick", Figure4Spec(
    "quick", QUICK.override(eval_every=C2_EVAL_EVERY, decay_steps=4000, dtype="auto"), 2, 3, (1, 2, 3), (0, 1)))
FIGURE4.register("smoke", Figure4Spec("smoke", SMOKE, 2, 2, (1, 2), (0, 1)))


def figure4(name: str, device: str | None = None, dtype: str | None = None) -> Figure4Spec:
    """A Figure 4 grid by name, trained on ``device`` in ``dtype`` (None: the preset's)."""
    return FIGURE4.get(name).on(device, dtype)


# --- the depth grids (beyond the paper) ---------------------------------------------------------

# Quick (CPU, N = 2): 20 ensembles of two seeds. Layers 1..5 reach one layer past the causal
# minimum of x4 (4 layers) and start below every minimum (2), so D1 and D2 can both be decided.
# QUICK's recipe and batch (128), 3,000 steps. A first cut at batch 64 and 2,000 steps took
# 12 min on two single-thread workers (2-core AVX2) and learned x1 only (x2 never, even with
# 5 layers at D = 2), so D2 was INCONCLUSIVE beyond D = 1: halving the batch cost more than
# it saved. The deep end (D = 4) may still need the GPU preset.
QUICK_DEPTH_STEPS = 3000
# Sec. 7.1: N = 4, 8 seeds per shape, 1..8 layers; D up to 8 (causal minimum of x8: 5 layers).
DEPTH.register("paper", DepthSpec("paper", PAPER, tuple(range(1, 9)), tuple(range(1, 9)), tuple(range(8))))
DEPTH.register("quick", DepthSpec("quick", QUICK.override(steps=QUICK_DEPTH_STEPS), (1, 2, 3, 4), (1, 2, 3, 4, 5), (0, 1)))
# The paper's N = 4 at the quick-n4 recipe: does D1's shortcut at N = 2 (1-layer
# models reading both answer positions by position) survive four chains? D = 1..3; bfloat16
# where the CPU has it.
DEPTH.register("quick-n4", DepthSpec("quick-n4", QUICK_N4.override(dtype="auto"), (1, 2, 3), (1, 2, 3, 4, 5), (0, 1)))
DEPTH.register("smoke", DepthSpec("smoke", SMOKE, (1, 2), (1, 2), (0, 1)))


def depth(name: str, **overrides) -> DepthSpec:
    """A depth grid by name, with ``depths``, ``layers``, ``seeds``, ``device`` or ``dtype``
    changed (see :meth:`DepthSpec.override`)."""
    return DEPTH.get(name).override(**overrides)


# --- whole runs (``reproduce``) -----------------------------------------------------------------

# Quick preset's LLM questions: per formulation, and per cell of the D sweeps. Measured
# 2.1 (SmolLM2) and 3.7 (Qwen 0.5B) CPU s per 3-shot question on one llama thread (a loaded
# 2-core machine): 45 questions per model, about 4 minutes for the stage.
QUICK_LLM_N, QUICK_LLM_DEPTH_N = 5, 5

# Every stage in about a minute: the test suite runs it. Two seeds a twin: the claims are judged
# over seeds at every preset (reproduce.check_twin_seeds).
REPRODUCE.register("smoke", ReproducePreset(
    "smoke", theory_max_depth=6, prompts_per_formulation=2,
    llm=LLMStage(n=1, few_shot=0, max_draws=2, max_tokens=8),
    figure4=FIGURE4.get("smoke"), circuits=SEC8_SMOKE, emergence=SEC9_SMOKE,
    circuits_seeds=(0, 1), emergence_seeds=(0, 1), maps_seqs=2, emergence_seqs=8,
))
# `make demo`: <= 15 minutes on 2 CPU cores (docs/reproduce.md). Seeds 0-3 of each twin, trained
# as one ensemble, and the claims judged over all four as at the paper's settings: no seed is
# chosen by what it shows (studies/twin_seeds.py looks at single seeds; it is a study, not an input).
REPRODUCE.register("quick", ReproducePreset(
    "quick", theory_max_depth=20, prompts_per_formulation=5,
    # The LLM stage (~4 min on 2 cores, measured; docs/prompts-and-llms.md): SmolLM2 and Qwen2.5-Coder-0.5B,
    # the five formulations at the paper's depths, and accuracy vs D for the three with a D.
    # Three solved examples: these small models then answer in 1-2 draws instead of 7-10.
    llm=LLMStage(
        n=QUICK_LLM_N, few_shot=3, equation_depths=(1, 2, 3, 4, 5), other_depths=(),
        depth_n=QUICK_LLM_DEPTH_N, model=LLMChoice(model="smollm2,qwen2.5-coder-0.5b"),
    ),
    # The A-C and D twins are one model family (docs/training.md, "The twins"): the circuits stage
    # trains it with the D twin's checkpoints, and the emergence stage takes that run as its own.
    figure4=FIGURE4.get("quick"), circuits=SEC9_QUICK, emergence=SEC9_QUICK,
    circuits_seeds=(0, 1, 2, 3), emergence_seeds=(0, 1, 2, 3),
))
# The paper's scale: 500 questions per formulation on a model the user names; 128 Figure 4
# runs; three 12-layer transformers; the 24-layer transformer D. Meant for a GPU.
REPRODUCE.register("paper", ReproducePreset(
    "paper", theory_max_depth=50, prompts_per_formulation=500,
    llm=LLMStage(n=500, few_shot=0, equation_depths=tuple(range(1, 11)), model=None),
    figure4=FIGURE4.get("paper"), circuits=SEC8, emergence=SEC9, circuit_threshold=0.05,
))


def reproduce(name: str) -> ReproducePreset:
    """A ``reproduce`` preset by name."""
    return REPRODUCE.get(name)
