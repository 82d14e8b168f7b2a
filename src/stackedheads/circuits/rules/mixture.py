"""Mixtures ``a&b``: a head splitting its attention between what two rules read.

A trained head may put half its attention on ``s+2`` and half on ``o+0``, or keep a sink beside
a retrieval target; one rule alone then catches too little, and replacing the rows by either
one may break the loss. App. E's replacement is a map "zero everywhere except" where the head
attends; a mixture sets both positions, one half each where both rules apply (their own map
where only one does). Equal halves keep the rule a function of the metadata alone, like every
other rule, so circuit.json names it completely. Its paths are both rules' paths.

Discovery tries a mixture only after the single rules of a role (:func:`~..discover.role_candidates`):
the simpler explanation first.
"""

from __future__ import annotations

from itertools import combinations

import torch

from stackedheads.circuits.rules import RULES, AttentionRule, Library, parametric, pattern_mass, positions
from stackedheads.tasks.vectors import Meta

MIN_PART = 0.15  # each rule of a proposed mixture catches at least this much, and adds at least this much
TOP_PARTS = 5  # rules of a role (best fits) whose pairs are proposed
TOP = 2  # mixtures proposed per role


def mix(a: str, b: str, lib: Library) -> AttentionRule:
    """Rules ``a`` and ``b`` of ``lib``, one half each where both apply."""
    ra, rb = lib[a], lib[b]

    def pattern(meta: Meta) -> torch.Tensor:
        pa, pb = ra.pattern(meta), rb.pattern(meta)
        own = positions(meta)
        # Where a rule applies: it reads something other than the token (the identity, always)
        moves_a = (pa.gather(-1, own[..., None]).squeeze(-1) < 1) | ra.baseline
        moves_b = (pb.gather(-1, own[..., None]).squeeze(-1) < 1) | rb.baseline
        both = (moves_a & moves_b)[..., None]
        return torch.where(both, (pa + pb) / 2, torch.where(moves_b[..., None] & ~moves_a[..., None], pb, pa))

    def links(role: str, i: int, depth: int) -> list:
        return [dst for r in (ra, rb) for src, dst in r.paths(role, depth) if src == i]

    return AttentionRule(spread=pattern, rank=(5, 0), links=links, parts=(a, b), shortcut=True)


def propose(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor, lib: Library, masses: dict[str, float]) -> dict[str, float]:
    """The best pairs of the role's ``TOP_PARTS`` best-fitting single rules, where each rule
    catches ``MIN_PART`` and the pair catches ``MIN_PART`` more than either alone."""
    singles = [n for n, m in sorted(masses.items(), key=lambda kv: -kv[1]) if m >= MIN_PART][:TOP_PARTS]
    order = {n: i for i, n in enumerate(lib)}
    found = {}
    for a, b in combinations(sorted(singles, key=order.get), 2):
        mass, applies = pattern_mass(observed, mix(a, b, lib), meta)
        applies &= of_role
        if applies.any() and float(mass[applies].mean()) >= max(masses[a], masses[b]) + MIN_PART:
            found[f"{a}&{b}"] = float(mass[applies].mean())
    return dict(sorted(found.items(), key=lambda kv: -kv[1])[:TOP])


@RULES.register("<a>&<b>")
@parametric(propose)
def parse(name: str, lib: Library) -> AttentionRule | None:
    """``s+2&o+0``: two different rules of the library, neither a mixture nor uniform (the
    identity may be one: a head that keeps half its attention on itself)."""
    parts = name.split("&")
    if len(parts) != 2 or parts[0] == parts[1] or not all(p in lib for p in parts):
        return None
    if any(not lib[p].fitted for p in parts):  # uniform spreads over everything: no half of it is a reading
        return None
    return mix(*parts, lib)
