"""Grids of training jobs and the Figure 4 experiment (Section 7).

A job is one ensemble: the runs that share a shape (formulation, depth, layers) and differ in
seed train together in one pass. Jobs are independent and idempotent (re-running one resumes
or skips it), so an executor may run them in any order, anywhere that sees the output folder.

``sweep figure4`` trains IC (D=5) and non-IC (D=3) transformers with 1..8 layers, 8 seeds each
for the paper preset, then writes ``summary.csv`` (one row per run, with the step at which each
partial loss first falls below the C2 threshold) and Figure 4. The claims of Section 7.2 are
judged from these files by :mod:`stackedheads.claims.sec7`; this module measures, it does not judge.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.execution.executors import Executor, Job, LocalExecutor, run_dir, run_unfinished
from stackedheads.report.plots import pyplot, save_figure
from stackedheads.state.write import (
    RunFolder,
    atomic_write_text,
    read_state_json,
)
from stackedheads.training import (
    TrainConfig,
    check_device,
    read_metrics,
    read_summary,
    run_is_complete,
)

CROSS = 0.5  # C2's threshold on a partial loss (Section 7.2), for the paper's N = 4 chains
NON_IC_FLOOR = 0.7  # C1's threshold (Section 7.2), for N = 4
SPEC_FILE = "sweep.json"
KIND = "figure4 sweep"  # what storage.folder_kinds calls a folder holding SPEC_FILE


def plateau_scaled(paper_value: float, chains: int) -> float:
    """A loss threshold of the paper (N = 4) carried over to N chains.

    A model that has not learned to retrieve predicts the mean of the N candidates and sits
    on a plateau of 1 - 1/N (0.75 for the paper's N = 4; 0.5 for N = 2). The paper's
    thresholds are fractions of that plateau (0.7 = 14/15 of it, 0.5 = 2/3 of it); for other
    N we keep the fraction, so N = 4 gives the paper's numbers exactly.
    """
    return paper_value / 0.75 * (1 - 1 / chains)


def non_ic_floor(chains: int) -> float:
    """C1's threshold for N chains (0.7 for N = 4)."""
    return plateau_scaled(NON_IC_FLOOR, chains)


def cross_threshold(chains: int) -> float:
    """C2's and C3's threshold on a partial loss for N chains (0.5 for N = 4)."""
    return plateau_scaled(CROSS, chains)


@dataclass(frozen=True)
class Figure4Spec:
    """The Figure 4 grid: IC at ``ic_depth`` and non-IC at ``non_ic_depth``, over layers x seeds."""

    preset: str
    base: TrainConfig
    ic_depth: int
    non_ic_depth: int
    layers: tuple[int, ...]
    seeds: tuple[int, ...]

    def jobs(self) -> list[Job]:
        out = []
        for form, depth, ic in (("ic", self.ic_depth, True), ("non-ic", self.non_ic_depth, False)):
            for n_layers in self.layers:
                cfg = self.base.override(depth=depth, ic=ic, n_layers=n_layers, seeds=self.seeds)
                out.append(Job(f"{form}-D{depth}-L{n_layers}", form, cfg))
        return out

    def on(self, device: str | None = None, dtype: str | None = None) -> Figure4Spec:
        """The same grid trained on another device or dtype (None: unchanged)."""
        return replace(self, base=self.base.override(device=device, dtype=dtype))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Figure4Spec:
        try:
            return cls(d["preset"], TrainConfig.from_dict(d["base"]), int(d["ic_depth"]), int(d["non_ic_depth"]),
                       tuple(_int(x) for x in d["layers"]), _seeds(d["seeds"]))
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"not a Figure 4 sweep specification: {e}") from None


def _seeds(seeds: object) -> tuple[int, ...]:
    """The seed rule of every command and file: a seed of -1 here was read as a damaged run
    (claims "rebuilt" its summary and then said to retrain)."""
    from stackedheads.state.write import check_seeds

    return check_seeds(seeds, "seeds")


def _int(x: object) -> int:
    """An integer read from sweep.json (layers name run folders: nothing else may pass)."""
    if type(x) is not int:
        raise ValueError(f"expected an integer, got {str(x)[:40]!r}")
    return x


# --- results ------------------------------------------------------------------------------------


def crossing_steps(rows: list[dict], seed: int, columns: list[str], threshold: float = CROSS) -> dict[str, int | None]:
    """First evaluated step at which each partial loss is below ``threshold`` (None: never)."""
    out: dict[str, int | None] = {c: None for c in columns}
    for r in sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["step"]):
        for c in columns:
            if out[c] is None and r[c] < threshold:
                out[c] = r["step"]
    return out


