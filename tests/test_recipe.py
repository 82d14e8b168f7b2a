"""The training recipe and the run folder's crash safety."""

import dataclasses
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stackedheads import presets
from stackedheads.errors import UsageError
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.training.gradclip import clip_grad_norm_per_member_
from stackedheads.state.write import FolderLock
from stackedheads.tasks.vectors import VectorTaskConfig, make_batch, position_codes
from stackedheads.training import (
    TrainConfig,
    checkpoint_path,
    list_checkpoints,
    make_optimizer,
    read_metrics,
    train,
)

RECIPE = presets.SMOKE.override(seeds=(0, 1), steps=30, warmup_steps=6, schedule="cosine", grad_clip=0.5, betas=(0.9, 0.95))


def metrics_without_wall(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in read_metrics(run_dir)]


# --- the schedule -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    steps=st.integers(2, 400),
    warm_frac=st.floats(0, 0.9),
    schedule=st.sampled_from(["constant", "cosine", "linear"]),
    floor=st.floats(0, 1),
)
def test_lr_schedule_shape(steps, warm_frac, schedule, floor):
    cfg = presets.SMOKE.override(steps=steps, warmup_steps=int(warm_frac * steps), schedule=schedule, min_lr_ratio=floor)
    lrs = [cfg.lr_at(s) for s in range(steps)]
    w = cfg.optim.warmup_steps
    assert all(0 <= lr <= cfg.optim.lr * (1 + 1e-12) for lr in lrs) and lrs[0] > 0
    if w:
        assert lrs[:w] == sorted(lrs[:w])  # warm-up rises
        assert math.isclose(lrs[w - 1], cfg.optim.lr * w / w)
    after = lrs[w:]
    assert after == sorted(after, reverse=True)  # never rises after warm-up
    if schedule == "constant":
        assert all(math.isclose(lr, cfg.optim.lr) for lr in after)
    elif len(after) > 1:
        assert math.isclose(after[0], cfg.optim.lr)
        assert math.isclose(after[-1], cfg.optim.lr * floor, abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(2, 300), longer=st.integers(0, 300), warm=st.integers(0, 50), schedule=st.sampled_from(["cosine", "linear"]))
def test_decay_steps_makes_a_run_the_start_of_a_longer_schedule(steps, longer, warm, schedule):
    """decay_steps (nanoGPT's lr_decay_iters): a run of ``steps`` follows, step for step, the
    schedule of a run of ``decay_steps``; decay_steps == steps is the default."""
    warm = min(warm, steps - 1)
    base = presets.SMOKE.override(steps=steps + longer, warmup_steps=warm, schedule=schedule)
    full = base
    cut = base.override(steps=steps, decay_steps=steps + longer)
    assert [cut.lr_at(s) for s in range(steps)] == [full.lr_at(s) for s in range(steps)]
    assert [base.override(steps=steps, decay_steps=steps).lr_at(s) for s in range(steps)] == [
        base.override(steps=steps).lr_at(s) for s in range(steps)]


