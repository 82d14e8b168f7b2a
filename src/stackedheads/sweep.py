"""Grids of training jobs and the Figure 4 experiment (Section 7).

A job is one ensemble: the runs that share a shape (formulation, depth, layers) and differ in
seed train together in one pass. Jobs are independent and idempotent (re-running one resumes
or skips it), so an executor may run them in any order, anywhere that sees the output folder.

``sweep figure4`` trains IC (D=5) and non-IC (D=3) transformers with 1..8 layers, 8 seeds each
for the paper preset, then writes ``summary.csv`` (one row per run), Figure 4 and the claims
of Section 7.2:

* C1: every non-IC run ends above 0.7;
* C2: in every IC run the partial losses cross 0.5 in the order x1, x2, ..., xD;
* C3: the layers needed per chain position grow with the position (beside the causal
  minimum of the information-flow model, :mod:`stackedheads.theory`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from stackedheads import presets, theory
from stackedheads.errors import UsageError
from stackedheads.executors import Executor, Job, LocalExecutor, run_dir
from stackedheads.plots import save_figure
from stackedheads.train import TrainConfig, read_metrics, run_is_complete

CROSS = 0.5  # C2's threshold on a partial loss (Section 7.2), for the paper's N = 4 chains
NON_IC_FLOOR = 0.7  # C1's threshold (Section 7.2), for N = 4


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
                cfg = replace(
                    self.base, task=replace(self.base.task, depth=depth, ic=ic), n_layers=n_layers, seeds=self.seeds
                )
                out.append(Job(f"{form}-D{depth}-L{n_layers}", form, cfg))
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d


FIGURE4 = {
    "paper": Figure4Spec("paper", presets.PAPER, 5, 3, tuple(range(1, 9)), tuple(range(8))),
    # IC at D=2 needs 2 layers for x1 and 3 for x2 (causal theory): layers 1-3 show both steps.
    "quick": Figure4Spec("quick", presets.QUICK, 2, 3, (1, 2, 3), (0, 1)),
    "smoke": Figure4Spec("smoke", presets.SMOKE, 2, 2, (1, 2), (0, 1)),
}


def figure4_spec(preset: str, **overrides) -> Figure4Spec:
    if preset not in FIGURE4:
        raise UsageError(f"unknown figure4 preset {preset!r}; choose one of {', '.join(FIGURE4)}")
    spec = FIGURE4[preset]
    base_over = {k: v for k, v in overrides.items() if k in ("device", "dtype") and v is not None}
    if base_over:
        spec = replace(spec, base=replace(spec.base, **base_over))
    return spec


# --- results ------------------------------------------------------------------------------------


def crossing_steps(rows: list[dict], seed: int, columns: list[str], threshold: float = CROSS) -> dict[str, int | None]:
    """First evaluated step at which each partial loss is below ``threshold`` (None: never)."""
    out: dict[str, int | None] = {c: None for c in columns}
    for r in sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["step"]):
        for c in columns:
            if out[c] is None and r[c] < threshold:
                out[c] = r["step"]
    return out


def collect(jobs: Sequence[Job], out: Path) -> list[dict]:
    """One row per run (job x seed) from the finished run folders."""
    rows = []
    for job in jobs:
        folder = run_dir(Path(out), job)
        summary = json.loads((folder / "summary.json").read_text())
        metrics = read_metrics(folder)
        cfg = job.config
        for seed in cfg.seeds:
            s = summary["seeds"][str(seed)]
            parts = s["final_partial"]
            cross = crossing_steps(metrics, seed, list(parts), cross_threshold(cfg.task.chains)) if cfg.task.ic else {}
            rows.append(
                {
                    "formulation": job.formulation,
                    "depth": cfg.task.depth,
                    "chains": cfg.task.chains,
                    "layers": cfg.n_layers,
                    "seed": seed,
                    "final_val_loss": s["final_val_loss"],
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
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def claims(rows: list[dict]) -> dict:
    """The claims of Section 7.2 checked on a sweep's rows (thresholds scaled to N, see
    :func:`plateau_scaled`)."""
    non_ic = [r for r in rows if r["formulation"] == "non-ic"]
    ic = [r for r in rows if r["formulation"] == "ic"]
    floors = sorted({round(non_ic_floor(r["chains"]), 4) for r in non_ic}) or [NON_IC_FLOOR]
    c1_fail = [f"{r['run']}/seed{r['seed']}" for r in non_ic if not r["final_val_loss"] > non_ic_floor(r["chains"])]
    c1 = {
        "claim": f"every non-IC run ends above {' / '.join(map(str, floors))}"
        + ("" if floors == [NON_IC_FLOOR] else f" (the paper's {NON_IC_FLOOR} scaled to the 1 - 1/N plateau)"),
        "threshold": floors,
        "runs": len(non_ic),
        "failing": c1_fail,
        "min_final_val_loss": min((r["final_val_loss"] for r in non_ic), default=None),
        "pass": bool(non_ic) and not c1_fail,
    }

    in_order, out_of_order, never, silent = [], [], [], []
    for r in ic:
        steps = [r[f"cross_val_x{j}"] for j in range(1, r["depth"] + 1)]
        name = f"{r['run']}/seed{r['seed']}"
        # "Never" counts as after every step: x_j may not cross while a position before it
        # never does, and crossings must be non-decreasing in j (one evaluation may see several).
        as_steps = [float("inf") if s is None else s for s in steps]
        if None in steps:
            never.append(name)
        if all(s is None for s in steps):
            silent.append(name)  # no evidence either way (e.g. too few layers to learn x1)
        elif as_steps == sorted(as_steps):
            in_order.append(name)
        else:
            out_of_order.append(name)
    thresholds = sorted({round(cross_threshold(r["chains"]), 4) for r in ic}) or [CROSS]
    shown = " / ".join(map(str, thresholds))
    c2 = {
        "claim": f"in every IC run the partial losses cross {shown} in the order x1..xD",
        "threshold": thresholds,
        "runs": len(ic),
        "in_order": in_order,
        "out_of_order": out_of_order,
        "some_position_never_crosses": never,
        "no_position_crosses": silent,
        "pass": bool(in_order) and not out_of_order,
    }

    needed: dict[str, int | None] = {}
    if ic:
        depth = ic[0]["depth"]
        layers = sorted({r["layers"] for r in ic})
        for j in range(1, depth + 1):
            key = f"final_val_x{j}"
            ok = [L for L in layers if _mean([r[key] for r in ic if r["layers"] == L]) < cross_threshold(ic[0]["chains"])]
            needed[f"x{j}"] = min(ok) if ok else None
        # "Never, within the layers tried" counts as more layers than any tried.
        inf = [float("inf") if v is None else v for v in needed.values()]
        grows = inf[0] != float("inf") and inf == sorted(inf) and inf[-1] > inf[0]
        causal = theory.min_layers_per_position(depth, causal=True)
        c3 = {
            "claim": "the layers needed per chain position grow with the position",
            "threshold": thresholds,
            "layers_needed": needed,
            "theory_causal_min_layers": {f"x{j}": v for j, v in enumerate(causal, start=1)},
            "pass": grows,
        }
    else:
        c3 = {"claim": "the layers needed per chain position grow with the position", "pass": False}
    return {"C1": c1, "C2": c2, "C3": c3}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def plot_figure4(rows: list[dict], out: Path) -> list[str]:
    """Figure 4: left, final val loss vs layers (IC vs non-IC); right, IC partial losses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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


