"""Section 7 and Figure 4: the implicit curriculum and the layers each chain position needs
(C0-C3), from a Figure 4 sweep's rows (:mod:`stackedheads.sweeps.figure4`). Thresholds are the paper's
(N = 4), scaled to the ``1 - 1/N`` plateau for other N (:func:`stackedheads.sweeps.figure4.plateau_scaled`)."""

from __future__ import annotations

from pathlib import Path

from stackedheads import theory
from stackedheads.sweeps import figure4
from stackedheads.claims._core import (
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    PASS,
    SECTIONS,
    Claim,
    Section,
    not_run,
)
from stackedheads.emergence.ordering import order_of
from stackedheads.state.write import atomic_write_json

SEC7 = "7 Implicit curriculum and layers"
# C0's "far below": the IC loss at the largest layer count is at most this fraction of the
# non-IC one (Figure 4 left shows IC near 0 and non-IC above 0.7: a factor of more than 10).
C0_MARGIN = 0.5
# C2 counts only runs where at least two positions cross; this many such runs are needed
# before "100% in order" means anything (the paper has 64 IC runs).
C2_MIN_DECIDED = 2


def rows_claims(rows: list[dict]) -> dict:
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
    thr = figure4.cross_threshold(chains)
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
    floors = sorted({round(figure4.non_ic_floor(r["chains"]), 4) for r in non_ic}) or [figure4.NON_IC_FLOOR]
    shown = " / ".join(map(str, floors))
    claim = f"every non-IC run at D = {', '.join(map(str, depths)) or '?'} ends above {shown}" + (
        "" if floors == [figure4.NON_IC_FLOOR] else f" (the paper's {figure4.NON_IC_FLOOR} scaled to the 1 - 1/N plateau)"
    )
    if not non_ic:
        return {"claim": claim, "verdict": NOT_RUN, "measured": "no non-IC runs", "runs": 0, "failing": [],
                "min_final_val_loss": None, "threshold": floors}
    failing = [f"{r['run']}/seed{r['seed']}" for r in non_ic if not r["final_val_loss"] > figure4.non_ic_floor(r["chains"])]
    low = min(r["final_val_loss"] for r in non_ic)
    return {
        "claim": claim, "threshold": floors, "runs": len(non_ic), "failing": failing, "min_final_val_loss": low,
        "verdict": FAIL if failing else PASS,
        "measured": f"{len(non_ic) - len(failing)} of {len(non_ic)} non-IC runs above {shown} (paper: 100% above 0.7); "
        f"lowest final loss {low:.3f}" + (f"; below: {', '.join(failing)}" if failing else ""),
    }


def _c2(ic: list[dict]) -> dict:
    thresholds = sorted({round(figure4.cross_threshold(r["chains"]), 4) for r in ic}) or [figure4.CROSS]
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
    thr = figure4.cross_threshold(chains)
    layers = sorted({r["layers"] for r in ic})
    # "Needs L layers": every seed at L layers learns x_j, the sense C0 gives "learned". The mean
    # over seeds is not used: where a few layers learn x_j in some seeds and not in others (IC at
    # N = 2: a 2-layer model learns x2 in seed 0 only, in float32 and bfloat16 alike), a mean of
    # two seeds crossed the threshold with the rounding while each seed's outcome held.
    needed: dict[str, int | None] = {}
    early: dict[str, str] = {}
    for j in range(1, depth + 1):
        key = f"final_val_x{j}"
        learned = {L: [r[key] < thr for r in ic if r["layers"] == L] for L in layers}
        ok = [L for L in layers if all(learned[L])]
        needed[f"x{j}"] = min(ok) if ok else None
        first = next((L for L in layers if any(learned[L])), None)
        if first is not None and (not ok or first < min(ok)):
            early[f"x{j}"] = f"{sum(learned[first])} of {len(learned[first])} seeds learn x{j} at {first}"
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
        f"layers needed for a final partial loss below {thr:.3g} in every seed (layers tried {layers[0]}..{layers[-1]}): "
        f"{shown}" + (f" (fewer in some seeds: {'; '.join(early.values())})" if early else "") + "; "
        f"causal theory {', '.join(f'{k} {v}' for k, v in causal.items())} (paper, Fig. 4 right: later positions need more)"
    )
    if decreases:
        verdict = FAIL
    elif never:
        verdict = INCONCLUSIVE
        measured += f"; {', '.join(never)} never learned within {layers[-1]} layers: train longer or use more layers"
    else:
        verdict = PASS if vals[-1] > vals[0] else FAIL
    return {"claim": claim, "threshold": [round(thr, 4)], "layers_needed": needed, "fewer_in_some_seeds": early,
            "theory_causal_min_layers": causal, "verdict": verdict, "measured": measured}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")



_SEC7_PAPER = {
    "C0": "IC is essential: with IC the loss goes to near 0, far below non-IC (Fig. 4 left).",
    "C1": "Non-IC runs fail at D = 3 regardless of the number of layers: 100% end with validation loss above 0.7.",
    "C2": "In 100% of IC runs the partial losses go below 0.5 for x1 first, then x2, and so on.",
    "C3": "Later positions of the chain are harder and need more layers (Fig. 4 right).",
}


def figure4_claims(result: dict | None) -> list[Claim]:
    """Section 7's claims from :func:`stackedheads.sweeps.figure4.claims` (or a sweep's claims.json)."""
    sec = SEC7
    if not result:
        return [not_run(sec, k, p, "figure4") for k, p in _SEC7_PAPER.items()]
    unfinished = result.get("unfinished_runs") or []
    out = []
    for k, paper in _SEC7_PAPER.items():
        c = result.get(k)
        if c is None or "verdict" not in c:
            out.append(Claim(sec, k, paper, "not in this sweep's results (written by an older version: re-run `claims`)", INCONCLUSIVE))
            continue
        verdict, measured = c["verdict"], f"{c['claim']}: {c['measured']}"
        if unfinished and verdict == PASS:  # a PASS on part of the grid is not yet the paper's claim
            verdict = INCONCLUSIVE
        if unfinished:
            measured += f"; {len(unfinished)} runs unfinished ({', '.join(unfinished)})"
        out.append(Claim(sec, k, paper, measured, verdict))
    return out




def folder_result(folder: Path) -> dict:
    """The Section 7 claims (as :func:`rows_claims` writes them) re-evaluated from a sweep
    folder's files, without training. Unfinished runs are left out and listed."""
    spec, done, unfinished = figure4.finished_jobs(folder)
    result = rows_claims(figure4.job_rows(done, folder, rebuild=False))  # claims and report never write
    result["unfinished_runs"] = unfinished
    return result


def folder_claims(folder: Path) -> list[Claim]:
    """Section 7's claims from a Figure 4 sweep folder (NOT RUN without one)."""
    return figure4_claims(folder_result(folder) if (Path(folder) / figure4.SPEC_FILE).exists() else None)


def write_claims(folder: Path) -> dict:
    """Evaluate a finished sweep folder and write its ``claims.json``; returns the result."""
    result = rows_claims(figure4.job_rows(figure4.finished_jobs(folder)[1], folder))
    atomic_write_json(Path(folder) / "claims.json", result)
    return result


SECTIONS.register("sec7", Section(SEC7, 7, "figure4", lambda run: folder_claims(Path(run) / "figure4")))
