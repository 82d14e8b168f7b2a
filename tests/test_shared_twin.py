"""The D twin trained exactly as the A-C twin (the quick preset) is the A-C twin's run: the
emergence stage takes its files instead of training the same models again."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from stackedheads import presets
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN
from stackedheads.reproduce import reproduce

pytestmark = pytest.mark.slow  # trains two tiny ensembles


def test_the_emergence_stage_takes_the_circuits_stage_run_when_they_train_the_same(tmp_path):
    smoke = presets.reproduce("smoke")
    same = replace(smoke, circuits=smoke.emergence)  # one configuration for both twins
    out = tmp_path / "r"
    skip = ("theory", "prompts", "llm", "figure4")
    summary = reproduce(same, out, skip=skip, threads=1)
    source, taken = out / "circuits" / "runs" / CIRCUITS_RUN, out / "emergence" / "runs" / EMERGENCE_RUN
    # Every checkpoint is the circuits stage's file (one inode), the run's record a copy of its own.
    ckpts = sorted(p.name for p in (source / "checkpoints").iterdir())
    assert ckpts and ckpts == sorted(p.name for p in (taken / "checkpoints").iterdir())
    for name in ckpts:
        assert (source / "checkpoints" / name).stat().st_ino == (taken / "checkpoints" / name).stat().st_ino
    assert json.loads((taken / "config.json").read_text()) == json.loads((source / "config.json").read_text())
    assert (taken / "metrics.csv").read_bytes() == (source / "metrics.csv").read_bytes()
    # Nothing was trained again: the emergence stage's one attempt resumed at the last step.
    last = json.loads((taken / "attempts.jsonl").read_text().splitlines()[-1])
    assert last["resumed_from"] == same.emergence.steps
    assert len((source / "attempts.jsonl").read_text().splitlines()) == 1  # the source's log is its own
    assert summary["stages"]["emergence"]["train"] == summary["stages"]["circuits"]["train"]
    for seed in same.emergence_seeds:
        assert (out / "emergence" / "timeline" / f"seed{seed}" / "timeline.json").exists()
    assert not list((out / "emergence" / "runs").glob("*.linking"))


def test_a_d_twin_of_other_settings_trains_its_own_run(tmp_path):
    smoke = presets.reproduce("smoke")  # its D twin has no MLP: another model
    out = tmp_path / "r"
    reproduce(smoke, out, skip=("theory", "prompts", "llm", "figure4"), threads=1)
    taken = out / "emergence" / "runs" / EMERGENCE_RUN
    source = out / "circuits" / "runs" / CIRCUITS_RUN
    assert json.loads((taken / "config.json").read_text())["model"]["mlp"] is False
    assert json.loads((source / "config.json").read_text())["model"]["mlp"] is True
    first = json.loads((taken / "attempts.jsonl").read_text().splitlines()[0])
    assert first["resumed_from"] == 0
