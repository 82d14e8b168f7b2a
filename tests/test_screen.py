"""The recipe screen (issue 39): the choices Sec. 7.1 leaves open as model and recipe settings,
runs trained in pieces read as one result, and the distance to Sec. 9's curriculum."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import torch
from helpers import one_error

from stackedheads import presets, recipes, seeds
from stackedheads.errors import UsageError
from stackedheads.layout import EMERGENCE_RUN
from stackedheads.model import INIT_STD, EnsembleTransformer, ModelConfig
from stackedheads.training import train
from stackedheads.training.optim import make_optimizer

SEC9 = presets.get("sec9")


def _params(cfg: ModelConfig, seeds=(0, 1)) -> dict:
    return dict(EnsembleTransformer(cfg, seeds).named_parameters())


# --- the model's choices ------------------------------------------------------------------------


def test_each_initialisation_choice_changes_only_its_own_parameters():
    base_cfg = presets.get("sec9-smoke").model_config()
    base = _params(base_cfg)
    for change, own in (({"in_init": "torch"}, {"W_in", "b_in"}), ({"pos_embed": "learned"}, {"W_pos"}),
                        ({"resid_scale": "sublayers"}, {f"blocks.{i}.attn.W_O" for i in range(base_cfg.n_layers)})):
        other = _params(ModelConfig(**{**base_cfg.to_dict(), **change}))
        assert {k for k in other if k not in base or not torch.equal(other[k], base[k])} == own, change


def test_transformer_lens_init_is_the_same_draws_at_one_std():
    base_cfg = presets.get("sec9-smoke").model_config()
    cfg = ModelConfig(**{**base_cfg.to_dict(), "weight_init": "transformer-lens", "pos_embed": "learned"})
    std = 0.8 / math.sqrt(cfg.d_model)  # HookedTransformerConfig's initializer_range when unset
    base = _params(ModelConfig(**{**base_cfg.to_dict(), "pos_embed": "learned"}))
    tl = _params(cfg)
    sublayers = 2 * cfg.n_layers  # GPT-2's residual projections: 0.02 / sqrt(2 n_layers)
    for name, p in tl.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("b_") or name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight", "bias")):
            assert torch.equal(p, base[name]), name  # biases 0, gains 1: as GPT-2's
            continue
        gpt2_std = INIT_STD / math.sqrt(sublayers) if leaf in ("W_O", "W_down") else INIT_STD
        torch.testing.assert_close(p, base[name] * (std / gpt2_std), rtol=1e-5, atol=1e-7, msg=name)
    big = _params(ModelConfig(**{**SEC9.model_config().to_dict(), "weight_init": "transformer-lens", "n_layers": 2}), seeds=(0,))
    for name in ("W_in", "blocks.0.attn.W_qkv", "blocks.1.attn.W_O", "W_readout"):
        assert big[name].std().item() == pytest.approx(0.8 / math.sqrt(512), rel=0.1), name
    with pytest.raises(UsageError, match="resid_scale scales GPT-2's init"):
        ModelConfig(**{**base_cfg.to_dict(), "weight_init": "transformer-lens", "resid_scale": "sublayers"})


def test_torch_init_is_nn_linears_default():
    cfg = ModelConfig(**{**SEC9.model_config().to_dict(), "in_init": "torch", "n_layers": 1})
    p = _params(cfg, seeds=(3,))
    bound = 1 / math.sqrt(cfg.d_in)  # kaiming_uniform(a=sqrt(5)) on fan_in d_in, and its bias
    for name in ("W_in", "b_in"):
        assert p[name].abs().max() <= bound and p[name].abs().max() > 0.9 * bound
    assert p["W_in"].std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)  # U(-b, b)
    # A member's draws depend on its seed only (ensembles split and merge exactly).
    assert torch.equal(p["W_in"][0], _params(cfg, seeds=(5, 3))["W_in"][1])


def test_residual_scaling_by_sublayers():
    no_mlp = SEC9.model_config()  # 24 layers, no MLP
    for cfg, ratio in ((no_mlp, math.sqrt(2)), (presets.get("sec8").model_config(), 1.0)):
        blocks = _params(cfg, seeds=(0,))["blocks.0.attn.W_O"].std().item()
        sub = _params(ModelConfig(**{**cfg.to_dict(), "resid_scale": "sublayers"}), seeds=(0,))["blocks.0.attn.W_O"].std().item()
        assert sub / blocks == pytest.approx(ratio, rel=1e-6)
    std = _params(ModelConfig(**{**no_mlp.to_dict(), "resid_scale": "sublayers"}), seeds=(0,))["blocks.0.attn.W_O"].std().item()
    assert std == pytest.approx(INIT_STD / math.sqrt(24), rel=0.05)


def test_a_learned_position_table_moves_the_outputs_and_is_an_embedding_for_decay():
    cfg = presets.get("sec9-smoke").override(pos_embed="learned")
    assert cfg.model.n_ctx == cfg.task.seq_len  # derived from the task, as d_in is
    model = EnsembleTransformer(cfg.model_config(), seeds=[0])
    x = torch.randn(1, 2, cfg.task.seq_len, cfg.task.d_in)
    before = model(x)
    with torch.no_grad():
        model.W_pos.copy_(torch.randn_like(model.W_pos))  # a constant shift would be removed by LayerNorm
    assert not torch.allclose(model(x), before)
    with pytest.raises(UsageError, match="positions exceed"):
        model(torch.randn(1, 2, cfg.task.seq_len + 1, cfg.task.d_in))
    groups = make_optimizer(model, cfg.override(decay_exempt=("embed",))).param_groups
    assert any(p is model.W_pos for p in groups[1]["params"]) and groups[1]["weight_decay"] == 0.0


def test_a_choice_outside_its_values_is_one_line(cli, tmp_path):
    with pytest.raises(UsageError, match="'in_init' must be one of gpt2, torch"):
        ModelConfig(in_init="xavier")
    r = cli("train", "--preset", "smoke", "--pos-embed", "sinusoid", "--out", tmp_path / "r")
    assert r.code == 2 and one_error(r.err) and "--pos-embed" in r.err and not (tmp_path / "r").exists()


def test_a_folder_written_before_the_choices_existed_resumes(tmp_path):
    cfg = presets.get("smoke").override(steps=10, ckpt_every=5, final_window=2)
    full = train(cfg, tmp_path / "full")
    run = tmp_path / "r"
    train(cfg, run, stop_after=5)
    assert not (run / "summary.json").exists()
    stored = json.loads((run / "config.json").read_text())
    for k in ("in_init", "resid_scale", "pos_embed"):
        del stored["model"][k]
    (run / "config.json").write_text(json.dumps(stored))
    resumed = train(cfg, run)  # from step 5's checkpoint, not refused as "another configuration"
    assert resumed["seeds"] == full["seeds"]


def test_naming_the_first_choice_is_leaving_it_unset():
    cfg = ModelConfig(in_init="gpt2", resid_scale="blocks", pos_embed="none")
    assert cfg == ModelConfig() and (cfg.in_init, cfg.resid_scale, cfg.pos_embed) == (None, None, None)


def test_choices_combine_without_moving_each_others_draws():
    base = presets.get("sec9-smoke").model_config().to_dict()
    both = _params(ModelConfig(**{**base, "in_init": "torch", "pos_embed": "learned"}))
    assert torch.equal(both["W_in"], _params(ModelConfig(**{**base, "in_init": "torch"}))["W_in"])
    assert torch.equal(both["W_pos"], _params(ModelConfig(**{**base, "pos_embed": "learned"}))["W_pos"])


# --- recipes ----------------------------------------------------------------------------------


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
    # a later part's field wins
    assert presets.get("sec9", "lr-3e-4+lr-1e-4").optim.lr == 1e-4
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


# --- pieces -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """Transformer D's smoke twin trained as two pieces (seed 0; seed 1) and as one ensemble."""
    root = tmp_path_factory.mktemp("pieces")
    cfg = presets.get("sec9-smoke").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1)
    stage = root / "split" / "emergence" / "runs"
    train(cfg.override(seeds=(0,)), stage / EMERGENCE_RUN)
    train(cfg.override(seeds=(1,)), stage / f"{EMERGENCE_RUN}-seed1")
    train(cfg.override(seeds=(0, 1)), root / "whole" / "emergence" / "runs" / EMERGENCE_RUN)
    return root, cfg


