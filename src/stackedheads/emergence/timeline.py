"""Emergence of attention heads during training (Section 9, Figures 6-7, Appendix D).

For a run saved with checkpoints and a circuit per member (:mod:`stackedheads.circuits.discover`),
measure at every checkpoint the mean attention each useful path carries over ``n_seqs``
validation sequences (Section 9.1 uses 32), interpolate linearly between checkpoints, and find
the first step (and epoch) where it exceeds 0.5.

Ordering: each path *serves* the chain positions whose partial loss its removal (its redundant
group's, for a redundant path) raises by more than the discovery tolerance. x_j emerges when the
paths that serve x_j but not x_(j-1) have (:func:`position_emergence`); a run emerges in order
when x_1, x_2, ... emerge at strictly increasing checkpoints (two at one checkpoint are a tie,
reported, not passed; a position with no path of its own makes the run inconclusive).

Steps and the paper's epochs: Section 9.1 trains 6,400 steps and calls them 800 epochs, with a
checkpoint every "10 epochs (80 steps)": 8 steps per epoch. With 262,144 examples and batch 256
an epoch would be 1,024 steps, so the paper's two statements disagree; the sec9 presets follow
its arithmetic (``TrainConfig.steps_per_epoch = 8``), so "450 epochs" is step 3,600. Timelines
and plots give both. The trainer saves a step-0 checkpoint, so attention at initialisation is
the first point of every curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


from stackedheads.circuits.ablate import Circuit, check_shape
from stackedheads.circuits.paths import CircuitPath, dst_label
from stackedheads.circuits.rules import path_attention
from stackedheads.errors import UsageError
from stackedheads.emergence.ordering import end_of_plateau, order_of
from stackedheads.report.plots import pyplot, save_figure
from stackedheads.state.origins import same_recorded_run
from stackedheads.state.write import RunFolder, atomic_write_json, check_seeds, read_state_json
from stackedheads.training import (
    TrainConfig,
    list_checkpoints,
    load_model,
    read_metrics,
    validation_batch,
)

THRESHOLD = 0.5  # Figure 7: the epoch at which the average attention goes above 0.5


def first_crossing(steps: list[int], values: list[float], threshold: float = THRESHOLD) -> float | None:
    """First step where the linear interpolation of ``values`` reaches ``threshold``."""
    for i, v in enumerate(values):
        if v >= threshold:
            if i == 0:
                return float(steps[0])
            s0, s1, v0 = steps[i - 1], steps[i], values[i - 1]
            return s0 + (threshold - v0) / (v - v0) * (s1 - s0)
    return None


def first_seen(steps: list[int], values: list[float], threshold: float = THRESHOLD) -> int | None:
    """First checkpoint step at which ``values`` is at or above ``threshold`` (None: never).

    Two crossings seen at the same checkpoint happened within one checkpoint interval: their
    interpolated order is a guess, so they are a tie."""
    return next((s for s, v in zip(steps, values) if v >= threshold), None)


@dataclass
class Timeline:
    seed: int
    steps: list[int]
    epochs: list[float]  # the paper's epochs of ``steps`` (TrainConfig.epoch)
    paths: list[CircuitPath]
    attention: list[list[float]]  # [checkpoint][path]
    emerged: dict[str, float | None]  # path key -> interpolated step of the 0.5 crossing
    emerged_seen: dict[str, int | None]  # path key -> first checkpoint at or above 0.5
    serves: dict[str, list[int]]  # path key -> chain positions j
    groups: list[list[str]]  # redundant groups of the circuit (useful only together)
    positions: dict[str, dict]  # "x{j}" -> new paths, step, seen step, epoch, status
    order: str  # ordering.order_of over the positions, or "inconclusive" (a position has no new path)
    first_paths: list[str]  # the paths serving a position seen first (:func:`end_of_plateau`)
    plateau_steps: float | None  # steps before the first of them emerges (Sec. 9.2: 450 epochs)
    loss_drops: dict[str, int | None]  # first evaluated step each partial loss is below the C2 threshold
    loss_drop_order: str

    def __post_init__(self) -> None:
        self.paths = [CircuitPath(*p) for p in self.paths]  # also from JSON's lists

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def position_emergence(
    emerged: dict[str, float | None], seen: dict[str, int | None], serves: dict[str, list[int]],
    groups: list[list[str]], depth: int,
) -> dict[str, dict]:
    """When each x_j emerges (Sec. 9.2): once the paths that serve x_j but not x_(j-1) have.

    Paths of one redundant group stand in for each other (the first of them to emerge counts);
    otherwise every new path is needed (the last to emerge counts). A position served by no path
    of its own (e.g. one path serving x1..x3) cannot be timed: ``new_paths`` is empty.
    """
    group_of = {k: tuple(g) for g in groups for k in g}
    out = {}
    for j in range(1, depth + 1):
        new = sorted(k for k, js in serves.items() if j in js and (j - 1) not in js)
        units = sorted({group_of.get(k, (k,)) for k in new})

        def unit_time(unit, times):
            got = [times[k] for k in unit if times.get(k) is not None]
            return min(got) if got else None

        t = [unit_time(u, emerged) for u in units]
        s = [unit_time(u, seen) for u in units]
        never = not units or None in s
        out[f"x{j}"] = {
            "new_paths": new,
            "step": None if never else max(t),
            "seen": None if never else max(s),
            "status": "no path serves it but not the position before" if not units
            else ("never emerged" if never else "emerged"),
        }
    return out


def position_order(positions: dict[str, dict]) -> str:
    """E3's evidence for one run: :func:`~stackedheads.emergence.ordering.order_of` of the positions' seen steps, or
    ``inconclusive`` when a position has no path of its own and the rest show no disorder."""
    order = order_of([p["seen"] for p in positions.values() if p["new_paths"]])
    if order != "out of order" and any(not p["new_paths"] for p in positions.values()):
        return "inconclusive"
    return order


def timeline(run_dir: str | Path, circuits: dict[int, Circuit], n_seqs: int = 32) -> list[Timeline]:
    """One :class:`Timeline` per member seed that has a circuit."""
    ckpts = list_checkpoints(Path(run_dir))
    if len(ckpts) < 2:
        raise UsageError(f"{run_dir} has {len(ckpts)} checkpoint(s); emergence needs a run saved with several")
    if n_seqs < 1:  # a negative slice would silently keep most of the batch
        raise UsageError(f"'n_seqs' must be >= 1, got {n_seqs}", fields=("n_seqs",))
    cfg = TrainConfig.from_dict(_run_config(Path(run_dir)), Path(run_dir) / "config.json")
    batch = validation_batch(cfg)[:n_seqs]
    seeds = [s for s in cfg.seeds if s in circuits]
    attn: dict[int, list[list[float]]] = {s: [] for s in seeds}
    steps = []
    for step, path in ckpts:
        model, _, _ = load_model(path)
        steps.append(step)
        for s in seeds:
            attn[s].append(path_attention(model.member(cfg.seeds.index(s)), batch, circuits[s].paths()))
    from stackedheads.sweeps.figure4 import cross_threshold, crossing_steps

    metrics = read_metrics(Path(run_dir))
    out = []
    for s in seeds:
        paths = circuits[s].paths()
        keys = [p.key for p in paths]
        curves = {k: [a[i] for a in attn[s]] for i, k in enumerate(keys)}
        emerged = {k: first_crossing(steps, curves[k]) for k in keys}
        seen = {k: first_seen(steps, curves[k]) for k in keys}
        serves = {k: v for k, v in circuits[s].info.serves.items() if k in emerged}
        groups = [[p.key for p in g] for g in circuits[s].info.redundant_groups]
        groups = [g for g in groups if all(k in emerged for k in g)]
        positions = position_emergence(emerged, seen, serves, groups, cfg.task.depth)
        for p in positions.values():
            p["epoch"] = None if p["step"] is None else cfg.epoch(p["step"])
        plateau, first, _ = end_of_plateau({"serves": serves, "emerged": emerged, "emerged_seen": seen})
        parts = [f"val_x{j}" for j in range(1, cfg.task.depth + 1)]
        drops = crossing_steps(metrics, s, parts, cross_threshold(cfg.task.chains))
        out.append(Timeline(
            s, steps, [cfg.epoch(x) for x in steps], paths, attn[s], emerged, seen, serves, groups, positions,
            position_order(positions), first, plateau, {k[4:]: v for k, v in drops.items()}, order_of(list(drops.values())),
        ))
    return out


def ordering_statistic(orders: list[str]) -> dict:
    """E3 over runs (one :attr:`Timeline.order` each): how many emerge strictly in order, out of
    order, tied, or cannot be timed."""
    count = {o: orders.count(o) for o in ("in order", "out of order", "tie", "undecided", "inconclusive")}
    decided = count["in order"] + count["out of order"]
    return {
        "runs": len(orders), "decided": decided, "in_order": count["in order"], "counts": count,
        "fraction_in_order": count["in order"] / decided if decided else None,
    }


def plot_timeline(t: Timeline, cfg: TrainConfig, metrics: list[dict], out: Path) -> list[str]:
    """Appendix D (one plot per path), Figure 7 right (summary) and Figure 6 (losses, marked)."""
    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    files = []
    per = cfg.epoch(1.0)  # epochs per step (8 steps per epoch for the sec9 presets, Sec. 9.1)
    colors = plt.get_cmap("tab10")

    def save(fig, name):
        files.extend(save_figure(fig, out, name, dpi=120))

    for i, p in enumerate(t.paths):
        fig, ax = plt.subplots(figsize=(5, 3))
        key = p.key
        ax.plot(t.steps, [a[i] for a in t.attention], "o-", ms=3, color=colors(i % 10))
        ax.axhline(THRESHOLD, color="grey", ls=":")
        if t.emerged[key] is not None:
            ax.axvline(t.emerged[key], color="grey", ls="--")
        ax.set(xlabel="step", ylabel="mean attention", ylim=(0, 1.02), title=f"seed {t.seed}: {key}")
        sec = ax.secondary_xaxis("top", functions=(lambda s: s * per, lambda e: e / per))
        sec.set_xlabel("epoch (paper's)")
        save(fig, f"path{i}_L{p.layer}.{p.head}_s{p.src}-" + dst_label(p.dst))

    # 2.2 in beside the bars: the title, two step axes and their labels (with less, one path's
    # figure was too short for tight_layout, which warned).
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(t.paths) + 2.2))
    keys = [p.key for p in t.paths]
    vals = [t.emerged[k] if t.emerged[k] is not None else float("nan") for k in keys]
    ax.barh(range(len(keys)), vals, color=[colors(i % 10) for i in range(len(keys))])
    ax.set_yticks(range(len(keys)), keys, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="step at which mean attention first exceeds 0.5", title=f"seed {t.seed}: emergence of each path")
    sec = ax.secondary_xaxis("top", functions=(lambda s: s * per, lambda e: e / per))
    sec.set_xlabel("epoch (paper's)")
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
        ax.secondary_xaxis("top", functions=(lambda s: s * per, lambda e: e / per)).set_xlabel("epoch (paper's)")
        ax.legend(fontsize=7)
    left.set_title(f"seed {t.seed}: loss (dashed: a path emerges)")
    right.set_title("partial validation loss")
    save(fig, "losses")
    return files


def check_circuit_run(circuit: Circuit, path: Path, run_dir: Path, seed: int) -> None:
    """Refuse a circuit that its ``info`` says was discovered on another run or member (one of
    the same shape passed :func:`check_shape` and timed this run's heads with another model's
    circuit). The run is compared as a folder where the recorded one still exists, else by
    name: a reproduce folder moved or published keeps its runs' names, not their paths."""
    info = circuit.info
    if info.seed is not None and info.seed != seed:
        raise UsageError(f"{path} is the circuit of seed {info.seed}, not of seed {seed} of {run_dir}")
    if not info.run:
        return  # a hand-written circuit names no run
    try:
        same = same_recorded_run(info.run, run_dir)  # discovery records the run's absolute path
    except OSError:
        same = False
    if not same:
        raise UsageError(f"{path} was discovered on {info.run}, not on {run_dir}: give --circuits the circuits of this run")


