"""Automatic circuit discovery: Appendix E's manual procedure as a greedy search (:class:`Search`).

The validation sequences are split in two: the search uses the first half; every reported loss
(step 5's combined ablation, step 6's per-path ablations) and every row's coverage use the
second, held out, so a circuit that only fits the sequences it was searched on fails.

Steps, as :func:`discover` runs them:

1. each head, in layer order: a head no rule fits (none catches ``min_mass`` of a role's
   attention) is tried whole as uniform attention, then the identity; otherwise each token role
   (first / second / query) gets the best-fitting rule of the paper's, then uniform, then the
   identity: the first that keeps every chain position within its budget (best fit first, so
   two heads doing one job both keep their rule);
2. rows no candidate explains keep the head's own attention (``kept``) and are retried, then
   with the shortcut rules (a fixed position ``p7``, an offset ``t-3``, the other chains ``o+d``,
   a mixture ``a&b``, last the row's own mean map, ``position-map``), and in place of a rule a
   shortcut fits clearly better (:func:`clearer`);
3. step 6: every path a rule carries is removed alone; a path whose removal breaks the budget is
   useful; the rest are tested in pairs and together (a redundant group: Section 9.2's layers 14
   and 21); roles that carry no useful path are simplified to a baseline where the budget allows;
4. a rule names a row only where it catches at least ``min_mass`` of the row's held-out
   attention (App. E's map is "the position that I expect the head to attend to"): a row below
   is kept, never labelled by the loss alone.

Kept rows count as useful computation; the combined ablation that validates the circuit makes
them uniform. Budgets: App. E's absolute threshold (validation loss below 0.05) at every chain
position, or, with ``threshold=None``, each position's unablated loss plus ``tolerance`` (the
CPU twins). A position whose unablated loss is already above the absolute threshold gets its own
loss plus ``tolerance`` and is listed in ``model_over_budget``. Which rules are baselines or
shortcuts, how ties rank and which paths a rule carries come from the rule objects of
:data:`~stackedheads.circuits.rules.RULES`, never from their names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path

import torch

from stackedheads import theory
from stackedheads.circuits.ablate import (
    COMBINED,
    COMBINED_KEPT,
    UNABLATED,
    Ablation,
    Ablator,
    Circuit,
    HeadSpec,
    LossRow,
    loss_table,
)
from stackedheads.circuits.diagnose import RowDiagnosis, diagnose_row, is_shortcut, rule_kind
from stackedheads.circuits.paths import CircuitPath, Link, Row
from stackedheads.circuits.rules import (
    CROSS_CHAIN,
    KEPT,
    POSITIONAL,
    RETRIEVAL,
    ROLES,
    Library,
    baselines,
    dst_label,
    library,
    pair_attention,
    path_kind,
    path_sort_key,
    pattern_mass,
    role_sources,
    rule_mass,
)
from stackedheads.errors import UsageError
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.report.plots import pyplot, save_figure
from stackedheads.tasks.vectors import Batch, VectorTaskConfig

MAX_PAIR_TESTS = 400  # pairs of non-necessary paths tested for redundancy (the rest: one joint group)
MAX_ROUNDS = 3  # rounds of paths, simplification and retrying the kept rows (each retry must explain a row)
# A shortcut rule is tried beside the paper's rules only where it catches this much more
# attention than all of them. With N = 2 a retrieval target sits at one of two positions, so a
# fixed position also catches half of a retrieval head's attention: that is no explanation.
SHORTCUT_MARGIN = 0.2
WEAK = 0.6  # a row whose rule covers less of its (held-out) attention is diagnosed too


@dataclass(frozen=True)
class DiscoverConfig:
    tolerance: float = 0.04  # per-position loss budget over the unablated loss
    threshold: float | None = None  # Appendix E's absolute threshold (0.05) instead, per position
    # A rule must catch this share of a role's attention to be tried (search half) and to be
    # kept (held-out half): App. E's map is "the position that I expect the head to attend to".
    min_mass: float = 0.5
    n_val: int = 512  # validation sequences: the first half searches, the second validates

    def __post_init__(self) -> None:
        inf = float("inf")  # comparisons below also refuse nan
        if not 0 <= self.tolerance < inf:
            raise UsageError(f"'tolerance' must be a finite number >= 0, got {self.tolerance}", fields=("tolerance",))
        if self.threshold is not None and not 0 < self.threshold < inf:
            raise UsageError(f"'threshold' must be a finite number > 0, got {self.threshold}", fields=("threshold",))
        if not 0 < self.min_mass <= 1:
            raise UsageError(f"'min_mass' must lie in (0, 1], got {self.min_mass}", fields=("min_mass",))
        if self.n_val < 2:
            raise UsageError(f"'n_val' must be >= 2 (half searches, half validates), got {self.n_val}", fields=("n_val",))

    def budgets(self, partial: list[float]) -> tuple[list[float], list[str]]:
        """Per-position loss budgets for unablated partial losses ``partial``, and the positions
        whose own loss is already above the absolute threshold."""
        if self.threshold is None:
            return [p + self.tolerance for p in partial], []
        over = [f"x{j}" for j, p in enumerate(partial, start=1) if p > self.threshold]
        return [p + self.tolerance if p > self.threshold else self.threshold for p in partial], over


def fitted_rules(masses: dict[str, float], lib: Library, min_mass: float = 0.0) -> list[str]:
    """Rules of one role catching at least ``min_mass`` of its attention, best fit first; ties
    go to the simpler rule (its ``rank``), then to library order (``masses`` keeps it)."""
    ranked = sorted(masses.items(), key=lambda kv: (-round(kv[1], 3), lib[kv[0]].rank))
    return [name for name, mass in ranked if mass >= min_mass]


def role_candidates(masses: dict[str, float], lib: Library, min_mass: float, top: int = 3) -> list[str]:
    """Replacements to try first for one role: the best-fitting rules of the paper's catching
    ``min_mass``, then the baselines (App. E: uniform, then the identity). Shortcut rules wait
    for the rows these leave unexplained (:func:`retry_candidates`) and for :func:`clearer`."""
    fits = [n for n in fitted_rules(masses, lib, min_mass) if not lib[n].baseline and not lib[n].shortcut]
    return fits[:top] + baselines(lib)


def clearer(name: str, masses: dict[str, float], lib: Library, min_mass: float) -> list[str]:
    """Single shortcut rules catching :data:`SHORTCUT_MARGIN` more of a row's attention than
    its rule ``name`` (and ``min_mass``), best first: the row follows a position (or the other
    chains) rather than the role its rule names (a head read as ``s0->s6`` that attends to one
    fixed position, which holds the query chain's s6 in half the sequences)."""
    floor = max(masses.get(name, 0.0) + SHORTCUT_MARGIN, min_mass)
    return [n for n in fitted_rules(masses, lib, floor) if lib[n].shortcut and not lib[n].parts]


def retry_candidates(masses: dict[str, float], lib: Library, min_mass: float) -> list[str]:
    """Replacements for a row the first pass left unexplained: every rule catching ``min_mass``,
    best fit first, single rules before mixtures (a
    mixture of two only where one alone does not fit); then the baselines; last the row's own
    mean map (``position-map``: attention by position alone, of which the baselines are the
    simplest cases)."""
    fits = fitted_rules(masses, lib, min_mass)
    singles = [n for n in fits if not lib[n].baseline and not lib[n].parts]
    return singles + [n for n in fits if lib[n].parts] + baselines(lib) + [n for n in lib if lib[n].measured]


def candidate_paths(spec: HeadSpec, depth: int) -> list[Link]:
    """Links a head may carry: what each role's rule links
    (:meth:`~stackedheads.circuits.rules.AttentionRule.paths`)."""
    lib = library(depth)
    return sorted({p for role, name in spec.rules.items() if name != KEPT for p in lib[name].paths(role, depth)},
                  key=path_sort_key)


def split(batch: Batch) -> tuple[Batch, Batch]:
    """(search, check): the first half of the sequences searches, the second validates."""
    n = batch.inputs.shape[0]
    if n < 2:
        raise UsageError("circuit discovery needs at least 2 validation sequences")
    return batch[: n // 2], batch[n // 2:]


@dataclass
class Discovery:
    circuit: Circuit
    table: list[LossRow]  # on the held-out half
    threshold: float  # the absolute threshold, or the mean of the per-position budgets
    unexplained: list[Row]  # rows left to the head's own attention
    budgets: list[float]  # per chain position, on the held-out half
    model_over_budget: list[str]  # positions whose unablated loss is above the absolute threshold
    diagnosis: list[RowDiagnosis] = field(default_factory=list)  # unexplained and shortcut rows, held out
    pair_attention: list = field(default_factory=list)  # rules.pair_attention, held out (A4)
    coverage: list = field(default_factory=list)  # [layer, head, role, rule, share of its held-out attention the rule catches]

    def summary(self) -> dict:
        c = self.circuit
        rows = {r.ablation: r for r in self.table}
        combined, info = rows[COMBINED], c.info
        over = [f"x{j}" for j, (p, b) in enumerate(zip(combined.partial, self.budgets, strict=True), start=1) if p > b]
        with_paths = [[h.layer, h.head] for h in c.useful_heads()]
        kept_heads = sorted({(l, h) for l, h, _ in self.unexplained})
        mapped = c.mapped()  # rows following their measured map: useful, shortcuts, no path
        useful = sorted({tuple(x) for x in with_paths} | set(kept_heads) | {(l, h) for l, h, _ in mapped})
        by_kind: dict[str, list] = {RETRIEVAL: [], POSITIONAL: [], CROSS_CHAIN: []}
        for p in c.paths():
            by_kind[path_kind(p.dst)].append(list(p))
        retrieval = sorted({(l, h) for l, h, *_ in by_kind[RETRIEVAL]})
        # Heads whose useful paths are all shortcuts (positional or cross-chain), or that have
        # rows following a position map: useful, but not the paper's content-based retrieval heads.
        shortcut = sorted(({(l, h) for kind in (POSITIONAL, CROSS_CHAIN) for l, h, *_ in by_kind[kind]}
                           | {(l, h) for l, h, _ in mapped}) - set(retrieval))
        return {
            "threshold": self.threshold,
            "threshold_kind": "absolute" if info.absolute else "relative",
            "tolerance": info.tolerance,
            "budgets": self.budgets,
            "model_over_budget": self.model_over_budget,
            "unablated": {"loss": rows[UNABLATED].loss, "partial": rows[UNABLATED].partial},
            "combined": {"loss": combined.loss, "partial": combined.partial},
            "over_budget": over,
            # Kept rows do computation no rule explains: they count as useful (A2, A5).
            "useful_heads": [list(u) for u in useful],
            "n_useful_heads": len(useful),
            "heads_with_paths": with_paths,
            "theory_min_heads": theory.min_layers(c.depth, causal=True),
            "unexplained_heads": [list(x) for x in self.unexplained],
            "paths": [list(p) for p in c.paths()],
            "paths_by_kind": by_kind,
            "mapped_rows": [[l, h, r, c.head(l, h).rules[r]] for l, h, r in mapped],
            "retrieval_heads": [list(h) for h in retrieval],
            "shortcut_heads": [list(h) for h in shortcut],
            "diagnosis": [d.to_dict() for d in self.diagnosis],
            "pair_attention": self.pair_attention,
            "coverage": self.coverage,
            "redundant_groups": info.to_dict()["redundant_groups"],
            "serves": info.serves,
            "n_search": info.n_search,
            "n_check": info.n_check,
            "losses": [r.to_dict() for r in self.table],
        }


class Search:
    """App. E's procedure on one model, on the search half: each head's mechanism (steps 1-4),
    the useful paths (step 6) and the simplest circuit within budget. Every change that keeps
    each chain position within its budget is kept; the others are undone."""

    def __init__(self, model: EnsembleTransformer, search: Batch, task: VectorTaskConfig, cfg: DiscoverConfig) -> None:
        self.model, self.batch, self.task, self.cfg = model, search, task, cfg
        self.circuit = Circuit(task.depth, [HeadSpec.whole(l, h, KEPT) for l in range(model.config.n_layers)
                                            for h in range(model.config.n_heads)])
        self.ablator = Ablator(model, search, task)  # reruns only the layers a trial changes
        self.budget, _ = cfg.budgets(self.ablator.loss(self.circuit)[1])  # every row kept: the unablated model
        self.ablator.promote()
        _, self.cache = model.run_with_cache(search.inputs, search.meta, names=model.pattern_names())
        self.lib = library(task.depth)
        self.base = baselines(self.lib)  # App. E's no-computation replacements, simplest (uniform) first
        self.masses = {(s.layer, s.head): rule_mass(self.observed(s), search.meta, self.lib) for s in self.circuit.heads}
        # Heads replaced whole by a baseline (they follow no rule) stay so: simplify() skips them.
        self.whole: set[tuple[int, int]] = set()

    def observed(self, spec: HeadSpec) -> torch.Tensor:
        return self.cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]

    def fits(self, remove=None) -> bool:
        """Every position within budget, kept rows left to the head. A change that fits is kept
        (callers undo the others), so its circuit is the one the next trials start from."""
        partial = self.ablator.loss(self.circuit, remove=remove)[1]
        ok = all(p <= b for p, b in zip(partial, self.budget, strict=True))
        if ok and remove is None:
            self.ablator.promote()
        return ok

    def measure(self, spec: HeadSpec, role: str, name: str) -> None:
        """A measured rule's map: the head's own mean attention, on the search sequences."""
        spec.maps[role] = self.lib[name].measure(self.observed(spec), self.batch.meta, self.batch.meta.role == ROLES[role])

    def assign(self, spec: HeadSpec, role: str, candidates: list[str]) -> None:
        """The first of ``candidates`` within budget for the role's rows, else ``kept``."""
        for candidate in candidates:
            spec.rules[role] = candidate
            if self.lib[candidate].measured:
                self.measure(spec, role, candidate)
            if self.fits():
                return
            spec.maps.pop(role, None)
        spec.rules[role] = KEPT

    def fit_heads(self) -> None:
        """Steps 2-3, head by head in layer order: a head no rule fits is tried whole as a
        baseline; otherwise each role gets the best-fitting rule within budget, then a baseline."""
        min_mass = self.cfg.min_mass
        for spec in self.circuit.heads:
            m = self.masses[spec.layer, spec.head]
            if not any(not self.lib[n].baseline for role in ROLES for n in role_candidates(m[role], self.lib, min_mass)):
                for name in self.base:
                    spec.rules = dict.fromkeys(ROLES, name)
                    if self.fits():
                        self.whole.add((spec.layer, spec.head))
                        break
                else:
                    spec.rules = dict.fromkeys(ROLES, KEPT)
                if (spec.layer, spec.head) in self.whole:
                    continue
            for role in ROLES:
                self.assign(spec, role, role_candidates(m[role], self.lib, min_mass))

    def retry_kept(self, shortcuts: bool) -> bool:
        """Step 4: rows left unexplained get every rule of the paper's catching ``min_mass``, now
        that the heads after them are settled (with ``shortcuts``: every rule,
        :func:`retry_candidates`); whether one of them now follows a rule."""
        got = False
        for spec in self.circuit.heads:
            for role in [r for r, n in spec.rules.items() if n == KEPT]:
                m = self.masses[spec.layer, spec.head][role]
                self.assign(spec, role, retry_candidates(m, self.lib, self.cfg.min_mass) if shortcuts else
                            [n for n in fitted_rules(m, self.lib, self.cfg.min_mass)
                             if not self.lib[n].baseline and not self.lib[n].shortcut] + self.base)
                got |= spec.rules[role] != KEPT
        return got

    def simplify(self) -> None:
        """Simpler is better (step 3): roles that carry no useful path become a baseline
        (uniform, or the identity) where every position stays within budget."""
        for spec in self.circuit.heads:
            if (spec.layer, spec.head) in self.whole:
                continue
            carried = {src for src, _ in spec.paths}
            for role, name in list(spec.rules.items()):
                if name in (self.base[0], KEPT) or (set(role_sources(role, self.task.depth)) & carried):
                    continue
                for simpler in self.base:
                    if simpler == name:
                        break
                    spec.rules[role] = simpler
                    if self.fits():
                        break
                    spec.rules[role] = name

    def relabel(self) -> bool:
        """Rows whose rule a shortcut rule fits clearly better (:func:`clearer`) take it where
        the budget allows; whether one did."""
        got = False
        for spec in self.circuit.heads:
            for role, name in list(spec.rules.items()):
                if name == KEPT or self.lib[name].baseline or self.lib[name].shortcut:
                    continue
                for better in clearer(name, self.masses[spec.layer, spec.head][role], self.lib, self.cfg.min_mass):
                    spec.rules[role] = better
                    if self.fits():
                        got = True
                        break
                    spec.rules[role] = name
        return got

    def joint_maps(self) -> bool:
        """The rows still unexplained, all replaced at once by their measured maps (simplest
        first), where that keeps the budget; failing that, together with the rows that already
        follow a map, all by the finer one. One at a time, each row was tried beside the others'
        own attention, which its neighbours' maps may suit better. Whether they were."""
        circuit = self.circuit
        kept, mapped = circuit.kept(), circuit.mapped()
        before = {(l, h): (dict(s.rules), dict(s.maps)) for l, h in {r[:2] for r in kept + mapped} for s in [circuit.head(l, h)]}
        measured = [n for n in self.lib if self.lib[n].measured]
        for rows, name in [(kept, n) for n in measured] + ([(kept + mapped, measured[-1])] if mapped else []):
            for l, h, role in rows:
                spec = circuit.head(l, h)
                spec.rules[role] = name
                self.measure(spec, role, name)
            if self.fits():
                return True
            for (l, h), (rules_, maps) in before.items():
                spec = circuit.head(l, h)
                spec.rules, spec.maps = dict(rules_), dict(maps)
        return False

    def unlabel(self, check: Batch) -> bool:
        """A rule names a row only where it catches at least ``min_mass`` of the row's attention
        on the held-out sequences (App. E reads "the position that I expect the head to attend
        to" off the map): a row below is left to the head (kept), never mislabelled. Whether any was."""
        _, cache = self.model.run_with_cache(check.inputs, check.meta, names=self.model.pattern_names())
        got = False
        for spec in self.circuit.heads:
            observed = cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]
            for role, name in list(spec.rules.items()):
                if name == KEPT or self.lib[name].baseline:
                    continue
                if rule_cover(observed, check.meta, self.lib, role, name, spec.maps.get(role)) < self.cfg.min_mass:
                    spec.rules[role] = KEPT
                    spec.maps.pop(role, None)
                    got = True
        return got

    def settle(self) -> list:
        """Step 6's paths, simplification, and the paths of the simplified circuit."""
        _useful_paths(self.circuit, self.fits)
        self.simplify()
        return _useful_paths(self.circuit, self.fits)