def test_pieces_read_as_one_run(pieces):
    root, cfg = pieces
    (split,) = seeds.collect_seeds([root / "split"])
    (whole,) = seeds.collect_seeds([root / "whole"])
    assert [r.seed for r in split.rows] == ["0", "1"] == [r.seed for r in whole.rows]
    for a, b in zip(split.rows, whole.rows):
        # The same models: an ensemble's member is the model of its seed alone (to rounding).
        assert a.final_val_loss == pytest.approx(b.final_val_loss, rel=1e-3)
        assert a.loss_drops == b.loss_drops and a.loss_drops is not None
        assert a.train_val_gap == pytest.approx(b.train_val_gap, abs=1e-3)
    assert split.recipe == whole.recipe


def test_pieces_of_other_settings_or_one_seed_twice_are_refused(pieces, tmp_path, cli):
    import shutil

    root, cfg = pieces
    folder = tmp_path / "mixed"
    shutil.copytree(root / "split", folder)
    train(cfg.override(seeds=(2,), lr=2e-3), folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-lr")
    with pytest.raises(UsageError, match=r"not pieces of one result: their settings differ \(optim.lr: 0.001 and 0.002\)"):
        seeds.collect_seeds([folder])
    r = cli("claims", folder)
    assert r.code == 2 and one_error(r.err) and "optim.lr" in r.err
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-lr")
    shutil.copytree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1", folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    with pytest.raises(UsageError, match="both hold seed 1"):
        seeds.collect_seeds([folder])
    # A piece still training (no summary.json) holds no seed of the result: named, not counted.
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    train(cfg.override(seeds=(1,)), folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again", stop_after=10)
    (run,) = seeds.collect_seeds([folder])
    assert [r.seed for r in run.rows] == ["0", "1"] and run.unfinished == [f"{EMERGENCE_RUN}-again"]
    assert any("not counted: transformer-D-again" in line for line in seeds.distribution_lines(run))
    split = seeds.collect_seeds([root / "split"])[0]
    assert [r.loss_drops for r in run.rows] == [r.loss_drops for r in split.rows]
    # How a piece ran (threads, compile, device) is not a setting: those combine.
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    summary = folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1" / "summary.json"
    s = json.loads(summary.read_text())
    s["config"]["threads"], s["config"]["compile"] = 2, True
    summary.write_text(json.dumps(s))
    assert len(seeds.collect_seeds([folder])[0].rows) == 2


# --- the distance -------------------------------------------------------------------------------


def _screen_folder(root, falls: dict[int, list[int | None]], final: float | dict[int, float], steps=6400, per_epoch=8,
                   onto: int | dict[int, int] = 0):
    """A sec9-shaped training run without circuits: each seed's x1..x4 at 1.0 until the step in
    ``onto`` (every seed's, or per seed), then on the 0.75 plateau until its step in ``falls``
    (None: never), then 0.01; training loss 0.002 below validation over the run; ``final`` the
    final val MSE of every seed, or per seed."""
    finals = final if isinstance(final, dict) else dict.fromkeys(falls, final)
    ontos = onto if isinstance(onto, dict) else dict.fromkeys(falls, onto)
    cfg = presets.get("sec9").override(seeds=tuple(falls), steps=steps, eval_every=80, final_window=100).to_dict()
    run = root / "emergence" / "runs" / EMERGENCE_RUN
    run.mkdir(parents=True)
    rows = []
    for seed, at in falls.items():
        for step in list(range(80, steps + 1, 80)):
            parts = [0.01 if a is not None and step >= a else 0.75 if step >= ontos[seed] else 1.0 for a in at]
            val = sum(parts) / 4
            rows.append({"step": step, "seed": seed, "train_loss": val - 0.002, "val_loss": val,
                         **{f"val_x{j + 1}": p for j, p in enumerate(parts)}, "wall_s": 1.0})
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (run / "summary.json").write_text(json.dumps({"config": cfg, "wall_s": 1.0, "seeds": {
        str(s): {"final_val_loss": finals[s], "final_partial": {f"val_x{j}": finals[s] for j in range(1, 5)}} for s in falls}}))
    return root


def test_the_distance_is_the_stated_formula_per_seed_then_its_median(tmp_path):
    # Seed 0 one position at a time from step 3,600 (450 epochs); seed 1 two positions at once.
    folder = _screen_folder(tmp_path / "a", {0: [3600, 4000, 4400, 4800], 1: [1600, 2400, 2400, 3200]}, final=0.062)
    (run,) = seeds.collect_seeds([folder])
    a, b = run.rows
    assert (a.plateau_epochs, a.plateau_from) == (450.0, "x1") and a.loss_drop_order == "in order"
    assert a.drop_epochs == {"x1": 450.0, "x2": 500.0, "x3": 550.0, "x4": 600.0}
    assert b.loss_drop_order == "tie" and a.train_val_gap == pytest.approx(0.002)
    # seed 0: x1 at the paper's 450 epochs, final 0.062 = 2 x 0.031, in order; seed 1: x1 at 200, a tie
    own = {"0": math.log(2), "1": abs(math.log(200 / 450)) + math.log(2) + 1.0}
    assert seeds.seed_distance(a)["value"] == pytest.approx(own["0"]) and seeds.seed_distance(b)["value"] == pytest.approx(own["1"])
    d = run.summary()["distance"]
    assert d["value"] == pytest.approx((own["0"] + own["1"]) / 2) and d["per_seed"] == pytest.approx(own)
    assert (d["min"], d["max"]) == (pytest.approx(own["0"]), pytest.approx(own["1"]))
    assert d["plateau"] == pytest.approx(abs(math.log(200 / 450)) / 2) and d["final"] == pytest.approx(math.log(2))
    assert d["order"] == 0.5 and not d["at_least"] and d["seeds"] == 2
    lines = seeds.distribution_lines(run)
    assert any(line.startswith(f"distance to the paper: {d['value']:.2f}, the median over 2 seeds "
                               f"(range {own['0']:.2f}-{own['1']:.2f}") for line in lines), lines
    assert any("until x1's loss falls below C2's threshold: median 325 epochs" in line for line in lines)
    head, rows = seeds.seed_table(run)
    assert rows[0][head.index("gaps (epochs)")] == "50 50 50" and rows[0][head.index("plateau (epochs)")] == "450 (x1)"
    assert [r[head.index("distance")] for r in rows] == [f"{own['0']:.2f}", f"{own['1']:.2f}"]


def test_mixed_outcomes_are_not_rewarded_and_show_their_spread(tmp_path):
    """Two seeds at the paper and two at the presets' (x1 at 50 epochs, final 0.0027): the medians
    of x1's fall (250) and of the final loss (0.017) are near the paper, though no seed is both
    near and far; the median of the seeds' distances is halfway, and the range says why."""
    paper, early = [3600, 4000, 4400, 4800], [400, 800, 880, 1040]
    folder = _screen_folder(tmp_path / "mixed", {0: paper, 1: paper, 2: early, 3: early},
                            final={0: 0.031, 1: 0.031, 2: 0.0027, 3: 0.0027})
    (run,) = seeds.collect_seeds([folder])
    far = math.log(450 / 50) + math.log(0.031 / 0.0027)
    d = run.summary()["distance"]
    on_medians = abs(math.log(250 / 450)) + abs(math.log(((0.031 + 0.0027) / 2) / 0.031))
    assert d["value"] == pytest.approx(far / 2) and d["value"] > on_medians + 1
    assert (d["min"], d["max"]) == (pytest.approx(0.0), pytest.approx(far))
    head, rows = seeds.distance_table([run])
    assert rows[0][head.index("distance (range)")] == f"0.00-{far:.2f}"


def test_x1s_time_to_the_plateau_is_shown_beside_its_fall(tmp_path):
    """x1's loss below 0.8 (onto the 1 - 1/N plateau) at the first evaluation it is, per seed and
    as a median, beside its fall below 0.5: a recipe that only slows everything shows as that."""
    slow = _screen_folder(tmp_path / "slow", {0: [1280, 2000, 2400, 2800], 1: [1600, 2000, 2400, 2800]}, final=0.02,
                          onto={0: 560, 1: 620})
    fast = _screen_folder(tmp_path / "fast", {0: [400, 800, 880, 1040]}, final=0.0027, onto=240)
    runs = seeds.collect_seeds([slow, fast])
    # 560 and 620 are evaluated at steps 560 and 640 (every 80): epochs 70 and 80
    assert [r.x1_below_08_epochs for r in runs[0].rows] == [70.0, 80.0] and runs[1].rows[0].x1_below_08_epochs == 30.0
    head, rows = seeds.seed_table(runs[0])
    assert [r[head.index("x1 below 0.8 (epoch)")] for r in rows] == ["70", "80"]
    head, rows = seeds.distance_table(runs)
    at = head.index("x1 below 0.8 (epoch)")
    assert head[at + 1] == "x1 falls (epoch)"
    assert [(r[0], r[at], r[at + 1]) for r in rows[:2]] == [("slow", "75", "180"), ("fast", "30", "50")]
    assert any(line.startswith("x1's loss below 0.8 (onto the plateau): median 75 epochs (range 70-80); below C2's "
                               "threshold: median 180") for line in seeds.distribution_lines(runs[0]))
    # a run whose x1 starts below 0.8 is on the plateau at its first evaluation
    assert seeds.collect_seeds([_screen_folder(tmp_path / "at-once", {0: [400] * 4}, final=0.01)])[0].rows[0].x1_below_08_epochs == 10.0


def test_runs_are_ranked_by_distance_and_a_run_on_the_plateau_is_not_measured(tmp_path, cli):
    near = _screen_folder(tmp_path / "near", {0: [3600, 4000, 4400, 4800]}, final=0.031)
    far = _screen_folder(tmp_path / "far", {0: [400, 800, 880, 1040]}, final=0.0024)
    stuck = _screen_folder(tmp_path / "stuck", {0: [None, None, None, None]}, final=0.75)
    runs = seeds.collect_seeds([far, stuck, near])
    head, rows = seeds.distance_table(runs)
    assert [r[0] for r in rows] == ["near", "far", "stuck", "paper (Sec. 9.2)"]
    # The stuck run's x1 never fell: it counts at the run's 800 epochs, a lower bound.
    dist, x1 = head.index("distance (median)"), head.index("x1 falls (epoch)")
    assert rows[0][dist] == "0.00" and rows[2][x1] == ">=800" and rows[2][dist].startswith(">=")
    # without circuits only E4 is judged: in chain order passes it, the plateau does not
    passing = head.index("E1, E2, E3, E4 passing")
    assert [r[passing] for r in rows] == ["-, -, -, 1 of 1", "-, -, -, 1 of 1", "-, -, -, 0 of 1", "every seed"]
    d = runs[1].summary()["distance"]
    assert d["at_least"] and d["plateau"] == pytest.approx(math.log(800 / 450)) and d["order"] == 1.0
    cmp = [c for c in seeds.compare(runs) if c["measure"] == "distance_to_paper"]
    assert cmp[0]["closer"] == "near"
    r = cli("seeds", far, stuck, near)
    assert r.code == 0 and "Distance to Sec. 9" in r.out and "distance to the paper: at least" in r.out


def test_toward_is_2x_closer_on_the_log_scale():
    paper = 0.031
    assert seeds.toward(2 * paper, 8 * paper, paper) and seeds.toward(paper / 2, 8 * paper, paper)
    assert not seeds.toward(5 * paper, 8 * paper, paper)  # closer, but not 2x
    assert not seeds.toward(0.39, 0.0027, paper)  # from 11x below to 13x above: farther, not toward
    assert not seeds.toward(0.0, 0.0027, paper)


def test_the_screen_wants_four_seeds_where_a_choice_moved_and_of_every_combination(tmp_path, cli):
    early = [400, 800, 880, 1040]  # x1 falls at 50 epochs
    base = _screen_folder(tmp_path / "base", {0: early, 1: early}, final=0.0027)
    # (a): seed 0 as the presets, seed 1 ends within 2x of the paper's 0.031
    a = _screen_folder(tmp_path / "a", {0: early, 1: early}, final={0: 0.003, 1: 0.02})
    # (f): two seeds, neither moved (x1 at 60 epochs, the final loss 10x below the paper's)
    f = _screen_folder(tmp_path / "f", {0: [480, 800, 880, 1040], 1: early}, final=0.0031)
    # (d): x1 falls at 110 epochs on its only seed: |ln(110/450)| <= |ln(50/450)| - ln 2
    d = _screen_folder(tmp_path / "d", {0: [880, 1200, 1600, 2000]}, final=0.0027)
    # (d) + (a): one seed that moved nothing
    da = _screen_folder(tmp_path / "da", {0: early}, final=0.0027)
    # (c): x1 never falls, so its 800 epochs are a lower bound, shown as one
    c = _screen_folder(tmp_path / "c", {0: [None] * 4}, final=0.75)
    labels = ["sec9", "lr-constant", "pos-pair", "init-input-torch", "init-input-torch+lr-constant", "n-train-2048"]
    runs = seeds.collect_seeds([base, a, f, d, da, c], labels)
    state = seeds.screen(runs)
    assert state["baseline"] == "sec9" and state["baseline_medians"] == {"x1's fall": "50 epochs", "final val MSE": "0.0027"}
    rows = {r["recipe"]: r for r in state["rows"]}
    assert set(rows) == set(recipes.SCREEN)
    assert rows["lr-constant"]["moved"] == ["final val MSE: median 0.0115, seed 1 0.0200"]
    assert (rows["lr-constant"]["wanted"], rows["lr-constant"]["to_run"]) == (4, 2)
    assert rows["pos-pair"]["moved"] == [] and (rows["pos-pair"]["wanted"], rows["pos-pair"]["to_run"]) == (2, 0)
    assert rows["init-input-torch"]["moved"] == ["x1's fall: median 110 epochs, seed 0 110 epochs"]
    assert (rows["init-input-torch"]["wanted"], rows["init-input-torch"]["to_run"]) == (4, 3)
    assert (rows["init-input-torch+lr-constant"]["why"], rows["init-input-torch+lr-constant"]["to_run"]) == ("a combination", 3)
    assert rows["n-train-2048"]["moved"] == ["x1's fall: median >=800 epochs, seed 0 >=800 epochs"]
    assert (rows["pos-learned"]["seeds"], rows["pos-learned"]["to_run"]) == (0, 2)
    assert state["to_run"] == sum(r["to_run"] for r in state["rows"])
    head, table = seeds.screen_table(state)
    assert table[[r[0] for r in table].index("pos-pair")][head.index("to run")] == "done"
    # No baseline, or no run named as a screen recipe: no screen to state.
    assert seeds.screen(runs[1:]) is None and seeds.screen(seeds.collect_seeds([base, f], ["sec9", "other"])) is None
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant", "--markdown")
    assert r.code == 0 and "### The recipe screen (issue 39)" in r.out and "| lr-constant | 2 |" in r.out
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant", "--json")
    assert json.loads(r.out)["screen"]["rows"][0]["recipe"] == "lr-constant"
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant")
    assert r.code == 0 and "The recipe screen" in r.out


def test_a_finished_choice_is_ruled_out_nearer_or_a_reproduction_and_the_closest_is_named(tmp_path, cli):
    early, paper = [400, 800, 880, 1040], [3600, 4000, 4400, 4800]  # x1 at 50 and at 450 epochs
    two = lambda falls: {0: falls, 1: falls}  # noqa: E731
    base = _screen_folder(tmp_path / "base", two(early), final=0.0027)  # distance ln 9 + ln(0.031/0.0027)
    folders = {
        "pos-learned": _screen_folder(tmp_path / "lp", two([320, 640, 720, 800]), final=0.001),  # farther
        "pos-pair": _screen_folder(tmp_path / "pp", two([480, 800, 880, 1040]), final=0.0031),  # 0.24 nearer
        "init-tl": _screen_folder(tmp_path / "tl", dict.fromkeys(range(4), paper), final=0.031),  # the paper: it moved, four
        # a combination, four seeds: x1 at 160 epochs, 0.02 at the end, one seed's x3 and x4 tie
        "tl-stack": _screen_folder(tmp_path / "tf", {0: [1280] + paper[1:], 1: [1280] + paper[1:],
                                                             2: [1280] + paper[1:], 3: [1280, 4000, 4400, 4400]}, final=0.02),
        # x1 never falls on seed 1: the distance is a lower bound, far below the baseline's
        "n-train-65536": _screen_folder(tmp_path / "t65", {0: paper, 1: [None] * 4, 2: paper, 3: paper}, final=0.031),
        "lr-warmup-constant": _screen_folder(tmp_path / "wc", {0: paper}, final=0.031),  # one seed of two
    }
    runs = seeds.collect_seeds([base, *folders.values()], ["sec9", *folders])
    state = seeds.screen(runs)
    b = state["baseline_distance"]
    assert b == pytest.approx(math.log(9) + math.log(0.031 / 0.0027))
    verdict = {r["recipe"]: r["verdict"] for r in state["rows"]}
    d = {r.label: r.summary()["distance"]["value"] for r in runs}
    assert verdict["pos-learned"] == f"ruled out: distance {d['pos-learned']:.2f}, {d['pos-learned'] - b:.2f} farther than sec9's {b:.2f}"
    assert verdict["pos-pair"].startswith(f"ruled out: distance {d['pos-pair']:.2f}, {b - d['pos-pair']:.2f} nearer")
    assert verdict["pos-pair"].endswith("less than the 0.69 of a 2x move")
    assert verdict["init-tl"] == "reproduces: distance 0.00 (x1's fall and final val MSE within 2x, every seed in order)"
    tf = d["tl-stack"]
    # three seeds in order at x1 160 and 0.02, one more out of order: the median is the three's
    assert tf == pytest.approx(math.log(450 / 160) + math.log(0.031 / 0.02))
    assert verdict["tl-stack"] == (f"nearer: distance {tf:.2f}, {b - tf:.2f} less than sec9's {b:.2f}; not the paper: "
                                           "x1's fall 2.8x off the paper's, 25% of seeds' losses out of chain order")
    assert verdict["n-train-65536"].startswith("undecided: distance at least")
    assert verdict["lr-warmup-constant"] == "open: 3 more seeds"  # it moved 2x: four wanted
    assert verdict["dtype-float32"] == "open: 2 more seeds"
    # The nearest finished recipe is named; so far, while seeds are still wanted.
    assert state["closest"] == "init-tl"
    # n-train-65536's distance (0.25 at least) is a bound: it names nothing
    assert seeds.screen([r for r in runs if r.label != "init-tl"])["closest"] == "tl-stack"
    assert seeds.closest_line(state).startswith(f"Closest recipe: init-tl (the closest so far: the screen still wants {state['to_run']} seeds)")
    assert "still wants 1 seed)" in seeds.closest_line({**state, "to_run": 1})
    # Finished: the line says so, and whether `--recipe paper-curriculum` selects the recipe named.
    done = {**state, "to_run": 0}
    for named, says in ((presets.PAPER_CURRICULUM, "`--recipe paper-curriculum` selects it)"),
                        ("init-tl", f"`--recipe paper-curriculum` selects {presets.PAPER_CURRICULUM}, not it)")):
        line = seeds.closest_line({**done, "closest": named})
        assert line.startswith(f"Closest recipe: {named} (the screen is finished; {says}"), line
    r = cli("seeds", base, folders["init-tl"], "--label", "sec9", "--label", "init-tl", "--markdown")
    assert r.code == 0 and "| verdict |" in r.out and "Closest recipe: init-tl" in r.out
    r = cli("seeds", base, folders["pos-learned"], "--label", "sec9", "--label", "pos-learned")
    assert r.code == 0 and "Closest recipe: pos-learned" in r.out


def test_a_result_in_pieces_publishes_into_a_group_the_report_reads(pieces, tmp_path, cli):
    from stackedheads import references

    root, _ = pieces
    commit = "7e32fd7"  # any commit's spelling: publish records it, it does not check out
    results = tmp_path / "results"
    (results / "sec9").mkdir(parents=True)
    r = cli("publish", root / "split", "--name", "dtype-float32", "--results", results / "sec9", "--title", "t",
            "--command", "c", "--commit", commit, "--include", "emergence/runs/*/*.json", "--include", "emergence/runs/*/*.csv")
    assert r.code == 0, r.err
    published = results / "sec9" / "dtype-float32"
    assert {p.parent.name for p in published.glob("emergence/runs/*/summary.json")} == {EMERGENCE_RUN, f"{EMERGENCE_RUN}-seed1"}
    (before,), (after,) = seeds.collect_seeds([root / "split"]), seeds.collect_seeds([published])
    assert [(r.seed, r.final_val_loss, r.loss_drops) for r in before.rows] == [(r.seed, r.final_val_loss, r.loss_drops) for r in after.rows]
    assert [ref["name"] for ref in references.load_all(results)] == ["dtype-float32"]


def test_a_result_from_pieces_on_two_devices_names_both(pieces, tmp_path):
    """A CPU seed beside GPU seeds (issue 39's float32 choice) is one result, shown as both."""
    import json
    import shutil

    root, _ = pieces
    shutil.copytree(root / "split", tmp_path / "split")
    piece = tmp_path / "split" / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1"
    for name in ("config.json", "summary.json"):
        d = json.loads((piece / name).read_text())
        (d["config"] if name == "summary.json" else d)["device"] = "cuda"
        (piece / name).write_text(json.dumps(d))
    (run,) = seeds.collect_seeds([tmp_path / "split"])
    assert run.recipe["device"] == "cpu+cuda" and [r.seed for r in run.rows] == ["0", "1"]
    (alone,) = seeds.collect_seeds([root / "split"])
    assert alone.recipe["device"] == "cpu"


def publisher(results, **defaults):
    """``publish(run, **options)``: :func:`stackedheads.publish_piece.publish_piece` with these
    defaults, returning the reference it wrote."""
    from stackedheads.publish_piece import Piece, publish_piece

    base = dict(stage="emergence", commit="7e32fd7", results=results) | defaults

    def publish(run, **kw):
        dest, _ = publish_piece(Piece(**(base | {"run": run} | kw)))
        return json.loads((dest / "reference.json").read_text())

    return publish


def test_publish_piece_publishes_pieces_and_recomputes_what_they_share(pieces, tmp_path, cli):
    """publish-piece: a first piece, then a further one beside it; publishing a piece
    again writes the same reference (command, wall time and notes recomputed, never added to)."""
    root, _ = pieces
    runs = root / "split" / "emergence" / "runs"
    results = tmp_path / "results"
    from stackedheads import publish_piece as sp

    publish = publisher(results, name="lr-constant")

    with pytest.raises(UsageError, match="needs --title, --train-command and --notes"):
        publish(runs / f"{EMERGENCE_RUN}-seed1")
    first = publish(runs / EMERGENCE_RUN, title="t", train_command="stackedheads train --preset sec9-smoke", notes="Seed 0 alone.")
    assert first["command"].startswith("stackedheads train --preset sec9-smoke --seeds 0 --out RUN; stackedheads circuit discover")
    with pytest.raises(UsageError, match="--note says how the piece ran"):
        publish(runs / f"{EMERGENCE_RUN}-seed1", note="Seed 1: the same command, final val MSE 0.017")
    second = publish(runs / f"{EMERGENCE_RUN}-seed1", commit="abcdef1", note="on another CPU")
    again = publish(runs / f"{EMERGENCE_RUN}-seed1", commit="abcdef1", note="on another CPU")
    assert again == second and second["commit"] == first["commit"] == "7e32fd7"
    walls = [json.loads((runs / n / "summary.json").read_text())["wall_s"] for n in (EMERGENCE_RUN, f"{EMERGENCE_RUN}-seed1")]
    assert second["wall_s"] == pytest.approx(sum(walls), abs=1e-3)
    assert second["command"].count("; seed 1: the same with --seeds 1") == 1
    assert second["notes"].startswith("Seed 0 alone. Seed 1: the same command with --seeds 1, from a clone of abcdef1")
    assert second["notes"].count("Seed 1:") == 1 and "on another CPU" in second["notes"]
    assert second["notes"].endswith("no circuits yet (E4 from metrics.csv).")
    # a piece's sentence names the seeds that have circuits or a timeline where some have none
    em = tmp_path / "em"
    for kind, file, held in (("discovered", "circuit.json", (2, 3)), ("timeline", "timeline.json", (0,))):
        for s in held:
            (em / kind / f"seed{s}").mkdir(parents=True)
            (em / kind / f"seed{s}" / file).write_text("{}")
    assert sp.analysed(em, [1, 2, 3]) == "circuits (App. E's 0.05 on its last checkpoint) for seeds 2,3; no timeline"
    assert sp.analysed(em, [2, 3]) == "circuits (App. E's 0.05 on its last checkpoint); no timeline"
    assert sp.analysed(em, [1]) == "no circuits yet (E4 from metrics.csv)"
    (em / "timeline" / "seed2").mkdir()
    (em / "timeline" / "seed2" / "timeline.json").write_text("{}")
    assert sp.analysed(em, [2, 3]).endswith("and a timeline for seed 2")
    assert {p.parent.name for p in (results / "lr-constant").glob("emergence/runs/*/summary.json")} == {
        EMERGENCE_RUN, f"{EMERGENCE_RUN}-s1"}
    (run,) = seeds.collect_seeds([results / "lr-constant"])
    assert [r.seed for r in run.rows] == ["0", "1"]
    with pytest.raises(UsageError, match="holds some of seeds"):
        publish(root / "whole" / "emergence" / "runs" / EMERGENCE_RUN)
    # circuits from one folder a seed, as gpu_runs.py writes them: each seed's from the folder holding it
    whole = root / "whole" / "emergence" / "runs" / EMERGENCE_RUN
    for s in (0, 1):
        r = cli("circuit", "discover", whole, "--seeds", s, "--threshold", "0.05", "--out", tmp_path / f"discovered-{s}")
        assert r.code == 0, r.err
    ref = publish(whole, name="two-folders", circuits=[tmp_path / "discovered-1", tmp_path / "discovered-0"],
                  title="t", train_command="stackedheads train --preset sec9-smoke", notes="Both seeds.")
    for s in (0, 1):
        assert (results / "two-folders" / "emergence" / "discovered" / f"seed{s}" / "circuit.json").read_bytes() == (
            tmp_path / f"discovered-{s}" / f"seed{s}" / "circuit.json").read_bytes()
    assert ref["name"] == "two-folders"


def test_publish_piece_lays_sec8_pieces_out_as_results_sec8_with_maps(tmp_path, cli):
    """--stage circuits: transformers A-C a seed a run (Sec. 8 at 24,000 steps on a CPU), published
    as results/sec8/gpt2 is laid out (circuits/runs/transformers-A-C[-s1], discovered/, maps/) and judged
    on A1-A5 as one result; a timeline (Sec. 9's) is refused there, and a Sec. 8 piece beside a
    Sec. 9 result."""
    from stackedheads.layout import CIRCUITS_RUN

    cfg = presets.get("sec8-smoke", "paper-curriculum").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1)
    runs = {s: tmp_path / f"run{s}" for s in (0, 1)}
    for s, run in runs.items():
        train(cfg.override(seeds=(s,)), run)
    r = cli("circuit", "discover", runs[0], "--threshold", "0.05", "--out", tmp_path / "disc0")
    assert r.code == 0, r.err
    r = cli("attention", runs[0], "--seed", 0, "--out", tmp_path / "maps0" / "seed0")
    assert r.code == 0, r.err
    results = tmp_path / "results"
    publish = publisher(results, name="tl-stack", stage="circuits")

    with pytest.raises(UsageError, match="--timeline belongs to the emergence stage, not circuits"):
        publish(runs[0], timeline=[tmp_path / "disc0"])
    first = publish(runs[0], circuits=[tmp_path / "disc0"], maps=[tmp_path / "maps0"], title="t",
                    train_command="stackedheads train --preset sec8-smoke --recipe paper-curriculum", notes="Seed 0.")
    assert "stackedheads attention RUN --seed S --out R/circuits/maps/seedS" in first["command"]
    second = publish(runs[1], note="on another CPU")
    dest = results / "tl-stack"
    assert {p.parent.name for p in dest.glob("circuits/runs/*/summary.json")} == {CIRCUITS_RUN, f"{CIRCUITS_RUN}-s1"}
    assert (dest / "circuits" / "discovered" / "seed0" / "circuit.json").is_file()
    assert {p.name for p in (dest / "circuits" / "maps" / "seed0").iterdir()} >= {"mean.png", "mean.svg"}
    # the further piece's sentence counts steps (Sec. 8 does) and says it has no circuits yet
    assert re.search(r" Seed 1: the same command with --seeds 1, \d+ s of training, on another CPU; partial losses "
                     r"below 0\.5 at steps: x1 [\d,never]+, x2 .*; no circuits yet \(its final loss only: A1-A5 judge a seed with circuits\)\.$", second["notes"])
    claims = {c["id"]: c for c in json.loads((dest / "claims.json").read_text()) if c["id"].startswith("A")}
    assert set(claims) == {"A1", "A2", "A3", "A4", "A5"}
    assert claims["A1"]["measured"].startswith("seed 0: ") and "seed 1" not in claims["A1"]["measured"]
    (run,) = seeds.collect_seeds([dest])
    assert [r.seed for r in run.rows] == ["0", "1"]
    # a Sec. 9 result takes no Sec. 8 piece
    (results / "sec9-like" / "emergence").mkdir(parents=True)
    (results / "sec9-like" / "reference.json").write_text("{}")
    with pytest.raises(UsageError, match="holds no circuits stage"):
        publish(runs[1], name="sec9-like")


def test_paper_curriculum_is_the_recipe_the_published_screen_names():
    """The alias follows the evidence: every screen recipe's seeds are in results/sec9, and of
    them the one nearest the paper is what ``--recipe paper-curriculum`` selects."""
    root = Path(__file__).resolve().parents[1] / "results"
    folders = sorted(p for p in (root / "sec9").iterdir() if p.is_dir())
    state = seeds.screen(seeds.collect_seeds(folders))
    assert state["to_run"] == 0, [(r["recipe"], r["to_run"]) for r in state["rows"] if r["to_run"]]
    assert state["closest"] == presets.PAPER_CURRICULUM
    assert presets.get("sec9", "paper-curriculum") == presets.get("sec9", presets.PAPER_CURRICULUM) != presets.get("sec9")
    assert "paper-curriculum" not in presets.RECIPES  # a name for a screened recipe, not one more to screen
