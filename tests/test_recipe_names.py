"""Named recipes (``train --recipe``): what each changes, '+' composing them, old names and the
paper-curriculum alias with one line, and ``train --help`` listing them all."""

from __future__ import annotations

import json
import re

import pytest
from helpers import one_error

from stackedheads import presets, recipes
from stackedheads.errors import UsageError


def test_every_recipe_changes_what_it_names_and_nothing_else():
    base = presets.get("sec9").to_dict()
    for name in presets.RECIPES:
        changes = presets.RECIPES.get(name).changes
        cfg = presets.get("sec9", name)
        for k, v in changes.items():
            owner = {"n_train": "task", "pe": "task", "in_init": "model", "resid_scale": "model", "pos_embed": "model",
                     "weight_init": "model", "dtype": None}.get(k, "optim")
            assert (cfg.to_dict()[owner] if owner else cfg.to_dict())[k] == (list(v) if isinstance(v, tuple) else v)
        diff = {(part, k) for part in ("task", "model", "optim") for k, v in cfg.to_dict()[part].items() if base[part][k] != v}
        diff |= {("", k) for k, v in cfg.to_dict().items() if not isinstance(v, dict) and base[k] != v}
        assert {k for _, k in diff} <= set(changes), name
    assert presets.get("sec9", "gpt2") == presets.get("sec9")
    with pytest.raises(UsageError, match="unknown recipe 'bogus'"):
        presets.get("sec9", "bogus")


def test_recipes_compose_left_to_right():
    lr_lower = presets.get("sec9", "tl-stack+lr-3e-4")
    assert lr_lower == presets.get("sec9", "tl-stack").override(lr=3e-4)
    assert presets.get("sec9", "lr-3e-4").optim.lr == 3e-4 and presets.get("sec9", "lr-1e-4").optim.lr == 1e-4
    # parts that set one field to two values are refused, not settled by order
    with pytest.raises(UsageError, match="lr-3e-4 sets lr to 0.0003 and lr-1e-4 to 0.0001"):
        presets.get("sec9", "lr-3e-4+lr-1e-4")
    assert presets.get("sec9", "init-input-torch+lr-constant") == presets.get("sec9").override(
        in_init="torch", warmup_steps=0, schedule="constant")
    assert recipes.recipe("tl-stack+init-input-torch", note=None).choices == 3
    assert presets.get("sec9", "decay-all").optim.decay_exempt == () != presets.get("sec9").optim.decay_exempt
    for bad in ("tl-stack+bogus", "tl-stack+", "+lr-3e-4"):
        with pytest.raises(UsageError, match="unknown recipe"):
            presets.get("sec9", bad)


def test_old_names_and_the_alias_resolve_with_one_line(cli, tmp_path, capsys):
    assert presets.get("sec9", "constant-clip") == presets.get("sec9", "lr-constant")
    assert capsys.readouterr().err == "constant-clip is now lr-constant\n"
    assert presets.get("sec9", "torch-in-init-constant") == presets.get("sec9", "init-input-torch+lr-constant")
    assert capsys.readouterr().err == "torch-in-init-constant is now init-input-torch+lr-constant\n"
    assert presets.get("sec9", "paper-curriculum") == presets.get("sec9", presets.PAPER_CURRICULUM)
    err = capsys.readouterr().err
    assert err.startswith(f"paper-curriculum is {presets.PAPER_CURRICULUM} ") and err.count("\n") == 1
    r = cli("train", "--preset", "smoke", "--recipe", "train-2048", "--steps", "6", "--ckpt-every", "6",
            "--final-window", "1", "--out", tmp_path / "s")
    assert r.code == 0, r.err
    assert "train-2048 is now n-train-2048" in r.err
    assert json.loads((tmp_path / "s" / "config.json").read_text())["task"]["n_train"] == 2048


def test_train_takes_a_recipe_and_options_override_it(cli, tmp_path):
    r = cli("train", "--preset", "smoke", "--recipe", "lr-constant", "--steps", "12", "--ckpt-every", "12",
            "--final-window", "2", "--out", tmp_path / "r")
    assert r.code == 0, r.err
    optim = json.loads((tmp_path / "r" / "config.json").read_text())["optim"]
    assert optim["schedule"] == "constant" and optim["warmup_steps"] == 0 and optim["grad_clip"] == 1.0
    r = cli("train", "--preset", "smoke", "--recipe", "n-train-2048", "--n-train", "1024", "--steps", "6",
            "--ckpt-every", "6", "--final-window", "1", "--out", tmp_path / "s")
    assert r.code == 0 and json.loads((tmp_path / "s" / "config.json").read_text())["task"]["n_train"] == 1024
    r = cli("train", "--preset", "smoke", "--recipe", "nope", "--out", tmp_path / "t")
    assert r.code == 2 and one_error(r.err) and "unknown recipe" in r.err


def test_train_help_names_every_preset_and_recipe(cli, monkeypatch):
    """The help is written out (the command line does not import torch to print it), so a preset or
    recipe registered without it would be one the user cannot find."""
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option
    r = cli("train", "--help")
    assert r.code == 0, r.err
    for opt, registry in (("--preset", presets.TRAIN), ("--recipe", presets.RECIPES)):
        text = next(ln for ln in r.out.splitlines() if opt in ln)
        missing = set(registry) - set(re.findall(r"[a-z][a-z0-9-]*[a-z0-9]", text))
        assert not missing, (opt, missing)