def _run_config(run_dir: Path) -> dict:
    """The training configuration ``run_dir`` recorded (a damaged one is one line)."""
    raw = RunFolder(run_dir, "training run").recorded("config.json", "the run's training configuration")
    if raw is None:
        raise UsageError(f"{run_dir} is not a run folder (no config.json)")
    return raw


def emergence_run(run_dir: str | Path, out: str | Path, circuits_dir: str | Path | None = None, n_seqs: int = 32) -> dict:
    """Timelines for every member of a run, plots under ``out/seed{s}/``, and the ordering.

    Circuits come from ``circuits_dir/seed{s}/circuit.json``; without one they are discovered
    on the last checkpoint first (into ``out/circuits``). ``out/summary.json`` covers every
    seed timed into ``out`` (:func:`timeline_summary`), so the pieces of one result share a folder.
    """
    run_dir, out = Path(run_dir), Path(out)
    if not 1 <= n_seqs <= 100_000:  # 0 would average nothing (NaN attention read as "never")
        raise UsageError(f"'n_seqs' must be between 1 and 100000, got {n_seqs}", fields=("n_seqs",))
    raw = _run_config(run_dir)
    check_seeds(raw.get("seeds"), run_dir / "config.json")  # seeds name the folders written below
    cfg = TrainConfig.from_dict(raw, run_dir / "config.json")
    with RunFolder(out).lock("emergence"):  # a second process on the folder gets one line
        return _emergence_locked(run_dir, out, circuits_dir, n_seqs, cfg)


