"""What a rule is (:class:`AttentionRule`), the registry :data:`RULES`, and the decorators that
add one (:func:`rule`, :func:`family`, :func:`parametric`).

-----------------
Decorate one function, in a new module here (a built-in) or in your own code before discovery
runs; nothing else changes::

    from stackedheads.circuits.rules import RULES, positions, rule

    @RULES.register("two-back")
    @rule(links=lambda role, i, depth: "t-2")
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
  (App. E step 6). Where the hop varies, ``links`` is a function ``(role, i, depth) -> dst``
  (any ``dst`` above, a list of them, or ``None``: no path from that ``s_i``). A rule without
  links carries no path: a role using it is simplified to a baseline where the loss allows.
* ``sink=True``: every token reads sequence position 0 (an attention sink), a path to
  :data:`SINK`, kept unless replacing it with uniform attention keeps the loss.
* ``rank``: ``(group, order)``, lower is simpler. Among rules catching the same attention mass
  the simpler is tried first, ties in library order (identity ``(0, 1)``, previous ``(1, 0)``,
  ``s+d`` ``(2, |d|)``, first-token and, by default, new rules ``(3, 0)``, ``o+d``
  ``(3, 1 + |d|)``, fixed positions and offsets ``(4, .)``, mixtures ``(5, 0)``).
* ``spread=True``: the function returns a whole ``(B, T, T)`` pattern, not positions; its
  mass is the attention on the positions the pattern covers (``o+d``). A spread baseline
  (``uniform``) covers everything and is never fitted.
* ``baseline=True``: App. E's replacement for a head with "no useful computation" (uniform,
  identity): tried, simplest first, after a role's fitted rules, for whole heads, and for
  roles that carry no useful path; a head that only fits baselines follows no rule.
* ``shortcut=True`` (the rules of ``positional``, ``other_chains``, ``mixture``): a reading the
  paper's rules do not name. Discovery tries it beside them only where it catches clearly more
  attention than any of them (a head that follows a position, not a role), and otherwise for
  the rows they leave unexplained (:mod:`..discover`).

Rules whose names depend on the depth (the ``s+d`` family) register a function of the depth
returning named rules, decorated with :func:`family`. Rules with a parameter no depth bounds (a
fixed position ``p7``, a mixture ``s+2&o+0``) register a :func:`parametric` family: ``parse``
turns a name into its rule (circuit.json, the ablations), ``propose`` names the members that
fit a head's observed attention best (discovery, the diagnosis). :func:`library` lists every
enumerable rule in registration order (a new rule comes after the built-ins) and resolves the
parametric names; ``RULES.unregister(name)`` removes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from stackedheads.circuits.paths import SINK, Dst
from stackedheads.circuits.rules.geometry import ROLES, _reachable, one_hot, role_sources
from stackedheads.errors import UsageError
from stackedheads.registry import Registry
from stackedheads.tasks.vectors import Meta

# What a parametric family's parse is given: the rules of one depth (library.Library).
Library = Mapping[str, "AttentionRule"]

UNIFORM, IDENTITY, KEPT = "uniform", "identity", "kept"  # KEPT: the head's own attention, not a rule
Target = Callable[[Meta], torch.Tensor]  # meta -> (B, T) attended position of every token
# role -> d (s_i reads s_{i+d} of its chain), or (role, i, depth) -> what s_i reads (None: nothing)
Links = Mapping[str, int] | Callable[[str, int, int], "Dst | list[Dst] | None"]



@dataclass(frozen=True)
class AttentionRule:
    """One rule and its metadata (see the module docstring for what each field drives).

    ``target`` gives the attended position of every token; a rule that spreads attention
    gives its ``(B, T, T)`` pattern as ``spread`` instead. ``parts``: a mixture's rules.
    ``shortcut``: a rule for what the paper's rules do not name (a fixed position, the other
    chains, a mixture); discovery tries it first only where it fits clearly better than they do.
    ``measure``: the pattern is data discovery measures on one head's rows, ``measure(observed,
    meta, of_role)`` (JSON-ready; circuit.json's ``maps``), turned into attention by
    ``spread(meta, data)``. ``kind``: what :func:`..diagnose.rule_kind` says of it where its
    paths cannot (a measured map has none).
    """

    target: Target | None = None
    spread: Callable[[Meta], torch.Tensor] | None = None
    rank: tuple[int, int] = (3, 0)
    baseline: bool = False
    links: Links = field(default_factory=dict)
    sink: bool = False
    parts: tuple[str, ...] = ()
    shortcut: bool = False
    measure: Callable[[torch.Tensor, Meta, torch.Tensor], list] | None = None
    kind: str = ""

    def __post_init__(self) -> None:
        if (self.target is None) == (self.spread is None):
            raise ValueError("an attention rule needs exactly one of target and spread")
        if self.measure is not None and self.spread is None:
            raise ValueError("a measured rule needs spread(meta, data)")
        if not callable(self.links) and not set(self.links) <= set(ROLES):
            raise ValueError(f"links name roles {sorted(set(self.links) - set(ROLES))}; roles are {sorted(ROLES)}")

    def __call__(self, meta: Meta) -> torch.Tensor:
        """``(B, T)`` attended positions (rules with a target only)."""
        return self.target(meta)

    @property
    def measured(self) -> bool:
        return self.measure is not None

    @property
    def fitted(self) -> bool:
        """Whether discovery measures it against observed attention: a spread baseline
        (uniform) covers every position, so its mass says nothing; a measured map has no
        pattern of its own."""
        return not (self.baseline and self.spread is not None) and not self.measured

    def pattern(self, meta: Meta, data=None) -> torch.Tensor:
        """``(B, T, T)``: every token's attention under this rule; ``data``: what
        :attr:`measure` measured, for a measured rule."""
        if self.measured:
            if data is None:
                raise UsageError("a measured attention rule needs its map (circuit.json: the head's maps)")
            return self.spread(meta, data)
        if self.spread is not None:
            return self.spread(meta)
        return one_hot(self.target(meta), meta.role.shape[1])

    def paths(self, role: str, depth: int) -> list[tuple[int, Dst]]:
        """``(src, dst)`` paths tokens of ``role`` carry under this rule, where ``s_src`` can
        read ``dst`` (causal attention; ``dst`` as in the module docstring)."""
        srcs = role_sources(role, depth)
        if self.sink:
            return [(i, SINK) for i in srcs]
        if callable(self.links):
            reads = []
            for i in srcs:
                got = self.links(role, i, depth)
                reads += [(i, j) for j in (got if isinstance(got, list) else [got])]
        else:
            reads = [(i, i + self.links[role]) for i in srcs] if role in self.links else []
        return [(i, j) for i, j in reads if j is not None and _reachable(i, j, depth)]


@dataclass(frozen=True)
class RuleFamily:
    """Rules registered under one name: ``expand(depth) -> {name: rule}`` lists those a depth
    bounds; ``parse(name, lib)`` resolves a member no depth bounds (``None``: not one of its
    names) and ``propose(observed, meta, of_role, lib, masses) -> {name: mass}`` names the
    members fitting one role's observed attention best (``masses``: the enumerated rules')."""

    expand: Callable[[int], dict[str, AttentionRule]]
    parse: Callable[[str, Library], AttentionRule | None] | None = None
    propose: Callable[..., dict[str, float]] | None = None


RULES: Registry[AttentionRule | RuleFamily] = Registry("attention rule", package="stackedheads.circuits.rules")


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


def parametric(propose: Callable[..., dict[str, float]]) -> Callable[[Callable], RuleFamily]:
    """Decorator on ``parse(name, lib)``, given the family's ``propose``: a family no depth
    enumerates, for ``@RULES.register(name)``."""

    def make(parse: Callable[[str, Library], AttentionRule | None]) -> RuleFamily:
        return RuleFamily(lambda depth: {}, parse, propose)

    return make
