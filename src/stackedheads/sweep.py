"""Grids of training jobs and the Figure 4 experiment (Section 7).

A job is one ensemble: the runs that share a shape (formulation, depth, layers) and differ in
seed train together in one pass. Jobs are independent and idempotent (re-running one resumes
or skips it), so an executor may run them in any order, anywhere that sees the output folder.

``sweep figure4`` trains IC (D=5) and non-IC (D=3) transformers with 1..8 layers, 8 seeds each
for the paper preset, then writes ``summary.csv`` (one row per run), Figure 4 and the claims
of Section 7.2:

* C0: IC learns: at the largest layer count every position is learned (Figure 4 left);
* C1: every non-IC run ends above 0.7;
* C2: in every IC run the partial losses cross 0.5 strictly in the order x1, x2, ..., xD;
* C3: the layers needed per chain position grow with the position (beside the causal
  minimum of the information-flow model, :mod:`stackedheads.theory`).

Each claim gets PASS (positive evidence), FAIL (evidence against), INCONCLUSIVE (the sweep
cannot decide, and says what is missing) or NOT RUN. :func:`folder_claims` re-evaluates them
from a sweep folder's files without training.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from stackedheads import presets, theory
from stackedheads.claims import FAIL, INCONCLUSIVE, NOT_RUN, PASS, order_of
from stackedheads.errors import UsageError
from stackedheads.executors import Executor, Job, LocalExecutor, run_dir
from stackedheads.plots import save_figure
from stackedheads.storage import FolderLock, atomic_write_json, atomic_write_text, read_state_json
from stackedheads.train import TrainConfig, check_device, read_metrics, read_summary, run_is_complete

CROSS = 0.5  # C2's threshold on a partial loss (Section 7.2), for the paper's N = 4 chains
NON_IC_FLOOR = 0.7  # C1's threshold (Section 7.2), for N = 4
# C0's "far below": the IC loss at the largest layer count is at most this fraction of the
# non-IC one (Figure 4 left shows IC near 0 and non-IC above 0.7: a factor of more than 10).
C0_MARGIN = 0.5
# C2 counts only runs where at least two positions cross; this many such runs are needed
# before "100% in order" means anything (the paper has 64 IC runs).
C2_MIN_DECIDED = 2


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

    @classmethod
    def from_dict(cls, d: dict) -> Figure4Spec:
        try:
            return cls(d["preset"], TrainConfig.from_dict(d["base"]), int(d["ic_depth"]), int(d["non_ic_depth"]),
                       tuple(_int(x) for x in d["layers"]), tuple(_int(x) for x in d["seeds"]))
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"not a Figure 4 sweep specification: {e}") from None


def _int(x: object) -> int:
    """An integer read from sweep.json (layers name run folders: nothing else may pass)."""
    if type(x) is not int:
        raise ValueError(f"expected an integer, got {str(x)[:40]!r}")
    return x


# C2 needs crossings one evaluation apart to order them (two in one interval are a tie): the
# presets' eval intervals (paper 100 of 10k steps, quick 50 of 2k) are refined to 25 steps,
# 0.25% of the paper's run, for the sweep.
C2_EVAL_EVERY = 25

FIGURE4 = {
    "paper": Figure4Spec("paper", replace(presets.PAPER, eval_every=C2_EVAL_EVERY), 5, 3, tuple(range(1, 9)), tuple(range(8))),
    # IC at D=2 needs 2 layers for x1 and 3 for x2 (causal theory): layers 1-3 show both steps.
    "quick": Figure4Spec("quick", replace(presets.QUICK, eval_every=C2_EVAL_EVERY), 2, 3, (1, 2, 3), (0, 1)),
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
        summary = read_summary(folder, job.config)  # rebuilt from metrics.csv if damaged
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


def claims(rows: list[dict]) -> dict:
    """The claims of Section 7.2 checked on a sweep's rows (thresholds scaled to N, see
    :func:`plateau_scaled`). Each claim has a ``verdict`` (PASS, FAIL, INCONCLUSIVE, NOT RUN)
    and a ``measured`` sentence stating the threshold and the paper's number."""
    non_ic = [r for r in rows if r["formulation"] == "non-ic"]
    ic = [r for r in rows if r["formulation"] == "ic"]
    c0, c1 = _c0(ic, non_ic), _c1(non_ic)
    if c1["verdict"] == PASS and c0.get("unlearned"):
        # Non-IC failing where IC fails too says nothing about the curriculum (Sec. 7.2 contrasts them).
        c1["verdict"] = INCONCLUSIVE
        c1["measured"] += (f"; but IC does not learn either ({', '.join(c0['unlearned'])} unlearned at L = {c0['layers']}, "
                           "see C0): train longer so that IC learns")
    return {"C0": c0, "C1": c1, "C2": _c2(ic), "C3": _c3(ic)}


