"""Rules for what the twins do besides retrieval (fixed positions and offsets, the
other chains' tokens, mixtures of two rules), and the diagnosis of rows no rule explains."""

import pytest
import torch
from helpers import Forced, train_forced

from stackedheads.circuits import discover as disc
from stackedheads.circuits import rules
from stackedheads.circuits.ablate import Circuit, HeadSpec, check_circuit_dict, path_key
from stackedheads.circuits.diagnose import diagnose_row, rule_kind
from stackedheads.circuits.discover import (
    DiscoverConfig,
    clearer,
    discover,
    retry_candidates,
    role_candidates,
)
from stackedheads.errors import UsageError
from stackedheads.tasks.vectors import VectorTaskConfig, make_batch

U = rules.UNIFORM


def batch(chains=4, depth=3, n=64):
    return make_batch(VectorTaskConfig(chains=chains, depth=depth), range(n))


def masses(by_role, meta, depth):
    lib = rules.library(depth)
    pat, _ = rules.head_pattern(by_role, meta, lib)
    return rules.rule_mass(pat, meta, lib), pat, lib


# --- positional: a fixed position, a fixed offset ----------------------------------------------


def test_a_fixed_position_fits_a_head_that_reads_it_and_not_a_retrieval_head():
    b = batch()
    got, _, lib = masses({"first": U, "second": U, "query": "p7"}, b.meta, 3)
    assert got["query"]["p7"] == pytest.approx(1.0)
    # It fits clearly better than any rule of the paper's: discovery tries it in their place.
    paper = max((n for n in got["query"] if not lib[n].shortcut and not lib[n].baseline), key=got["query"].get)
    assert got["query"][paper] < 0.5 and clearer(paper, got["query"], lib, 0.4)[0] == "p7"
    # A retrieval head's target moves with the shuffled chains: with N = 4 no fixed position
    # catches the 0.4 a candidate needs, and s+2 stays the best fit.
    got, _, lib = masses({"first": U, "second": U, "query": "s+2"}, b.meta, 3)
    assert max(m for n, m in got["query"].items() if n.startswith("p")) < 0.4
    assert role_candidates(got["query"], lib, 0.4)[0] == "s+2" and clearer("s+2", got["query"], lib, 0.4) == []
    # With N = 2 the retrieval target sits at one of two positions: a fixed position catches
    # half the attention, and is no clearer explanation than s+2.
    got, _, lib = masses({"first": U, "second": U, "query": "s+2"}, batch(chains=2).meta, 3)
    assert max(m for n, m in got["query"].items() if n.startswith("p")) >= 0.4 and clearer("s+2", got["query"], lib, 0.4) == []


def test_a_fixed_offset_fits_a_head_that_reads_it_and_not_a_retrieval_head():
    b = batch()
    got, _, lib = masses({"first": "t-3", "second": U, "query": U}, b.meta, 3)
    assert got["first"]["t-3"] == pytest.approx(1.0) and clearer("previous", got["first"], lib, 0.4)[0] == "t-3"
    got, _, _ = masses({"first": "s+2", "second": U, "query": U}, b.meta, 3)
    assert max(m for n, m in got["first"].items() if n.startswith("t-")) < 0.4


