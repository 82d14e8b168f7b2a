"""Attention rules (Appendix E): the registry :data:`RULES` and what discovery knows of each rule.

Appendix E replaces each useful head's attention with "a map that is zero everywhere except for
the position I expect the head to attend to", and the others with uniform attention or the
identity. A *rule* names such a position for every token (a function of the batch metadata that
returns, for each token, the position it attends to, ``(B, T)``), or, for ``uniform``, a whole
pattern. Each rule carries, as data, all that discovery (:mod:`.discover`), the ablations and
circuit.json's schema (:mod:`.ablate`) and the emergence timelines need to know of it; no other
module checks a rule's name.

Every token of the minimal task is one of the positions ``s_0 .. s_2D`` of its chain
(Appendix B, Definition 1): the query is ``s_0``, the second token of pair ``k`` (holding
``x_k``) is ``s_{2k}``, the first token of pair ``k + 1`` (also holding ``x_k``) is ``s_{2k+1}``.
The family ``s+d`` ("attend to ``s_{i+d}`` of my own chain") therefore covers the retrieval
heads: ``s-1`` is the pair partner (Sec. 8.2's first head), ``s+1`` the other occurrence of the
same symbol (the query's induction target), ``s+2`` the next symbol's second occurrence, and so
on. Where an ``s+d`` rule points at a later position (which causal attention cannot see) or
outside the chain, the token attends to itself.

How to add a rule
-----------------
Decorate one function, here (a built-in) or in your own code before discovery runs; nothing
else changes::

    from stackedheads.circuits.rules import RULES, positions, rule

    @RULES.register("two-back")
    @rule()
    def two_back(meta):  # two positions back; the first two tokens attend to themselves
        p = positions(meta)
        return torch.where(p >= 2, p - 2, p)

Discovery then measures how much of each head's attention it catches (:func:`rule_mass`),
tries it among a role's candidates, circuit.json may name it, and the ablations replace rows by
it. The function must return, for every token, a position at or before it (causal attention);
:func:`head_pattern` refuses one that looks ahead. What :func:`rule` records:

* ``links={role: d}``: tokens ``s_i`` of that role read ``s_{i+d}`` of their own chain, so the
  rule carries the paths ``(i, i + d)`` where ``s_{i+d}`` exists and comes earlier in the
  sequence (:meth:`AttentionRule.paths`); each is kept only when its removal breaks the loss
  (App. E step 6). Where the hop varies, ``links`` is a function ``(role, i, depth) -> j``
  (``None``: no path from that ``s_i``). A rule without links carries no path: a role using it
  is simplified to a baseline where the loss allows.
* ``sink=True``: every token reads sequence position 0 (an attention sink), a path to
  :data:`SINK`, kept unless replacing it with uniform attention keeps the loss.
* ``rank``: ``(group, order)``, lower is simpler. Among rules catching the same attention mass
  the simpler is tried first, ties in library order (identity ``(0, 1)``, previous ``(1, 0)``,
  ``s+d`` ``(2, |d|)``, first-token and, by default, new rules ``(3, 0)``).
* ``spread=True``: the function returns a whole ``(B, T, T)`` pattern, not positions
  (``uniform``); such a rule is never fitted to observed attention.
* ``baseline=True``: App. E's replacement for a head with "no useful computation" (uniform,
  identity): tried, simplest first, after a role's fitted rules, for whole heads, and for
  roles that carry no useful path; a head that only fits baselines follows no rule.

Rules whose names depend on the depth (the ``s+d`` family) register a function of the depth
returning named rules, decorated with :func:`family`. :func:`library` lists every rule in
registration order (a new rule comes after the built-ins); ``RULES.unregister(name)`` removes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from stackedheads import theory
from stackedheads.errors import UsageError
from stackedheads.registry import Registry
from stackedheads.tasks.vectors import FIRST, QUERY, SECOND, Meta

ROLES = {"first": FIRST, "second": SECOND, "query": QUERY}
UNIFORM, IDENTITY, KEPT = "uniform", "identity", "kept"  # KEPT: the head's own attention, not a rule
SINK = -1  # a path's dst: sequence position 0 (an attention sink), not a chain position

Target = Callable[[Meta], torch.Tensor]  # meta -> (B, T) attended position of every token
# role -> d (s_i reads s_{i+d} of its chain), or (role, i, depth) -> the s-index s_i reads (None: none)
Links = Mapping[str, int] | Callable[[str, int, int], int | None]


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


def positions(meta: Meta) -> torch.Tensor:
    """``(B, T)``: each token's own position."""
    B, T = meta.role.shape
    return torch.arange(T).expand(B, T)


