"""One training job: ``(TrainConfig, run dir) -> run dir`` (Section 7.1).

The run folder is self-describing:

* ``config.json`` -- the :class:`TrainConfig`;
* ``metrics.csv`` -- one row per (evaluated step, seed): train loss, val loss, partial val losses
  per chain position ``x_1..x_D`` (IC), wall time;
* ``checkpoints/step_XXXXXX.safetensors`` -- model and AdamW state, with SHA-256 checksums in
  the header (checked on load);
* ``summary.json`` -- per seed, the final val loss (mean over the last 100 steps, Sec. 7.1) and
  the final partial losses.

One module per concern: :mod:`.config` (what a job is), :mod:`.data` (its batches),
:mod:`.evaluate` (losses, validation), :mod:`.optim` (AdamW), :mod:`.checkpoints`,
:mod:`.metrics` (metrics.csv, summary.json) and :mod:`.loop` (the loop). The loop knows the
model only through :class:`~stackedheads.model.transformer.EnsembleTransformer`'s constructor and forward.

The training recipe (Section 7.1: "following the recipe of Radford et al. (2019)") is explicit
in :class:`OptimConfig`: warm-up, learning-rate schedule, per-member gradient clipping, Adam
betas and weight-decay exemptions. The defaults are the plain recipe (constant lr, no clipping);
the paper presets use :data:`GPT2_RECIPE` (docs/training.md, "Training recipe", has the measurements).
"""

from stackedheads.training.checkpoints import (
    CheckpointWriter,
    checkpoint_for,
    checkpoint_path,
    list_checkpoints,
    load_model,
    read_checkpoint,
    save_checkpoint,
)
from stackedheads.training.config import (
    DECAY_EXEMPTIONS,
    DTYPES,
    GPT2_RECIPE,
    SCHEDULES,
    OptimConfig,
    TrainConfig,
    check_device,
    field_owner,
)
from stackedheads.training.data import member_batches, validation_batch
from stackedheads.training.evaluate import evaluate, member_mse, partial_losses
from stackedheads.training.loop import train
from stackedheads.training.metrics import (
    metric_columns,
    read_metrics,
    read_summary,
    run_is_complete,
    summarize,
)
from stackedheads.training.optim import make_optimizer

__all__ = [
    "DECAY_EXEMPTIONS", "DTYPES", "GPT2_RECIPE", "SCHEDULES", "CheckpointWriter", "OptimConfig", "TrainConfig",
    "check_device", "checkpoint_for", "checkpoint_path", "evaluate", "field_owner", "list_checkpoints", "load_model",
    "make_optimizer", "member_batches", "member_mse", "metric_columns", "partial_losses", "read_checkpoint",
    "read_metrics", "read_summary", "run_is_complete", "save_checkpoint", "summarize", "train", "validation_batch",
]