def test_positional_rules_are_shortcut_paths():
    lib = rules.library(3)
    assert lib["p7"].paths("query", 3) == [(0, "p7")] and lib["t-3"].paths("first", 3) == [(1, "t-3"), (3, "t-3"), (5, "t-3")]
    assert rule_kind(lib["p7"], "query", 3) == rules.POSITIONAL and rule_kind(lib["s+2"], "query", 3) == rules.RETRIEVAL
    # Position 0 is first-token's (a sink) and one back is previous's; previous is the pair
    # partner (retrieval) for a second token only.
    assert "p0" not in lib and "t-1" not in lib and "p-1" not in lib
    assert rule_kind(lib["previous"], "second", 3) == rules.RETRIEVAL and rule_kind(lib["previous"], "first", 3) == rules.POSITIONAL
    assert [rules.path_kind(d) for d in (4, rules.SINK, "p7", "t-2", "o3")] == [
        rules.RETRIEVAL, rules.POSITIONAL, rules.POSITIONAL, rules.POSITIONAL, rules.CROSS_CHAIN]
    assert path_key((3, 0, 0, "p7")) == "L3.0 s0->p7" and path_key((3, 0, 0, rules.SINK)) == "L3.0 s0->p0"
    b = batch()
    rows, cols = rules.path_ends(b.meta, 2, "t-2")
    assert torch.equal(cols, rows - 2)
    assert torch.equal(rules.path_ends(b.meta, 0, "p7")[1], torch.full((64, 4), 7))
    # The first token of the deepest pair (s5 for D = 3) sits at position 0 in one chain of every
    # sequence, where "one back" is itself (attention 1 whatever the head does): that entry is
    # the other chain's instead, so the path's mean attention is over tokens that can follow it.
    m2 = batch(chains=2).meta
    rows, cols = rules.path_ends(m2, 5, "t-1")
    assert torch.all(cols == rows - 1) and torch.all(rows > 0)
    assert torch.equal(rows[:, 0], rows[:, 1]) and torch.all(rows[:, 0] == 2)


# --- the other chains' token of the same step ---------------------------------------------------


def test_other_chains_rule_reads_the_same_step_of_the_other_chains():
    b = batch(chains=3)
    m = b.meta
    pat = rules.library(3)["o+0"].pattern(m)
    assert torch.allclose(pat.sum(-1), torch.ones_like(pat[..., 0])) and torch.all(pat.triu(1) == 0)
    bb, tt, cc = (pat > 0).nonzero(as_tuple=True)
    moved = tt != cc
    # Where a token reads something other than itself, it is another chain's token of its own
    # step and role, spread evenly over those that come before it.
    for x in (m.chain_pos, m.role):
        assert torch.equal(x[bb, tt][moved], x[bb, cc][moved])
    assert torch.all(m.chain[bb, tt][moved] != m.chain[bb, cc][moved])
    assert torch.all(pat[1, -1][pat[1, -1] > 0] == 0.5)  # the last query sees the other two queries
    rows, cols = rules.path_ends(m, 0, "o0")
    assert rows.shape == cols.shape == (64, 6)


def test_other_chains_rule_fits_a_head_that_reads_them_and_not_a_retrieval_head():
    b = batch()
    got, _, lib = masses({"first": U, "second": "o+0", "query": U}, b.meta, 3)
    assert got["second"]["o+0"] == pytest.approx(1.0) and retry_candidates(got["second"], lib, 0.4)[0] == "o+0"
    assert rule_kind(lib["o+0"], "second", 3) == rules.CROSS_CHAIN and lib["o+0"].paths("second", 3)[0] == (2, "o2")
    got, _, _ = masses({"first": U, "second": "s+2", "query": U}, b.meta, 3)
    assert got["second"]["o+0"] == pytest.approx(0.0) and got["second"]["o+2"] == pytest.approx(0.0)


# --- a mixture of two rules --------------------------------------------------------------------


