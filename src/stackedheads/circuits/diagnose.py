"""Where a head's attention goes, in the task's own terms, for rows no retrieval rule explains.

Appendix E reads the mechanism of each head off its attention maps (App. C) by eye. Discovery
does it with rules (:mod:`.rules`); a row no rule fits is left to the head (``kept``), and a
researcher then needs to know what it does. :func:`diagnose_row` says it, measured on held-out
sequences:

* ``own`` / ``other``: the attention on each ``s_j`` of the token's own chain and on the other
  chains' ``s_j`` (by step and role: ``s_2k`` the second token of pair k, ``s_2k+1`` the first
  of pair k + 1, ``s_0`` the query). Every position of a sequence is some chain's ``s_j``, so
  the two add up to the whole row;
* ``positions``: the fixed sequence positions that get the most attention (``p0`` included),
  and ``cells``: the same split by what each position holds (``p3 own s6``: position 3 where it
  holds the token's own s6), which names a row that reads a position only when it holds a role;
* ``best``: the description (a rule of the library: ``s+d``, ``o+d``, a fixed position ``p7``,
  an offset ``t-3``, a mixture ``a&b``, the identity...) whose replacement pattern covers the
  largest share of the row's attention, ``covered`` (mean over the role's tokens, the tokens a
  rule sends to themselves included), with the next best ones beside it.

Rows that a positional, cross-chain or mixture rule explains get the same diagnosis, so the
share of their attention that the rule covers is stated beside the shortcut.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from stackedheads.circuits.rules import (
    KEPT,
    ROLES,
    RETRIEVAL,
    AttentionRule,
    Library,
    chain_positions,
    path_kind,
    pattern_mass,
    rule_mass,
)
from stackedheads.circuits.rules.measured import cells
from stackedheads.tasks.vectors import Meta

N_ALTERNATIVES = 3
N_POSITIONS = 3
N_CELLS = 4


def rule_kind(r: AttentionRule, role: str, depth: int) -> str:
    """What a rule is for tokens of ``role``: ``baseline``, the kinds of its paths joined by
    ``+`` (``retrieval``, ``positional``, ``cross-chain``), prefixed ``mixture:`` for a mixture,
    the rule's own ``kind`` where it has one (a measured map), or ``no path``."""
    if r.baseline:
        return "baseline"
    if r.kind:
        return r.kind
    kinds = "+".join(sorted({path_kind(d) for _, d in r.paths(role, depth)})) or "no path"
    return f"mixture: {kinds}" if r.parts else kinds


def is_shortcut(kind: str) -> bool:
    """A rule kind that is not the paper's content-based retrieval, nor a baseline."""
    return kind not in (RETRIEVAL, "baseline", "no path")


def describe(name: str) -> str:
    """A rule's name in words."""
    if "&" in name:
        a, b = name.split("&")
        return f"half {describe(a)}, half {describe(b)}"
    words = {"identity": "itself", "first-token": "position 0", "previous": "the previous position",
             "position-map": "its own mean map by position (attention by position alone)",
             "position-role-map": "its own mean map by position and the chain role each holds"}
    if name in words:
        return words[name]
    if name[0] in "so" and name[1:2] in "+-":
        d = int(name[1:])
        whose = "its own chain's" if name[0] == "s" else "the other chains'"
        return f"{whose} s_(i{d:+d})" if d else f"{whose} s_i"
    if name.startswith("t-"):
        return f"{name[2:]} positions back"
    if name.startswith("p") and name[1:].isdigit():
        return f"position {name[1:]}"
    return name


@dataclass
class RowDiagnosis:
    layer: int
    head: int
    role: str
    rule: str  # what the circuit does with the row: a rule's name, or kept
    best: str  # the description covering the largest share
    kind: str  # rule_kind of best
    covered: float  # share of the row's attention on best's positions
    rule_covered: float | None  # the same for the circuit's rule (None for kept rows)
    rule_kind: str | None  # rule_kind of the circuit's rule (None for kept rows)
    alternatives: dict[str, float]  # the next best descriptions
    own: dict[str, float]  # "s_j" -> attention on the own chain's s_j
    other: dict[str, float]  # "s_j" -> attention on the other chains' s_j
    positions: dict[str, float]  # "p_k" -> attention on fixed position k (the largest)
    cells: dict[str, float]  # "p_k own s_j" / "p_k other s_j" -> attention on k where it holds that (the largest)

    @property
    def where(self) -> str:
        return f"L{self.layer}.{self.head} {self.role}"

    def text(self) -> str:
        """One line: what the row does, and how much of its attention that covers."""
        what = "no rule explains it" if self.rule == KEPT else f"replaced by {self.rule}"
        if self.rule not in (KEPT, self.best) and self.rule_covered is not None:
            what += f" (covering {self.rule_covered:.0%})"
        alts = ", ".join(f"{n} {m:.0%}" for n, m in self.alternatives.items())
        cells = [*((f"own {k}", v) for k, v in self.own.items()), *((f"other chains' {k}", v) for k, v in self.other.items())]
        roles = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cells, key=lambda kv: -kv[1])[:4])
        return (f"{self.where} ({what}): reads {describe(self.best)} ({self.best}, {self.kind}), covering "
                f"{self.covered:.0%} of its attention" + (f"; next {alts}" if alts else "")
                + (f"; by role: {roles}" if roles else "")
                + "; by position: " + ", ".join(f"{k} {v:.2f}" for k, v in self.positions.items())
                + "; by position and role: " + ", ".join(f"{k} {v:.2f}" for k, v in self.cells.items()))

    def to_dict(self) -> dict:
        return {**asdict(self), "text": self.text()}


