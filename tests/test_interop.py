"""TransformerLens interop: every preset shape gives a HookedTransformer equal to ours, the
reverse loads back, what does not map is refused, and circuit validation's losses are recomputed
with TransformerLens's hooks."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

# The `interop` extra (`make test` installs it), found without importing it: its 5 s import
# would otherwise be paid by every pytest-xdist worker at collection.
if importlib.util.find_spec("transformer_lens") is None:
    pytest.skip("transformer_lens is not installed (the `interop` extra)", allow_module_level=True)

from stackedheads import presets  # noqa: E402
from stackedheads.circuits.ablate import Circuit, DiscoveryRecord, HeadSpec, validate_run  # noqa: E402
from stackedheads.circuits.discover import discover_run  # noqa: E402
from stackedheads.circuits.paths import CircuitPath  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.interop import (  # noqa: E402
    check_run,
    from_transformer_lens,
    hooked_config,
    model_to_transformer_lens,
    to_transformer_lens,
    write_run,
)
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer  # noqa: E402
from stackedheads.tasks.vectors import make_batch  # noqa: E402
from stackedheads.training import checkpoint_for, load_model, train, validation_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5  # float32 rounding, relative to the outputs' scale (measured: < 1e-6, docs/interop.md)


def shaken(model: EnsembleTransformer) -> EnsembleTransformer:
    """GPT-2's init gives near-uniform patterns and tiny outputs, where any mapping looks equal:
    add noise to every weight (gains included) so patterns are sharp and outputs of order one
    (scaled by 1/sqrt(d_model), so scores are of one size at every width)."""
    scale = 1.6 / model.config.d_model ** 0.5
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model


def compare(model: EnsembleTransformer, batch, member: int = 1) -> tuple[float, float]:
    """Largest |difference| of the readout (relative to its scale) and of every layer's pattern,
    between member ``member`` of ``model`` and its HookedTransformer."""
    N = model.config.n_queries
    with torch.no_grad():
        ours, cache = model.run_with_cache(batch.inputs, names=model.pattern_names())
        hooked, embed = model_to_transformer_lens(model, member)
        theirs, tl_cache = hooked.run_with_cache(embed(batch.inputs), start_at_layer=0,
                                                 names_filter=lambda n: n.endswith("hook_pattern"))
    assert theirs.shape == (batch.inputs.shape[0], batch.inputs.shape[1], model.config.d_out)
    assert sorted(tl_cache.keys()) == sorted(model.pattern_names())
    out = (theirs[:, -N:] - ours[member]).abs().max().item() / max(1.0, ours[member].abs().max().item())
    pat = max((tl_cache[n] - cache[n][member]).abs().max().item() for n in model.pattern_names())
    return out, pat


# Every training preset's shape (1 to 24 layers, 1 to 8 heads, head size 8 to 64, with and without
# MLPs, IC readouts), and the variants the presets do not cover.
SHAPES = {name: presets.get(name) for name in presets.TRAIN.names()}
SHAPES["1-layer"] = presets.get("smoke").override(n_layers=1)
SHAPES["non-IC"] = presets.get("smoke").override(ic=False)
SHAPES["non-IC, no MLP"] = presets.get("sec9-smoke").override(ic=False)
SHAPES["learned positions"] = presets.get("smoke").override(pos_embed="learned")
SHAPES["learned positions, no MLP"] = presets.get("sec9-smoke").override(pos_embed="learned")
SHAPES["torch init, sublayers"] = presets.get("quick").override(in_init="torch", resid_scale="sublayers")


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_preset_shape_equals_ours(name):
    cfg = SHAPES[name]
    model = shaken(EnsembleTransformer(cfg.model_config(), seeds=[3, 5]))
    batch = make_batch(cfg.task, range(2), "val")  # 2 sequences: sec9 is 24 layers x d_model 512
    out, pat = compare(model, batch)
    print(f"{name}: outputs {out:.1e}, patterns {pat:.1e}")
    assert out < TOL and pat < TOL, (out, pat)
    # Not vacuous: outputs of order one, and a last row (T keys, uniform: 1/T) mostly on one key.
    with torch.no_grad():
        ours, cache = model.run_with_cache(batch.inputs, names=model.pattern_names())
    assert ours.abs().max() > 0.5
    assert max(c[..., -1, :].max().item() for c in cache.values()) > 0.3


def test_the_mapping_is_exact_and_shares_the_embedding():
    """The reverse gives back the very weights (a round trip is bit-exact), and hooked.W_E and
    hooked.W_pos are the embedding's own parameters, so an edit of either is an edit of both."""
    cfg = presets.get("sec9-smoke").override(pos_embed="learned")
    model = shaken(EnsembleTransformer(cfg.model_config(), seeds=[3, 5]))
    hooked, embed = model_to_transformer_lens(model, 1)
    assert hooked.W_E is embed.W_in and hooked.W_pos is embed.W_pos
    assert all(p.dtype == torch.float32 for p in hooked.parameters())
    back = from_transformer_lens(hooked, embed, cfg.model_config(), seed=5)
    assert back.seeds == (5,)
    want = model.member(1).state_dict()
    assert set(back.state_dict()) == set(want)
    assert all(torch.equal(v, want[k]) for k, v in back.state_dict().items())
    x = make_batch(cfg.task, range(4), "val").inputs
    with torch.no_grad():
        assert torch.equal(back(x), model.member(1)(x))


