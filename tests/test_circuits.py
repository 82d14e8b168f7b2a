"""Circuits: rules, ablations and discovery, on a model whose circuit is known by construction."""

import pytest
import torch
from conftest import is_figure
from helpers import KNOWN, Forced, train_forced  # noqa: F401
from helpers import one_error

from stackedheads.circuits import rules
from stackedheads.circuits.ablate import (
    COMBINED,
    COMBINED_KEPT,
    Ablation,
    Circuit,
    DiscoveryRecord,
    HeadSpec,
    ablated_loss,
    loss_table,
    replaced_patterns,
)
from stackedheads.circuits.discover import (
    DiscoverConfig,
    Search,
    candidate_paths,
    discover,
    plot_circuit,
    retry_candidates,
    rule_cover,
    split,
)
from stackedheads.claims import sec8
from stackedheads.errors import UsageError
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.tasks.vectors import VectorTaskConfig, make_batch

U, KEPT = rules.UNIFORM, rules.KEPT


def test_hop_rules_follow_the_chain():
    task = VectorTaskConfig(chains=3, depth=3)
    b = make_batch(task, range(8))
    m = b.meta
    idx = rules.s_index(m)
    cp = rules.chain_positions(m)
    T = task.seq_len
    pos = torch.arange(T).expand(8, T)
    for d in (-1, 1, 2, 3):
        tgt = rules.hop(d)(m)
        assert torch.all(tgt <= pos)  # causal
        moved = tgt != pos
        # Wherever the rule moves, it lands on the same chain's s_{i+d}, holding x_{(i+d)//2}.
        assert torch.all(m.chain.gather(1, tgt)[moved] == m.chain[moved])
        assert torch.all(idx.gather(1, tgt)[moved] == (idx + d)[moved])
    # s-1 from a second token is its pair partner, which is also the previous position.
    second = m.role == rules.ROLES["second"]
    assert torch.equal(rules.hop(-1)(m)[second], rules.previous(m)[second])
    # The query's s+1 is the first occurrence of x_0: the induction head's target.
    q = m.role == rules.ROLES["query"]
    assert torch.all(m.chain_pos.gather(1, rules.hop(1)(m))[q] == 0)
    assert torch.all(cp[torch.arange(8)[:, None], m.chain, idx] == pos)


def test_patterns_are_rows_that_sum_to_one_and_respect_the_mask():
    task = VectorTaskConfig(chains=2, depth=2)
    b = make_batch(task, range(4))
    pat, rows = rules.head_pattern({"first": U, "second": "s-1", "query": "s+2"}, b.meta, rules.library(2))
    assert rows.all()
    T = task.seq_len
    assert torch.allclose(pat.sum(-1), torch.ones(4, T))
    assert torch.all(pat.triu(1) == 0)


def test_rule_mass_finds_the_rule_a_pattern_was_made_from():
    task = VectorTaskConfig(chains=2, depth=3)
    b = make_batch(task, range(16))
    lib = rules.library(3)
    pat, _ = rules.head_pattern({"first": "identity", "second": "s+1", "query": "s+4"}, b.meta, lib)
    masses = rules.rule_mass(pat, b.meta, lib)
    assert masses["second"]["s+1"] == pytest.approx(1.0)
    assert masses["query"]["s+4"] == pytest.approx(1.0) and masses["query"]["s+2"] == pytest.approx(0.0)


# --- a model whose circuit is known by construction ------------------------------------------

@pytest.fixture(scope="module")
def forced_model():
    return train_forced(Forced)


@pytest.mark.slow
def test_forced_model_solves_the_task(forced_model):
    model, task, val = forced_model
    loss, _ = ablated_loss(model, val, task)
    assert loss < 0.05, loss
    # Breaking the circuit breaks the model: the induction path is necessary.
    broken = Circuit(2, [HeadSpec.whole(0, 0, KEPT), HeadSpec.whole(1, 0, U), HeadSpec.whole(2, 0, KEPT)])
    assert ablated_loss(model, val, task, replaced_patterns(broken, val.meta))[0] > 0.3