def test_paper_presets_train_with_the_gpt2_recipe():
    """What the README promises for the paper presets, checked through what training does with
    them: the learning rate the loop sets at each step, which parameters AdamW decays, and how
    far a member's gradient is clipped."""
    for name in ("paper", "sec8", "sec9"):
        cfg = presets.get(name)
        peak, lrs = cfg.optim.lr, [cfg.lr_at(s) for s in range(cfg.steps)]
        assert lrs[:200] == pytest.approx([peak * (s + 1) / 200 for s in range(200)])  # linear warm-up, 200 steps
        decay = lrs[199:]
        assert decay == sorted(decay, reverse=True) and decay[-1] == pytest.approx(0.1 * peak)  # down to a tenth
        quarter = decay[(len(decay) - 1) // 4]  # a cosine is still high a quarter of the way (linear: 0.775)
        assert quarter == pytest.approx(peak * (0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2), rel=1e-3)

        model = EnsembleTransformer(cfg.model_config(), seeds=(0, 1), init=False)
        decayed = {id(p) for g in make_optimizer(model, cfg).param_groups if g["weight_decay"] > 0 for p in g["params"]}
        for pname, p in model.named_parameters():  # the matrices decay; LayerNorm gains and biases (vectors) do not
            assert (id(p) in decayed) == (p.ndim == 3), (name, pname)

        for e, p in enumerate(model.parameters()):
            p.grad = torch.full_like(p, float(e + 1))
        clip_grad_norm_per_member_(model, cfg.optim.grad_clip)
        norms = torch.stack([p.grad.flatten(1).square().sum(1) for p in model.parameters()]).sum(0).sqrt()
        assert norms.tolist() == pytest.approx([1.0, 1.0])  # each member clipped to norm 1
    assert presets.get("sec9").epoch(6400) == 800  # Sec. 9.1: 6,400 steps are 800 epochs
    assert presets.get("sec9").epoch(80) == 10  # a checkpoint every 10 epochs (80 steps)


@pytest.mark.parametrize(
    "field,value",
    [("lr", float("nan")), ("lr", float("inf")), ("grad_clip", -1.0), ("schedule", "step"), ("min_lr_ratio", 1.5),
     ("warmup_steps", 30), ("betas", (0.9, 1.0)), ("decay_exempt", ("gains",)), ("steps_per_epoch", 0),
     ("decay_steps", 5), ("decay_steps", 0), ("decay_steps", 2.5), ("decay_steps", True), ("decay_steps", 10**10)],
)
def test_bad_recipe_values_are_refused(field, value):
    with pytest.raises(UsageError):
        presets.SMOKE.override(**{field: value})


def test_a_decay_that_ends_before_the_run_or_without_a_decay_is_refused():
    with pytest.raises(UsageError, match="at least 'steps'"):  # a preset's decay_steps kept under a longer --steps
        presets.get("sec8-quick").override(steps=24_000)
    with pytest.raises(UsageError, match="cosine or linear"):
        presets.SMOKE.override(schedule="constant", decay_steps=40)


def test_the_twins_are_the_papers_task_cut_from_a_longer_schedule():
    """docs/n4-study.md's choice: N and K of Sec. 8.1, D = 3, and a run that stops while the
    learning rate is still high (the start of a 4,000-step schedule)."""
    paper = presets.get("sec8").task
    for name in ("sec8-quick", "sec9-quick"):
        cfg = presets.get(name)
        assert (cfg.task.chains, cfg.task.dims, cfg.task.depth, cfg.task.ic) == (paper.chains, paper.dims, 3, True)
        assert cfg.lr_at(cfg.steps - 1) > 0.5 * cfg.optim.lr


def test_config_records_recipe_and_old_configs_load(tmp_path):
    train(RECIPE, tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    optim = saved["optim"]
    assert optim["schedule"] == "cosine" and optim["betas"] == [0.9, 0.95] and optim["grad_clip"] == 0.5
    # dtype and threads are made concrete when the folder is created: part of the run's identity
    assert saved["threads"] == torch.get_num_threads() and saved["dtype"] == "float32"
    assert TrainConfig.from_dict(saved) == RECIPE.resolved()
    # A config.json from before the recipe fields existed (and before configs were nested:
    # one flat dict) reads as the plain recipe.
    flat = {k: v for k, v in saved.items() if k not in ("model", "optim")} | saved["model"] | optim
    old = {k: v for k, v in flat.items() if k not in ("warmup_steps", "schedule", "min_lr_ratio", "grad_clip", "betas", "decay_exempt", "steps_per_epoch")}
    cfg = TrainConfig.from_dict(old)
    assert (cfg.optim.schedule, cfg.optim.grad_clip, cfg.optim.warmup_steps, cfg.optim.betas) == ("constant", 0.0, 0, (0.9, 0.999))
    with pytest.raises(UsageError):
        TrainConfig.from_dict({**saved, "bogus": 1})


# --- the recipe changes training, and resumes exactly ----------------------------------------


def test_recipe_changes_the_trajectory(tmp_path):
    plain = RECIPE.override(warmup_steps=0, schedule="constant", grad_clip=0.0, betas=(0.9, 0.999))
    a = train(RECIPE, tmp_path / "recipe")
    b = train(plain, tmp_path / "plain")
    assert a["seeds"]["0"]["final_val_loss"] != b["seeds"]["0"]["final_val_loss"]


def test_a_run_cut_from_a_longer_schedule_trains_as_its_start(tmp_path):
    """The CPU twins train the first 2,000 steps of a 4,000-step schedule (presets.SEC8_QUICK):
    the shorter run's evaluations match the longer run's at the steps both evaluate."""
    cut = train(RECIPE.override(steps=20, decay_steps=30), tmp_path / "cut")
    train(RECIPE, tmp_path / "full")
    rows = {(r["step"], r["seed"]): r for r in metrics_without_wall(tmp_path / "full")}
    shared = [r for r in metrics_without_wall(tmp_path / "cut") if r["step"] in (10, 20)]
    assert len(shared) == 4 and all(r == rows[(r["step"], r["seed"])] for r in shared)
    assert cut["config"]["optim"]["decay_steps"] == 30


def test_resume_with_schedule_and_clipping_is_bit_identical(tmp_path):
    full = train(RECIPE, tmp_path / "full")
    train(RECIPE, tmp_path / "cut", stop_after=15)  # between checkpoints (every 10 steps)
    resumed = train(RECIPE, tmp_path / "cut")
    assert resumed["seeds"] == full["seeds"]
    assert metrics_without_wall(tmp_path / "cut") == metrics_without_wall(tmp_path / "full")


def test_clipping_keeps_members_independent(tmp_path):
    cfg = RECIPE.override(grad_clip=0.01)
    both = train(cfg, tmp_path / "both")
    alone = train(cfg.override(seeds=(1,)), tmp_path / "alone")
    assert math.isclose(both["seeds"]["1"]["final_val_loss"], alone["seeds"]["1"]["final_val_loss"], rel_tol=1e-5)


def test_decay_exemptions_group_the_right_parameters():
    cfg = presets.SMOKE.override(decay_exempt=("norm", "bias", "embed"))
    model = EnsembleTransformer(cfg.model_config(), seeds=[0])
    opt = make_optimizer(model, cfg)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in opt.param_groups[0]["params"]}
    exempt = {names[id(p)] for p in opt.param_groups[1]["params"]}
    assert opt.param_groups[1]["weight_decay"] == 0.0 and opt.param_groups[0]["weight_decay"] == cfg.optim.weight_decay
    assert "W_in" in exempt and "ln_f.weight" in exempt and "b_readout" in exempt
    assert "W_readout" in decayed and all(".ln" not in f".{n}" for n in decayed)
    assert not any(n.endswith("bias") or n.rsplit(".", 1)[-1].startswith("b_") for n in decayed)
    plain = make_optimizer(model, presets.SMOKE.override(decay_exempt=()))  # no exemption: one group
    assert len(plain.param_groups) == 1


# --- positional encodings -----------------------------------------------------------------------


def test_pair_positional_codes_follow_definition_3():
    cfg = VectorTaskConfig(chains=3, depth=2, dims=4, pe="pair", n_train=64, n_val=8)
    codes = position_codes(cfg)
    n_pairs = cfg.chains * cfg.depth
    assert codes.shape == (cfg.seq_len, cfg.dims)
    for m in range(n_pairs):
        assert torch.equal(codes[2 * m], codes[2 * m + 1])  # both tokens of pair m share p_m
    distinct = torch.cat([codes[0:2 * n_pairs:2], codes[2 * n_pairs:]])
    assert torch.unique(distinct, dim=0).shape[0] == n_pairs + cfg.chains
    token = position_codes(dataclasses.replace(cfg, pe="token"))
    assert torch.unique(token, dim=0).shape[0] == cfg.seq_len
    batch = make_batch(cfg, range(4), "train")
    assert torch.equal(batch.inputs[0, :, cfg.dims:], codes)
    with pytest.raises(UsageError):
        VectorTaskConfig(pe="rope")


# --- numerics: bf16 autocast against fp32 ------------------------------------------------------


def test_bf16_autocast_matches_fp32_within_tolerance():
    cfg = presets.QUICK
    model = EnsembleTransformer(cfg.model_config(), seeds=[0, 1])
    x = make_batch(cfg.task, range(64), "val").inputs
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x).float()
    # bf16 keeps 8 bits of mantissa: relative error about 2^-8 per op; we allow 2% of the scale.
    err = (low - ref).abs().max().item()
    assert err < 0.02 * ref.abs().max().item(), err


