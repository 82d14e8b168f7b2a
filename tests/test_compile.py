"""torch.compile: the compiled step and a compiled run give the eager losses.
Apart from the other precision tests so that the suite's two workers start these, its longest
file (a cold inductor: about 2 min on a 2-core CPU), first."""

import pytest
from training_helpers import BF16_REL_TOL, final_losses, metrics_without_wall, one_step

from stackedheads import presets
from stackedheads.training import train


@pytest.mark.slow
@pytest.mark.parametrize("preset,members,dtype", [("sec8-smoke", 3, "float32"), ("sec9-smoke", 1, "bfloat16")])
def test_compiled_step_matches_eager(tmp_path, preset, members, dtype):
    """torch.compile (inductor's fused C++ on a CPU): the loss of the eager step within the
    dtype's tolerance. Each of the three things that change the compiled code is taken both ways
    over the two cases: an MLP and none (sec8-smoke and its MLP-less sec9-smoke), one member and
    several, float32 and bfloat16. A case is one cold compilation (about 40 s on a 2-core CPU,
    the first one 45 s more for inductor's own start), so not every combination: the
    eager step runs all of them (test_precision.py). The whole-run test below reuses the
    float32 case's kernels."""
    tol = 1e-4 if dtype == "float32" else BF16_REL_TOL
    eager = final_losses(one_step(preset, members, dtype, tmp_path / "eager"))
    compiled = final_losses(one_step(preset, members, dtype, tmp_path / "compiled", compile=True))
    for a, b in zip(eager, compiled):
        assert abs(a - b) <= tol * a, (dtype, a, b)


@pytest.mark.slow
def test_compiled_training_gives_the_eager_losses(tmp_path):
    """``compile`` changes how the step runs, not what it computes, over a whole run with
    its evaluations. Beside the other compiled tests, at the shapes of their sec8-smoke case (3
    members, batch 8, float32: inductor's cache holds its training step). Its 16 validation
    sequences against a batch of 8 take the path a real run's evaluation takes (chunks of 1,024
    after batches of 256): a static graph of their own, compiled once, so the run compiles two
    graphs (the step's and the evaluation's) whatever its number of steps and evaluations."""
    from torch._dynamo.utils import counters

    cfg = presets.get("sec8-smoke").override(seeds=(0, 1, 2), batch_size=8, n_train=64, n_val=16, steps=12, eval_every=4,
                                             final_window=2, ckpt_every=12, warmup_steps=2, keep_checkpoints=False, dtype="float32")
    eager = train(cfg, tmp_path / "eager")
    graphs = counters["stats"]["unique_graphs"]
    compiled = train(cfg.override(compile=True), tmp_path / "compiled")
    assert counters["stats"]["unique_graphs"] - graphs <= 2  # no recompiles: one graph a call signature
    for seed, s in eager["seeds"].items():
        assert compiled["seeds"][seed]["final_val_loss"] == pytest.approx(s["final_val_loss"], rel=1e-4)
    a, b = metrics_without_wall(tmp_path / "eager"), metrics_without_wall(tmp_path / "compiled")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-4)