def by_role(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(own, other)``, ``(2D + 1,)`` each: the role's mean attention on ``s_j`` of its own
    chain and on ``s_j`` of all the other chains together."""
    cp = chain_positions(meta)  # (B, N, S)
    B, N, S = cp.shape
    cols = cp.view(B, 1, N * S).expand(B, observed.shape[1], N * S)
    mass = observed.gather(-1, cols).view(B, -1, N, S)  # (B, T, N, S): attention on s_j of chain c
    own = (meta.chain[..., None] == torch.arange(N))[..., None]  # (B, T, N, 1)
    rows = of_role.float()[..., None]
    count = of_role.sum().clamp(min=1)
    return ((mass * own).sum(2) * rows).sum((0, 1)) / count, ((mass * ~own).sum(2) * rows).sum((0, 1)) / count


def by_cell(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor) -> dict[str, float]:
    """The role's mean attention on position k where k holds a given role (``s_j`` of its own
    chain or of another), the :data:`N_CELLS` largest over 0.05: a row that reads position 3
    when it holds its own s6, else position 2, shows as ``p3 own s6`` and ``p2 other s5``."""
    T, S = observed.shape[-1], meta.paths.shape[-1]
    key = torch.arange(T) * 2 * S + cells(meta)  # (B, T, T): position k and what it holds
    mass = torch.zeros(T * 2 * S, dtype=torch.float64).scatter_add_(
        0, key[of_role].flatten(), observed[of_role].double().flatten()) / of_role.sum().clamp(min=1)
    top = [int(c) for c in mass.argsort(descending=True, stable=True)[:N_CELLS] if mass[c] >= 0.05]
    return {f"p{c // (2 * S)} {'own' if c % (2 * S) >= S else 'other'} s{c % S}": round(float(mass[c]), 4) for c in top}


def diagnose_row(observed: torch.Tensor, meta: Meta, lib: Library, layer: int, head: int, role: str,
                 rule: str = KEPT, measured=None) -> RowDiagnosis:
    """The diagnosis of one head's rows of tokens ``role``; ``observed``: ``(B, T, T)`` its
    attention on (held-out) sequences ``meta``; ``rule``: what the circuit does with the rows
    (``measured``: its map, for a measured rule, whose share is the attention it reproduces,
    ``sum min(observed, map)``)."""
    of_role = meta.role == ROLES[role]
    # In rule_mass's order, not a set's: ties (two mixtures covering the same rows) then rank the
    # same in every process (a set of strings iterates by PYTHONHASHSEED).
    candidates = list(dict.fromkeys([*rule_mass(observed, meta, lib)[role], "identity"]))

    def covered(name: str) -> float:
        mass, _ = pattern_mass(observed, lib[name], meta)
        return float(mass[of_role].mean())

    shares = {n: covered(n) for n in candidates if lib[n].fitted}
    ranked = sorted(shares, key=lambda n: (-round(shares[n], 3), lib[n].rank))  # descriptions by name only
    if rule != KEPT and lib[rule].measured:
        shares[rule] = float(torch.minimum(observed, lib[rule].pattern(meta, measured)).sum(-1)[of_role].mean())
    elif rule != KEPT:
        shares[rule] = covered(rule)
    best = ranked[0]
    own, other = by_role(observed, meta, of_role)
    at = (observed * of_role[..., None]).sum((0, 1)) / of_role.sum().clamp(min=1)
    top = at.argsort(descending=True, stable=True)[:N_POSITIONS]

    def labelled(v: torch.Tensor) -> dict[str, float]:
        return {f"s{j}": round(float(v[j]), 4) for j in v.argsort(descending=True, stable=True).tolist() if v[j] >= 0.05}

    return RowDiagnosis(
        layer, head, role, rule, best, rule_kind(lib[best], role, lib.depth), round(shares[best], 4),
        None if rule == KEPT else round(shares[rule], 4), None if rule == KEPT else rule_kind(lib[rule], role, lib.depth),
        {n: round(shares[n], 4) for n in ranked[1:1 + N_ALTERNATIVES]},
        labelled(own), labelled(other), {f"p{int(k)}": round(float(at[k]), 4) for k in top},
        by_cell(observed, meta, of_role),
    )
