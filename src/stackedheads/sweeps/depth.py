"""Beyond the paper: the depth phase diagram (trained layers needed vs the exact theory).

Theorem 1 (Sec. 5, App. B) says the query cannot retrieve ``x_D`` with fewer than
``ceil(log3 2D)`` layers; it ignores causal masking, capacity and training. Figure 4 (right,
Sec. 7.2) shows for one D that later chain positions need more layers. This module trains the
IC formulation (Sec. 7) over a grid of depths D x layer counts, one ensemble per shape over the
seeds, and puts, for every D, the smallest layer count that learns each ``x_j`` beside three
theory curves: the paper's bound, the exact minimum of the information-flow model without a
mask, and the exact causal minimum (:mod:`stackedheads.theory`).

A position ``x_j`` counts as *learned* by a run when its final partial validation loss (the mean
over the last evaluations, Sec. 7.1) is below the C2/C3 threshold, the paper's 0.5 scaled to
the ``1 - 1/N`` plateau (:func:`stackedheads.sweeps.figure4.cross_threshold`). Its *step* is the first
evaluation at which the partial loss is below that threshold.

The folder ``out`` holds ``depth.json`` (the grid), ``runs/ic-D<D>-L<L>/`` (one ensemble each),
``results.jsonl`` (one row per D, layers and position), ``summary.csv``, ``phase.json`` (the
per-D table) and the figure ``depth_phase.png``/``.svg``. Running again skips
finished jobs; another grid in the same folder is refused.

The claims D1 and D2 (:mod:`stackedheads.claims.beyond`) are read from these files.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from stackedheads import theory
from stackedheads.errors import UsageError, brief
from stackedheads.execution.executors import Executor, Job, LocalExecutor, run_dir, run_unfinished
from stackedheads.report.plots import save_figure
from stackedheads.state.write import (
    RunFolder,
    atomic_write_json,
    atomic_write_text,
    check_seeds,
)
from stackedheads.sweeps.figure4 import cross_threshold, crossing_steps
from stackedheads.training import (
    TrainConfig,
    check_device,
    read_metrics,
    read_summary,
)

SPEC_FILE = "depth.json"
KIND = "depth sweep"  # what storage.folder_kinds calls a folder holding SPEC_FILE


@dataclass(frozen=True)
class DepthSpec:
    """The grid: IC runs at every depth in ``depths`` with every layer count in ``layers``,
    each shape one ensemble over ``seeds`` (trained together, as in ``sweep figure4``)."""

    preset: str
    base: TrainConfig
    depths: tuple[int, ...]
    layers: tuple[int, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("depths", "layers", "seeds"):
            values = getattr(self, name)
            if not values:
                raise UsageError(f"'{name}' is empty: the depth grid needs at least one value in it", fields=(name,))
            if len(set(values)) != len(values):
                raise UsageError(f"'{name}' must be distinct, got {brief(values)}", fields=(name,))
        for name in ("depths", "layers"):
            if min(getattr(self, name)) < 1:
                raise UsageError(f"'{name}' must be >= 1, got {min(getattr(self, name))}", fields=(name,))
        check_seeds(self.seeds, "the depth grid", field="seeds")  # the rule of every run's seeds

    def config(self, depth: int, n_layers: int) -> TrainConfig:
        return self.base.override(depth=depth, ic=True, n_layers=n_layers, seeds=self.seeds)

    def override(
        self, depths: Sequence[int] | None = None, layers: Sequence[int] | None = None,
        seeds: Sequence[int] | None = None, device: str | None = None, dtype: str | None = None,
        steps: int | None = None,
    ) -> DepthSpec:
        """The grid with some of its axes, device, dtype or training steps changed (None:
        unchanged); a changed grid or step count is a new specification (its folder refuses the
        old one)."""
        grid = {k: tuple(v) for k, v in (("depths", depths), ("layers", layers), ("seeds", seeds)) if v is not None}
        return replace(self, base=self.base.override(device=device, dtype=dtype, steps=steps), **grid)

    def jobs(self) -> list[Job]:
        # Shallow shapes first: they are cheapest and fill the diagram's left side early.
        return [
            Job(f"ic-D{d}-L{n}", "ic", self.config(d, n)) for d in sorted(self.depths) for n in sorted(self.layers)
        ]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["base"] = self.base.to_dict()
        for k in ("depths", "layers", "seeds"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DepthSpec:
        try:
            return cls(
                preset=d["preset"], base=TrainConfig.from_dict(d["base"]),
                depths=tuple(d["depths"]), layers=tuple(d["layers"]), seeds=tuple(d["seeds"]),
            )
        except (KeyError, TypeError):
            raise UsageError("a depth grid must be a JSON object with preset, base, depths, layers, seeds") from None


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """``"1-6"``, ``"1,3,5"`` or ``"1-3,6"`` as a sorted tuple of distinct integers."""
    out: set[int] = set()
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise UsageError(f"{option} takes integers and ranges like 1-6 or 1,3,5; got {text!r}") from None
    if not out:
        raise UsageError(f"{option} is empty")
    return tuple(sorted(out))


# --- results ------------------------------------------------------------------------------------


def job_rows(jobs: Sequence[Job], out: Path) -> list[dict]:
    """One row per (D, layers, position j) from the finished run folders."""
    rows = []
    for job in jobs:
        folder = run_dir(Path(out), job)
        cfg = job.config
        summary = read_summary(folder, cfg)  # rebuilt from metrics.csv if damaged
        metrics = read_metrics(folder)
        D, thr = cfg.task.depth, cross_threshold(cfg.task.chains)
        causal = theory.min_layers_per_position(D, causal=True)
        no_mask = theory.min_layers_per_position(D, causal=False)
        columns = [f"val_x{j}" for j in range(1, D + 1)]
        crossings = {str(s): crossing_steps(metrics, s, columns, thr) for s in cfg.seeds}
        for j in range(1, D + 1):
            col = f"val_x{j}"
            final = {str(s): summary["seeds"][str(s)]["final_partial"][col] for s in cfg.seeds}
            learned = {s: v < thr for s, v in final.items()}
            rows.append(
                {
                    "depth": D, "layers": cfg.model.n_layers, "position": j, "chains": cfg.task.chains,
                    "threshold": thr, "steps": cfg.steps, "seeds": [str(s) for s in cfg.seeds],
                    "final_partial": final, "learned": learned,
                    "first_step": {s: crossing[col] for s, crossing in crossings.items()},
                    "fraction_learned": sum(learned.values()) / len(learned),
                    "learned_all": all(learned.values()),
                    "causal_min": causal[j - 1], "no_mask_min": no_mask[j - 1],
                    "run": job.name,
                }
            )
    return rows


def _median_step(row: dict) -> float | None:
    """Median first step over the seeds that learned the position (None: none did)."""
    steps = [row["first_step"][s] for s in row["seeds"] if row["learned"][s] and row["first_step"][s] is not None]
    return statistics.median(steps) if steps else None


def phase_table(rows: Sequence[dict]) -> list[dict]:
    """Per D: the smallest layer count that learns x_D (and each x_j) in every seed, beside theory."""
    out = []
    for D in sorted({r["depth"] for r in rows}):
        sub = [r for r in rows if r["depth"] == D]
        tried = sorted({r["layers"] for r in sub})

        def trained_min(j: int, every_seed: bool = True) -> int | None:
            ok = [r["layers"] for r in sub if r["position"] == j and (r["learned_all"] if every_seed else r["fraction_learned"] > 0)]
            return min(ok) if ok else None

        causal = theory.min_layers_per_position(D, causal=True)
        t_min = trained_min(D)
        out.append(
            {
                "depth": D,
                "layers_tried": tried,
                "paper_bound": theory.paper_bound(D),
                "no_mask_min": theory.min_layers(D),
                "causal_min": causal[-1],
                "trained_min": t_min,
                "trained_min_any_seed": trained_min(D, every_seed=False),
                "gap": None if t_min is None else t_min - causal[-1],
                "trained_min_per_position": {f"x{j}": trained_min(j) for j in range(1, D + 1)},
                "causal_min_per_position": {f"x{j}": v for j, v in enumerate(causal, start=1)},
                "step_learned_xD": {
                    str(r["layers"]): _median_step(r) for r in sorted(sub, key=lambda r: r["layers"]) if r["position"] == D
                },
            }
        )
    return out


SUMMARY_COLUMNS = [
    "depth", "layers", "position", "chains", "threshold", "steps", "n_seeds", "fraction_learned", "learned_all",
    "final_partial_mean", "final_partial_max", "first_step_median", "first_step_per_seed", "causal_min", "no_mask_min",
]


def write_summary_csv(rows: Sequence[dict], path: Path) -> None:
    lines = []
    for r in rows:
        finals = [r["final_partial"][s] for s in r["seeds"]]
        steps = {s: "never" if r["first_step"][s] is None else r["first_step"][s] for s in r["seeds"]}
        lines.append(
            {
                **{k: r[k] for k in SUMMARY_COLUMNS if k in r},
                "threshold": round(r["threshold"], 6),
                "n_seeds": len(r["seeds"]),
                "final_partial_mean": sum(finals) / len(finals),
                "final_partial_max": max(finals),
                "first_step_median": _median_step(r),
                "first_step_per_seed": ";".join(f"{s}:{v}" for s, v in steps.items()),
            }
        )
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SUMMARY_COLUMNS)
    w.writeheader()
    w.writerows(lines)
    atomic_write_text(path, buf.getvalue())


def write_results_jsonl(rows: Sequence[dict], path: Path) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def read_results(out: str | Path) -> list[dict]:
    """The rows of a depth folder's ``results.jsonl`` ([] when the sweep has not finished)."""
    path = Path(out) / "results.jsonl"
    from stackedheads.state.write import read_state_jsonl

    if not path.exists():
        return []
    return read_state_jsonl(path, "a depth sweep's results")



