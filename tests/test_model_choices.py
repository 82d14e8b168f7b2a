"""The model's choices the paper leaves open (input layer, residual scaling, positions, TransformerLens's
init): each changes its own parameters only, and old run folders resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import one_error

from stackedheads import presets
from stackedheads.errors import UsageError
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import INIT_STD, EnsembleTransformer
from stackedheads.training import train
from stackedheads.training.optim import make_optimizer

SEC9 = presets.get("sec9")


def _params(cfg: ModelConfig, seeds=(0, 1)) -> dict:
    return dict(EnsembleTransformer(cfg, seeds).named_parameters())




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
    with pytest.raises(UsageError, match="'resid_scale' scales GPT-2's init"):
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
