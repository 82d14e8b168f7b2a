"""Attention rules (Appendix E): the registry :data:`RULES` and what discovery knows of each rule.

Appendix E replaces each useful head's attention with "a map that is zero everywhere except for
the position I expect the head to attend to", and the others with uniform attention or the
identity. A *rule* names such a position for every token (a function of the batch metadata that
returns, for each token, the position it attends to, ``(B, T)``), or a whole pattern
(``uniform``; a rule spread over several positions). Each rule carries, as data, all that
discovery (:mod:`..discover`), the ablations and circuit.json's schema (:mod:`..ablate`) and
the emergence timelines need to know of it; no other module checks a rule's name.

Every token of the minimal task is one of the positions ``s_0 .. s_2D`` of its chain
(Appendix B, Definition 1): the query is ``s_0``, the second token of pair ``k`` (holding
``x_k``) is ``s_{2k}``, the first token of pair ``k + 1`` (also holding ``x_k``) is ``s_{2k+1}``.
The family ``s+d`` ("attend to ``s_{i+d}`` of my own chain") therefore covers the retrieval
heads: ``s-1`` is the pair partner (Sec. 8.2's first head), ``s+1`` the other occurrence of the
same symbol (the query's induction target), ``s+2`` the next symbol's second occurrence, and so
on. Where an ``s+d`` rule points at a later position (which causal attention cannot see) or
outside the chain, the token attends to itself.

What a rule reads: paths
------------------------
A rule's *paths* ``(src, dst)`` say what tokens ``s_src`` read; ``dst`` is one of

* an s-index ``j >= 0``: ``s_j`` of the token's own chain, the paper's content-based
  retrieval (Figure 5's arrows): kind :data:`RETRIEVAL`;
* :data:`SINK` (-1, shown ``p0``), ``"p<k>"`` or ``"t-<d>"``: sequence position 0, a fixed
  position ``k``, or the position ``d`` before the token, whatever chain holds it: kind
  :data:`POSITIONAL`, a shortcut (README: with few chains a fixed position often holds the
  answer), never counted as retrieval;
* ``"o<j>"``: ``s_j`` of the *other* chains: kind :data:`CROSS_CHAIN` (what the query's chain
  is not).

The built-in rules live here (uniform, identity, first-token, previous, ``s+d``); those for what
the diagnosis (:mod:`..diagnose`) finds in rows these cannot explain are one module each in this
package (``positional``, ``other_chains``, ``mixture``, ``measured``): :data:`RULES` imports every module of
the package on first use, so a new built-in is a new file.

How to add a rule
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

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from stackedheads import theory
from stackedheads.circuits.paths import (  # noqa: F401 (what a path is, re-exported beside the rules)
    CROSS_CHAIN,
    POSITIONAL,
    RETRIEVAL,
    SINK,
    Dst,
    dst_label,
    dst_parts,
    path_kind,
    path_sort_key,
)
from stackedheads.errors import UsageError
from stackedheads.registry import Registry
from stackedheads.tasks.vectors import FIRST, QUERY, SECOND, Meta

ROLES = {"first": FIRST, "second": SECOND, "query": QUERY}
UNIFORM, IDENTITY, KEPT = "uniform", "identity", "kept"  # KEPT: the head's own attention, not a rule
Target = Callable[[Meta], torch.Tensor]  # meta -> (B, T) attended position of every token
# role -> d (s_i reads s_{i+d} of its chain), or (role, i, depth) -> what s_i reads (None: nothing)
Links = Mapping[str, int] | Callable[[str, int, int], "Dst | list[Dst] | None"]


def s_index(meta: Meta) -> torch.Tensor:
    """``(B, T)``: the ``i`` of ``s_i`` each token is in its own chain."""
    return torch.where(
        meta.role == QUERY, 0, torch.where(meta.role == SECOND, 2 * meta.chain_pos, 2 * meta.chain_pos + 1)
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


def path_ends(meta: Meta, src: int, dst: Dst) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence positions of a path's ends, ``(rows, cols)``: ``s_src`` of every chain and what
    it reads, ``(B, N)`` each. For ``o<j>`` (the other chains' ``s_j``) every pair of a chain and
    another chain is one entry, ``(B, N (N - 1))``, so a path's mean attention there is per
    other chain's token. Where ``s_src`` cannot read ``dst`` in a sequence (it would read itself,
    or a later position: position 0 has nothing before it, another chain's token of its block may
    come after it), the entry is replaced by one of the same sequence that can, so that a path's
    mean attention is that of the tokens able to follow it (attention on oneself at position 0
    is 1 whatever the head does); a sequence with none reads a masked position (attention 0)."""
    cp = chain_positions(meta)
    rows = cp[:, :, src]
    kind, n = dst_parts(dst)
    if kind == "s":
        return rows, cp[:, :, n]
    if kind == "p":
        cols = torch.full_like(rows, n)
    elif kind == "t":
        cols = rows - n
    else:
        B, N = rows.shape
        other = ~torch.eye(N, dtype=torch.bool).expand(B, N, N)
        rows, cols = rows[:, :, None].expand(B, N, N)[other].view(B, -1), cp[:, None, :, n].expand(B, N, N)[other].view(B, -1)
    readable = (cols < rows) & (cols >= 0)
    pick = readable.float().argmax(-1, keepdim=True)  # a readable entry of the sequence
    masked = torch.tensor([0, meta.role.shape[1] - 1])  # row 0 cannot see the last position
    some = readable.any(-1, keepdim=True)
    rows = torch.where(readable, rows, torch.where(some, rows.gather(-1, pick), masked[0]))
    cols = torch.where(readable, cols, torch.where(some, cols.gather(-1, pick), masked[1]))
    return rows, cols