@pytest.mark.slow
def test_discovery_recovers_the_known_circuit(forced_model, tmp_path):
    model, task, val = forced_model
    found = discover(model, val, task, DiscoverConfig(tolerance=0.02))
    assert sorted(found.circuit.paths()) == [(0, 0, 2, 4), (1, 0, 0, 2)]
    assert found.unexplained == []
    assert found.circuit.head(2, 0).shared in (U, rules.IDENTITY)
    summary = found.summary()
    # Forced attention needs no shared information to find its target (it is exempt from
    # Assumption 1), so it can beat the theory's minimum of 3 heads for D = 2.
    assert summary["n_useful_heads"] == 2 and summary["theory_min_heads"] == 3
    rows = {r.ablation: r for r in found.table}
    # Validated on held-out sequences, every position within its budget (not only the mean).
    assert all(p <= b for p, b in zip(rows[COMBINED].partial, found.budgets))
    assert summary["over_budget"] == [] and summary["redundant_groups"] == []
    assert all(r.loss > found.threshold for a, r in rows.items() if a.kind == "paths")
    assert [str(a) for a in rows] == ["none", "combined", "-L0.0 s2->s4", "-L1.0 s0->s2"]  # losses.json's text
    assert summary["serves"] == {"L0.0 s2->s4": [2], "L1.0 s0->s2": [1, 2]}
    # Each replaced row's share of its held-out attention that its rule catches: the whole.
    assert [row[:4] for row in summary["coverage"]] == [[0, 0, "second", "s+2"], [1, 0, "query", "s+2"]]
    assert all(row[4] > 0.99 for row in summary["coverage"])
    # Every head's map on the pair links, held out: this circuit's first head reads s_2k+2 instead.
    assert [row[:2] for row in summary["pair_attention"]] == [[0, 0], [1, 0], [2, 0]]
    assert max(summary["pair_attention"][0][2]) < 0.5
    # The circuit is data: it survives a JSON round trip and validates the same way.
    found.circuit.save(tmp_path / "circuit.json")
    again = Circuit.load(tmp_path / "circuit.json")
    assert [r.loss for r in loss_table(model, split(val)[1], task, again)] == [r.loss for r in found.table]
    files = plot_circuit(again, tmp_path)
    assert all(is_figure(tmp_path / f) for f in ("circuit.png", "circuit.svg"))
    assert len(files) == 2


class ForcedPairs(Forced):
    """L0.0's second tokens read their pair partner (Sec. 8.2's first head); L1.0 is uniform."""

    circuit = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "s-1", "query": U}), HeadSpec.whole(1, 0, U)])


def test_pair_attention_reads_each_heads_map_on_the_pair_links():
    task = VectorTaskConfig(chains=2, depth=2, n_train=256, n_val=64)
    cfg = ModelConfig(d_in=task.d_in, d_out=task.d_out, n_queries=2, n_layers=2, n_heads=1, d_model=16)
    val = make_batch(task, range(64), "val")
    got = rules.pair_attention(ForcedPairs(cfg, seeds=[0]).member(0), val, task.depth)
    assert [row[:2] for row in got] == [[0, 0], [1, 0]]
    assert got[0][2] == [1.0, 1.0]  # every pair's second token on its first: the link, whole
    # Uniform attention spreads a row over every earlier position: below Figure 7's 0.5.
    assert all(0 < a < 0.5 for a in got[1][2]), got[1][2]


@pytest.mark.slow
def test_a_rule_names_a_row_only_where_it_catches_half_its_attention(forced_model):
    """App. E reads each map off where the head attends: a rule kept for the loss alone but
    catching under half of its row's held-out attention leaves the row unexplained (kept)."""
    model, task, val = forced_model
    search, check = split(val)
    s = Search(model, search, task, DiscoverConfig(tolerance=0.02))
    lib = rules.library(task.depth)
    observed = s.observed(s.circuit.head(1, 0))
    assert rule_cover(observed, search.meta, lib, "query", "s+2") > 0.99  # L1.0's query reads s+2
    assert rule_cover(observed, search.meta, lib, "query", "s+1") < 0.01
    s.circuit = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}),
                            HeadSpec(1, 0, {"first": U, "second": U, "query": "s+1"}), HeadSpec.whole(2, 0, U)])
    assert s.unlabel(check)
    assert s.circuit.head(1, 0).rules["query"] == KEPT and s.circuit.head(0, 0).rules["second"] == "s+2"
    assert not s.unlabel(check)  # nothing left to unlabel