# --- crash safety of the run folder -------------------------------------------------------------


def test_nan_loss_stops_with_one_line(tmp_path):
    cfg = presets.SMOKE.override(lr=1e30, grad_clip=0.0)
    with pytest.raises(UsageError, match="diverged"):
        train(cfg, tmp_path)
    assert not (tmp_path / "summary.json").exists()


def test_second_writer_is_refused_naming_the_holder(tmp_path):
    with FolderLock(tmp_path):
        with pytest.raises(UsageError, match=r"in use by pid \d+"):
            train(presets.SMOKE, tmp_path)
    assert train(presets.SMOKE, tmp_path)["seeds"]  # the lock dies with its holder


def test_corrupted_checkpoint_falls_back_to_the_one_before(tmp_path):
    full = train(RECIPE, tmp_path / "full")
    cut = tmp_path / "cut"
    train(RECIPE, cut, stop_after=20)
    assert [s for s, _ in list_checkpoints(cut)] == [10, 20]  # the last two are kept
    path = checkpoint_path(cut, 20)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # one bit in the tensor data; the header still parses
    path.write_bytes(bytes(data))
    resumed = train(RECIPE, cut)
    assert resumed["seeds"] == full["seeds"]
    assert (cut / "checkpoints" / "step_000020.damaged").exists()