def test_a_mixture_is_proposed_where_no_single_rule_fits():
    b = batch()
    lib = rules.library(3)
    half = 0.5 * lib["s+2"].pattern(b.meta) + 0.5 * lib["o+0"].pattern(b.meta)
    got = rules.rule_mass(half, b.meta, lib)["query"]
    # The first of the four queries sees no other query: o+0 sends it to itself, where the
    # mixture reads s+2 alone (half of that token's attention): 1 - 0.5 / 4.
    assert got["s+2"] == pytest.approx(0.5) and got["s+2&o+0"] == pytest.approx(0.875)
    # The first pass tries the paper's rules (o+0 catches no more than s+2: no clear shortcut);
    # a row they leave unexplained gets the shortcuts, single rules before the mixture, then
    # the baselines, then its own map.
    assert role_candidates(got, lib, 0.4) == ["s+2", U, rules.IDENTITY]
    retry = retry_candidates(got, lib, 0.4)
    order = [retry.index(n) for n in ("s+2", "o+0", "s+2&o+0", U, rules.IDENTITY, "position-map", "position-role-map")]
    assert order == sorted(order) and retry[-1] == "position-role-map"
    mix = lib["s+2&o+0"]
    later = (b.meta.role == rules.ROLES["query"]) & (rules.positions(b.meta) > 24)  # queries after the first
    assert torch.allclose(mix.pattern(b.meta)[later], half[later])
    assert mix.paths("query", 3) == [(0, 2), (0, "o0")] and rule_kind(mix, "query", 3) == "mixture: cross-chain+retrieval"
    # One rule that fits alone: no mixture is proposed.
    pure = rules.rule_mass(lib["s+2"].pattern(b.meta), b.meta, lib)["query"]
    assert not any("&" in n for n in pure)
    assert "uniform&s+2" not in lib and "s+2&s+2" not in lib


def test_circuit_files_name_shortcuts_and_refuse_bad_ones():
    ok = {"depth": 2, "heads": [{"layer": 0, "head": 0, "rules": {"first": "t-3", "second": "o+0", "query": "p7&s+2"},
                                 "paths": [[0, "p7"], [2, "o2"], [1, "t-3"], [0, 2], [0, -1]]}]}
    check_circuit_dict(ok)
    for bad in ([0, "p0"], [0, "q3"], [0, "o5"], [0, -2], [0, 2.0]):
        with pytest.raises(UsageError):
            check_circuit_dict({**ok, "heads": [{**ok["heads"][0], "paths": [bad]}]})
    with pytest.raises(UsageError, match="unknown rule"):
        check_circuit_dict({**ok, "heads": [{**ok["heads"][0], "rules": {"first": "p0", "second": U, "query": U}}]})


# --- a row that attends by position alone: its own mean map ----------------------------------


def test_a_position_map_reproduces_a_row_that_reads_by_position_and_not_a_retrieval_row():
    lib = rules.library(3)
    b = batch()
    for rule_, role, reproduced in (("previous", "first", True), ("s+2", "query", False)):
        pat, _ = rules.head_pattern({r: (rule_ if r == role else U) for r in rules.ROLES}, b.meta, lib)
        mine = b.meta.role == rules.ROLES[role]
        data = lib["position-map"].measure(pat, b.meta, mine)  # as discovery measures it
        d = diagnose_row(pat, b.meta, lib, 1, 0, role, "position-map", data)
        # A row that reads by position is its mean map; a retrieval row follows the shuffled
        # chains, so its mean map spreads over the N = 4 slots its target may sit in.
        assert (d.rule_covered == pytest.approx(1.0)) if reproduced else d.rule_covered < 0.5
        assert d.rule_kind == rules.POSITIONAL
        # Keyed by the role each position holds, the map reproduces the retrieval row too.
        data = lib["position-role-map"].measure(pat, b.meta, mine)
        assert torch.allclose(lib["position-role-map"].pattern(b.meta, data)[mine], pat[mine])
    with pytest.raises(UsageError, match="needs its map"):
        lib["position-map"].pattern(b.meta)
    spec = {"layer": 0, "head": 0, "rules": {"first": "position-map", "second": U, "query": U}, "paths": []}
    with pytest.raises(UsageError, match="needs its map"):
        check_circuit_dict({"depth": 3, "heads": [spec]})
    spec["maps"] = {"first": [[2, 1, 0.5], [2, 2, 0.5]]}
    check_circuit_dict({"depth": 3, "heads": [spec]})
    c = Circuit.from_dict({"depth": 3, "heads": [spec]})
    assert c.mapped() == [(0, 0, "first")] and c.to_dict()["heads"][0]["maps"] == spec["maps"]
    with pytest.raises(UsageError, match="needs its map"):  # a weight on a later position
        check_circuit_dict({"depth": 3, "heads": [{**spec, "maps": {"first": [[2, 3, 1.0]]}}]})