def test_an_edit_in_transformer_lens_changes_the_model_that_comes_back():
    cfg = presets.get("smoke")
    model = shaken(EnsembleTransformer(cfg.model_config(), seeds=[0]))
    hooked, embed = model_to_transformer_lens(model)
    with torch.no_grad():
        hooked.blocks[1].attn.W_V[1] *= 2.0  # head 1 of layer 1
        ours = model.blocks[1].attn
        H, dh = ours.n_heads, ours.d_head
        ours.W_qkv[0].view(-1, 3, H, dh)[:, 2, 1] *= 2.0  # the same weights in our layout
        back = from_transformer_lens(hooked, embed, cfg.model_config())
    assert torch.equal(back.blocks[1].attn.W_qkv, model.blocks[1].attn.W_qkv)


# --- what does not map -------------------------------------------------------------------------


@pytest.mark.parametrize("setting,value,named", [
    ("normalization_type", "RMS", "normalization_type='RMS'"),
    ("positional_embedding_type", "rotary", "positional_embedding_type='rotary'"),
    ("act_fn", "relu", "act_fn='relu'"),
    ("d_mlp", 100, "d_mlp=100"),
    ("gated_mlp", True, "gated_mlp=True"),
    ("parallel_attn_mlp", True, "parallel_attn_mlp=True"),
    ("n_key_value_heads", 1, "n_key_value_heads=1"),
    ("output_logits_soft_cap", 30.0, "output_logits_soft_cap=30.0"),
    ("n_layers", 3, "n_layers 3"),
])
def test_what_does_not_map_back_is_refused_in_one_line(setting, value, named):
    cfg = presets.get("smoke").model_config()
    hooked, embed = model_to_transformer_lens(EnsembleTransformer(cfg, seeds=[0]))
    setattr(hooked.cfg, setting, value)
    with pytest.raises(UsageError) as e:
        from_transformer_lens(hooked, embed, cfg)
    assert named in str(e.value) and "\n" not in str(e.value)


def test_a_model_setting_not_mapped_yet_is_refused_by_name():
    @dataclass(frozen=True)
    class Rotary(ModelConfig):
        rotary: bool = False

    with pytest.raises(UsageError, match="'rotary' of this model does not map to TransformerLens"):
        hooked_config(Rotary(rotary=True))
    hooked_config(Rotary())  # at its default it changes nothing


def test_missing_transformer_lens_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # import fails as if not installed
    with pytest.raises(UsageError) as e:
        model_to_transformer_lens(EnsembleTransformer(ModelConfig(), seeds=[0]))
    assert str(e.value) == "TransformerLens is not installed: pip install 'stackedheads[interop]'"