def _emergence_locked(run_dir: Path, out: Path, circuits_dir, n_seqs: int, cfg: TrainConfig) -> dict:
    from stackedheads.circuits.discover import discover_run

    if circuits_dir is None:
        circuits_dir = out / "circuits"
        discover_run(run_dir, circuits_dir)
    model = cfg.model_config()
    circuits = {}
    for seed in cfg.seeds:
        p = Path(circuits_dir) / f"seed{seed}" / "circuit.json"
        if p.exists():
            circuits[seed] = Circuit.load(p)
            try:  # a circuit of another model would index heads or tokens this run lacks
                check_shape(circuits[seed], model, cfg.task)
            except UsageError as e:
                raise UsageError(f"{p} does not describe {run_dir}: {e}") from None
            check_circuit_run(circuits[seed], p, run_dir, seed)
    if not circuits:
        raise UsageError(f"no circuit.json for any seed of {run_dir} under {circuits_dir}")
    timelines = timeline(run_dir, circuits, n_seqs)
    metrics = read_metrics(run_dir)
    for t in timelines:
        folder = out / f"seed{t.seed}"
        plot_timeline(t, cfg, metrics, folder)
        atomic_write_json(folder / "timeline.json", t.to_dict())
    summary = timeline_summary(out, cfg, run_dir)
    atomic_write_json(out / "summary.json", summary)
    return summary


