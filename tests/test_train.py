import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch

from stackedheads import presets
from stackedheads.errors import UsageError
from stackedheads.tasks.vectors import VectorTaskConfig
from stackedheads.training import (
    TrainConfig,
    list_checkpoints,
    load_model,
    partial_losses,
    read_metrics,
    train,
)

SMOKE = presets.SMOKE.override(seeds=(0, 1))


def metric_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_run_folder_is_self_describing(tmp_path):
    summary = train(SMOKE, tmp_path)
    cfg = TrainConfig.from_dict(json.loads((tmp_path / "config.json").read_text()))
    assert cfg == SMOKE
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert steps == [SMOKE.steps - SMOKE.ckpt_every, SMOKE.steps]  # keep_checkpoints=False keeps the last two
    rows = read_metrics(tmp_path)
    assert {r["seed"] for r in rows} == {0, 1}
    assert set(rows[0]) == {"step", "seed", "train_loss", "val_loss", "val_x1", "val_x2", "wall_s"}
    # Final val loss: every one of the last final_window steps is evaluated and averaged.
    tail = [r for r in rows if r["seed"] == 1 and r["step"] > SMOKE.steps - SMOKE.final_window]
    assert [r["step"] for r in tail] == list(range(SMOKE.steps - SMOKE.final_window + 1, SMOKE.steps + 1))
    s1 = summary["seeds"]["1"]
    assert s1["final_val_loss"] == pytest.approx(sum(r["val_loss"] for r in tail) / len(tail))
    assert s1["final_partial"]["val_x2"] == pytest.approx(sum(r["val_x2"] for r in tail) / len(tail))
    # The checkpoint reloads into a model that reproduces the logged validation loss.
    model, cfg2, step = load_model(list_checkpoints(tmp_path)[-1][1])
    assert step == SMOKE.steps and cfg2 == SMOKE and model.n_members == 2


def test_interrupted_run_resumes_to_identical_numbers(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    cfg = SMOKE.override(steps=24, ckpt_every=8, final_window=4)
    train(cfg, full)
    assert train(cfg, cut, stop_after=13) == {}  # stopped between checkpoints 8 and 16
    assert not (cut / "summary.json").exists()
    train(cfg, cut)
    assert metric_rows(cut) == metric_rows(full)
    a = json.loads((full / "summary.json").read_text())["seeds"]
    b = json.loads((cut / "summary.json").read_text())["seeds"]
    assert a == b


@pytest.mark.slow
def test_killed_process_resumes_exactly(tmp_path):
    """SIGKILL a real `stackedheads train` after its first checkpoint, run it again, compare."""
    args = [
        sys.executable, "-m", "stackedheads", "train", "--preset", "smoke", "--steps", "400",
        "--ckpt-every", "50", "--eval-every", "25", "--seeds", "0,1",
    ]
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run([*args, "--out", str(full)], check=True, capture_output=True)
    proc = subprocess.Popen([*args, "--out", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list_checkpoints(killed) and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list_checkpoints(killed), "the run never reached its first checkpoint"
    assert not (killed / "summary.json").exists(), "the run finished before it was killed"
    r = subprocess.run([*args, "--out", str(killed)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert metric_rows(killed) == metric_rows(full)


def test_member_of_ensemble_trains_like_a_model_alone(tmp_path):
    cfg = SMOKE.override(seeds=(3, 5), steps=20, ckpt_every=20)
    train(cfg, tmp_path / "pair")
    train(cfg.override(seeds=(5,)), tmp_path / "alone")
    pair = [r for r in read_metrics(tmp_path / "pair") if r["seed"] == 5]
    alone = read_metrics(tmp_path / "alone")
    assert len(pair) == len(alone)
    for a, b in zip(pair, alone):
        assert a["step"] == b["step"]
        for k in ("train_loss", "val_loss", "val_x1", "val_x2"):
            assert a[k] == pytest.approx(b[k], abs=1e-5)
    # And different seeds really are different models.
    other = [r for r in read_metrics(tmp_path / "pair") if r["seed"] == 3]
    assert other[-1]["val_loss"] != pytest.approx(pair[-1]["val_loss"], abs=1e-6)


@pytest.mark.slow
def test_training_reaches_the_candidate_mean_plateau(tmp_path):
    # Predicting 0 costs 1.0; predicting the mean of the N = 2 candidates costs 1 - 1/N = 0.5.
    # Any working model and optimiser gets below 0.6 quickly; an untrained one stays near 1.
    cfg = SMOKE.override(seeds=(0,), d_model=64, n_heads=4, batch_size=128, steps=400, eval_every=50, ckpt_every=400)
    train(cfg, tmp_path)
    rows = read_metrics(tmp_path)
    assert rows[0]["step"] == 50 and rows[0]["val_loss"] > 0.6
    assert rows[-1]["val_loss"] < 0.6


def test_partial_losses_locate_the_error():
    task = VectorTaskConfig(chains=2, depth=3, dims=4)
    y = torch.randn(2, 5, 2, 12)
    pred = y.clone()
    pred[..., 4:8] += 1.0  # error only on x_2
    p = partial_losses(pred, y, task)
    assert p.shape == (2, 3)
    assert torch.allclose(p[:, 1], torch.ones(2)) and p[:, 0].abs().max() == 0 and p[:, 2].abs().max() == 0
    non_ic = replace(task, ic=False)
    assert partial_losses(pred[..., :4], y[..., :4], non_ic).shape == (2, 1)


def test_existing_folder_with_other_config_is_refused(tmp_path):
    train(SMOKE.override(steps=10, ckpt_every=10), tmp_path)
    with pytest.raises(UsageError):
        train(SMOKE.override(steps=12, ckpt_every=10), tmp_path)


@pytest.mark.parametrize(
    "kwargs",
    [dict(seeds=()), dict(seeds=(1, 1)), dict(steps=0), dict(lr=0.0), dict(dtype="float16"), dict(device="tpu"), dict(batch_size=10**7)],
)
def test_bad_train_config(kwargs):
    with pytest.raises(UsageError):
        SMOKE.override(**kwargs)


@pytest.mark.slow
def test_train_cli_bad_input_is_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "stackedheads", "train", "--out", "/tmp/never", "--preset", "smoke", "--dims", "3"],
        capture_output=True, text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "dims" in r.stderr