def role_sources(role: str, depth: int) -> list[int]:
    """The ``s_i`` a token role holds: the query s_0, second tokens s_2k, first tokens s_2k+1."""
    return {"query": [0], "second": list(range(2, 2 * depth + 1, 2)), "first": list(range(1, 2 * depth, 2))}[role]


def path_ends(meta: Meta, src: int, dst: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, N)`` sequence positions of a path's ends in every chain: ``s_src``, and ``s_dst``
    of the same chain or position 0 (:data:`SINK`)."""
    cp = chain_positions(meta)
    return cp[:, :, src], (torch.zeros_like(cp[:, :, 0]) if dst == SINK else cp[:, :, dst])


def dst_label(dst: int) -> str:
    """A path's dst as text: ``s4``, or ``p0`` for :data:`SINK`."""
    return "p0" if dst == SINK else f"s{dst}"


def one_hot(target: torch.Tensor, T: int) -> torch.Tensor:
    """``(B, T, T)`` patterns with all attention on ``target[b, t]``."""
    return torch.nn.functional.one_hot(target, T).float()


def uniform_causal(B: int, T: int) -> torch.Tensor:
    """``(B, T, T)``: uniform attention over the positions the causal mask allows."""
    tri = torch.ones(T, T).tril()
    return (tri / tri.sum(-1, keepdim=True)).expand(B, T, T)


@dataclass(frozen=True)
class AttentionRule:
    """One rule and its metadata (see the module docstring for what each field drives).

    ``target`` gives the attended position of every token; a rule that spreads attention
    (``uniform``) gives its ``(B, T, T)`` pattern as ``spread`` instead.
    """

    target: Target | None = None
    spread: Callable[[Meta], torch.Tensor] | None = None
    rank: tuple[int, int] = (3, 0)
    baseline: bool = False
    links: Links = field(default_factory=dict)
    sink: bool = False

    def __post_init__(self) -> None:
        if (self.target is None) == (self.spread is None):
            raise ValueError("an attention rule needs exactly one of target and spread")
        if not callable(self.links) and not set(self.links) <= set(ROLES):
            raise ValueError(f"links name roles {sorted(set(self.links) - set(ROLES))}; roles are {sorted(ROLES)}")

    def __call__(self, meta: Meta) -> torch.Tensor:
        """``(B, T)`` attended positions (rules with a target only)."""
        return self.target(meta)

    def pattern(self, meta: Meta) -> torch.Tensor:
        """``(B, T, T)``: every token's attention under this rule."""
        if self.spread is not None:
            return self.spread(meta)
        return one_hot(self.target(meta), meta.role.shape[1])

    def paths(self, role: str, depth: int) -> list[tuple[int, int]]:
        """``(src, dst)`` paths tokens of ``role`` carry under this rule: ``s_src`` reads
        ``s_dst`` of its own chain where that position exists and is earlier (causal), or
        position 0 (``dst`` = :data:`SINK`) for a sink."""
        srcs = role_sources(role, depth)
        if self.sink:
            return [(i, SINK) for i in srcs]
        if callable(self.links):
            reads = [(i, self.links(role, i, depth)) for i in srcs]
        else:
            reads = [(i, i + self.links[role]) for i in srcs] if role in self.links else []
        pos = theory.chain_order(depth)  # sequence position of each s_i within one chain
        return [(i, j) for i, j in reads if j is not None and 0 <= j <= 2 * depth and pos[j] < pos[i]]


@dataclass(frozen=True)
class RuleFamily:
    """Rules whose names depend on the depth: ``expand(depth) -> {name: rule}``."""

    expand: Callable[[int], dict[str, AttentionRule]]


