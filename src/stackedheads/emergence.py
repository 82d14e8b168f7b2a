"""Emergence of attention heads during training (Section 9, Figures 6-7, Appendix D).

For a run saved with checkpoints and a circuit per member (:mod:`stackedheads.circuits.discover`),
measure at every checkpoint the mean attention each useful path carries over ``n_seqs``
validation sequences (Section 9.1 uses 32), interpolate linearly between checkpoints, and find
the first step (and epoch) where it exceeds 0.5.

Ordering: each path *serves* the chain positions whose partial loss its removal raises by more
than the discovery tolerance (recorded at discovery). x_j is retrieved once every path serving it has
emerged; a run emerges "in order" when x_1, x_2, ... are retrieved in that order (Sec. 9.2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from stackedheads.circuits.ablate import Circuit, path_key
from stackedheads.circuits.rules import chain_positions
from stackedheads.errors import UsageError
from stackedheads.plots import save_figure
from stackedheads.train import (
    TrainConfig,
    list_checkpoints,
    load_model,
    read_metrics,
    validation_batch,
)

THRESHOLD = 0.5  # Figure 7: the epoch at which the average attention goes above 0.5


@torch.no_grad()
def path_attention(model, batch, paths: list[tuple[int, int, int, int]]) -> list[float]:
    """Mean attention of tokens ``s_src`` on ``s_dst`` (same chain), per path, for one member."""
    names = sorted({f"blocks.{l}.attn.hook_pattern" for l, *_ in paths})
    _, cache = model.run_with_cache(batch.inputs, batch.meta, names=names)
    cp = chain_positions(batch.meta)  # (B, N, 2D+1)
    B = cp.shape[0]
    out = []
    for layer, head, src, dst in paths:
        pat = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, head]  # (B, T, T)
        rows, cols = cp[:, :, src], cp[:, :, dst]  # (B, N)
        out.append(float(pat[torch.arange(B)[:, None], rows, cols].mean()))
    return out


def first_crossing(steps: list[int], values: list[float], threshold: float = THRESHOLD) -> float | None:
    """First step where the linear interpolation of ``values`` reaches ``threshold``."""
    for i, v in enumerate(values):
        if v >= threshold:
            if i == 0:
                return float(steps[0])
            s0, s1, v0 = steps[i - 1], steps[i], values[i - 1]
            return s0 + (threshold - v0) / (v - v0) * (s1 - s0)
    return None


@dataclass
class Timeline:
    seed: int
    steps: list[int]
    paths: list[tuple[int, int, int, int]]
    attention: list[list[float]]  # [checkpoint][path]
    emerged: dict[str, float | None]  # path key -> step
    serves: dict[str, list[int]]  # path key -> chain positions j
    retrieved: dict[str, float | None]  # "x{j}" -> step when every path serving it has emerged
    in_order: bool | None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def retrieval_order(emerged: dict[str, float | None], serves: dict[str, list[int]], depth: int) -> tuple[dict, bool | None]:
    retrieved: dict[str, float | None] = {}
    for j in range(1, depth + 1):
        keys = [k for k, js in serves.items() if j in js]
        times = [emerged[k] for k in keys]
        retrieved[f"x{j}"] = None if not keys or None in times else max(times)
    known = [t for t in retrieved.values() if t is not None]
    in_order = None if len(known) < 2 else known == sorted(known) and all(
        t is not None for t in list(retrieved.values())[: len(known)]
    )
    return retrieved, in_order


def timeline(run_dir: str | Path, circuits: dict[int, Circuit], n_seqs: int = 32) -> list[Timeline]:
    """One :class:`Timeline` per member seed that has a circuit."""
    ckpts = list_checkpoints(Path(run_dir))
    if len(ckpts) < 2:
        raise UsageError(f"{run_dir} has {len(ckpts)} checkpoint(s); emergence needs a run saved with several")
    cfg = TrainConfig.from_dict(json.loads((Path(run_dir) / "config.json").read_text()))
    batch = validation_batch(cfg)[:n_seqs]
    seeds = [s for s in cfg.seeds if s in circuits]
    attn: dict[int, list[list[float]]] = {s: [] for s in seeds}
    steps = []
    for step, path in ckpts:
        model, _, _ = load_model(path)
        steps.append(step)
        for s in seeds:
            attn[s].append(path_attention(model.member(cfg.seeds.index(s)), batch, circuits[s].paths()))
    out = []
    for s in seeds:
        paths = circuits[s].paths()
        emerged = {path_key(p): first_crossing(steps, [a[i] for a in attn[s]]) for i, p in enumerate(paths)}
        serves = {k: v for k, v in circuits[s].info.get("serves", {}).items() if k in emerged}
        retrieved, in_order = retrieval_order(emerged, serves, cfg.task.depth)
        out.append(Timeline(s, steps, paths, attn[s], emerged, serves, retrieved, in_order))
    return out


def ordering_statistic(timelines: list[Timeline]) -> dict:
    decided = [t for t in timelines if t.in_order is not None]
    return {
        "runs": len(timelines),
        "decided": len(decided),
        "in_order": sum(bool(t.in_order) for t in decided),
        "fraction_in_order": (sum(bool(t.in_order) for t in decided) / len(decided)) if decided else None,
    }


def plot_timeline(t: Timeline, cfg: TrainConfig, metrics: list[dict], out: Path) -> list[str]:
    """Appendix D (one plot per path), Figure 7 right (summary) and Figure 6 (losses, marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    files = []
    epoch = cfg.batch_size / cfg.task.n_train
    colors = plt.get_cmap("tab10")

    def save(fig, name):
        files.extend(save_figure(fig, out, name, dpi=120))

    for i, p in enumerate(t.paths):
        fig, ax = plt.subplots(figsize=(5, 3))
        key = path_key(p)
        ax.plot(t.steps, [a[i] for a in t.attention], "o-", ms=3, color=colors(i % 10))
        ax.axhline(THRESHOLD, color="grey", ls=":")
        if t.emerged[key] is not None:
            ax.axvline(t.emerged[key], color="grey", ls="--")
        ax.set(xlabel="step", ylabel="mean attention", ylim=(0, 1.02), title=f"seed {t.seed}: {key}")
        sec = ax.secondary_xaxis("top", functions=(lambda s: s * epoch, lambda e: e / epoch))
        sec.set_xlabel("epoch")
        save(fig, f"path{i}_L{p[0]}.{p[1]}_s{p[2]}-s{p[3]}")

    fig, ax = plt.subplots(figsize=(6, 0.45 * len(t.paths) + 1.2))
    keys = [path_key(p) for p in t.paths]
    vals = [t.emerged[k] if t.emerged[k] is not None else float("nan") for k in keys]
    ax.barh(range(len(keys)), vals, color=[colors(i % 10) for i in range(len(keys))])
    ax.set_yticks(range(len(keys)), keys, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="step at which mean attention first exceeds 0.5", title=f"seed {t.seed}: emergence of each path")
    save(fig, "emergence_summary")

    rows = [r for r in metrics if r["seed"] == t.seed]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    left.plot([r["step"] for r in rows], [r["train_loss"] for r in rows], label="train")
    left.plot([r["step"] for r in rows], [r["val_loss"] for r in rows], label="validation")
    for c in [k for k in rows[0] if k.startswith("val_x")] if rows else []:
        right.plot([r["step"] for r in rows], [r[c] for r in rows], label=c[4:])
    for ax in (left, right):
        for i, k in enumerate(keys):
            if t.emerged[k] is not None:
                ax.axvline(t.emerged[k], color=colors(i % 10), ls="--", lw=1)
        ax.set(xlabel="step", ylabel="MSE", yscale="log")
        ax.legend(fontsize=7)
    left.set_title(f"seed {t.seed}: loss (dashed: a path emerges)")
    right.set_title("partial validation loss")
    save(fig, "losses")
    return files


def emergence_run(run_dir: str | Path, out: str | Path, circuits_dir: str | Path | None = None, n_seqs: int = 32) -> dict:
    """Timelines for every member of a run, plots under ``out/seed{s}/``, and the ordering.

    Circuits come from ``circuits_dir/seed{s}/circuit.json``; without one they are discovered
    on the last checkpoint first (into ``out/circuits``).
    """
    from stackedheads.circuits.discover import discover_run

    run_dir, out = Path(run_dir), Path(out)
    cfg = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text())) if (run_dir / "config.json").exists() else None
    if cfg is None:
        raise UsageError(f"{run_dir} is not a run folder (no config.json)")
    if circuits_dir is None:
        circuits_dir = out / "circuits"
        discover_run(run_dir, circuits_dir)
    circuits = {}
    for seed in cfg.seeds:
        p = Path(circuits_dir) / f"seed{seed}" / "circuit.json"
        if p.exists():
            circuits[seed] = Circuit.load(p)
    if not circuits:
        raise UsageError(f"no circuit.json for any seed of {run_dir} under {circuits_dir}")
    timelines = timeline(run_dir, circuits, n_seqs)
    metrics = read_metrics(run_dir)
    for t in timelines:
        folder = out / f"seed{t.seed}"
        plot_timeline(t, cfg, metrics, folder)
        (folder / "timeline.json").write_text(json.dumps(t.to_dict(), indent=2))
    summary = {
        "ordering": ordering_statistic(timelines),
        "seeds": {
            t.seed: {"emerged": t.emerged, "retrieved": t.retrieved, "in_order": t.in_order, "serves": t.serves}
            for t in timelines
        },
        "epoch_per_step": cfg.batch_size / cfg.task.n_train,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