# What summary.json keeps of each seed's timeline.json.
SUMMARY_FIELDS = ("emerged", "positions", "order", "serves", "first_paths", "plateau_steps")


def timeline_summary(out: Path, cfg: TrainConfig, run_dir: Path) -> dict:
    """The summary of every ``seed{s}/timeline.json`` under ``out``: the seeds just timed and any
    a piece of the same result (a run holding other seeds, :mod:`stackedheads.state.pieces`) timed
    into the same folder before, so ``emergence PIECE --out DIR`` per piece builds one result.
    A timeline on another epoch axis (``steps_per_epoch``) belongs to other settings: refused."""
    seeds = {}
    for path in (p for p in out.glob("seed*/timeline.json") if p.parent.name[4:].isdigit()):
        try:
            t = read_state_json(path, "an emergence timeline")
            steps, epochs = t["steps"], t["epochs"]
            entry = {k: t[k] for k in SUMMARY_FIELDS}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{path} is not an emergence timeline ({type(e).__name__}: {e}); delete it or give another --out") from None
        if any(not math.isclose(e, cfg.epoch(s), rel_tol=1e-9, abs_tol=1e-12) for s, e in zip(steps, epochs)):
            raise UsageError(f"{path} counts epochs otherwise than {run_dir} (steps_per_epoch differs): "
                             "a timeline of other settings; give another --out")
        seeds[int(path.parent.name[4:])] = entry
    seeds = dict(sorted(seeds.items()))
    return {"ordering": ordering_statistic([s["order"] for s in seeds.values()]), "seeds": seeds,
            "steps_per_epoch": 1 / cfg.epoch(1.0)}