def test_retried_rows_get_only_rules_catching_min_mass():
    lib = rules.library(2)
    masses = dict.fromkeys(lib, 0.0) | {"s+1": 0.7, "s+2": 0.3, "p3": 0.45}
    got = retry_candidates(masses, lib, 0.5)
    assert "s+1" in got and "s+2" not in got and "p3" not in got
    assert lib[got[-1]].measured  # the row's own map, last


def test_candidate_paths_are_causal_chain_hops():
    spec = HeadSpec(0, 0, {"first": "s+2", "second": "s-1", "query": "s+1"})
    paths = candidate_paths(spec, depth=2)
    assert (0, 1) in paths and (2, 1) in paths and (4, 3) in paths and (1, 3) in paths
    assert (3, 5) not in paths  # s_5 does not exist for D = 2


def test_bad_circuit_files(tmp_path):
    with pytest.raises(UsageError):
        Circuit.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"depth": 1, "heads": [{"layer": 0, "head": 0, "rules": {"first": "uniform"}}]}')
    with pytest.raises(UsageError):
        Circuit.load(tmp_path / "bad.json")


def test_kept_rows_keep_the_heads_own_attention(forced_model):
    model, task, val = forced_model
    natural, _ = ablated_loss(model, val, task)
    all_kept = Circuit(2, [HeadSpec.whole(l, 0, KEPT) for l in range(3)])
    assert ablated_loss(model, val, task, replaced_patterns(all_kept, val.meta))[0] == natural
    per_role_kept = Circuit(2, [HeadSpec(l, 0, {r: KEPT for r in rules.ROLES}) for l in range(3)])
    assert ablated_loss(model, val, task, replaced_patterns(per_role_kept, val.meta))[0] == natural
    # Replacing only the query rows of layer 1 with uniform attention breaks the model.
    q_only = Circuit(2, [HeadSpec.whole(0, 0, KEPT), HeadSpec(1, 0, {"first": KEPT, "second": KEPT, "query": U}), HeadSpec.whole(2, 0, KEPT)])
    assert ablated_loss(model, val, task, replaced_patterns(q_only, val.meta))[0] > natural + 0.2


def test_combined_ablation_makes_unexplained_rows_uniform(forced_model):
    """Kept rows hide nothing: the combined ablation (strict) replaces them with uniform."""
    model, task, val = forced_model
    natural, _ = ablated_loss(model, val, task)
    kept_query = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}),
                             HeadSpec(1, 0, {"first": U, "second": U, "query": KEPT}), HeadSpec.whole(2, 0, U)])
    lenient = ablated_loss(model, val, task, replaced_patterns(kept_query, val.meta))[0]
    strict = ablated_loss(model, val, task, replaced_patterns(kept_query, val.meta, strict=True))[0]
    assert lenient < natural + 0.02 and strict > natural + 0.2
    rows = {r.ablation: r.loss for r in loss_table(model, val, task, kept_query)}
    assert rows[COMBINED] == strict and rows[COMBINED_KEPT] == lenient
    assert str(COMBINED_KEPT) == "combined, unexplained rows kept"


# Two heads do the same job: layers 0 and 1 both let x_1's second token read x_2's (s_2 -> s_4),
# then the query reads s_2. Either suffices (Sec. 9.2's layers 14 and 21 both retrieve B).
REDUNDANT = Circuit(
    depth=2,
    heads=[
        HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}),
        HeadSpec(1, 0, {"first": U, "second": "s+2", "query": U}),
        HeadSpec(2, 0, {"first": U, "second": U, "query": "s+2"}),
    ],
)


class ForcedRedundant(Forced):
    circuit = REDUNDANT


@pytest.fixture(scope="module")
def redundant_model():
    return train_forced(ForcedRedundant, drops=([(0, 0, 2)], [(1, 0, 2)]), steps=600)


