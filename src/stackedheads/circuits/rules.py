"""Named attention rules over the batch metadata (Appendix E).

Appendix E replaces each useful head's attention with "a map that is zero everywhere except for
the position I expect the head to attend to", and the others with uniform attention or the
identity. A *rule* names such a position for every token: a function of the metadata that
returns, for each token, the position it attends to, ``(B, T)``.

Every token of the minimal task is one of the positions ``s_0 .. s_2D`` of its chain
(Appendix B, Definition 1): the query is ``s_0``, the second token of pair ``k`` (holding
``x_k``) is ``s_{2k}``, the first token of pair ``k + 1`` (also holding ``x_k``) is ``s_{2k+1}``.
The family ``s+d`` ("attend to ``s_{i+d}`` of my own chain") therefore covers the retrieval
heads: ``s-1`` is the pair partner (Sec. 8.2's first head), ``s+1`` the other occurrence of the
same symbol (the query's induction target), ``s+2`` the next symbol's second occurrence, and so
on. Where a rule points at a later position (which causal attention cannot see) or outside the
chain, the token attends to itself.

The library is a plain dict: users add a rule by adding a function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from stackedheads.tasks.vectors import FIRST, QUERY, SECOND, Meta

ROLES = {"first": FIRST, "second": SECOND, "query": QUERY}
UNIFORM, IDENTITY, KEPT = "uniform", "identity", "kept"  # KEPT: the head's own attention

Rule = Callable[[Meta], torch.Tensor]  # meta -> (B, T) attended position of every token


def s_index(meta: Meta) -> torch.Tensor:
    """``(B, T)``: the ``i`` of ``s_i`` each token is in its own chain."""
    return torch.where(
        meta.role == QUERY, 0, torch.where(meta.role == SECOND, 2 * meta.step, 2 * meta.step + 1)
    )


def chain_positions(meta: Meta) -> torch.Tensor:
    """``(B, N, 2D + 1)``: position of ``s_i`` of chain ``c`` (by chain id, not query slot)."""
    out = torch.empty_like(meta.paths)
    out.scatter_(1, meta.query_chain[..., None].expand_as(meta.paths), meta.paths)
    return out


def _positions(meta: Meta) -> torch.Tensor:
    B, T = meta.role.shape
    return torch.arange(T).expand(B, T)


def identity(meta: Meta) -> torch.Tensor:
    return _positions(meta)


def previous(meta: Meta) -> torch.Tensor:
    """The previous position in the sequence (whatever chain holds it); the first attends to itself."""
    return (_positions(meta) - 1).clamp(min=0)


def first_token(meta: Meta) -> torch.Tensor:
    """Position 0: trained heads often park attention on the first token (an attention sink)
    when they have nothing to fetch. It still copies a real token (the first symbol of some
    chain) into the stream, so discovery treats it as a path (to ``p0``) that is kept unless
    replacing it with uniform attention keeps the loss within budget."""
    return torch.zeros_like(meta.role)


def hop(d: int) -> Rule:
    """``s_i -> s_{i+d}`` of the same chain, where that position is earlier; else self."""

    def rule(meta: Meta) -> torch.Tensor:
        cp = chain_positions(meta)  # (B, N, 2D+1)
        i = s_index(meta) + d
        valid = (i >= 0) & (i < cp.shape[-1])
        tgt = cp[torch.arange(cp.shape[0])[:, None], meta.chain, i.clamp(0, cp.shape[-1] - 1)]
        pos = _positions(meta)
        return torch.where(valid & (tgt <= pos), tgt, pos)

    rule.__name__ = f"s{d:+d}"
    return rule


def library(depth: int, extra: dict[str, Rule] | None = None) -> dict[str, Rule]:
    """The rules for chains of ``depth`` steps: identity, previous and ``s+d`` for every ``d``."""
    rules: dict[str, Rule] = {IDENTITY: identity, "first-token": first_token, "previous": previous}
    for d in [*range(-2 * depth, 0), *range(1, 2 * depth + 1)]:
        rules[f"s{d:+d}"] = hop(d)
    rules.update(extra or {})
    return rules


def hop_of(name: str) -> int | None:
    """``d`` of an ``s+d`` rule name, else None."""
    if name.startswith("s") and name[1:2] in "+-" and name[2:].isdigit():
        return int(name[1:])
    return None


def one_hot(target: torch.Tensor, T: int) -> torch.Tensor:
    """``(B, T, T)`` patterns with all attention on ``target[b, t]``."""
    return torch.nn.functional.one_hot(target, T).float()


def uniform_causal(B: int, T: int) -> torch.Tensor:
    """``(B, T, T)``: uniform attention over the positions the causal mask allows."""
    tri = torch.ones(T, T).tril()
    return (tri / tri.sum(-1, keepdim=True)).expand(B, T, T)


def head_pattern(rules_by_role: dict[str, str], meta: Meta, lib: dict[str, Rule]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pattern (B, T, T), replaced (B, T))``: each role's tokens attend by that role's rule
    (or uniformly); rows of roles marked ``kept`` are left to the head (``replaced`` False)."""
    B, T = meta.role.shape
    out = torch.zeros(B, T, T)
    replaced = torch.zeros(B, T, dtype=torch.bool)
    for role, code in ROLES.items():
        name = rules_by_role[role]
        if name == KEPT:
            continue
        rows = one_hot(lib[name](meta), T) if name != UNIFORM else uniform_causal(B, T)
        mine = meta.role == code
        out = torch.where(mine[..., None], rows, out)
        replaced |= mine
    return out, replaced


def rule_mass(pattern: torch.Tensor, meta: Meta, lib: dict[str, Rule]) -> dict[str, dict[str, float]]:
    """Mean attention each role's tokens put on each rule's target, where the rule applies.

    ``pattern``: ``(B, T, T)`` observed attention of one head. A rule "applies" to a token when
    it points somewhere other than the token itself (identity always applies); rules that apply
    to no token of a role are left out for that role.
    """
    pos = _positions(meta)
    out: dict[str, dict[str, float]] = {}
    for role, code in ROLES.items():
        of_role = meta.role == code
        out[role] = {}
        for name, rule in lib.items():
            tgt = rule(meta)
            applies = of_role & ((tgt != pos) | (name == IDENTITY))
            if applies.any():
                mass = pattern.gather(-1, tgt[..., None]).squeeze(-1)
                out[role][name] = float(mass[applies].mean())
    return out