def _c0(ic: list[dict], non_ic: list[dict]) -> dict:
    """Figure 4 left: IC learns. At the largest layer count every position of every seed is
    below the crossing threshold, and the IC loss is at most ``C0_MARGIN`` times the non-IC one."""
    claim = "IC learns: at the largest layer count every x_j is learned in every seed, far below non-IC"
    if not ic:
        return {"claim": claim, "verdict": NOT_RUN, "measured": "no IC runs"}
    top = max(r["layers"] for r in ic)
    depth, chains = ic[0]["depth"], ic[0]["chains"]
    thr = cross_threshold(chains)
    at_top = [r for r in ic if r["layers"] == top]
    unlearned = sorted(
        {f"x{j}" for r in at_top for j in range(1, depth + 1) if not r[f"final_val_x{j}"] < thr}, key=lambda x: int(x[1:])
    )
    ic_loss = _mean([r["final_val_loss"] for r in at_top])
    non_top = [r for r in non_ic if r["layers"] == max((n["layers"] for n in non_ic), default=0)]
    non_loss = _mean([r["final_val_loss"] for r in non_top]) if non_top else None
    measured = (
        f"L = {top} (D = {depth}): {len(at_top)} seeds, positions not below {thr:.3g} in some seed: "
        f"{', '.join(unlearned) or 'none'}; mean IC final loss {ic_loss:.3f}"
        + (f" vs non-IC {non_loss:.3f} (L = {non_top[0]['layers']}; PASS needs IC <= {C0_MARGIN} x non-IC)" if non_loss is not None else "; no non-IC runs to compare")
        + " (paper, Fig. 4 left: IC near 0, non-IC above 0.7)"
    )
    if unlearned:
        verdict = FAIL
    elif non_loss is None:
        verdict = INCONCLUSIVE
    else:
        verdict = PASS if ic_loss <= C0_MARGIN * non_loss else FAIL
    return {"claim": claim, "verdict": verdict, "measured": measured, "layers": top, "unlearned": unlearned,
            "ic_final_val_loss": ic_loss, "non_ic_final_val_loss": non_loss, "margin": C0_MARGIN, "threshold": thr}


def _c1(non_ic: list[dict]) -> dict:
    depths = sorted({r["depth"] for r in non_ic})
    floors = sorted({round(non_ic_floor(r["chains"]), 4) for r in non_ic}) or [NON_IC_FLOOR]
    shown = " / ".join(map(str, floors))
    claim = f"every non-IC run at D = {', '.join(map(str, depths)) or '?'} ends above {shown}" + (
        "" if floors == [NON_IC_FLOOR] else f" (the paper's {NON_IC_FLOOR} scaled to the 1 - 1/N plateau)"
    )
    if not non_ic:
        return {"claim": claim, "verdict": NOT_RUN, "measured": "no non-IC runs", "runs": 0, "failing": [],
                "min_final_val_loss": None, "threshold": floors}
    failing = [f"{r['run']}/seed{r['seed']}" for r in non_ic if not r["final_val_loss"] > non_ic_floor(r["chains"])]
    low = min(r["final_val_loss"] for r in non_ic)
    return {
        "claim": claim, "threshold": floors, "runs": len(non_ic), "failing": failing, "min_final_val_loss": low,
        "verdict": FAIL if failing else PASS,
        "measured": f"{len(non_ic) - len(failing)} of {len(non_ic)} non-IC runs above {shown} (paper: 100% above 0.7); "
        f"lowest final loss {low:.3f}" + (f"; below: {', '.join(failing)}" if failing else ""),
    }


def _c2(ic: list[dict]) -> dict:
    thresholds = sorted({round(cross_threshold(r["chains"]), 4) for r in ic}) or [CROSS]
    shown = " / ".join(map(str, thresholds))
    claim = f"in every IC run the partial losses cross {shown} strictly in the order x1, x2, ..."
    groups: dict[str, list[str]] = {"in order": [], "out of order": [], "tie": [], "undecided": []}
    for r in ic:
        groups[order_of([r[f"cross_val_x{j}"] for j in range(1, r["depth"] + 1)])].append(f"{r['run']}/seed{r['seed']}")
    decided = len(groups["in order"]) + len(groups["out of order"])
    intervals = sorted({r.get("eval_every") for r in ic if r.get("eval_every")})
    measured = (
        f"{len(groups['in order'])} of {decided} decided runs in order (PASS needs 100% of at least "
        f"{C2_MIN_DECIDED}; paper: 100% of 64); {len(groups['tie'])} ties (two positions crossing within one "
        f"evaluation interval of {', '.join(map(str, intervals)) or '?'} steps); {len(groups['undecided'])} runs with "
        f"fewer than two positions crossing (of {len(ic)})"
        + (f"; out of order: {', '.join(groups['out of order'])}" if groups["out of order"] else "")
    )
    if not ic:
        verdict = NOT_RUN
    elif groups["out of order"]:
        verdict = FAIL
    elif decided >= C2_MIN_DECIDED:
        verdict = PASS
    else:
        verdict = INCONCLUSIVE
        measured += "; too few decided runs: train longer or use more layers so that x2.. cross"
    return {
        "claim": claim, "threshold": thresholds, "runs": len(ic), "verdict": verdict, "measured": measured,
        "in_order": groups["in order"], "out_of_order": groups["out of order"], "ties": groups["tie"],
        "undecided": groups["undecided"], "decided": decided, "min_decided": C2_MIN_DECIDED,
        "fraction_in_order": len(groups["in order"]) / decided if decided else None,
    }