@pytest.mark.slow
def test_discovery_reports_both_redundant_paths(redundant_model):
    model, task, val = redundant_model
    assert ablated_loss(model, val, task)[0] < 0.05
    found = discover(model, val, task, DiscoverConfig(tolerance=0.05))
    pair = ["L0.0 s2->s4", "L1.0 s2->s4"]
    assert sorted(found.circuit.paths()) == [(0, 0, 2, 4), (1, 0, 2, 4), (2, 0, 0, 2)]
    assert [[p.key for p in g] for g in found.circuit.info.redundant_groups] == [pair]
    rows = {r.ablation: r for r in found.table}
    # Alone, each is dispensable; together they carry x_2.
    assert all(max(rows[Ablation.removed(p)].partial) <= max(found.budgets) for p in [(0, 0, 2, 4), (1, 0, 2, 4)])
    joint = rows[Ablation.removed((0, 0, 2, 4), (1, 0, 2, 4))]
    assert str(joint.ablation) == "-(" + " + ".join(pair) + ")"
    assert joint.partial[1] > found.budgets[1]
    # A group's paths serve what removing the whole group breaks.
    serves = found.summary()["serves"]
    assert serves[pair[0]] == serves[pair[1]] and 2 in serves[pair[0]]


def test_first_token_is_a_path_when_it_carries_information():
    spec = HeadSpec(0, 0, {"first": U, "second": U, "query": "first-token"})
    assert candidate_paths(spec, depth=2) == [(0, -1)]
    from stackedheads.circuits.ablate import path_key

    assert path_key((3, 0, 0, -1)) == "L3.0 s0->p0"


def test_discovery_keeps_a_path_that_breaks_one_position_but_not_the_mean(forced_model):
    """The budget holds for every chain position, not only for their mean. Removing
    L0.0's s2->s4 breaks x2 alone: with a tolerance above the mean's rise but below x2's, a
    search on the mean would drop the path; per position, discovery keeps it."""
    model, task, val = forced_model
    found = discover(model, val, task, DiscoverConfig(tolerance=0.6))
    rows = {r.ablation: r for r in found.table}
    removed = rows[Ablation.removed((0, 0, 2, 4))]
    assert removed.loss <= sum(found.budgets) / len(found.budgets)  # the mean stays within budget
    assert removed.partial[1] > found.budgets[1] and removed.partial[0] <= found.budgets[0]  # x2 does not
    assert (0, 0, 2, 4) in found.circuit.paths()
    assert found.summary()["serves"]["L0.0 s2->s4"] == [2]
    assert all(p <= b for p, b in zip(rows[COMBINED].partial, found.budgets))


def test_a_circuit_the_rules_cannot_explain_is_reported_partial(forced_model, monkeypatch):
    """Without the s+2 rule (and the shortcut rules, whose measured maps would reproduce it)
    nothing explains the model's two heads: their rows are kept, the combined ablation makes
    them uniform, every position breaks, and the circuit is reported partial with the
    positions and rows named (A3 INCONCLUSIVE, never PASS)."""
    from stackedheads import claims
    from stackedheads.circuits import discover as disc

    full = rules.library

    def no_s2(depth):
        lib = full(depth)
        return rules.Library(depth, {k: v for k, v in lib.items() if k != "s+2" and not v.shortcut}, [])

    monkeypatch.setattr(disc, "library", no_s2)
    model, task, val = forced_model
    found = discover(model, val, task, DiscoverConfig(tolerance=0.05))
    s = found.summary()
    assert (1, 0, "query") in found.unexplained and (0, 0, "second") in found.unexplained
    assert s["over_budget"] == ["x1", "x2"]
    rows = {r.ablation: r for r in found.table}
    # Left to the heads, the kept rows keep the loss: only the strict combined ablation shows it.
    assert all(p <= b for p, b in zip(rows[COMBINED_KEPT].partial, found.budgets))
    assert s["n_useful_heads"] >= 2  # kept heads count as useful
    train_summary = {"config": {"n_layers": 3, "n_heads": 1, "task": {"chains": 2, "depth": 2}},
                     "seeds": {"0": {"final_val_loss": s["unablated"]["loss"],
                                     "final_partial": {f"val_x{j}": p for j, p in enumerate(s["unablated"]["partial"], 1)}}}}
    a3 = {c.id: c for c in sec8.circuit_claims({"train": train_summary, "circuits": {"0": s}})}["A3"]
    assert a3.verdict == claims.INCONCLUSIVE
    assert "partial circuit:" in a3.measured and "unexplained rows made uniform" in a3.measured and "L1.0 query" in a3.measured
    per_position = next(r for r in a3.readings if r.reading == "per-position").measured
    assert "partial circuit: x1, x2 over budget" in per_position


