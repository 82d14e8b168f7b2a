"""The CUDA-graph step (training/step.py) against the eager step: the same trajectory, resumable
across the two. Runs only where CUDA is (the device machine); CI has none."""

import json

import pytest
import torch

from stackedheads import presets
from stackedheads.training import train
from stackedheads.training.metrics import read_metrics

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CFG = presets.get("sec9-smoke").override(device="cuda", dtype="float32", steps=48, ckpt_every=16, eval_every=8,
                                          final_window=4, seeds=(0, 1), keep_checkpoints=False)


def losses(run):
    return [(r["step"], r["seed"], r["train_loss"], r["val_loss"]) for r in read_metrics(run)]


def close(a, b, rtol):
    assert [r[:2] for r in a] == [r[:2] for r in b]
    for x, y in zip(a, b):
        assert x[2:] == pytest.approx(y[2:], rel=rtol, abs=1e-6), (x, y)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_graphed_training_follows_the_eager_trajectory(tmp_path, dtype):
    cfg = CFG.override(dtype=dtype)
    train(cfg, tmp_path / "eager")
    train(cfg.override(cuda_graph=True), tmp_path / "graph")
    # The same kernels on the same buffers; only the lr's form (a device tensor) differs.
    close(losses(tmp_path / "graph"), losses(tmp_path / "eager"), 1e-4 if dtype == "float32" else 1e-2)
    assert json.loads((tmp_path / "graph" / "config.json").read_text())["cuda_graph"] is True


def test_graphed_run_resumes_to_the_same_numbers(tmp_path):
    cfg = CFG.override(cuda_graph=True)
    train(cfg, tmp_path / "full")
    assert train(cfg, tmp_path / "cut", stop_after=20) == {}  # past checkpoint 16
    train(cfg, tmp_path / "cut")
    close(losses(tmp_path / "cut"), losses(tmp_path / "full"), 1e-5)
