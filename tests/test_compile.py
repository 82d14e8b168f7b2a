"""torch.compile (issues 17, 24): the compiled step and a compiled run give the eager losses.
Apart from the other precision tests so that the suite's two workers start these, its longest
file (a cold inductor: about 3.5 min on a 2-core CPU), first."""

import pytest
from training_helpers import BF16_REL_TOL, final_losses, metrics_without_wall, one_step

from stackedheads import presets
from stackedheads.training import train


@pytest.mark.slow
@pytest.mark.parametrize("preset,members,dtypes", [("sec8-smoke", 1, ("float32", "bfloat16")), ("sec9-smoke", 2, ("bfloat16",)),
                                                   ("sec8-smoke", 3, ("float32",))])
def test_compiled_step_matches_eager(tmp_path, preset, members, dtypes):
    """torch.compile (inductor's fused C++ on a CPU) with and without an MLP, one member and
    several, float32 and bfloat16: the loss of the eager step within the dtype's tolerance.
    One architecture family (sec8-smoke and its MLP-less sec9-smoke). Each case compiles anew
    for each dtype (25-75 s of a cold inductor on a 2-core CPU, issue 42), so the ensembles run
    in one dtype each: sec9-smoke in the bfloat16 sec9 compiles in, sec8-smoke's 3 members in
    float32, whose kernels the whole-run test below reuses."""
    for dtype, tol in (("float32", 1e-4), ("bfloat16", BF16_REL_TOL)):
        if dtype not in dtypes:
            continue
        eager = final_losses(one_step(preset, members, dtype, tmp_path / f"{dtype}-eager"))
        compiled = final_losses(one_step(preset, members, dtype, tmp_path / f"{dtype}-compiled", compile=True))
        for a, b in zip(eager, compiled):
            assert abs(a - b) <= tol * a, (dtype, a, b)


@pytest.mark.slow
def test_compiled_training_gives_the_eager_losses(tmp_path):
    """``compile`` changes how the step runs, not what it computes (issue 17), over a whole run with
    its evaluations. Beside the other compiled tests, at the shapes of their sec8-smoke case (3
    members, batch 8, float32: inductor's cache holds its training step). Its 16 validation
    sequences against a batch of 8 take the path a real run's evaluation takes (chunks of 1,024
    after batches of 256): dynamo compiles the forward again with a dynamic batch."""
    cfg = presets.get("sec8-smoke").override(seeds=(0, 1, 2), batch_size=8, n_train=64, n_val=16, steps=12, eval_every=4,
                                             final_window=2, ckpt_every=12, warmup_steps=2, keep_checkpoints=False, dtype="float32")
    eager = train(cfg, tmp_path / "eager")
    compiled = train(cfg.override(compile=True), tmp_path / "compiled")
    for seed, s in eager["seeds"].items():
        assert compiled["seeds"][seed]["final_val_loss"] == pytest.approx(s["final_val_loss"], rel=1e-4)
    a, b = metrics_without_wall(tmp_path / "eager"), metrics_without_wall(tmp_path / "compiled")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-4)