def test_redundant_groups_are_minimal_and_repeat():
    """Step 6 on a stand-in loss: L2 is necessary alone; L0/L1 are stand-ins (a pair); L3-L5
    are three stand-ins (no pair breaks, the triple does); L6 never matters and is not swept
    into a group."""
    from stackedheads.circuits.discover import _useful_paths

    second, query, other = ({"first": U, "second": "s+2", "query": U}, {"first": U, "second": U, "query": "s+2"},
                            {"first": U, "second": U, "query": "s+1"})
    circuit = Circuit(2, [HeadSpec(0, 0, dict(second)), HeadSpec(1, 0, dict(second)), HeadSpec(2, 0, dict(query)),
                          *(HeadSpec(l, 0, dict(query)) for l in (3, 4, 5)), HeadSpec(6, 0, dict(other))])
    assert candidate_paths(circuit.head(6, 0), 2) == [(0, 1)]
    pair, triple = {(0, 0, 2), (1, 0, 2)}, {(3, 0, 0), (4, 0, 0), (5, 0, 0)}

    def fits(remove=None):
        gone = {tuple(r) for r in (remove or [])}
        return not ((2, 0, 0) in gone or pair <= gone or triple <= gone)

    groups = _useful_paths(circuit, fits)
    assert sorted(map(sorted, groups)) == [[(0, 0, 2, 4), (1, 0, 2, 4)], [(3, 0, 0, 2), (4, 0, 0, 2), (5, 0, 0, 2)]]
    assert circuit.head(6, 0).paths == [] and circuit.head(2, 0).paths == [(0, 2)]
    assert sorted(circuit.paths()) == sorted([(0, 0, 2, 4), (1, 0, 2, 4), (2, 0, 0, 2), (3, 0, 0, 2), (4, 0, 0, 2), (5, 0, 0, 2)])


def test_the_diagram_shows_redundant_groups(tmp_path):
    """Figure 5 style: the paths of a redundant group are drawn dashed and labelled g1."""
    circuit = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}, [(2, 4)]),
                          HeadSpec(1, 0, {"first": U, "second": "s+2", "query": U}, [(2, 4)]),
                          HeadSpec(2, 0, {"first": U, "second": U, "query": "s+2"}, [(0, 2)])],
                      info=DiscoveryRecord.from_dict({"redundant_groups": [["L0.0 s2->s4", "L1.0 s2->s4"]]}))
    plot_circuit(circuit, tmp_path / "g")
    svg = (tmp_path / "g" / "circuit.svg").read_text()  # matplotlib names each text in a comment
    assert "<!-- L0.0 g1 -->" in svg and "<!-- L1.0 g1 -->" in svg and "<!-- L2.0 -->" in svg
    assert "1 redundant group(s)" in svg and "stroke-dasharray" in svg
    plot_circuit(Circuit(2, circuit.heads), tmp_path / "plain")
    plain = (tmp_path / "plain" / "circuit.svg").read_text()
    assert "<!-- L0.0 -->" in plain and " g1 -->" not in plain and "redundant" not in plain
    assert "stroke-dasharray" not in plain


# --- Circuit files validated on load, and the discover command's folder and options

import json  # noqa: E402