def span(layers: Sequence[int]) -> str:
    layers = sorted(layers)
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 1:
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


# --- figure -------------------------------------------------------------------------------------


def plot_phase(rows: Sequence[dict], out: Path) -> list[str]:
    """Left: the phase diagram (x = D, y = layers), cells shaded by the chain positions learned in
    every seed, trained minima per position and three theory curves. Right: the step at which
    x_D is first below the threshold (median over the seeds that learn it) vs D, per layer count."""
    from matplotlib import ticker

    from stackedheads.report.plots import pyplot

    plt = pyplot()
    import numpy as np

    table = phase_table(rows)
    depths = [t["depth"] for t in table]
    layers = sorted({r["layers"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.6))

    # Shaded cells: fraction of x_1..x_D learned in every seed (0 = none, 1 = the whole chain).
    grid = np.full((len(layers), len(depths)), np.nan)
    for r in rows:
        i, k = layers.index(r["layers"]), depths.index(r["depth"])
        grid[i, k] = np.nan_to_num(grid[i, k]) + r["learned_all"] / r["depth"]
    mesh = left.pcolormesh(
        _edges(depths), _edges(layers), grid, cmap="Greens", vmin=0, vmax=1, alpha=0.6, shading="flat",
    )
    fig.colorbar(mesh, ax=left, label="fraction of x_1..x_D learned (every seed)")
    # Theory as stairs over each D's column, drawn 0.06 apart so coincident curves stay visible.
    edges = _edges(depths)
    for key, dy, style, label in (
        ("paper_bound", -0.06, {"color": "grey", "ls": ":"}, r"paper bound $\lceil\log_3 2D\rceil$ (Thm. 1)"),
        ("no_mask_min", 0.0, {"color": "C0", "ls": "--"}, "exact minimum, no mask (App. B)"),
        ("causal_min", 0.06, {"color": "C3"}, "exact minimum, causal mask"),
    ):
        left.stairs([t[key] + dy for t in table], edges, baseline=None, lw=2, label=label, **style)
    # Per-position trained minima, spread inside each D column so x_1..x_D read left to right.
    cmap = plt.get_cmap("viridis")
    for t in table:
        D = t["depth"]
        for j in range(1, D + 1):
            v = t["trained_min_per_position"][f"x{j}"]
            if v is not None and j < D:
                left.plot(D - 0.35 + 0.7 * (j - 1) / max(1, D - 1), v, "o", ms=5, mec="white", color=cmap(j / max(depths)))
    # Room above the grid for theory curves that exceed the layers tried, and for the markers
    # of depths whose x_D was never learned.
    top = max(max(layers), max(t["causal_min"] for t in table)) + 0.8
    never = [t for t in table if t["trained_min"] is None]
    xs = [t["depth"] for t in table if t["trained_min"] is not None]
    left.plot(xs, [t["trained_min"] for t in table if t["trained_min"] is not None], "k*-", ms=12, label="trained minimum for x_D")
    if never:
        left.plot([t["depth"] for t in never], [top - 0.3] * len(never), "kv", ms=9,
                  label=f"x_D not learned within {max(layers)} layers")
    left.plot([], [], "o", ms=4, color=cmap(0.5), label="trained minimum for x_j, j < D")
    left.set(xlabel="retrieval steps D", ylabel="layers", title="Depth phase diagram (IC, every seed)",
             xlim=(min(depths) - 0.5, max(depths) + 0.5), ylim=(min(layers) - 0.5, top))
    left.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    left.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)

    for L in layers:
        pts = [(t["depth"], t["step_learned_xD"].get(str(L))) for t in table]
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:
            right.plot(*zip(*pts), "o-", label=f"{L} layers")
    right.set(xlabel="retrieval steps D", ylabel="first step with x_D below threshold",
              title="When x_D is learned (median over seeds that learn it)")
    right.set_xticks(depths)
    right.set_xlim(min(depths) - 0.3, max(depths) + 0.3)
    right.grid(alpha=0.3)
    if right.lines:
        right.legend(fontsize=7)
    else:
        right.text(0.5, 0.5, "x_D not learned in any run", ha="center", va="center", transform=right.transAxes)
    return save_figure(fig, out, "depth_phase")