def job_rows(jobs: Sequence[Job], out: Path, rebuild: bool = True) -> list[dict]:
    """One row per run (job x seed) from the finished run folders (``rebuild`` False: a
    read-only verb, which never rewrites a damaged summary.json)."""
    rows = []
    for job in jobs:
        folder = run_dir(Path(out), job)
        summary = read_summary(folder, job.config, rebuild)  # rebuilt from metrics.csv if damaged
        metrics = read_metrics(folder)
        cfg = job.config
        for seed in cfg.seeds:
            s = summary["seeds"][str(seed)]
            parts = s["final_partial"]
            cross = crossing_steps(metrics, seed, list(parts), cross_threshold(cfg.task.chains)) if cfg.task.ic else {}
            rows.append(
                {
                    "formulation": job.target,
                    "depth": cfg.task.depth,
                    "chains": cfg.task.chains,
                    "layers": cfg.model.n_layers,
                    "seed": seed,
                    "final_val_loss": s["final_val_loss"],
                    "eval_every": cfg.eval_every,
                    **{f"final_{k}": v for k, v in parts.items()},
                    **{f"cross_{k}": v for k, v in cross.items()},
                    "run": job.name,
                }
            )
    return rows


def write_summary_csv(rows: list[dict], path: Path) -> None:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    import io

    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=columns)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def plot_figure4(rows: list[dict], out: Path) -> list[str]:
    """Figure 4: left, final val loss vs layers (IC vs non-IC); right, IC partial losses."""
    import numpy as np

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for form, color in (("ic", "C0"), ("non-ic", "C3")):
        sub = [r for r in rows if r["formulation"] == form]
        if not sub:
            continue
        layers = sorted({r["layers"] for r in sub})
        vals = [np.array([r["final_val_loss"] for r in sub if r["layers"] == L]) for L in layers]
        mean = np.array([v.mean() for v in vals])
        lo, hi = np.array([v.min() for v in vals]), np.array([v.max() for v in vals])
        label = f"{form.upper()} (D={sub[0]['depth']})"
        left.plot(layers, mean, "o-", color=color, label=label)
        left.fill_between(layers, lo, hi, color=color, alpha=0.2)
    left.set(xlabel="layers", ylabel="final validation loss", title="IC vs non-IC (min-max over seeds)")
    left.legend()
    left.grid(alpha=0.3)

    ic = [r for r in rows if r["formulation"] == "ic"]
    if ic:
        layers = sorted({r["layers"] for r in ic})
        for j in range(1, ic[0]["depth"] + 1):
            key = f"final_val_x{j}"
            right.plot(layers, [_mean([r[key] for r in ic if r["layers"] == L]) for L in layers], "o-", label=f"x{j}")
        right.axhline(cross_threshold(ic[0]["chains"]), color="grey", ls=":", lw=1)
    right.set(xlabel="layers", ylabel="partial validation loss", title="IC: per chain position (dotted: C2/C3 threshold)")
    all_layers = sorted({r["layers"] for r in rows})
    for ax in (left, right):
        ax.set_xticks(all_layers)
    right.legend()
    right.grid(alpha=0.3)
    return save_figure(fig, out, "figure4")


def run_figure4(spec: Figure4Spec, out: str | Path, executor: Executor | None = None, on_done=None) -> list[dict]:
    """Run (or resume) the Figure 4 sweep into ``out``; returns its rows (one per run).

    ``on_done(job, finished, total)`` is called as each remaining job finishes.
    """
    out = Path(out)
    if executor is None or isinstance(executor, LocalExecutor):  # Ray jobs may run where CUDA is
        for device in {j.config.device for j in spec.jobs()}:
            check_device(device)  # before sweep.json records the spec
        from stackedheads.training.config import check_jobs_fit

        check_jobs_fit((j.name, j.config) for j in spec.jobs())  # before the grid is recorded
    folder = RunFolder(out, KIND)
    with folder.lock("figure4 sweep"):  # another kind of folder, or a second process: one line
        folder.settle(SPEC_FILE, spec.to_dict(), "the sweep's specification", "another specification")
        return _run_figure4_locked(spec, out, executor, on_done)


def _run_figure4_locked(spec: Figure4Spec, out: Path, executor: Executor | None, on_done) -> list[dict]:
    jobs = spec.jobs()
    run_unfinished(jobs, out, executor, on_done)
    rows = job_rows(jobs, out)
    write_summary_csv(rows, out / "summary.csv")
    plot_figure4(rows, out)
    return rows


def finished_jobs(out: str | Path) -> tuple[Figure4Spec, list[Job], list[str]]:
    """A sweep folder's specification, its finished jobs and the names of the unfinished ones."""
    out = Path(out)
    data = read_state_json(out / SPEC_FILE, "a Figure 4 sweep specification")
    try:
        spec = Figure4Spec.from_dict(data)
    except UsageError as e:
        raise UsageError(f"{out / SPEC_FILE}: {e}; delete it and run the sweep again to rebuild it") from None
    done = [j for j in spec.jobs() if run_is_complete(run_dir(out, j))]
    return spec, done, [j.name for j in spec.jobs() if j not in done]