# --- the diagnosis ----------------------------------------------------------------------------


def test_the_diagnosis_names_where_the_attention_goes():
    b = batch()
    lib = rules.library(3)
    pat, _ = rules.head_pattern({"first": U, "second": U, "query": "p7"}, b.meta, lib)
    d = diagnose_row(pat, b.meta, lib, 3, 0, "query")
    assert (d.best, d.kind, d.covered) == ("p7", rules.POSITIONAL, 1.0)
    # By role, position 7 holds some chain's s_6 (the second token of pair 3, the last of
    # block 0): the query's own chain in a quarter of the sequences (N = 4), another's in the rest.
    assert sum(d.own.values()) + sum(d.other.values()) == pytest.approx(1.0, abs=1e-3)
    assert set(d.own) == {"s6"} and set(d.other) == {"s6"} and d.own["s6"] + d.other["s6"] == pytest.approx(1.0, abs=1e-3)
    assert d.own["s6"] == pytest.approx(0.25, abs=0.1)
    assert list(d.positions)[0] == "p7" and "L3.0 query (no rule explains it): reads position 7 (p7, positional)" in d.text()
    # A retrieval head is described as one.
    pat, _ = rules.head_pattern({"first": U, "second": U, "query": "s+2"}, b.meta, lib)
    d = diagnose_row(pat, b.meta, lib, 3, 0, "query", "s+2")
    assert (d.best, d.kind, d.covered, d.rule_covered) == ("s+2", rules.RETRIEVAL, 1.0, 1.0) and d.own == {"s2": 1.0}


# --- discovery on a model whose head is forced to read a fixed position -----------------------

# N = 2, D = 2 (T = 10): x_1's second token reads x_2's (s_2 -> s_4), then the queries read
# position 5, the second token of block 1's first pair: s_2 of the query's own chain in half the
# sequences, of the other chain in the rest. s+2 catches half of that attention, p5 all of it.
POSITIONAL = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}),
                         HeadSpec(1, 0, {"first": U, "second": U, "query": "p5"}), HeadSpec.whole(2, 0, U)])


class ForcedPositional(Forced):
    circuit = POSITIONAL


@pytest.mark.slow
def test_discovery_names_a_head_forced_to_read_a_fixed_position(monkeypatch):
    model, task, val = train_forced(ForcedPositional)
    found = discover(model, val, task, DiscoverConfig(tolerance=0.02))
    assert found.circuit.head(1, 0).rules["query"] == "p5"
    assert (1, 0, 0, "p5") in found.circuit.paths() and found.unexplained == []
    s = found.summary()
    assert s["paths_by_kind"][rules.POSITIONAL] == [[1, 0, 0, "p5"]] and s["shortcut_heads"] == [[1, 0]]
    assert [1, 0] not in s["retrieval_heads"] and [1, 0] in s["useful_heads"]
    d = next(d for d in s["diagnosis"] if (d["layer"], d["head"], d["role"]) == (1, 0, "query"))
    assert d["best"] == "p5" and d["kind"] == rules.POSITIONAL and d["covered"] > 0.99
    assert d["own"]["s2"] == pytest.approx(0.5, abs=0.1) and d["other"]["s2"] == pytest.approx(0.5, abs=0.1)
    # With the paper's rules alone (no shortcut rule) the same row is left unexplained: s+2
    # catches only the half of its attention that lands on the own chain.
    lib = rules.library(2)
    paper = rules.Library(2, {n: r for n, r in lib.items() if not r.shortcut}, [rules.RULES["s+d"]])
    monkeypatch.setattr(disc, "library", lambda depth: paper)
    before = discover(model, val, task, DiscoverConfig(tolerance=0.02))
    assert before.circuit.head(1, 0).rules["query"] == rules.KEPT, before.circuit.head(1, 0).rules