def run_figure4(spec: Figure4Spec, out: str | Path, executor: Executor | None = None, on_done=None) -> dict:
    """Run (or resume) the Figure 4 sweep into ``out``; returns the claims.

    ``on_done(job, finished, total)`` is called as each remaining job finishes.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "sweep.json"
    if spec_path.exists() and json.loads(spec_path.read_text()) != json.loads(json.dumps(spec.to_dict())):
        raise UsageError(f"{out} holds a sweep with another specification; choose a new --out")
    spec_path.write_text(json.dumps(spec.to_dict(), indent=2))
    jobs = spec.jobs()
    todo = [j for j in jobs if not run_is_complete(run_dir(out, j))]
    finished = [0]

    def done(job: Job) -> None:
        finished[0] += 1
        if on_done:
            on_done(job, finished[0], len(todo))

    (executor or LocalExecutor()).run(todo, out, on_done=done)
    rows = collect(jobs, out)
    write_summary_csv(rows, out / "summary.csv")
    result = claims(rows)
    (out / "claims.json").write_text(json.dumps(result, indent=2))
    plot_figure4(rows, out)
    return result


def claims_table(result: dict):
    """The claims as a rich table (PASS / FAIL with the evidence in one line each)."""
    from rich.table import Table

    t = Table(title="Claims of Section 7.2")
    for col in ("claim", "result", "evidence"):
        t.add_column(col)
    c1, c2, c3 = result["C1"], result["C2"], result["C3"]
    low = c1["min_final_val_loss"]
    t.add_row("C1 " + c1["claim"], _verdict(c1), f"{c1['runs']} runs, lowest {low:.3f}" if low is not None else "no runs")
    t.add_row(
        "C2 " + c2["claim"], _verdict(c2),
        f"{len(c2['in_order'])} in order, {len(c2['out_of_order'])} out of order, "
        f"{len(c2['no_position_crosses'])} with no crossing (of {c2['runs']})",
    )
    t.add_row(
        "C3 " + c3["claim"], _verdict(c3),
        f"layers needed {c3.get('layers_needed')}; causal theory {c3.get('theory_causal_min_layers')}",
    )
    return t


def _verdict(claim: dict) -> str:
    return "PASS" if claim["pass"] else "FAIL"
