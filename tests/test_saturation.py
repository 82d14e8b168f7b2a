"""`stackedheads attention --over-training`: how heads sharpen and settle on positions."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import is_figure
from helpers import one_error

from stackedheads.circuits.saturation import head_stats

B, T = 64, 6


def causal_uniform() -> torch.Tensor:
    return torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1).unsqueeze(1) * torch.ones(B, 1, 1)


def peaked(keys: torch.Tensor, weight: float = 0.9) -> torch.Tensor:
    """Row t puts ``weight`` on key ``keys[b, t]`` (<= t) and spreads the rest over its keys."""
    p = torch.zeros(B, T, T)
    for t in range(T):
        p[:, t, : t + 1] = (1 - weight) / (t + 1)
        p[torch.arange(B), t, keys[:, t]] += weight
    return p


def test_a_uniform_head_is_diffuse_and_not_positional():
    s = head_stats(causal_uniform())
    assert s["entropy"] == pytest.approx(s["uniform_entropy"]) == pytest.approx(sum(math.log(t + 1) for t in range(1, T)) / (T - 1))
    assert s["positional"] == 0 and s["top_key"] is None


def test_a_head_on_one_fixed_key_is_positional():
    s = head_stats(peaked(torch.zeros(B, T, dtype=torch.long)))  # every row reads key 0 (a sink)
    assert s["positional"] == 1.0 and s["top_key"] == 0 and s["top_key_rows"] == 1.0
    assert s["entropy"] < 0.5 * s["uniform_entropy"]


def test_a_head_that_reads_content_moves_between_sequences():
    gen = torch.Generator().manual_seed(0)
    keys = torch.stack([torch.randint(0, t + 1, (B,), generator=gen) for t in range(T)], 1)
    s = head_stats(peaked(keys))
    # As sharp as the positional head, but the key moves: only the rows with one or two keys
    # (row 1 may land on one key by chance) could count.
    assert s["entropy"] == pytest.approx(head_stats(peaked(torch.zeros(B, T, dtype=torch.long)))["entropy"], rel=0.05)
    assert s["positional"] == 0


def test_over_training_cli(tmp_path, cli, monkeypatch):
    from stackedheads import presets
    from stackedheads.training import train

    monkeypatch.setenv("COLUMNS", "200")  # the table at its natural width
    run = tmp_path / "run"
    train(presets.SEC8_SMOKE.override(steps=20, seeds=(0, 1)), run)
    code, out, err = cli("attention", run, "--out", tmp_path / "stats", "--over-training", "--seed", "1")
    assert code == 0, err
    data = json.loads((tmp_path / "stats" / "attention_stats.json").read_text())
    steps = sorted(int(p.stem.split("_")[-1]) for p in (run / "checkpoints").glob("step_*.safetensors"))
    assert data["seed"] == 1 and data["steps"] == steps and len(steps) >= 2
    assert sorted(data["heads"]) == ["L0.0", "L1.0", "L2.0"] and all(len(v) == len(steps) for v in data["heads"].values())
    assert all(0 <= s["entropy"] <= s["uniform_entropy"] + 1e-6 for v in data["heads"].values() for s in v)
    assert "L2.0" in out and f"step {steps[-1]:,}" in out and "step 0" in out  # the first and last checkpoints
    assert is_figure(tmp_path / "stats" / "attention_over_training.png")
    for args, said in ((("--checkpoint", "20"), "leave out --checkpoint"), (("--seed", "7"), "not 7")):
        code, _, err = cli("attention", run, "--out", tmp_path / "bad", "--over-training", *args)
        assert code == 2 and one_error(err) and said in err, err
