"""The rules for a depth (:func:`library`), the patterns they make for a head, and how much of a
head's observed attention each one catches (:func:`rule_mass`): what discovery fits."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from stackedheads.circuits.rules.base import KEPT, RULES, AttentionRule, RuleFamily
from stackedheads.circuits.rules.geometry import ROLES, positions
from stackedheads.errors import UsageError
from stackedheads.tasks.vectors import Meta

class Library(Mapping[str, AttentionRule]):
    """The rules for chains of ``depth`` steps: iterating lists the enumerable ones (those
    discovery fits to every head), in registration order; looking up a name also resolves the
    members of parametric families (``p7``, ``s+2&o+0``)."""

    def __init__(self, depth: int, rules: dict[str, AttentionRule], families: list[RuleFamily]) -> None:
        self.depth, self._rules, self.families = depth, rules, families
        self._parsed: dict[str, AttentionRule] = {}

    def __getitem__(self, name: str) -> AttentionRule:
        if name in self._rules:
            return self._rules[name]
        if name not in self._parsed:
            got = next((r for f in self.families if f.parse and (r := f.parse(name, self)) is not None), None)
            if got is None:
                raise KeyError(name)
            self._parsed[name] = got
        return self._parsed[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)


def library(depth: int) -> Library:
    """Every registered rule for chains of ``depth`` steps, families expanded, in registration
    order. Add a rule by registering it in :data:`RULES` (see the module docstring)."""
    out: dict[str, AttentionRule] = {}
    families = []
    for name, entry in RULES.items():
        if isinstance(entry, RuleFamily):
            out.update(entry.expand(depth))
            families.append(entry)
        else:
            out[name] = entry
    return Library(depth, out, families)


def baselines(lib: Mapping[str, AttentionRule]) -> list[str]:
    """The baseline rules of ``lib`` (App. E's "no useful computation"), simplest first."""
    return sorted((n for n, r in lib.items() if r.baseline), key=lambda n: lib[n].rank)


def head_pattern(rules_by_role: dict[str, str], meta: Meta, lib: Mapping[str, AttentionRule],
                 maps: Mapping | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pattern (B, T, T), replaced (B, T))``: each role's tokens attend by that role's rule
    (``maps[role]``: its map, for a measured rule); rows of roles marked ``kept`` are left to
    the head (``replaced`` False)."""
    B, T = meta.role.shape
    out = torch.zeros(B, T, T)
    replaced = torch.zeros(B, T, dtype=torch.bool)
    for role, code in ROLES.items():
        name = rules_by_role[role]
        if name == KEPT:
            continue
        rows = lib[name].pattern(meta, (maps or {}).get(role))
        mine = meta.role == code
        if rows.triu(1)[mine].any():  # a rule from outside that looks ahead would leak the future
            raise UsageError(f"attention rule {name!r} attends to later positions, which causal attention cannot see")
        out = torch.where(mine[..., None], rows, out)
        replaced |= mine
    return out, replaced


def pattern_mass(observed: torch.Tensor, r: AttentionRule, meta: Meta) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mass, applies)``, ``(B, T)`` each: the attention each token puts where rule ``r``
    sends it, and whether ``r`` sends it anywhere but itself (a baseline always applies)."""
    pos = positions(meta)
    if r.target is not None:
        tgt = r(meta)
        return observed.gather(-1, tgt[..., None]).squeeze(-1), (tgt != pos) | r.baseline
    pat = r.pattern(meta)
    on_self = pat.diagonal(dim1=-2, dim2=-1) >= 1
    return (observed * (pat > 0)).sum(-1), ~on_self | r.baseline


def rule_mass(pattern: torch.Tensor, meta: Meta, lib: Library) -> dict[str, dict[str, float]]:
    """Mean attention each role's tokens put on each rule's target, where the rule applies.

    ``pattern``: ``(B, T, T)`` observed attention of one head. A rule "applies" to a token when
    it points somewhere other than the token itself (a baseline always applies); rules that
    apply to no token of a role, and spread baselines (uniform), are left out. The parametric
    families then add the members they propose for each role (the best fixed positions, the
    best mixture of two rules...).
    """
    out: dict[str, dict[str, float]] = {}
    for role, code in ROLES.items():
        of_role = meta.role == code
        out[role] = {}
        for name, r in lib.items():
            if not r.fitted:
                continue
            mass, applies = pattern_mass(pattern, r, meta)
            applies &= of_role
            if applies.any():
                out[role][name] = float(mass[applies].mean())
        enumerated = dict(out[role])
        for fam in lib.families:
            if fam.propose is not None:
                out[role].update(fam.propose(pattern, meta, of_role, lib, enumerated))
    return out
