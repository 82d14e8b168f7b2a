"""Small trainings shared by the precision and compile tests."""

from stackedheads import presets
from stackedheads.training import train
from stackedheads.training.metrics import read_metrics

# bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per value). The loss of a freshly
# initialised model is ~1 (targets of unit scale, predictions near 0); after one step both
# dtypes' losses must agree to 2%: a wrong cast (float32 gradients fed to a bfloat16 kernel, a
# dropped affine) moves it by far more, and genuine bfloat16 rounding by about 0.1% here.
BF16_REL_TOL = 0.02


def one_step(preset: str, members: int, dtype: str, out, compile: bool = False) -> dict:
    """One real training step (``train``) at the preset's architecture, on a small batch. The
    validation batch is the training batch's size: under torch.compile another size compiles
    the step again with a dynamic batch (a cold inductor's 7 s per dtype)."""
    cfg = presets.get(preset).override(
        seeds=tuple(range(members)), steps=2, batch_size=8, n_train=64, n_val=8, eval_every=1,
        final_window=1, ckpt_every=2, warmup_steps=0, keep_checkpoints=False, dtype=dtype, compile=compile,
    )
    return train(cfg, out)


def final_losses(summary: dict) -> list[float]:
    return [s["final_val_loss"] for s in summary["seeds"].values()]


def metrics_without_wall(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in read_metrics(run_dir)]