RULES: Registry[AttentionRule | RuleFamily] = Registry("attention rule")


def rule(*, rank: tuple[int, int] = (3, 0), baseline: bool = False, links: Links | None = None,
         sink: bool = False, spread: bool = False) -> Callable[[Callable[[Meta], torch.Tensor]], AttentionRule]:
    """Decorator: a target function (a pattern function if ``spread``) with its metadata, ready
    for ``@RULES.register(name)``."""

    def make(fn: Callable[[Meta], torch.Tensor]) -> AttentionRule:
        kinds = {"spread": fn} if spread else {"target": fn}
        return AttentionRule(**kinds, rank=rank, baseline=baseline, links=links or {}, sink=sink)

    return make


def family(expand: Callable[[int], dict[str, AttentionRule]]) -> RuleFamily:
    """Decorator: a function of the depth returning named rules, for ``@RULES.register(name)``."""
    return RuleFamily(expand)


# --- the built-in rules, in library order (ties in fit and simplicity keep this order) --------


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
    chain) into the stream, so discovery treats it as a path (to ``p0``) that is kept unless
    replacing it with uniform attention keeps the loss within budget."""
    return torch.zeros_like(meta.role)


@RULES.register("previous")
@rule(rank=(1, 0), links={"second": -1})
def previous(meta: Meta) -> torch.Tensor:
    """The previous position in the sequence (whatever chain holds it); the first attends to
    itself. Only for a second token is that its own chain (the pair partner, ``s_{i-1}``)."""
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


# --- using the library ----------------------------------------------------------------------


def library(depth: int) -> dict[str, AttentionRule]:
    """Every registered rule for chains of ``depth`` steps, families expanded, in registration
    order. Add a rule by registering it in :data:`RULES` (see the module docstring)."""
    out: dict[str, AttentionRule] = {}
    for name, entry in RULES.items():
        out.update(entry.expand(depth) if isinstance(entry, RuleFamily) else {name: entry})
    return out


def baselines(lib: Mapping[str, AttentionRule]) -> list[str]:
    """The baseline rules of ``lib`` (App. E's "no useful computation"), simplest first."""
    return sorted((n for n, r in lib.items() if r.baseline), key=lambda n: lib[n].rank)


def head_pattern(rules_by_role: dict[str, str], meta: Meta, lib: Mapping[str, AttentionRule]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pattern (B, T, T), replaced (B, T))``: each role's tokens attend by that role's rule;
    rows of roles marked ``kept`` are left to the head (``replaced`` False)."""
    B, T = meta.role.shape
    out = torch.zeros(B, T, T)
    replaced = torch.zeros(B, T, dtype=torch.bool)
    for role, code in ROLES.items():
        name = rules_by_role[role]
        if name == KEPT:
            continue
        rows = lib[name].pattern(meta)
        mine = meta.role == code
        if rows.triu(1)[mine].any():  # a rule from outside that looks ahead would leak the future
            raise UsageError(f"attention rule {name!r} attends to later positions, which causal attention cannot see")
        out = torch.where(mine[..., None], rows, out)
        replaced |= mine
    return out, replaced


def rule_mass(pattern: torch.Tensor, meta: Meta, lib: Mapping[str, AttentionRule]) -> dict[str, dict[str, float]]:
    """Mean attention each role's tokens put on each rule's target, where the rule applies.

    ``pattern``: ``(B, T, T)`` observed attention of one head. A rule "applies" to a token when
    it points somewhere other than the token itself (a baseline always applies); rules that
    apply to no token of a role, and rules without a target (uniform), are left out.
    """
    pos = positions(meta)
    out: dict[str, dict[str, float]] = {}
    for role, code in ROLES.items():
        of_role = meta.role == code
        out[role] = {}
        for name, r in lib.items():
            if r.target is None:
                continue
            tgt = r(meta)
            applies = of_role & ((tgt != pos) | r.baseline)
            if applies.any():
                mass = pattern.gather(-1, tgt[..., None]).squeeze(-1)
                out[role][name] = float(mass[applies].mean())
    return out