def test_cut_off_metrics_line_is_dropped_on_resume(tmp_path):
    full = train(RECIPE, tmp_path / "full")
    cut = tmp_path / "cut"
    train(RECIPE, cut, stop_after=25)
    with open(cut / "metrics.csv", "a") as f:
        f.write("30,0,0.49")  # a crash in the middle of writing a row
    assert train(RECIPE, cut)["seeds"] == full["seeds"]
    assert metrics_without_wall(cut) == metrics_without_wall(tmp_path / "full")


def test_damaged_summary_of_a_finished_run_is_rebuilt(tmp_path):
    first = train(RECIPE, tmp_path)
    (tmp_path / "summary.json").write_text("")  # what a full disk can leave of a file written in place
    again = train(RECIPE, tmp_path)
    assert again["seeds"] == first["seeds"]
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == first["seeds"]


def test_step_zero_checkpoint_when_checkpoints_are_kept(tmp_path):
    cfg = presets.SEC9_SMOKE.override(steps=20)
    train(cfg, tmp_path)
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert steps[0] == 0 and steps[-1] == 20


def test_cli_lr_nan_is_refused_before_anything_is_written(tmp_path, cli):
    out = tmp_path / "run"
    r = cli("train", "--preset", "smoke", "--lr", "nan", "--out", str(out))
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
    assert not out.exists()
    r = cli("train", "--preset", "smoke", "--decay-steps", "1", "--out", str(out))
    assert r.code == 2 and "--decay-steps" in r.err and len(r.err.strip().splitlines()) == 1 and not out.exists()
    r = cli("train", "--preset", "smoke", "--steps", "12", "--warmup-steps", "2", "--schedule", "linear",
        "--decay-steps", "24", "--grad-clip", "1", "--betas", "0.9,0.95", "--decay-exempt", "norm,bias", "--pe", "pair", "--out", str(out))
    assert r.code == 0, r.err
    saved = json.loads((out / "config.json").read_text())
    assert saved["optim"]["schedule"] == "linear" and saved["task"]["pe"] == "pair" and saved["optim"]["decay_exempt"] == ["norm", "bias"]
    assert saved["optim"]["decay_steps"] == 24


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_matches_cpu_closely(tmp_path):
    cpu = train(RECIPE, tmp_path / "cpu")
    gpu = train(RECIPE.override(device="cuda"), tmp_path / "gpu")
    for seed in cpu["seeds"]:
        assert math.isclose(cpu["seeds"][seed]["final_val_loss"], gpu["seeds"][seed]["final_val_loss"], rel_tol=1e-2)


def test_tf32_needs_cuda():
    with pytest.raises(UsageError, match="tf32"):
        presets.SMOKE.override(dtype="tf32")
