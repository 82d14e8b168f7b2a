"""Adding an attention rule from outside the package (docs/extending.md, "Adding an attention rule")."""

import pytest
import torch
from helpers import Forced, train_forced

from stackedheads.circuits import rules
from stackedheads.circuits.ablate import (
    Circuit,
    HeadSpec,
    loss_table,
    replaced_patterns,
)
from stackedheads.circuits.discover import (
    DiscoverConfig,
    candidate_paths,
    discover,
    role_candidates,
    split,
)
from stackedheads.errors import UsageError

U = rules.UNIFORM


# A rule the package does not have: every token reads the end of its own chain, s_2D (x_D's
# second occurrence; App. B Def. 1), where that is earlier. Its hop varies with the token (s_1
# reads s_4 with d = 3, s_2 with d = 2), so its links are a function. Ranked before the s+d
# family: where it explains a head as well as a hop does, it is the name to report.
@rules.rule(rank=(1, 0), links=lambda role, i, depth: 2 * depth)
def chain_end(meta):
    cp = rules.chain_positions(meta)  # (B, N, 2D+1)
    tgt = cp[torch.arange(cp.shape[0])[:, None], meta.chain, -1]
    pos = rules.positions(meta)
    return torch.where(tgt <= pos, tgt, pos)


@rules.rule()
def next_token(meta):  # looks ahead: causal attention cannot see it
    return (rules.positions(meta) + 1).clamp(max=meta.role.shape[1] - 1)


class ForcedChainEnd(Forced):
    """Layer 0's second tokens read s_4 by the new rule, the query then reads s_2 (D = 2)."""

    circuit = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": "chain-end", "query": U}),
                          HeadSpec(1, 0, {"first": U, "second": U, "query": "s+2"}), HeadSpec.whole(2, 0, U)])


@pytest.mark.slow
def test_add_an_attention_rule_from_outside(tmp_path):
    assert "chain-end" not in rules.RULES
    rules.RULES.register("chain-end", chain_end)
    rules.RULES.register("next-token", next_token)
    try:
        lib = rules.library(2)
        assert "chain-end" in lib and not lib["chain-end"].baseline
        # Its paths come from its links, kept where causal: s_3 sits before s_4, s_4 is s_4.
        spec = HeadSpec(0, 0, {"first": "chain-end", "second": "chain-end", "query": U})
        assert candidate_paths(spec, 2) == [(1, 4), (2, 4)]

        model, task, val = train_forced(ForcedChainEnd)
        search, check = split(val)
        # Discovery fits it to the head's attention and lists it first among the candidates.
        _, cache = model.run_with_cache(search.inputs, search.meta, names=["blocks.0.attn.hook_pattern"])
        masses = rules.rule_mass(cache["blocks.0.attn.hook_pattern"][0, :, 0], search.meta, lib)
        assert masses["second"]["chain-end"] == pytest.approx(1.0)
        assert role_candidates(masses["second"], lib, 0.4)[:2] == ["chain-end", "s+2"]

        found = discover(model, val, task, DiscoverConfig(tolerance=0.02))
        assert found.circuit.head(0, 0).rules == {"first": U, "second": "chain-end", "query": U}
        assert sorted(found.circuit.paths()) == [(0, 0, 2, 4), (1, 0, 0, 2)]
        # circuit.json may name it: the schema and the combined ablation accept it.
        found.circuit.save(tmp_path / "circuit.json")
        again = Circuit.load(tmp_path / "circuit.json")
        assert [r.loss for r in loss_table(model, check, task, again)] == [r.loss for r in found.table]

        # A rule that looks ahead is refused where it would replace attention.
        ahead = Circuit(2, [HeadSpec(0, 0, {"first": U, "second": U, "query": "next-token"})])
        with pytest.raises(UsageError, match="later positions"):
            replaced_patterns(ahead, val.meta)
    finally:
        rules.RULES.unregister("chain-end")
        rules.RULES.unregister("next-token")
    assert "chain-end" not in rules.library(2)
    with pytest.raises(UsageError, match="unknown rule"):
        Circuit.load(tmp_path / "circuit.json")
