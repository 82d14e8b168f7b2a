"""Cross-chain rules ``o+d``: a token ``s_i`` reads ``s_{i+d}`` of the *other* chains.

``o+0`` is the other chains' token of the same step and role: Sec. 6 shuffles the chains only
within a step, so those sit in the same block, next to the token. Reading them tells a head
what its own chain is *not* (docs/results.md, "Shortcuts": the 1-layer twin puts weight on the other chain's first
token), which is no retrieval along the query's chain (Fig. 5); the paths are
:data:`~.CROSS_CHAIN` (``o4``) and are reported apart from retrieval.

With ``N`` chains a token sees up to ``N - 1`` of them, so the rule spreads its attention
evenly over those that come earlier (causal attention); a token that sees none reads itself.
"""

from __future__ import annotations

import torch

from stackedheads.circuits.rules import RULES, AttentionRule, chain_positions, family, positions, s_index
from stackedheads.tasks.vectors import Meta


def other_chains(d: int) -> AttentionRule:
    """``s_i`` reads ``s_{i+d}`` of every other chain that comes earlier, evenly."""

    def pattern(meta: Meta) -> torch.Tensor:
        cp = chain_positions(meta)  # (B, N, 2D + 1)
        B, N, S = cp.shape
        T = meta.role.shape[1]
        pos = positions(meta)
        i = s_index(meta) + d
        valid = (i >= 0) & (i < S)
        at = cp[torch.arange(B)[:, None, None], torch.arange(N), i.clamp(0, S - 1)[..., None]]  # (B, T, N)
        seen = (meta.chain[..., None] != torch.arange(N)) & valid[..., None] & (at < pos[..., None])
        count = seen.sum(-1, keepdim=True)
        out = torch.zeros(B, T, T).scatter_add_(-1, at, seen / count.clamp(min=1))
        return out + torch.diag_embed((count[..., 0] == 0).float())

    return AttentionRule(
        spread=pattern, rank=(3, 1 + abs(d)), links=lambda role, i, depth: f"o{i + d}" if 0 <= i + d <= 2 * depth else None,
        shortcut=True,
    )


@RULES.register("o+d")
@family
def cross(depth: int) -> dict[str, AttentionRule]:
    """``o-2D .. o+2D``: the other chains' token ``d`` steps along the chain (``o+0``: the same)."""
    return {f"o{d:+d}": other_chains(d) for d in range(-2 * depth, 2 * depth + 1)}
