"""Emergence timelines, and the attention / circuit / emergence commands on a tiny trained run."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from stackedheads import presets
from stackedheads.emergence import first_crossing, retrieval_order
from stackedheads.train import train

CLI = [sys.executable, "-m", "stackedheads.cli"]


def test_first_crossing_interpolates_between_checkpoints():
    assert first_crossing([0, 10, 20], [0.1, 0.3, 0.7]) == pytest.approx(15.0)
    assert first_crossing([0, 10], [0.6, 0.9]) == 0.0
    assert first_crossing([0, 10, 20], [0.1, 0.2, 0.4]) is None
    assert first_crossing([0, 10, 20], [0.1, 0.5, 0.2]) == pytest.approx(10.0)


def test_retrieval_order():
    serves = {"a": [1, 2], "b": [2], "c": [3]}
    retrieved, ok = retrieval_order({"a": 100.0, "b": 250.0, "c": 300.0}, serves, 3)
    assert retrieved == {"x1": 100.0, "x2": 250.0, "x3": 300.0} and ok is True
    _, ok = retrieval_order({"a": 100.0, "b": 250.0, "c": 200.0}, serves, 3)
    assert ok is False
    # x2 never retrieved while x3 is: out of order.
    _, ok = retrieval_order({"a": 100.0, "b": None, "c": 200.0}, serves, 3)
    assert ok is False
    _, ok = retrieval_order({"a": None, "b": None, "c": None}, serves, 3)
    assert ok is None


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("tiny") / "run"
    cfg = replace(presets.SMOKE, seeds=(0, 1), steps=40, ckpt_every=10, keep_checkpoints=True, d_model=32, n_heads=2)
    train(cfg, run)
    return run


def run(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def test_attention_maps(tiny_run, tmp_path):
    r = run("attention", str(tiny_run), "--out", str(tmp_path), "--seqs", "2", "--checkpoint", "20")
    assert r.returncode == 0, r.stderr
    for name in ("layer0.png", "layer1.png", "grid.png", "grid.svg", "mean.png", "mean.svg"):
        assert (tmp_path / name).stat().st_size > 1000, name


def test_discover_validate_and_emergence(tiny_run, tmp_path):
    r = run("circuit", "discover", str(tiny_run), "--out", str(tmp_path / "c"), "--tolerance", "0.05")
    assert r.returncode == 0, r.stderr
    for seed in (0, 1):
        folder = tmp_path / "c" / f"seed{seed}"
        circuit = json.loads((folder / "circuit.json").read_text())
        assert len(circuit["heads"]) == 4 and circuit["info"]["seed"] == seed
        assert (folder / "circuit.png").exists() and (folder / "losses.json").exists()
    r = run("circuit", "validate", str(tiny_run), "--spec", str(tmp_path / "c" / "seed1" / "circuit.json"))
    assert r.returncode == 0, r.stderr
    assert "combined" in r.stdout
    r = run("emergence", str(tiny_run), "--out", str(tmp_path / "e"), "--circuits", str(tmp_path / "c"), "--seqs", "8")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["ordering"]["runs"] == 2
    for seed in (0, 1):
        timeline = json.loads((tmp_path / "e" / f"seed{seed}" / "timeline.json").read_text())
        assert timeline["steps"] == [10, 20, 30, 40]
        assert len(timeline["attention"]) == 4
        assert (tmp_path / "e" / f"seed{seed}" / "losses.png").exists()
        assert (tmp_path / "e" / f"seed{seed}" / "emergence_summary.svg").exists()


def test_bad_inputs_are_one_line(tiny_run, tmp_path):
    single = tmp_path / "single"
    train(replace(presets.SMOKE, steps=10, ckpt_every=10), single)
    for args in (
        ["emergence", str(single), "--out", str(tmp_path / "x")],
        ["attention", str(tmp_path / "nowhere"), "--out", str(tmp_path / "y")],
        ["attention", str(tiny_run), "--out", str(tmp_path / "y"), "--checkpoint", "7"],
        ["circuit", "validate", str(tiny_run), "--spec", str(tmp_path / "missing.json")],
    ):
        r = run(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
