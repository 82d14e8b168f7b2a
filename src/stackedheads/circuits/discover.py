"""Automatic circuit discovery: Appendix E's manual procedure as a greedy search.

The validation sequences are split in two: the search uses the first half, every reported loss
(the combined ablation of step 5, the per-path ablations of step 6) the second, held out, so a
circuit that only fits the sequences it was searched on fails its validation.

For each head, in layer order (Appendix E steps 2-3):

1. a head whose observed attention follows no rule (no rule other than the identity catches
   ``min_mass`` of a role's attention) is tried whole as uniform attention, then the identity
   (no useful computation);
2. otherwise each token role (first / second / query) gets the rule that best fits its observed
   attention (the most attention mass on the rule's target), then uniform, then the identity,
   the first that keeps the loss within budget. The best fit comes first so that two heads doing
   the same job both keep their rule: were the simpler "uniform" tried first, the first of two
   redundant heads would be replaced because the second still does the job.

A replacement is accepted only when the partial loss of *every* chain position stays within its
budget (not only their mean). Rows no candidate explains keep the head's own attention
(``kept``); a second pass retries them with every rule of the library. Kept rows count as useful
computation, and the combined ablation that validates the circuit makes them uniform.

Paths (step 6): every ``(src, dst)`` a rule head carries is removed alone (rows ``s_src`` made
uniform); a path whose removal pushes some position over budget is useful. The others are then
tested in pairs, and all together: paths whose *joint* removal breaks the loss are all useful
and are reported as a redundant group (Section 9.2: layers 14 and 21 both retrieve B); a joint
removal that breaks is shrunk to a minimal group, and the search repeats on the rest. Roles
that carry no useful path are simplified to uniform (or the identity) where the budget allows,
and the paths are recomputed on the simplified circuit.

Which rules are baselines, how ties rank and which paths a rule carries come from the rule
objects of :data:`~stackedheads.circuits.rules.RULES`, never from their names: a sink rule
(``first-token``, all attention on position 0) copies a real token into the stream, so it is a
path like any other (``dst`` = :data:`~stackedheads.circuits.rules.SINK`), kept only when
replacing it with uniform attention breaks the loss.

Budgets: Appendix E's absolute threshold (validation loss below 0.05) applied to every chain
position, or, with ``threshold=None``, each position's unablated loss plus ``tolerance`` (the CPU
twins, whose losses are larger than the paper's; the report states which). A position whose
unablated loss is already above the absolute threshold gets its own loss plus ``tolerance`` and
is listed in ``model_over_budget``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import torch

from stackedheads import theory
from stackedheads.circuits.ablate import (
    COMBINED,
    COMBINED_KEPT,
    Circuit,
    HeadSpec,
    LossRow,
    ablated_loss,
    loss_table,
    path_key,
    replaced_patterns,
)
from stackedheads.circuits.rules import (
    KEPT,
    ROLES,
    SINK,
    AttentionRule,
    baselines,
    library,
    role_sources,
    rule_mass,
)
from stackedheads.errors import UsageError
from stackedheads.model import EnsembleTransformer
from stackedheads.plots import save_figure
from stackedheads.tasks.vectors import Batch, VectorTaskConfig

MAX_PAIR_TESTS = 400  # pairs of non-necessary paths tested for redundancy (the rest: one joint group)


@dataclass(frozen=True)
class DiscoverConfig:
    tolerance: float = 0.04  # per-position loss budget over the unablated loss
    threshold: float | None = None  # Appendix E's absolute threshold (0.05) instead, per position
    min_mass: float = 0.4  # a rule must catch this much attention to be a candidate
    n_val: int = 512  # validation sequences: the first half searches, the second validates

    def __post_init__(self) -> None:
        inf = float("inf")  # comparisons below also refuse nan
        if not 0 <= self.tolerance < inf or (self.threshold is not None and not 0 < self.threshold < inf):
            raise UsageError("tolerance must be >= 0 and threshold > 0")
        if not 0 < self.min_mass <= 1 or self.n_val < 2:
            raise UsageError("min_mass must lie in (0, 1] and n_val be >= 2")

    def budgets(self, partial: list[float]) -> tuple[list[float], list[str]]:
        """Per-position loss budgets for unablated partial losses ``partial``, and the positions
        whose own loss is already above the absolute threshold."""
        if self.threshold is None:
            return [p + self.tolerance for p in partial], []
        over = [f"x{j}" for j, p in enumerate(partial, start=1) if p > self.threshold]
        return [p + self.tolerance if p > self.threshold else self.threshold for p in partial], over


def fitted_rules(masses: dict[str, float], lib: dict[str, AttentionRule], min_mass: float = 0.0) -> list[str]:
    """Rules of one role catching at least ``min_mass`` of its attention, best fit first; ties
    go to the simpler rule (its ``rank``), then to library order (``masses`` keeps it)."""
    ranked = sorted(masses.items(), key=lambda kv: (-round(kv[1], 3), lib[kv[0]].rank))
    return [name for name, mass in ranked if mass >= min_mass]


def role_candidates(masses: dict[str, float], lib: dict[str, AttentionRule], min_mass: float, top: int = 3) -> list[str]:
    """Replacements to try for one role: the best-fitting rules, then the baselines (App. E:
    uniform, then the identity)."""
    fits = [n for n in fitted_rules(masses, lib, min_mass) if not lib[n].baseline][:top]
    return fits + baselines(lib)


def candidate_paths(spec: HeadSpec, depth: int) -> list[tuple[int, int]]:
    """``(src, dst)`` paths a rule head may carry: what each role's rule links
    (:meth:`~stackedheads.circuits.rules.AttentionRule.paths`)."""
    if spec.kind != "rule":
        return []
    lib = library(depth)
    return sorted(p for role, name in spec.rules.items() if name != KEPT for p in lib[name].paths(role, depth))


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
    unexplained: list[tuple[int, int, str]]  # (layer, head, role) left to the head's own attention
    budgets: list[float]  # per chain position, on the held-out half
    model_over_budget: list[str]  # positions whose unablated loss is above the absolute threshold

    def summary(self) -> dict:
        c = self.circuit
        rows = {r.ablation: r for r in self.table}
        combined = rows[COMBINED]
        over = [f"x{j}" for j, (p, b) in enumerate(zip(combined.partial, self.budgets, strict=True), start=1) if p > b]
        with_paths = [[h.layer, h.head] for h in c.useful_heads()]
        kept_heads = sorted({(l, h) for l, h, _ in self.unexplained})
        useful = sorted({tuple(x) for x in with_paths} | set(kept_heads))
        return {
            "threshold": self.threshold,
            "threshold_kind": "relative" if c.info.get("config", {}).get("threshold") is None else "absolute",
            "tolerance": c.info.get("tolerance"),
            "budgets": self.budgets,
            "model_over_budget": self.model_over_budget,
            "unablated": {"loss": rows["none"].loss, "partial": rows["none"].partial},
            "combined": {"loss": combined.loss, "partial": combined.partial},
            "over_budget": over,
            # Kept rows do computation no rule explains: they count as useful (A2, A5).
            "useful_heads": [list(u) for u in useful],
            "n_useful_heads": len(useful),
            "heads_with_paths": with_paths,
            "theory_min_heads": theory.min_layers(c.depth, causal=True),
            "unexplained_heads": [list(x) for x in self.unexplained],
            "paths": [list(p) for p in c.paths()],
            "redundant_groups": c.info.get("redundant_groups", []),
            "serves": c.info.get("serves", {}),
            "n_search": c.info.get("n_search"),
            "n_check": c.info.get("n_check"),
            "losses": [r.to_dict() for r in self.table],
        }


@torch.no_grad()
def discover(model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, cfg: DiscoverConfig = DiscoverConfig()) -> Discovery:
    """The circuit of one model (``model.member(e)``) on ``batch`` (validation sequences)."""
    search, check = split(batch)
    budget, _ = cfg.budgets(ablated_loss(model, search, task)[1])
    _, cache = model.run_with_cache(search.inputs, search.meta, names=model.pattern_names())
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    circuit = Circuit(task.depth, [HeadSpec(l, h, KEPT) for l in range(n_layers) for h in range(n_heads)])

    def fits(remove=None) -> bool:
        """Every position within budget on the search half, kept rows left to the head."""
        partial = ablated_loss(model, search, task, replaced_patterns(circuit, search.meta, remove=remove))[1]
        return all(p <= b for p, b in zip(partial, budget, strict=True))

    def assign(spec: HeadSpec, role: str, candidates: list[str]) -> None:
        for candidate in candidates:
            spec.rules[role] = candidate
            if fits():
                return
        spec.rules[role] = KEPT

    lib = library(task.depth)
    base = baselines(lib)  # App. E's no-computation replacements, simplest (uniform) first
    masses = {}
    for spec in circuit.heads:
        observed = cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]
        masses[spec.layer, spec.head] = m = rule_mass(observed, search.meta, lib)
        if not any(not lib[n].baseline for role in ROLES for n in fitted_rules(m[role], lib, cfg.min_mass)):
            for whole in base:
                spec.rules = whole
                if fits():
                    break
            else:
                spec.rules = KEPT
            if spec.rules != KEPT:
                continue
        spec.rules = {role: KEPT for role in ROLES}
        for role in ROLES:
            assign(spec, role, role_candidates(m[role], lib, cfg.min_mass))
        if set(spec.rules.values()) == {KEPT}:
            spec.rules = KEPT
    # Keep searching: rows left unexplained get every rule of the library, now that the heads
    # after them are settled.
    for spec in circuit.heads:
        roles = list(ROLES) if spec.kind == KEPT else [r for r, n in spec.rules.items() if n == KEPT] if spec.kind == "rule" else []
        if not roles:
            continue
        if spec.kind == KEPT:
            spec.rules = {role: KEPT for role in ROLES}
        for role in roles:
            assign(spec, role, [n for n in fitted_rules(masses[spec.layer, spec.head][role], lib) if not lib[n].baseline] + base)
        if set(spec.rules.values()) == {KEPT}:
            spec.rules = KEPT

    groups = _useful_paths(circuit, fits)
    # Simpler is better (App. E step 3): roles that carry no useful path become a baseline
    # (uniform, or the identity) where every position stays within budget; then the paths are
    # found again. A head all of whose roles are the simplest baseline is that baseline whole.
    for spec in circuit.heads:
        if spec.kind != "rule":
            continue
        carried = {src for src, _ in spec.paths}
        for role, name in list(spec.rules.items()):
            if name in (base[0], KEPT) or (set(role_sources(role, task.depth)) & carried):
                continue
            for simpler in base:
                if simpler == name:
                    break
                spec.rules[role] = simpler
                if fits():
                    break
                spec.rules[role] = name
        if set(spec.rules.values()) == {base[0]}:
            spec.rules = base[0]
    groups = _useful_paths(circuit, fits)
    circuit.info["redundant_groups"] = [[path_key(p) for p in g] for g in groups]

    table = loss_table(model, check, task, circuit)
    check_budget, over = cfg.budgets(table[0].partial)
    # Which chain positions each path serves: removing it (its group, for a redundant path)
    # raises their partial loss by more than the tolerance over the combined ablation with kept
    # rows left to the head. Emergence (Sec. 9) orders positions by this.
    rows = {r.ablation: r for r in table}
    base = rows.get(COMBINED_KEPT, rows[COMBINED]).partial

    def raised(partial: list[float]) -> list[int]:
        return [j for j, (p, c) in enumerate(zip(partial, base, strict=True), start=1) if p - c > cfg.tolerance]

    serves = {path_key(p): raised(rows["-" + path_key(p)].partial) for p in circuit.paths()}
    for g in circuit.info["redundant_groups"]:
        joint = raised(rows["-(" + " + ".join(g) + ")"].partial)
        for k in g:
            serves[k] = joint
    circuit.info.update(
        {
            "threshold": cfg.threshold if cfg.threshold is not None else sum(check_budget) / len(check_budget),
            "tolerance": cfg.tolerance, "unablated_loss": table[0].loss, "config": asdict(cfg), "serves": serves,
            "budgets": check_budget, "n_search": int(search.inputs.shape[0]), "n_check": int(check.inputs.shape[0]),
        }
    )
    return Discovery(circuit, table, circuit.info["threshold"], circuit.kept(), check_budget, over)


def _useful_paths(circuit: Circuit, fits) -> list[list[tuple[int, int, int, int]]]:
    """Set each rule head's useful paths (step 6); return the redundant groups.

    A path is useful alone when removing it breaks the budget. The rest are tested in pairs and
    then all together: paths whose joint removal breaks it form a redundant group, all useful.
    A joint removal that breaks is shrunk to a minimal group (no path of it can be left out and
    still break the budget), so paths that merely ride along are not reported, and the search
    repeats on what is left (two triples of stand-ins are two groups).
    """
    cands = [(s.layer, s.head, src, dst) for s in circuit.heads for src, dst in candidate_paths(s, circuit.depth)]
    singles = [p for p in cands if not fits(remove=[p[:3]])]
    rest = [p for p in cands if p not in singles]
    groups: list[list[tuple[int, int, int, int]]] = []
    if len(rest) >= 2 and not fits(remove=[p[:3] for p in rest]):
        # Likely stand-ins first: the same (src, dst) in two heads, then the same src.
        pairs = sorted(combinations(rest, 2), key=lambda ab: (ab[0][2:] != ab[1][2:], ab[0][2] != ab[1][2]))
        grouped: set = set()
        for a, b in pairs[:MAX_PAIR_TESTS]:
            if a not in grouped and b not in grouped and not fits(remove=[a[:3], b[:3]]):
                groups.append([a, b])
                grouped |= {a, b}
        left = [p for p in rest if p not in grouped]
        while len(left) >= 2 and not fits(remove=[p[:3] for p in left]):
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
        if len(trial) >= 2 and not fits(remove=[q[:3] for q in trial]):
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
    (useful only together) are dashed and labelled ``g1``, ``g2``...; ``p0`` is the sequence's
    first position (the paths of a sink rule, such as first-token).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    D = circuit.depth
    pos = theory.chain_order(D)
    fig, ax = plt.subplots(figsize=(1.1 * (2 * D + 1) + 1, 3.2))
    for i in range(2 * D + 1):
        x = pos[i]
        ax.add_patch(plt.Circle((x, 0), 0.32, color="#dde6f3" if i else "#f7d9c4", zorder=2))
        ax.text(x, 0, symbol_label(i), ha="center", va="center", fontsize=11, zorder=3)
        ax.text(x, -0.6, f"s{i}", ha="center", va="center", fontsize=7, color="grey")
    paths = circuit.paths()
    group_of = {k: g for g, keys in enumerate(circuit.info.get("redundant_groups", []), start=1) for k in keys}
    if any(p[3] == SINK for p in paths):
        ax.add_patch(plt.Circle((-1.2, 0), 0.32, color="#eeeeee", zorder=2))
        ax.text(-1.2, 0, "p0", ha="center", va="center", fontsize=10, zorder=3)
    colors = plt.get_cmap("tab10")
    layers = sorted({p[0] for p in paths})
    seen: dict[tuple[int, int], int] = {}
    heights = [0.9]
    for layer, head, src, dst in paths:
        k = seen[(src, dst)] = seen.get((src, dst), -1) + 1  # parallel paths: higher arcs
        x0, x1 = (-1.2 if dst == SINK else pos[dst]), pos[src]
        rad = (0.5 + 0.7 * k) * (-1 if x1 > x0 else 1)
        c = colors(layers.index(layer) % 10)
        g = group_of.get(path_key((layer, head, src, dst)))
        ax.annotate(
            "", xy=(x1, 0.3), xytext=(x0, 0.3),
            arrowprops=dict(arrowstyle="-|>", color=c, lw=1.6, connectionstyle=f"arc3,rad={rad}", shrinkA=6, shrinkB=6,
                            ls="--" if g else "-"),
        )
        height = 0.3 + abs(rad) * abs(x1 - x0) / 2
        heights.append(height + 0.4)
        ax.text((x0 + x1) / 2, height + 0.08, f"L{layer}.{head}" + (f" g{g}" if g else ""), color=c, ha="center", fontsize=8)
    ax.set_xlim(-1.8, 2 * D + 0.8)
    ax.set_ylim(-1.0, max(heights))
    ax.set_aspect("equal")
    ax.axis("off")
    n = len(circuit.useful_heads())
    title = title or f"circuit: {n} heads with paths, {len(paths)} paths (D={D})"
    if group_of:
        title += f"; dashed: {len(set(group_of.values()))} redundant group(s)"
    ax.set_title(title, fontsize=10)
    return save_figure(fig, out, "circuit")


def discover_run(
    run_dir: str | Path, out: str | Path, checkpoint: int | None = None, cfg: DiscoverConfig = DiscoverConfig()
) -> dict[int, Discovery]:
    """Discover the circuit of every member of a run; ``out/seed{s}/`` gets circuit.json,
    losses.json, circuit.png/svg and summary.json."""
    from stackedheads.storage import FolderLock

    with FolderLock(out, "circuit discovery"):  # a second process on the folder gets one line
        return _discover_run_locked(run_dir, out, checkpoint, cfg)


def _discover_run_locked(run_dir, out, checkpoint, cfg: DiscoverConfig) -> dict[int, Discovery]:
    from stackedheads.storage import atomic_write_json, check_seeds
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    path = checkpoint_for(run_dir, checkpoint)
    model, tcfg, step = load_model(path)
    if not tcfg.task.ic:
        raise UsageError("circuit discovery needs an IC run (partial losses per chain position)")
    batch = validation_batch(tcfg)[: cfg.n_val]
    found = {}
    for e, seed in enumerate(check_seeds(list(tcfg.seeds), path)):  # seeds name folders
        d = discover(model.member(e), batch, tcfg.task, cfg)
        d.circuit.info.update({"run": str(run_dir), "seed": seed, "checkpoint": step})
        folder = Path(out) / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        d.circuit.save(folder / "circuit.json")
        atomic_write_json(folder / "losses.json", [r.to_dict() for r in d.table])
        atomic_write_json(folder / "summary.json", d.summary())
        s = d.summary()
        plot_circuit(
            d.circuit, folder,
            f"seed {seed}: {s['n_useful_heads']} useful heads ({len(s['unexplained_heads'])} unexplained rows), D={tcfg.task.depth}",
        )
        found[seed] = d
    return found