@torch.no_grad()
def path_attention(model, batch, paths) -> list[float]:
    """Mean attention of tokens ``s_src`` on ``s_dst`` (same chain, or position 0 for a sink
    path), per ``(layer, head, src, dst)`` path, for one member."""
    names = sorted({f"blocks.{l}.attn.hook_pattern" for l, *_ in paths})
    _, cache = model.run_with_cache(batch.inputs, batch.meta, names=names)
    B = batch.meta.role.shape[0]
    out = []
    for layer, head, src, dst in paths:
        pat = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, head]  # (B, T, T)
        rows, cols = path_ends(batch.meta, src, dst)  # (B, N) each
        out.append(float(pat[torch.arange(B)[:, None], rows, cols].mean()))
    return out


def pair_attention(model, batch, depth: int) -> list[list]:
    """Sec. 8.2 (i) as the paper read it, from the attention maps: every head's mean attention
    from the second token of each pair, ``s_2k``, on its first, ``s_2k-1`` (k = 1..D), as
    ``[[layer, head, [a_1, .., a_D]], ...]``."""
    cfg = model.config
    heads = [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    att = path_attention(model, batch, [(l, h, 2 * k, 2 * k - 1) for l, h in heads for k in range(1, depth + 1)])
    return [[l, h, att[i * depth:(i + 1) * depth]] for i, (l, h) in enumerate(heads)]


def one_hot(target: torch.Tensor, T: int) -> torch.Tensor:
    """``(B, T, T)`` patterns with all attention on ``target[b, t]``."""
    return torch.nn.functional.one_hot(target, T).float()


def uniform_causal(B: int, T: int) -> torch.Tensor:
    """``(B, T, T)``: uniform attention over the positions the causal mask allows."""
    tri = torch.ones(T, T).tril()
    return (tri / tri.sum(-1, keepdim=True)).expand(B, T, T)


def _reachable(i: int, dst: Dst, depth: int) -> bool:
    """Whether ``s_i`` can read ``dst`` in some sequence (causal attention, Sec. 6's layout)."""
    kind, n = dst_parts(dst)
    pos = theory.chain_order(depth)  # sequence position of each s_i within one chain
    if kind in ("s", "o") and not 0 <= n <= 2 * depth:
        return False
    if kind == "s":
        return bool(pos[n] < pos[i])
    if kind == "o":  # other chains' tokens of the same block may come first (shuffled within it)
        return bool(pos[n] // 2 <= pos[i] // 2)
    return True


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


RULES: Registry[AttentionRule | RuleFamily] = Registry("attention rule", package=__name__)


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


# --- using the library ----------------------------------------------------------------------


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