def rule_cover(observed: torch.Tensor, meta, lib: Library, role: str, name: str, measured=None) -> float:
    """The share of a role's attention (mean over its rows) that rule ``name`` catches: the mass
    on its targets, or for a measured map the attention it reproduces (``sum min(observed, map)``)."""
    of_role = meta.role == ROLES[role]
    if lib[name].measured:
        return float(torch.minimum(observed, lib[name].pattern(meta, measured)).sum(-1)[of_role].mean())
    return float(pattern_mass(observed, lib[name], meta)[0][of_role].mean())


@torch.no_grad()
def discover(model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, cfg: DiscoverConfig = DiscoverConfig()) -> Discovery:
    """The circuit of one model (``model.member(e)``) on ``batch`` (validation sequences), by
    App. E's steps on the first half; every reported loss on the second, held out."""
    search, check = split(batch)
    s = Search(model, search, task, cfg)
    s.fit_heads()  # steps 1-3
    # The paper's rules first, as App. E names them; then the shortcut rules, for the rows those
    # leave unexplained (again after each settling, which changes the heads beside them), and
    # for the rows a shortcut fits clearly better than their rule.
    s.retry_kept(shortcuts=False)  # step 4
    groups = s.settle()  # step 6, then step 3 again
    for _ in range(MAX_ROUNDS):
        if not s.circuit.kept() or not s.retry_kept(shortcuts=True):
            break
        groups = s.settle()
    if s.circuit.kept() and s.joint_maps():
        groups = s.settle()
    if s.relabel():
        groups = s.settle()
    if s.unlabel(check):
        groups = s.settle()
    circuit, lib = s.circuit, s.lib
    circuit.info.redundant_groups = groups
    for spec in circuit.heads:  # maps of rows simplified to something else are gone
        spec.maps = {r: m for r, m in spec.maps.items() if spec.rules[r] != KEPT and lib[spec.rules[r]].measured}
    return _validated(model, check, task, cfg, circuit, groups, int(search.inputs.shape[0]))