# --- the claims name what the model does instead ------------------------------------------------


def _summary(paths, unexplained=(), diagnosis=(), combined=(0.02, 0.03, 0.04), mapped_rows=()):
    """A discovery summary (D = 3, 12 heads, absolute 0.05) as summary.json holds it."""
    from helpers import pair_maps

    with_paths = sorted({(p[0], p[1]) for p in paths})
    retrieval = sorted({(p[0], p[1]) for p in paths if isinstance(p[3], int) and p[3] >= 0})
    mapped = {(l, h) for l, h, *_ in mapped_rows}
    useful = sorted(set(with_paths) | {(l, h) for l, h, _ in unexplained} | mapped)
    budgets = [0.05] * 3
    return {
        "threshold": 0.05, "threshold_kind": "absolute", "tolerance": 0.04, "budgets": budgets, "model_over_budget": [],
        "unablated": {"loss": 0.005, "partial": [0.004, 0.005, 0.006]},
        "combined": {"loss": sum(combined) / 3, "partial": list(combined)},
        "over_budget": [f"x{j}" for j, (p, b) in enumerate(zip(combined, budgets), start=1) if p > b],
        "useful_heads": [list(u) for u in useful], "n_useful_heads": len(useful),
        "heads_with_paths": [list(h) for h in with_paths], "theory_min_heads": 3,
        "retrieval_heads": [list(h) for h in retrieval],
        "shortcut_heads": [list(h) for h in sorted((set(with_paths) | mapped) - set(retrieval))],
        "mapped_rows": [list(r) for r in mapped_rows],
        "unexplained_heads": [list(u) for u in unexplained], "paths": [list(p) for p in paths],
        "diagnosis": list(diagnosis), "redundant_groups": [], "serves": {}, "losses": [],
        "pair_attention": pair_maps(paths),
    }


def _train(depth=3):
    parts = {f"val_x{j}": 0.004 for j in range(1, depth + 1)}
    return {"config": {"n_layers": 12, "n_heads": 1, "task": {"chains": 4, "depth": depth}},
            "seeds": {"0": {"final_val_loss": 0.005, "final_partial": parts}}}


PAIRS = [[1, 0, 2, 1], [1, 0, 4, 3], [1, 0, 6, 5]]
RETRIEVE = [[5, 0, 0, 2], [7, 0, 0, 4], [9, 0, 0, 6]]


def _sec8(f):
    from stackedheads.claims import sec8

    return {c.id: c for c in sec8.circuit_claims({"train": _train(), "circuits": {"0": f}})}


def test_a_positional_first_head_fails_a4_and_says_what_it_reads():
    from stackedheads.claims import FAIL, PASS

    got = _sec8(_summary([[0, 0, 0, "p7"], *PAIRS, *RETRIEVE]))
    assert got["A4"].verdict == FAIL
    assert "L0.0 attends from each pair's second token to its first 0.10, 0.10, 0.10 (0 of 3" in got["A4"].measured
    assert "positional shortcut (L0.0 s0->p7)" in got["A4"].measured
    assert "every pair linked by L1.0 (at least 0.95)" in got["A4"].measured
    # A2 and A5 count the shortcut head as useful, never as a retrieval head.
    assert got["A2"].verdict == PASS and "4 retrieval heads" in got["A2"].measured
    assert "1 shortcut head (L0.0 s0->p7 (positional))" in got["A2"].measured
    assert "1 shortcut head" in got["A5"].measured and "shortcuts: L0.0 s0->p7 (positional)" in got["A3"].measured
    # Without it, the same circuit passes A4.
    assert _sec8(_summary([*PAIRS, *RETRIEVE]))["A4"].verdict == PASS