def _circuit(**over):
    heads = [{"layer": 0, "head": 0, "rules": "uniform", "paths": []},
             {"layer": 1, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}]
    d = {"depth": 2, "heads": heads, "info": {}}
    d.update(over)
    return d


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["heads"][1]["rules"].update(first="s+99"), "unknown rule"),
        (lambda d: d["heads"][0].update(rules="sometimes"), "unknown kind"),
        (lambda d: d["heads"][1].update(paths=[[9, 0]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[-2, 0]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[1, -3]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[1]]), "a path must be"),
        (lambda d: d["heads"][0].update(layer=-1), "layer and head"),
        (lambda d: d.update(depth="2"), "depth"),
        (lambda d: d.update(heads={}), "heads"),
        (lambda d: d["heads"][1].update(rules=["s-1"]), "rules must be"),
    ],
)
def test_circuit_schema_validated_on_load(tmp_path, mutate, message):
    from stackedheads.circuits.ablate import Circuit

    good = tmp_path / "good.json"
    good.write_text(json.dumps(_circuit()))
    assert Circuit.load(good).paths() == [(1, 0, 1, 0)]
    d = _circuit()
    mutate(d)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(UsageError, match=message):
        Circuit.load(bad)


def test_circuit_sink_path_is_valid(tmp_path):
    from stackedheads.circuits.ablate import SINK, Circuit

    d = _circuit()
    d["heads"][1]["paths"] = [[1, SINK]]
    (tmp_path / "c.json").write_text(json.dumps(d))
    assert Circuit.load(tmp_path / "c.json").paths() == [(1, 0, 1, SINK)]


def test_spec_is_a_folder(tmp_path, cli):
    code, _, stderr = cli("circuit", "validate", str(tmp_path), "--spec", str(tmp_path))
    assert code == 2 and "is a folder" in stderr and "Traceback" not in stderr


def test_tolerance_nan_refused(tmp_path, cli):
    out = tmp_path / "out"
    for bad in ("nan", "inf", "-1"):
        code, _, stderr = cli("circuit", "discover", str(tmp_path), "--out", str(out), "--tolerance", bad)
        assert code == 2 and "tolerance" in stderr and not out.exists()


def test_discover_folder_locked(tmp_path, held):
    from stackedheads.circuits.discover import discover_run
    from stackedheads.errors import UsageError
    from helpers import train_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(train_config()))
    held(tmp_path / "c")
    with pytest.raises(UsageError, match="in use by pid"):
        discover_run(run, tmp_path / "c")


def test_older_circuit_files_name_a_whole_head_once(tmp_path):
    """Every head's rules are {role: rule}; a file that names one rule for a whole head
    loads (as that rule for every role) and is written back per role."""
    import json

    d = {"depth": 2, "heads": [{"layer": 0, "head": 0, "rules": "uniform", "paths": []},
                               {"layer": 1, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": U}, "paths": [[1, 0]]}],
         "info": {"seed": 3, "redundant_groups": [["L1.0 s1->s0"]], "unknown": 1}}
    (tmp_path / "old.json").write_text(json.dumps(d))
    c = Circuit.load(tmp_path / "old.json")
    assert c.head(0, 0).rules == dict.fromkeys(rules.ROLES, U) and c.head(0, 0).shared == U
    assert c.head(1, 0).shared is None and c.kept() == [(1, 0, "second")]
    assert c.info.seed == 3 and c.info.redundant_groups == [[(1, 0, 1, 0)]]
    c.save(tmp_path / "new.json")
    again = json.loads((tmp_path / "new.json").read_text())
    assert again["heads"][0]["rules"] == dict.fromkeys(rules.ROLES, U)
    assert again["info"] == {"seed": 3, "redundant_groups": [["L1.0 s1->s0"]], "serves": {}}


def test_discovery_one_seed_at_a_time_gives_the_same_files(tmp_path, cli):
    """``--seeds`` splits a long discovery (paper-size members take minutes each): each member's
    circuit is found alone, so one seed at a time writes the bytes a whole run writes, and a
    seed the run lacks is one line."""
    from stackedheads import presets
    from stackedheads.training import train

    run = tmp_path / "run"
    train(presets.SEC8_SMOKE.override(steps=20, seeds=(0, 1)), run)
    code, _, err = cli("circuit", "discover", run, "--out", tmp_path / "all")
    assert code == 0, err
    for seed in (1, 0):
        code, out, err = cli("circuit", "discover", run, "--out", tmp_path / "one", "--seeds", seed)
        assert code == 0 and f"seed {seed}:" in out and f"seed {1 - seed}:" not in out, err
    for seed in (0, 1):
        for name in ("circuit.json", "summary.json", "losses.json"):
            assert (tmp_path / "one" / f"seed{seed}" / name).read_bytes() == (tmp_path / "all" / f"seed{seed}" / name).read_bytes()
    code, _, err = cli("circuit", "discover", run, "--out", tmp_path / "bad", "--seeds", "0,7")
    assert code == 2 and "has seeds 0, 1; asked for 0, 7" in err and not (tmp_path / "bad" / "seed0").exists()
    # Another threshold for one seed would mix two discoveries in one folder: refused, nothing written.
    before = (tmp_path / "one" / "seed0" / "circuit.json").read_bytes()
    code, _, err = cli("circuit", "discover", run, "--out", tmp_path / "one", "--seeds", "0", "--threshold", "0.07")
    assert code == 2 and one_error(err) and "seed1/circuit.json was discovered at step 20" in err and "one discovery" in err, err
    assert (tmp_path / "one" / "seed0" / "circuit.json").read_bytes() == before


def _oracle_loss(model, batch, task):
    """Every layer run for every circuit: what the Ablator must give, byte for byte."""
    def loss(self, circuit, remove=None, strict=False):
        self.calls += 1
        return ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta, remove, strict))
    return loss