def _validated(model: EnsembleTransformer, check: Batch, task: VectorTaskConfig, cfg: DiscoverConfig,
               circuit: Circuit, groups: list, n_search: int) -> Discovery:
    """Step 5 and step 6 on the held-out sequences: the combined ablation, each path's, and which
    chain positions each path serves."""
    lib = library(task.depth)
    table = loss_table(model, check, task, circuit)
    check_budget, over = cfg.budgets(table[0].partial)
    # Which chain positions each path serves: removing it (its group, for a redundant path)
    # raises their partial loss by more than the tolerance over the combined ablation with kept
    # rows left to the head. Emergence (Sec. 9) orders positions by this.
    rows = {r.ablation: r for r in table}
    base = rows.get(COMBINED_KEPT, rows[COMBINED]).partial

    def raised(partial: list[float]) -> list[int]:
        return [j for j, (p, c) in enumerate(zip(partial, base, strict=True), start=1) if p - c > cfg.tolerance]

    serves = {p.key: raised(rows[Ablation.removed(p)].partial) for p in circuit.paths()}
    serves.update({r.key: raised(rows[Ablation.removed_row(r)].partial) for r in circuit.mapped()})
    for g in groups:
        joint = raised(rows[Ablation.removed(*g)].partial)
        for p in g:
            serves[p.key] = joint
    info = circuit.info
    info.threshold = cfg.threshold if cfg.threshold is not None else sum(check_budget) / len(check_budget)
    info.tolerance, info.unablated_loss, info.config, info.serves = cfg.tolerance, table[0].loss, asdict(cfg), serves
    info.budgets, info.n_search, info.n_check = check_budget, n_search, int(check.inputs.shape[0])
    _, cache = model.run_with_cache(check.inputs, check.meta, names=model.pattern_names())
    cover = _coverage(cache, check, circuit, lib)
    return Discovery(circuit, table, info.threshold, circuit.kept(), check_budget, over,
                     _diagnose(cache, check, circuit, lib, cover), pair_attention(model, check, task.depth),
                     [[l, h, r, circuit.head(l, h).rules[r], round(c, 4)] for (l, h, r), c in cover.items()])