def test_rows_that_attend_by_position_alone_are_useful_shortcuts():
    from stackedheads.claims import FAIL

    got = _sec8(_summary([*PAIRS, *RETRIEVE], mapped_rows=[(0, 0, "second", "position-map")]))
    # The lowest useful head attends by position alone: not the paper's pair-linking head.
    assert got["A4"].verdict == FAIL and "L0.0 second (attends by position alone)" in got["A4"].measured
    assert "5 useful heads" in got["A5"].measured and "1 shortcut head (L0.0 second (attends by position alone))" in got["A2"].measured


def test_a_first_head_attending_by_position_is_judged_even_with_unexplained_rows_above_it():
    """A4's first useful head is the lowest with paths or rows following a map: an unexplained row
    above a position-map head (results/sec8/tl-stack+lr-3e-4 seed 0: L0.0 mapped, L3.0 unexplained,
    paths from L5.0) is not below it and leaves A4 decided."""
    from stackedheads.claims import FAIL, INCONCLUSIVE

    got = _sec8(_summary(RETRIEVE, mapped_rows=[(0, 0, "second", "position-map")], unexplained=[(3, 0, "query")]))
    assert got["A4"].verdict == FAIL and "heads below it" not in got["A4"].measured, got["A4"].measured
    # An unexplained row below the lowest useful head still leaves it undecided.
    got = _sec8(_summary(RETRIEVE, mapped_rows=[(4, 0, "second", "position-map")], unexplained=[(3, 0, "query")]))
    assert got["A4"].verdict == INCONCLUSIVE and "heads below it have rows no rule explains" in got["A4"].measured


def test_an_unexplained_row_is_named_by_its_diagnosis():
    from stackedheads.claims import INCONCLUSIVE

    d = {"layer": 3, "head": 0, "role": "query", "rule": "kept", "rule_covered": None, "rule_kind": None,
         "best": "s+6&o+6", "kind": "mixture: cross-chain+retrieval", "covered": 0.62}
    a3 = _sec8(_summary([*PAIRS, *RETRIEVE], unexplained=[(3, 0, "query")], diagnosis=[d], combined=(0.01, 0.05, 0.12)))["A3"]
    assert a3.verdict == INCONCLUSIVE
    assert "L3.0 query reads s+6&o+6 (mixture: cross-chain+retrieval, 62% of its attention)" in a3.measured
    # A rule that covers little of its row's attention is said beside the head count, for a
    # useful head only: a head that carries no useful path is not named.
    weak = {**d, "rule": "s+6", "rule_covered": 0.5, "rule_kind": "retrieval"}
    a2 = _sec8(_summary([*PAIRS, *RETRIEVE], diagnosis=[weak]))["A2"]
    assert "L3.0" not in a2.measured, a2.measured
    a2 = _sec8(_summary([*PAIRS, *RETRIEVE, [3, 0, 0, 6]], diagnosis=[weak]))["A2"]
    assert "L3.0 query's s+6 catches 50%" in a2.measured, a2.measured


def test_emergence_claims_mark_shortcut_paths(tmp_path):
    import json

    from stackedheads.claims import FAIL, sec9
    from stackedheads.emergence.timeline import position_emergence, position_order

    seen = {"L3.0 s0->p7": 400, "L5.0 s0->s4": 800}
    serves = {"L3.0 s0->p7": [1, 2], "L5.0 s0->s4": [2]}
    positions = position_emergence({k: v - 40.0 for k, v in seen.items()}, seen, serves, [], 2)
    for p in positions.values():
        p["epoch"] = p["step"] / 8
    t = {"steps": [0, 400, 800], "epochs": [0, 50, 100], "emerged": {k: v - 40.0 for k, v in seen.items()},
         "emerged_seen": seen, "serves": serves, "groups": [], "positions": positions, "order": position_order(positions),
         "first_paths": ["L3.0 s0->p7"], "plateau_steps": 360.0, "loss_drops": {"x1": 100, "x2": 200}, "loss_drop_order": "in order"}
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "timeline.json").write_text(json.dumps(t))
    got = {c.id: c for c in sec9.emergence_claims({"train": _train(2), "circuits": {"0": _summary([])}}, tmp_path)}
    # The first path to emerge reads a fixed position: no induction head, whatever it serves.
    assert got["E2"].verdict == FAIL and "first: L3.0 s0->p7 (positional shortcut) (serves x1, x2" in got["E2"].measured
    assert "not an induction head" in got["E2"].measured
    assert "x1 step 360 (epoch 45) by L3.0 s0->p7 (positional shortcut)" in got["E3"].measured