def test_the_ablator_gives_the_losses_of_a_full_rerun():
    """Reusing the stream below the first changed layer changes only the time: over random
    circuits, removals and anchors, each loss is exactly what running every layer gives."""
    from stackedheads.circuits.ablate import Ablator

    task = VectorTaskConfig(chains=2, depth=2, dims=4)
    model = EnsembleTransformer(ModelConfig(n_layers=6, n_heads=2, d_model=32, d_in=task.d_in, d_out=task.d_out,
                                            n_queries=task.chains), seeds=[3])
    batch = make_batch(task, range(16), "val")
    lib = rules.library(task.depth)
    names = [n for n in lib if not lib[n].measured] + [KEPT] * 6  # kept often: a layer without hooks runs fused
    gen = torch.Generator().manual_seed(0)

    def pick(seq):
        return seq[int(torch.randint(len(seq), (1,), generator=gen))]

    circuit = Circuit(task.depth, [HeadSpec.whole(l, h, KEPT) for l in range(6) for h in range(2)])
    ablator = Ablator(model, batch, task)
    for _ in range(60):
        spec = pick(circuit.heads)  # one change at a time, as discovery makes them
        spec.rules[pick(list(rules.ROLES))] = pick(names)
        remove = [(spec.layer, spec.head, pick(range(2 * task.depth + 1)))] if pick([0, 1]) else None
        strict = bool(pick([0, 1]))
        want = ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta, remove, strict))
        assert ablator.loss(circuit, remove, strict) == want
        if pick([0, 1]):
            ablator.promote()
    assert ablator.layers_run < 0.8 * 6 * ablator.calls  # the stream was reused
    # A circuit asked again is not run again, and promoting it keeps the stream it shares.
    run = ablator.layers_run
    assert ablator.loss(circuit, remove, strict) == want and ablator.layers_run == run
    ablator.promote()
    spec = circuit.heads[-1]
    spec.rules["query"] = U if spec.rules["query"] != U else KEPT
    assert ablator.loss(circuit) == ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta))


@pytest.mark.slow
def test_discovery_with_reuse_finds_what_rerunning_every_layer_finds(redundant_model, monkeypatch):
    """The whole search (paths, redundant groups, simplification) on the Ablator and on a full
    rerun per trial: the same circuit and the same held-out losses."""
    from stackedheads.circuits import ablate

    model, task, val = redundant_model
    cfg = DiscoverConfig(tolerance=0.05)
    found = discover(model, val, task, cfg)
    with monkeypatch.context() as m:
        m.setattr(ablate.Ablator, "loss", lambda self, c, remove=None, strict=False: _oracle_loss(
            model, self.batch, task)(self, c, remove, strict))
        again = discover(model, val, task, cfg)
    assert again.circuit.to_dict() == found.circuit.to_dict()
    assert found.summary() == again.summary()