def _coverage(cache: dict, check: Batch, circuit: Circuit, lib: Library) -> dict[tuple[int, int, str], float]:
    """Every row a rule replaces (baselines aside): the share of its held-out attention the rule catches."""
    out = {}
    for spec in circuit.heads:
        observed = cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]
        for role, name in spec.rules.items():
            if name != KEPT and not lib[name].baseline:
                out[spec.layer, spec.head, role] = rule_cover(observed, check.meta, lib, role, name, spec.maps.get(role))
    return out


def _diagnose(cache: dict, check: Batch, circuit: Circuit, lib: Library, cover: dict) -> list[RowDiagnosis]:
    """The diagnosis (:mod:`.diagnose`) of every row left to the head, every row a shortcut or
    mixture rule replaces, and every row whose rule covers less than :data:`WEAK` of its
    attention, on the held-out sequences."""
    out = []
    for spec in circuit.heads:
        observed = cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]
        for role, name in spec.rules.items():
            if name != KEPT and lib[name].baseline:
                continue
            weak = name != KEPT and lib[name].fitted and cover[spec.layer, spec.head, role] < WEAK
            if name == KEPT or weak or is_shortcut(rule_kind(lib[name], role, circuit.depth)):
                out.append(diagnose_row(observed, check.meta, lib, spec.layer, spec.head, role, name, spec.maps.get(role)))
    return out