def test_import_stackedheads_stays_cheap():
    code = ("import sys, stackedheads, stackedheads.interop; "
            "assert 'transformer_lens' not in sys.modules and 'transformers' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_the_extra_is_pinned_and_installed_by_make():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^interop = \["transformer-lens==3\.9\.0", "circuitsvis==1\.43\.3"\]$', pyproject, re.M)
    assert "'.[dev,ray,llm,interop]'" in (ROOT / "Makefile").read_text()


# --- trained runs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Transformer D's seconds-sized twin (Sec. 9.1 shape: one head per layer, no MLP), two
    members, and the circuits discovery finds in it."""
    root = tmp_path_factory.mktemp("interop")
    run = root / "run"
    train(presets.get("sec9-smoke").override(seeds=(0, 1)), run)
    discover_run(run, root / "circuits")
    return run, root / "circuits"


def test_a_run_member_loads_at_any_checkpoint(trained):
    run, _ = trained
    cfg_batch = None
    for step in (20, None):
        model, cfg, _ = load_model(checkpoint_for(run, step))
        cfg_batch = validation_batch(cfg)[:8]
        hooked, embed = to_transformer_lens(run, seed=1, step=step)
        with torch.no_grad():
            want = model(cfg_batch.inputs)[1]
            got = hooked(embed(cfg_batch.inputs), start_at_layer=0)[:, -cfg.task.chains:]
        assert (got - want).abs().max() < TOL
    with pytest.raises(UsageError, match=r"has seeds \[0, 1\]; asked for seed 7"):
        to_transformer_lens(run, seed=7)
    with pytest.raises(UsageError, match="no checkpoint at step 15"):
        to_transformer_lens(run, seed=0, step=15)


def test_a_bfloat16_run_loads_in_float32(tmp_path):
    run = tmp_path / "run"
    train(presets.get("smoke").override(dtype="bfloat16", steps=10, seeds=(0,)), run)
    model, cfg, _ = load_model(checkpoint_for(run))
    assert cfg.dtype == "bfloat16"
    hooked, embed = to_transformer_lens(run, seed=0)
    assert {p.dtype for p in [*hooked.parameters(), *embed.parameters()]} == {torch.float32}
    batch = validation_batch(cfg)[:8]
    with torch.no_grad():
        ours, cache = model.run_with_cache(batch.inputs, names=model.pattern_names())  # float32 weights, no autocast
        theirs, tl_cache = hooked.run_with_cache(embed(batch.inputs), start_at_layer=0)
    assert (theirs[:, -cfg.task.chains:] - ours[0]).abs().max() < TOL
    assert all((tl_cache[n] - cache[n][0]).abs().max() < TOL for n in model.pattern_names())


def hand_written(depth: int, n_layers: int) -> Circuit:
    """A circuit for a 1-head model with every kind of row ``circuit validate`` reports: paths on
    rule rows, rows left to the head (kept), uniform heads and a redundant group."""
    heads = [HeadSpec(0, 0, {"first": "uniform", "second": "s+2", "query": "kept"}, paths=[(2, 4)]),
             HeadSpec(1, 0, {"first": "identity", "second": "uniform", "query": "s+2"}, paths=[(0, 2)]),
             *[HeadSpec.whole(l, 0, "uniform") for l in range(2, n_layers)]]
    info = DiscoveryRecord(seed=1, redundant_groups=[[CircuitPath(0, 0, 2, 4), CircuitPath(1, 0, 0, 2)]])
    return Circuit(depth, heads, info)


def test_ablation_losses_recomputed_with_transformer_lens_equal_circuit_validate(trained, tmp_path):
    run, circuits = trained
    hand = tmp_path / "hand.json"
    hand_written(2, 3).save(hand)
    largest = 0.0
    for circuit in (circuits / "seed0" / "circuit.json", circuits / "seed1" / "circuit.json", hand):
        result = check_run(run, circuit, n_val=128)
        ours = validate_run(run, circuit, n_val=128)
        assert [name for name, _, _ in result["rows"]] == [str(r.ablation) for r in ours]
        for (_, a, b), want in zip(result["rows"], ours):
            assert a.loss == want.loss  # the left column is circuit validate's, untouched
            assert abs(a.loss - b.loss) < 1e-6 and all(abs(p - q) < 1e-6 for p, q in zip(a.partial, b.partial))
        largest = max(largest, result["max_diff"])
    names = [name for name, _, _ in result["rows"]]  # the hand-written circuit's rows
    assert names == ["none", "combined", "combined, unexplained rows kept", "-L0.0 s2->s4", "-L1.0 s0->s2",
                     "-(L0.0 s2->s4 + L1.0 s0->s2)"]
    # The ablations bite (else equal tables would prove little): combined and per-path losses differ.
    losses = [b.loss for _, _, b in result["rows"]]
    assert len({round(x, 6) for x in losses}) >= 4
    print(f"ablation losses: largest difference {largest:.1e}")


def test_circuit_validate_with_transformer_lens_prints_both_columns(trained, cli):
    run, circuits = trained
    circuit = circuits / "seed1" / "circuit.json"
    r = cli("circuit", "validate", run, "--circuit", circuit, "--n-val", "64", "--transformer-lens")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert "seed 1: val MSE under each ablation" in r.out and lines[-1].startswith("largest difference (losses and partial losses): ")
    assert re.search(r"^│ none +│ \d\.\d{6} +│ \d\.\d{6} +│$", r.out, re.M), r.out
    assert re.search(r"^│ combined +│ \d\.\d{6} +│ \d\.\d{6} +│$", r.out, re.M), r.out
    ours = validate_run(run, circuit, n_val=64)
    assert f"{ours[0].loss:.6f}" in next(s for s in lines if s.startswith("│ none "))  # the left column is circuit validate's
    r = cli("circuit", "validate", run, "--circuit", run / "nothing.json", "--transformer-lens")
    assert r.code == 2 and r.out == "" and "no circuit file" in r.err and len(r.err.splitlines()) == 1


@pytest.mark.parametrize("n_val", ["0", "-5"])
@pytest.mark.parametrize("with_tl", [[], ["--transformer-lens"]], ids=["ours", "transformer-lens"])
def test_circuit_validate_refuses_a_count_of_sequences_below_one(trained, cli, n_val, with_tl):
    run, circuits = trained
    r = cli("circuit", "validate", run, "--circuit", circuits / "seed1" / "circuit.json", "--n-val", n_val, *with_tl)
    assert r.code == 2 and r.out == ""
    assert len(r.err.splitlines()) == 1 and r.err.startswith("stackedheads: error: Invalid value for '--n-val'"), r.err


def test_circuit_validate_without_transformer_lens_installed_is_one_line(trained, cli, monkeypatch):
    run, circuits = trained
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # import fails as if not installed
    r = cli("circuit", "validate", run, "--circuit", circuits / "seed1" / "circuit.json", "--transformer-lens")
    assert (r.code, r.out) == (2, "")
    assert r.err == "stackedheads: error: TransformerLens is not installed: pip install 'stackedheads[interop]'\n"


@pytest.mark.parametrize("n_val", [0, -5, True, 2.5, "64"])
def test_check_run_refuses_a_count_of_sequences_that_is_not_one_or_more(trained, n_val):
    run, circuits = trained
    with pytest.raises(UsageError, match=re.escape(f"n_val must be a whole number >= 1, got {n_val!r}")):
        check_run(run, circuits / "seed1" / "circuit.json", n_val=n_val)


@pytest.mark.parametrize("seed", ["0", False, True, 0.0, None])
def test_a_seed_that_is_not_a_whole_number_is_refused_as_such(trained, tmp_path, seed):
    run, _ = trained
    hooked, embed = to_transformer_lens(run, seed=0)
    want = re.escape(f"seed must be a whole number, got {seed!r}")
    with pytest.raises(UsageError, match=want):
        to_transformer_lens(run, seed)
    with pytest.raises(UsageError, match=re.escape(f"member must be a whole number, got {seed!r}")):
        model_to_transformer_lens(load_model(checkpoint_for(run))[0], seed)
    if seed is not None:  # write_run's seed=None is documented: the run's first seed
        with pytest.raises(UsageError, match=want):
            write_run(hooked, embed, run, tmp_path / "out", seed=seed)
        assert not (tmp_path / "out").exists()


def test_an_edited_model_is_judged_by_circuit_validate(trained, tmp_path, cli):
    run, circuits = trained
    hooked, embed = to_transformer_lens(run, seed=1)
    with torch.no_grad():
        hooked.blocks[0].attn.W_O.zero_()  # silence layer 0
    out = write_run(hooked, embed, run, tmp_path / "edited", seed=1)
    model, cfg, step = load_model(checkpoint_for(out))
    assert cfg.seeds == (1,) and step == 40 and cfg.model_config() == load_model(checkpoint_for(run))[1].model_config()
    # The same edit made in our model gives the same losses.
    ours, _, _ = load_model(checkpoint_for(run))
    with torch.no_grad():
        ours.blocks[0].attn.W_O[1].zero_()
    circuit = circuits / "seed1" / "circuit.json"
    from stackedheads.circuits.ablate import loss_table

    want = loss_table(ours.member(1), validation_batch(cfg)[:512], cfg.task, Circuit.load(circuit))
    got = validate_run(out, circuit)
    assert [(str(r.ablation), r.loss) for r in got] == [(str(r.ablation), r.loss) for r in want]
    assert got[0].loss != validate_run(run, circuit)[0].loss  # the edit changed the model
    code, text, err = cli("circuit", "validate", out, "--circuit", circuit)
    assert code == 0 and "combined" in text, err
    with pytest.raises(UsageError, match="exists"):
        write_run(hooked, embed, run, out, seed=1)
    with pytest.raises(UsageError, match="the HookedTransformer has n_layers 3, the run's model 2"):
        write_run(hooked, embed, presets_run(tmp_path), tmp_path / "other")


def presets_run(tmp_path: Path) -> Path:
    """A run folder of another shape (the smoke preset: 2 layers), config only."""
    from stackedheads.state.write import atomic_write_json

    folder = tmp_path / "smoke-run"
    folder.mkdir()
    atomic_write_json(folder / "config.json", presets.get("smoke").to_dict())
    return folder


# --- docs/interop.md ---------------------------------------------------------------------------


def fenced(text: str):
    """``(language, body)`` of each fenced block, in page order."""
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        yield m.group(1), m.group(2)


def test_the_docs_example_runs_as_written(tmp_path, monkeypatch, cli):
    """Every command and the Python example of docs/interop.md, in page order, in an empty folder
    (the real sec9 check is left out: it needs transformer D's checkpoints)."""
    monkeypatch.chdir(tmp_path)
    page = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    ran = []
    for lang, body in fenced(page):
        if lang == "python":
            exec(compile(body, "docs/interop.md", "exec"), {"__name__": "docs_example"})
            ran.append("python")
            continue
        for line in body.splitlines():
            args = line.split()
            if not args or args[0] == "pip" or "results/sec9" in line:
                continue
            assert args[0] == "stackedheads", line
            code, _, err = cli(*args[1:])
            assert code == 0, f"{line}: {err}"
            ran.append(" ".join(args[:3]) + " --transformer-lens" * ("--transformer-lens" in args))
    assert ran == ["stackedheads train --preset", "python", "stackedheads circuit discover",
                   "stackedheads circuit validate", "stackedheads circuit validate --transformer-lens"]
    assert (tmp_path / "runs" / "sec9-smoke-edited" / "config.json").exists()
    assert "circuits-vis" in (tmp_path / "attention.html").read_text()


def test_partial_losses_through_transformer_lens_equal_ours_with_and_without_a_head_ablated():
    from stackedheads.circuits.ablate import ablated_loss
    from stackedheads.circuits.rules import uniform_causal
    from stackedheads.interop import partial_losses, uniform_attention_hook

    cfg = presets.get("sec9-smoke").override(n_heads=2, d_head=8)
    model = shaken(EnsembleTransformer(cfg.model_config(), seeds=[0, 1]))  # sharp patterns: ablations bite
    batch = validation_batch(cfg)[:64]
    hooked, embed = model_to_transformer_lens(model, 1)
    member = model.member(1)
    plain = partial_losses(hooked, embed, batch, cfg.task)
    assert len(plain[1]) == cfg.task.depth
    assert abs(plain[0] - ablated_loss(member, batch, cfg.task)[0]) < 1e-6
    B, T = batch.inputs.shape[:2]
    for layer in range(cfg.model.n_layers):
        for head in range(cfg.model.n_heads):
            whole = torch.ones(B, T, dtype=torch.bool)
            want = ablated_loss(member, batch, cfg.task, {layer: {head: (uniform_causal(B, T), whole)}})
            got = partial_losses(hooked, embed, batch, cfg.task, [uniform_attention_hook(layer, head)])
            assert abs(got[0] - want[0]) < 1e-6 and all(abs(p - q) < 1e-6 for p, q in zip(got[1], want[1]))
            assert abs(got[0] - plain[0]) > 1e-3  # the ablation bites: equal losses would prove little
    with pytest.raises(UsageError, match="layer 0 has 2 heads; asked for head 3"):
        partial_losses(hooked, embed, batch, cfg.task, [uniform_attention_hook(0, 3)])
    with pytest.raises(UsageError, match="head must be a whole number >= 0, got -1"):
        uniform_attention_hook(0, -1)
