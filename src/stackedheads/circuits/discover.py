"""Automatic circuit discovery: Appendix E's manual procedure as a greedy search.

For each head, in layer order, the simplest replacement that keeps the validation loss under
the threshold wins (Appendix E step 3):

1. uniform attention, then the identity, for the whole head (no useful computation);
2. otherwise each token role (first / second / query) separately: uniform, identity, the first
   token (an attention sink), then the rules of :mod:`.rules` that best fit the head's observed
   attention for that role (the most attention mass on the rule's target), best first.

Replacements accumulate: each is tested with every earlier one in place, so the final circuit
passes the combined ablation (step 5) by construction. Rows that no candidate explains keep the
head's own attention and are reported as unexplained. Then every path of every rule head is removed
on its own (step 6): a path whose removal pushes the loss over the threshold is useful. Rule
heads without a useful path are simplified to uniform when the combined loss allows it.

The threshold is the unablated loss plus ``tolerance`` (Appendix E: 0.05, for models whose loss
is under 0.01), or an absolute ``threshold``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from stackedheads import theory
from stackedheads.circuits.ablate import (
    Circuit,
    HeadSpec,
    LossRow,
    ablated_loss,
    loss_table,
    replaced_patterns,
)
from stackedheads.circuits.rules import (
    IDENTITY,
    KEPT,
    ROLES,
    UNIFORM,
    hop_of,
    library,
    rule_mass,
)
from stackedheads.errors import UsageError
from stackedheads.model import EnsembleTransformer
from stackedheads.plots import save_figure
from stackedheads.tasks.vectors import Batch, VectorTaskConfig


@dataclass(frozen=True)
class DiscoverConfig:
    tolerance: float = 0.04  # loss budget over the unablated loss
    threshold: float | None = None  # an absolute threshold instead
    min_mass: float = 0.4  # a rule must catch this much attention to be a candidate
    n_val: int = 512  # validation sequences used for every ablation

    def __post_init__(self) -> None:
        if self.tolerance < 0 or (self.threshold is not None and self.threshold <= 0):
            raise UsageError("tolerance must be >= 0 and threshold > 0")
        if not 0 < self.min_mass <= 1 or self.n_val < 1:
            raise UsageError("min_mass must lie in (0, 1] and n_val be >= 1")


def _simplicity(name: str) -> tuple:
    """Ties in attention mass go to the simpler rule."""
    if name == IDENTITY:
        return (0, 0)
    if name == "previous":
        return (1, 0)
    d = hop_of(name)
    return (2, abs(d)) if d is not None else (3, name)


def role_candidates(masses: dict[str, float], min_mass: float, top: int = 3) -> list[str]:
    """Replacements to try for one role, simplest first, then the best-fitting rules."""
    fixed = [UNIFORM, IDENTITY, "first-token"]
    ranked = sorted(masses.items(), key=lambda kv: (-round(kv[1], 3), _simplicity(kv[0])))
    fits = [name for name, mass in ranked if mass >= min_mass and name not in fixed]
    return fixed + fits[:top]


def candidate_paths(spec: HeadSpec, depth: int) -> list[tuple[int, int]]:
    """``(src, dst)`` chain paths a rule head may carry: tokens ``s_src`` read ``s_dst``."""
    if spec.kind != "rule":
        return []
    pos = theory.chain_order(depth)  # sequence position of each s_i within one chain
    out = []
    for role, name in spec.rules.items():
        srcs = {"query": [0], "second": range(2, 2 * depth + 1, 2), "first": range(1, 2 * depth, 2)}[role]
        d = -1 if (name == "previous" and role == "second") else hop_of(name)
        if d is None:
            continue  # identity, uniform, or previous off-chain
        for i in srcs:
            j = i + d
            if 0 <= j <= 2 * depth and pos[j] < pos[i]:
                out.append((i, j))
    return sorted(out)


@dataclass
class Discovery:
    circuit: Circuit
    table: list[LossRow]
    threshold: float
    unexplained: list[tuple[int, int, str]]  # (layer, head, role) left to the head's own attention

    def summary(self) -> dict:
        useful = self.circuit.useful_heads()
        return {
            "threshold": self.threshold,
            "useful_heads": [[h.layer, h.head] for h in useful],
            "n_useful_heads": len(useful),
            "theory_min_heads": theory.min_layers(self.circuit.depth, causal=True),
            "unexplained_heads": [list(x) for x in self.unexplained],
            "losses": [r.to_dict() for r in self.table],
        }


@torch.no_grad()
def discover(model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, cfg: DiscoverConfig = DiscoverConfig()) -> Discovery:
    """The circuit of one model (``model.member(e)``) on ``batch`` (validation sequences)."""
    base, _ = ablated_loss(model, batch, task)
    threshold = cfg.threshold if cfg.threshold is not None else base + cfg.tolerance
    _, cache = model.run_with_cache(batch.inputs, batch.meta, names=model.pattern_names())
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    circuit = Circuit(task.depth, [HeadSpec(l, h, KEPT) for l in range(n_layers) for h in range(n_heads)])

    def loss_now() -> float:
        return ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta))[0]

    lib = library(task.depth)
    for spec in circuit.heads:
        observed = cache[f"blocks.{spec.layer}.attn.hook_pattern"][0, :, spec.head]
        masses = rule_mass(observed, batch.meta, lib)
        for whole in (UNIFORM, IDENTITY):
            spec.rules = whole
            if loss_now() <= threshold:
                break
        else:
            spec.rules = {role: KEPT for role in ROLES}
            for role in ROLES:
                for candidate in role_candidates(masses[role], cfg.min_mass):
                    spec.rules[role] = candidate
                    if loss_now() <= threshold:
                        break
                else:
                    spec.rules[role] = KEPT
            if set(spec.rules.values()) == {KEPT}:
                spec.rules = KEPT

    for spec in circuit.heads:
        for src, dst in candidate_paths(spec, task.depth):
            removed = ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta, remove=(spec.layer, spec.head, src)))[0]
            if removed > threshold:
                spec.paths.append((src, dst))
    for spec in circuit.heads:  # rule heads that carry nothing necessary: simpler is better
        if spec.kind == "rule" and not spec.paths:
            rules, spec.rules = spec.rules, UNIFORM
            if loss_now() > threshold:
                spec.rules = rules
    table = loss_table(model, batch, task, circuit)
    # Which chain positions each path serves: removing it raises their partial loss by more
    # than the tolerance over the combined ablation. Relative, so that two redundant heads
    # (each enough alone) both count. Emergence orders by this.
    combined = table[1].partial
    serves = {
        r.ablation[1:]: [j for j, (p, c) in enumerate(zip(r.partial, combined, strict=True), start=1) if p - c > cfg.tolerance]
        for r in table[2:]
    }
    circuit.info.update(
        {"threshold": threshold, "tolerance": cfg.tolerance, "unablated_loss": base, "config": asdict(cfg), "serves": serves}
    )
    return Discovery(circuit, table, threshold, circuit.kept())


def symbol_label(i: int) -> str:
    """``s_i`` as the paper draws it: A for x_0, B for x_1, ...; ' marks the second occurrence."""
    letter = chr(ord("A") + i // 2)
    return "q" if i == 0 else (f"{letter}'" if i % 2 == 0 else letter)


def plot_circuit(circuit: Circuit, out: str | Path, title: str = "") -> list[str]:
    """Figure 5 style: one chain's positions in sequence order, one arrow per useful path.

    Arrows point the way information flows: from the attended position to the attending one,
    labelled with the layer (``L0`` is the first, as in ``blocks.0``).
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
    colors = plt.get_cmap("tab10")
    layers = sorted({p[0] for p in paths})
    seen: dict[tuple[int, int], int] = {}
    heights = [0.9]
    for layer, head, src, dst in paths:
        k = seen[(src, dst)] = seen.get((src, dst), -1) + 1  # parallel paths: higher arcs
        x0, x1 = pos[dst], pos[src]
        rad = (0.5 + 0.7 * k) * (-1 if x1 > x0 else 1)
        c = colors(layers.index(layer) % 10)
        ax.annotate(
            "", xy=(x1, 0.3), xytext=(x0, 0.3),
            arrowprops=dict(arrowstyle="-|>", color=c, lw=1.6, connectionstyle=f"arc3,rad={rad}", shrinkA=6, shrinkB=6),
        )
        height = 0.3 + abs(rad) * abs(x1 - x0) / 2
        heights.append(height + 0.4)
        ax.text((x0 + x1) / 2, height + 0.08, f"L{layer}.{head}", color=c, ha="center", fontsize=8)
    ax.set_xlim(-0.8, 2 * D + 0.8)
    ax.set_ylim(-1.0, max(heights))
    ax.set_aspect("equal")
    ax.axis("off")
    n = len(circuit.useful_heads())
    ax.set_title(title or f"circuit: {n} useful heads, {len(paths)} paths (D={D})", fontsize=10)
    return save_figure(fig, out, "circuit")


def discover_run(
    run_dir: str | Path, out: str | Path, checkpoint: int | None = None, cfg: DiscoverConfig = DiscoverConfig()
) -> dict[int, Discovery]:
    """Discover the circuit of every member of a run; ``out/seed{s}/`` gets circuit.json,
    losses.json, circuit.png/svg and summary.json."""
    import json

    from stackedheads.train import checkpoint_for, load_model, validation_batch

    path = checkpoint_for(run_dir, checkpoint)
    model, tcfg, step = load_model(path)
    if not tcfg.task.ic:
        raise UsageError("circuit discovery needs an IC run (partial losses per chain position)")
    batch = validation_batch(tcfg)[: cfg.n_val]
    found = {}
    for e, seed in enumerate(tcfg.seeds):
        d = discover(model.member(e), batch, tcfg.task, cfg)
        d.circuit.info.update({"run": str(run_dir), "seed": seed, "checkpoint": step})
        folder = Path(out) / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        d.circuit.save(folder / "circuit.json")
        (folder / "losses.json").write_text(json.dumps([r.to_dict() for r in d.table], indent=2))
        (folder / "summary.json").write_text(json.dumps(d.summary(), indent=2))
        plot_circuit(d.circuit, folder, f"seed {seed}: {len(d.circuit.useful_heads())} useful heads, D={tcfg.task.depth}")
        found[seed] = d
    return found