def _useful_paths(circuit: Circuit, fits) -> list[list[CircuitPath]]:
    """Set each rule head's useful paths (step 6); return the redundant groups.

    A path is useful alone when removing it breaks the budget. The rest are tested in pairs and
    then all together: paths whose joint removal breaks it form a redundant group, all useful.
    A joint removal that breaks is shrunk to a minimal group (no path of it can be left out and
    still break the budget), so paths that merely ride along are not reported, and the search
    repeats on what is left (two triples of stand-ins are two groups).
    """
    cands = [CircuitPath(s.layer, s.head, src, dst) for s in circuit.heads for src, dst in candidate_paths(s, circuit.depth)]
    singles = [p for p in cands if not fits(remove=[p.removal])]
    rest = [p for p in cands if p not in singles]
    groups: list[list[CircuitPath]] = []
    if len(rest) >= 2 and not fits(remove=[p.removal for p in rest]):
        # Likely stand-ins first: the same (src, dst) in two heads, then the same src.
        pairs = sorted(combinations(rest, 2), key=lambda ab: (ab[0][2:] != ab[1][2:], ab[0].src != ab[1].src))
        grouped: set = set()
        for a, b in pairs[:MAX_PAIR_TESTS]:
            if a not in grouped and b not in grouped and not fits(remove=[a.removal, b.removal]):
                groups.append([a, b])
                grouped |= {a, b}
        left = [p for p in rest if p not in grouped]
        while len(left) >= 2 and not fits(remove=[p.removal for p in left]):
            group = _minimal_group(left, fits)
            if len(group) < 2:  # cannot happen (a single would have broken alone); never loop
                break
            groups.append(group)
            left = [p for p in left if p not in group]
    useful = set(singles) | {p for g in groups for p in g}
    for s in circuit.heads:
        s.paths = [(src, dst) for (l, h, src, dst) in cands if (l, h) == (s.layer, s.head) and (l, h, src, dst) in useful]
    return groups