def test_the_report_shows_the_diagnosis(tmp_path):
    """The report's circuit section lists the shortcut paths, the rows that attend by position
    alone, and each diagnosed row: its rule, the best description and its share, by role and
    by position (held-out sequences)."""
    import html
    import json

    from stackedheads.state.layout import CIRCUITS_RUN
    from stackedheads.report.html import write_report

    run = tmp_path / "run"
    found = run / "circuits" / "discovered" / "seed0"
    found.mkdir(parents=True)
    (run / "circuits" / "runs" / CIRCUITS_RUN).mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"preset": {"name": "paper"}}))
    d = {"layer": 3, "head": 0, "role": "query", "rule": "kept", "best": "p7", "kind": "positional", "covered": 0.98,
         "rule_covered": None, "rule_kind": None, "alternatives": {"s+6": 0.51}, "own": {"s6": 0.51}, "other": {"s6": 0.47},
         "positions": {"p7": 0.98, "p0": 0.01}, "text": ""}
    f = _summary([*PAIRS, [2, 0, 0, "p7"], *RETRIEVE], unexplained=[(3, 0, "query")], diagnosis=[d],
                 mapped_rows=[(4, 0, "second", "position-role-map")])
    f["n_check"] = 64
    (found / "summary.json").write_text(json.dumps(f))
    (run / "circuits" / "runs" / CIRCUITS_RUN / "summary.json").write_text(json.dumps(_train()))
    page = html.unescape(write_report(run).read_text())
    claims = {c["id"]: c for c in json.loads((run / "report" / "claims.json").read_text())}
    assert "2 shortcut heads (L2.0 s0->p7 (positional), L4.0 second (attends by position and chain role))" in claims["A2"]["measured"]
    assert "Shortcut paths (not the paper's content-based retrieval): L2.0 s0->p7 (positional), L4.0 second (attends by position and chain role)" in page
    assert "<td>L3.0 query</td><td>kept</td><td>p7</td><td>positional</td><td class=\"num\">98%</td><td>s+6 51%</td>" in page
    assert "<td>own s6 0.51, other chains' s6 0.47</td><td>p7 0.98, p0 0.01</td>" in page


DIAGNOSE_TIE = """
import json
from stackedheads.circuits import rules
from stackedheads.circuits.diagnose import diagnose_row
from stackedheads.tasks.vectors import VectorTaskConfig, make_batch
b = make_batch(VectorTaskConfig(chains=4, depth=3), range(64), "val")
lib = rules.library(3)
pat, _ = rules.head_pattern({"first": "uniform", "second": "s-1&o+0", "query": "uniform"}, b.meta, lib)
print(json.dumps(diagnose_row(pat, b.meta, lib, 8, 0, "second").to_dict()))
"""


def test_the_diagnosis_is_the_same_in_every_process():
    """A second token's s-1 is its previous position, so rules tie; the tie must not be broken
    by the order a set of names iterates in, which PYTHONHASHSEED changes per process."""
    import os
    import subprocess
    import sys

    outs = set()
    for seed in ("1", "2", "3", "4"):
        r = subprocess.run([sys.executable, "-c", DIAGNOSE_TIE], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed})
        outs.add(r.stdout)
    assert len(outs) == 1, outs
    assert '"alternatives"' in outs.pop()