def _edges(values: Sequence[int]):
    """Cell edges halfway between the grid values (pcolormesh's ``shading="flat"``)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    mids = (v[1:] + v[:-1]) / 2 if len(v) > 1 else np.array([])
    first = v[0] - (mids[0] - v[0] if len(mids) else 0.5)
    last = v[-1] + (v[-1] - mids[-1] if len(mids) else 0.5)
    return np.concatenate([[first], mids, [last]])


# --- the sweep ----------------------------------------------------------------------------------


@dataclass
class DepthResult:
    rows: list[dict]
    table: list[dict]
    figures: list[str]
    trained: int  # jobs trained (or resumed) by this call; 0 when every job was finished


def check_folder(spec: DepthSpec, out: str | Path) -> dict:
    """Refuse (one line) a folder that holds another grid; returns the spec as JSON data.

    The CLI calls it before showing progress, so the refusal is the only line printed.
    """
    folder = RunFolder(out, KIND)
    folder.check()  # not a Figure 4 sweep's folder, a training run's, ...
    want = json.loads(json.dumps(spec.to_dict()))
    old = folder.recorded(SPEC_FILE, "the depth sweep's grid")
    if old is not None:
        folder.require_same(old, want, "another grid or preset")
    return want


def run_depth(
    spec: DepthSpec,
    out: str | Path,
    executor: Executor | None = None,
    on_done: Callable[[Job, int, int], None] | None = None,
) -> DepthResult:
    """Run (or resume) the depth grid into ``out``; finished jobs are skipped.

    ``on_done(job, finished, total)`` is called as each remaining job finishes.
    """
    out = Path(out)
    if executor is None or isinstance(executor, LocalExecutor):  # Ray jobs may run where CUDA is
        for device in {j.config.device for j in spec.jobs()}:
            check_device(device)  # before depth.json records the grid
        from stackedheads.training.config import check_jobs_fit

        axes = {"depth": ("depths", span(spec.depths)), "n_layers": ("layers", span(spec.layers)),
                "seeds": ("seeds", f"({len(spec.seeds)} of them)")}
        check_jobs_fit(((j.name, j.config) for j in spec.jobs()), axes)  # before the grid is recorded
    folder = RunFolder(out, KIND)
    with folder.lock("a depth sweep"):
        folder.settle(SPEC_FILE, spec.to_dict(), "the depth sweep's grid", "another grid or preset")
        jobs = spec.jobs()
        ran = run_unfinished(jobs, out, executor, on_done)
        rows = job_rows(jobs, out)
        write_results_jsonl(rows, out / "results.jsonl")
        write_summary_csv(rows, out / "summary.csv")
        table = phase_table(rows)
        atomic_write_json(out / "phase.json", table)
        figures = plot_phase(rows, out)
    return DepthResult(rows, table, figures, ran)
