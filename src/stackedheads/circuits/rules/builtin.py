"""The paper's rules, in library order (ties in fit and simplicity keep this order): uniform,
identity, first-token, previous and the ``s+d`` family (Appendix E)."""

from __future__ import annotations

import torch

from stackedheads.circuits.rules.base import IDENTITY, RULES, UNIFORM, AttentionRule, family, rule
from stackedheads.circuits.rules.geometry import ROLES, chain_positions, positions, s_index, uniform_causal
from stackedheads.tasks.vectors import Meta

@RULES.register(UNIFORM)
@rule(rank=(0, 0), baseline=True, spread=True)
def uniform(meta: Meta) -> torch.Tensor:
    """Uniform attention over the positions the causal mask allows: App. E's uniform map."""
    return uniform_causal(*meta.role.shape)


@RULES.register(IDENTITY)
@rule(rank=(0, 1), baseline=True)
def identity(meta: Meta) -> torch.Tensor:
    """Each token attends to itself: App. E's identity matrix."""
    return positions(meta)


@RULES.register("first-token")
@rule(sink=True)
def first_token(meta: Meta) -> torch.Tensor:
    """Position 0: trained heads often park attention on the first token (an attention sink)
    when they have nothing to fetch. It still copies a real token (the first symbol of some
    chain) into the stream, so discovery treats it as a path (to ``p0``, a positional one) that
    is kept unless replacing it with uniform attention keeps the loss within budget."""
    return torch.zeros_like(meta.role)


@RULES.register("previous")
@rule(rank=(1, 0), links=lambda role, i, depth: i - 1 if role == "second" else "t-1")
def previous(meta: Meta) -> torch.Tensor:
    """The previous position in the sequence (whatever chain holds it); the first attends to
    itself. Only for a second token is that its own chain (the pair partner, ``s_{i-1}``, the
    first useful head of Sec. 8.2); for other tokens it is a positional read (``t-1``)."""
    return (positions(meta) - 1).clamp(min=0)


def hop(d: int) -> AttentionRule:
    """``s_i -> s_{i+d}`` of the same chain, where that position is earlier; else self."""

    def target(meta: Meta) -> torch.Tensor:
        cp = chain_positions(meta)  # (B, N, 2D+1)
        i = s_index(meta) + d
        valid = (i >= 0) & (i < cp.shape[-1])
        tgt = cp[torch.arange(cp.shape[0])[:, None], meta.chain, i.clamp(0, cp.shape[-1] - 1)]
        pos = positions(meta)
        return torch.where(valid & (tgt <= pos), tgt, pos)

    target.__name__ = f"s{d:+d}"
    return AttentionRule(target, rank=(2, abs(d)), links={role: d for role in ROLES})


@RULES.register("s+d")
@family
def hops(depth: int) -> dict[str, AttentionRule]:
    """``s-2D .. s-1, s+1 .. s+2D``: every hop within a chain of ``depth`` steps."""
    return {f"s{d:+d}": hop(d) for d in [*range(-2 * depth, 0), *range(1, 2 * depth + 1)]}