def _minimal_group(paths: list, fits) -> list:
    """A subset of ``paths`` whose joint removal still breaks the budget and from which no path
    can be left out (one pass, each path dropped where the rest still break)."""
    keep = list(paths)
    for p in paths:
        trial = [q for q in keep if q != p]
        if len(trial) >= 2 and not fits(remove=[q.removal for q in trial]):
            keep = trial
    return keep


def symbol_label(i: int) -> str:
    """``s_i`` as the paper draws it: A for x_0, B for x_1, ...; ' marks the second occurrence."""
    letter = chr(ord("A") + i // 2)
    return "q" if i == 0 else (f"{letter}'" if i % 2 == 0 else letter)


def plot_circuit(circuit: Circuit, out: str | Path, title: str = "") -> list[str]:
    """Figure 5 style: one chain's positions in sequence order, one arrow per useful path.

    Arrows point the way information flows: from the attended position to the attending one,
    labelled with the layer (``L0`` is the first, as in ``blocks.0``). Paths of a redundant group
    (useful only together) are dashed and labelled ``g1``, ``g2``...; shortcut paths come from
    grey nodes left of the chain, drawn dotted: ``p0`` is the sequence's first position (a sink
    rule, such as first-token), ``p7`` a fixed position, ``t-2`` an offset, ``o4`` the other
    chains' ``s4``.
    """
    plt = pyplot()

    D = circuit.depth
    pos = theory.chain_order(D)
    paths = circuit.paths()
    outside = sorted({dst_label(p[3]) for p in paths if path_kind(p[3]) != RETRIEVAL})
    x_of = {label: -1.2 * (n + 1) for n, label in enumerate(outside)}
    fig, ax = plt.subplots(figsize=(1.1 * (2 * D + 1 + 1.2 * len(outside)) + 1, 3.2))
    for i in range(2 * D + 1):
        x = pos[i]
        ax.add_patch(plt.Circle((x, 0), 0.32, color="#dde6f3" if i else "#f7d9c4", zorder=2))
        ax.text(x, 0, symbol_label(i), ha="center", va="center", fontsize=11, zorder=3)
        ax.text(x, -0.6, f"s{i}", ha="center", va="center", fontsize=7, color="grey")
    group_of = {p: g for g, group in enumerate(circuit.info.redundant_groups, start=1) for p in group}
    for label, x in x_of.items():
        ax.add_patch(plt.Circle((x, 0), 0.32, color="#eeeeee", zorder=2))
        ax.text(x, 0, label, ha="center", va="center", fontsize=9, zorder=3)
    colors = plt.get_cmap("tab10")
    layers = sorted({p[0] for p in paths})
    seen: dict[tuple, int] = {}
    heights = [0.9]
    for layer, head, src, dst in paths:
        k = seen[(src, dst)] = seen.get((src, dst), -1) + 1  # parallel paths: higher arcs
        shortcut = path_kind(dst) != RETRIEVAL
        x0, x1 = (x_of[dst_label(dst)] if shortcut else pos[dst]), pos[src]
        rad = (0.5 + 0.7 * k) * (-1 if x1 > x0 else 1)
        c = colors(layers.index(layer) % 10)
        g = group_of.get((layer, head, src, dst))
        ax.annotate(
            "", xy=(x1, 0.3), xytext=(x0, 0.3),
            arrowprops=dict(arrowstyle="-|>", color=c, lw=1.6, connectionstyle=f"arc3,rad={rad}", shrinkA=6, shrinkB=6,
                            ls="--" if g else ":" if shortcut else "-"),
        )
        height = 0.3 + abs(rad) * abs(x1 - x0) / 2
        heights.append(height + 0.4)
        ax.text((x0 + x1) / 2, height + 0.08, f"L{layer}.{head}" + (f" g{g}" if g else ""), color=c, ha="center", fontsize=8)
    ax.set_xlim(min(x_of.values(), default=-1.2) - 0.6, 2 * D + 0.8)
    ax.set_ylim(-1.0, max(heights))
    ax.set_aspect("equal")
    ax.axis("off")
    n = len(circuit.useful_heads())
    title = title or f"circuit: {n} heads with paths, {len(paths)} paths (D={D})"
    if group_of:
        title += f"; dashed: {len(set(group_of.values()))} redundant group(s)"
    if outside:
        title += "; dotted: shortcuts"
    ax.set_title(title, fontsize=10)
    return save_figure(fig, out, "circuit")


def discover_run(
    run_dir: str | Path, out: str | Path, checkpoint: int | None = None, cfg: DiscoverConfig = DiscoverConfig(),
    seeds: tuple[int, ...] | None = None,
) -> dict[int, Discovery]:
    """Discover the circuit of every member of a run (or of the members ``seeds`` name: each
    member's circuit is found alone, so one seed at a time gives the same files, and a long
    discovery can be split across sessions); ``out/seed{s}/`` gets circuit.json, losses.json,
    circuit.png/svg and summary.json."""
    from stackedheads.state.write import RunFolder

    with RunFolder(out).lock("circuit discovery"):  # a second process on the folder gets one line
        return _discover_run_locked(run_dir, out, checkpoint, cfg, seeds)


def _check_same_discovery(out: Path, now: list[int], step: int, cfg: DiscoverConfig) -> None:
    """The seeds already in ``out`` that this discovery leaves as they are must come from the same
    checkpoint and settings: ``claims`` and ``seeds`` read the folder as one discovery (a seed
    discovered while the run was still training, or with another threshold, would mix in)."""
    from stackedheads.state.write import read_state_json

    for other in sorted(out.glob("seed*/circuit.json")):
        if other.parent.name[4:] in {str(s) for s in now}:
            continue  # rewritten now
        try:
            info = read_state_json(other, "a discovered circuit").get("info", {})
        except (OSError, ValueError, AttributeError):
            raise UsageError(f"{other} is not a readable circuit: remove it or discover into another folder") from None
        if info.get("checkpoint") != step or info.get("config") != asdict(cfg):
            raise UsageError(
                f"{other} was discovered at step {info.get('checkpoint')} with {info.get('config')}; this discovery "
                f"is at step {step} with {asdict(cfg)}: one folder holds one discovery (give the same "
                "--checkpoint and settings, or another --out)")


def _discover_run_locked(run_dir, out, checkpoint, cfg: DiscoverConfig, seeds) -> dict[int, Discovery]:
    from stackedheads.state.write import atomic_write_json, check_seeds
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    path = checkpoint_for(run_dir, checkpoint)
    model, tcfg, step = load_model(path)
    if not tcfg.task.ic:
        raise UsageError("circuit discovery needs an IC run (partial losses per chain position)")
    members = check_seeds(list(tcfg.seeds), path)  # seeds name folders
    if seeds is not None:
        absent = [s for s in seeds if s not in members]
        if absent or not seeds:
            raise UsageError(f"{run_dir} has seeds {', '.join(map(str, members))}; "
                             f"asked for {', '.join(map(str, seeds)) or 'none'}")
    _check_same_discovery(Path(out), members if seeds is None else seeds, step, cfg)
    batch = validation_batch(tcfg)[: cfg.n_val]
    found = {}
    for e, seed in enumerate(members):
        if seeds is not None and seed not in seeds:
            continue
        d = discover(model.member(e), batch, tcfg.task, cfg)
        d.circuit.info.run, d.circuit.info.seed, d.circuit.info.checkpoint = str(Path(run_dir).resolve()), seed, step
        folder = Path(out) / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        d.circuit.save(folder / "circuit.json")
        atomic_write_json(folder / "losses.json", [r.to_dict() for r in d.table])
        atomic_write_json(folder / "summary.json", d.summary())
        s = d.summary()
        plot_circuit(
            d.circuit, folder,
            f"seed {seed}: {s['n_useful_heads']} useful heads ({len(s['shortcut_heads'])} shortcuts, "
            f"{len(s['unexplained_heads'])} unexplained rows), D={tcfg.task.depth}",
        )
        found[seed] = d
    return found