def _c3(ic: list[dict]) -> dict:
    claim = "later chain positions need more layers (at least as many as the one before, more at least once)"
    if not ic:
        return {"claim": claim, "verdict": NOT_RUN, "measured": "no IC runs"}
    depth, chains = ic[0]["depth"], ic[0]["chains"]
    thr = cross_threshold(chains)
    layers = sorted({r["layers"] for r in ic})
    needed: dict[str, int | None] = {}
    for j in range(1, depth + 1):
        key = f"final_val_x{j}"
        ok = [L for L in layers if _mean([r[key] for r in ic if r["layers"] == L]) < thr]
        needed[f"x{j}"] = min(ok) if ok else None
    causal = {f"x{j}": v for j, v in enumerate(theory.min_layers_per_position(depth, causal=True), start=1)}
    vals = list(needed.values())
    never = [k for k, v in needed.items() if v is None]
    reached = [v for v in vals if v is not None]
    # Evidence against: a later position needing fewer layers, or x_k reached while x_j (j < k) never is.
    decreases = any(a > b for a, b in zip(reached, reached[1:])) or any(
        vals[i] is None and any(v is not None for v in vals[i + 1:]) for i in range(len(vals))
    )
    shown = ", ".join(f"{k} {'never' if v is None else v}" for k, v in needed.items())
    measured = (
        f"layers needed for a mean partial loss below {thr:.3g} (layers tried {layers[0]}..{layers[-1]}): {shown}; "
        f"causal theory {', '.join(f'{k} {v}' for k, v in causal.items())} (paper, Fig. 4 right: later positions need more)"
    )
    if decreases:
        verdict = FAIL
    elif never:
        verdict = INCONCLUSIVE
        measured += f"; {', '.join(never)} never learned within {layers[-1]} layers: train longer or use more layers"
    else:
        verdict = PASS if vals[-1] > vals[0] else FAIL
    return {"claim": claim, "threshold": [round(thr, 4)], "layers_needed": needed,
            "theory_causal_min_layers": causal, "verdict": verdict, "measured": measured}


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
    if executor is None or isinstance(executor, LocalExecutor):  # Ray jobs may run where CUDA is
        for device in {j.config.device for j in spec.jobs()}:
            check_device(device)  # before sweep.json records the spec
    with FolderLock(out, "figure4 sweep"):  # a second process on the folder gets one line
        return _run_figure4_locked(spec, out, executor, on_done)


def _run_figure4_locked(spec: Figure4Spec, out: Path, executor: Executor | None, on_done) -> dict:
    spec_path = out / "sweep.json"
    if spec_path.exists() and read_state_json(spec_path, "the sweep's specification") != json.loads(json.dumps(spec.to_dict())):
        raise UsageError(f"{out} holds a sweep with another specification; choose a new --out")
    atomic_write_json(spec_path, spec.to_dict())
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
    atomic_write_json(out / "claims.json", result)
    plot_figure4(rows, out)
    return result


def claims_table(result: dict):
    """The claims as a rich table: verdict and the evidence (threshold, paper's number) each."""
    from stackedheads.claims import claims_table as table
    from stackedheads.claims import figure4_claims

    return table(figure4_claims(result), "Claims of Section 7.2 (Figure 4)")


def folder_claims(out: str | Path) -> dict:
    """The Section 7 claims re-evaluated from a sweep folder's files (``sweep.json``, the run
    folders' ``summary.json`` and ``metrics.csv``), without training. Unfinished runs are left out."""
    out = Path(out)
    spec = Figure4Spec.from_dict(read_state_json(out / "sweep.json", "a Figure 4 sweep specification"))
    jobs = [j for j in spec.jobs() if run_is_complete(run_dir(out, j))]
    result = claims(collect(jobs, out))
    result["unfinished_runs"] = [j.name for j in spec.jobs() if j not in jobs]
    return result
