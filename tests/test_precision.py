"""Low precision: every preset's shape trains a step in float32 and bfloat16 (compiled:
test_compile.py), with the bfloat16 loss within a stated tolerance of the float32 one; "auto"
resolves per machine and is recorded; thread counts change the bits only within a tolerance."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import BF16_REL_TOL, final_losses, one_step

from stackedheads import presets
from stackedheads.training import train
from stackedheads.training.config import native_dtype

SHAPES = ("smoke", "quick", "sec8-quick", "sec9-quick", "sec8", "sec9", "paper")


@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize("preset", SHAPES)
def test_bf16_trains_every_preset_shape_like_fp32(tmp_path, preset, members):
    fp32 = final_losses(one_step(preset, members, "float32", tmp_path / "fp32"))
    bf16 = final_losses(one_step(preset, members, "bfloat16", tmp_path / "bf16"))
    assert all(torch.isfinite(torch.tensor(bf16)))
    for a, b in zip(fp32, bf16):
        assert abs(a - b) <= BF16_REL_TOL * a, (preset, members, a, b)
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_auto_dtype_is_resolved_recorded_and_kept_on_resume(tmp_path):
    cfg = presets.SMOKE.override(steps=20, ckpt_every=10, dtype="auto")
    train(cfg, tmp_path, stop_after=10)
    recorded = json.loads((tmp_path / "config.json").read_text())
    assert recorded["dtype"] == native_dtype("cpu") and recorded["threads"] == torch.get_num_threads()
    # The folder records what "auto" meant; resuming with "auto" (or the same dtype) continues it.
    assert train(cfg, tmp_path)["config"]["dtype"] == recorded["dtype"]
    other = "float32" if recorded["dtype"] == "bfloat16" else "bfloat16"
    from stackedheads.errors import UsageError

    with pytest.raises(UsageError, match="another configuration"):
        train(cfg.override(dtype=other), tmp_path)


def test_native_dtype_follows_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert native_dtype("cpu") == "bfloat16"
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_dtype("cpu") == "float32"


def test_training_restores_the_callers_thread_count(tmp_path):
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    train(presets.SMOKE.override(steps=10, threads=target), tmp_path)
    assert torch.get_num_threads() == before
    assert json.loads((tmp_path / "config.json").read_text())["threads"] == target


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["smoke", "sec9-smoke"])  # an ensemble of 2 and a single model
def test_thread_counts_agree_within_tolerance_and_repeat_exactly(tmp_path, preset):
    """Bit-identity across thread counts is not promised (its machinery cost speed): the same
    count gives the same bytes; another count the same losses to float32 rounding."""
    # a1 and a2 in a fresh interpreter, b1 in this one: the same count in two processes.
    script = ("import sys; from stackedheads import presets; from stackedheads.training import train\n"
              "for n, out in zip(sys.argv[1::2], sys.argv[2::2]):\n"
              f"    train(presets.get({preset!r}).override(steps=20, ckpt_every=20, threads=int(n)), out)")
    subprocess.run([sys.executable, "-c", script, "1", str(tmp_path / "a1"), "2", str(tmp_path / "a2")], check=True)
    train(presets.get(preset).override(steps=20, ckpt_every=20, threads=1), tmp_path / "b1")
    losses = {}
    for name in ("a1", "b1", "a2"):
        rows = (tmp_path / name / "metrics.csv").read_text().splitlines()
        losses[name] = [[float(v) for v in row.split(",")[2:-1]] for row in rows[1:]]  # wall_s last
    assert losses["a1"] == losses["b1"]
    ckpt = {name: load_file(str(tmp_path / name / "checkpoints" / "step_000020.safetensors")) for name in ("a1", "b1")}
    assert ckpt["a1"].keys() == ckpt["b1"].keys()
    assert all(torch.equal(ckpt["a1"][k], ckpt["b1"][k]) for k in ckpt["a1"])
    for r1, r2 in zip(losses["a1"], losses["a2"]):
        assert r1 == pytest.approx(r2, rel=1e-4)


@pytest.mark.parametrize("requested,says", [("auto", "trains in float32"), ("bfloat16", "bfloat16 is emulated"),
                                            ("float32", None)])
def test_a_cpu_without_bfloat16_says_so_in_one_line(tmp_path, monkeypatch, capsys, requested, says):
    """No AVX512-BF16 and no AMX: "auto" falls back to float32 and an explicit bfloat16 trains
    emulated, each with one line on stderr; float32 says nothing."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    train(presets.SMOKE.override(steps=2, eval_every=1, final_window=1, ckpt_every=2, warmup_steps=0,
                                 dtype=requested), tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if "bfloat16" in line]
    assert len(lines) == (1 if says else 0) and all(says in line for line in lines)
    recorded = json.loads((tmp_path / "config.json").read_text())["dtype"]
    assert recorded == {"auto": "float32"}.get(requested, requested)
