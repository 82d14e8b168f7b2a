"""Beyond the paper: the depth phase diagram's claims (D1, D2), from a depth sweep's rows
(:mod:`stackedheads.sweeps.depth`).

* D1: no run learns ``x_j`` with fewer layers than the exact causal minimum. The theory is a
  lower bound; a violation means a bug or a flaw in Assumptions 1-2 and FAILs loudly.
* D2: trained transformers learn ``x_D`` within :data:`GAP_MAX` layer(s) of the exact causal
  minimum, at every D tried (Sec. 5: "in practice, we can expect the number of required layers
  to be even higher"; this measures how much higher).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stackedheads.claims._core import FAIL, INCONCLUSIVE, NOT_RUN, PASS, Claim
from stackedheads.sweeps.depth import phase_table, read_results, span

SECTION = "Beyond the paper: depth phase diagram"
# D2's threshold: x_D must be learned with at most this many layers above the exact causal
# minimum. The theory ignores capacity and training (Sec. 5), so some slack is expected; one
# layer is the least that allows any, and a PASS then says the exact causal model is nearly tight.
GAP_MAX = 1

_D1_PAPER = (
    "Theorem 1 is a lower bound (Sec. 5), and so is its exact causal refinement (App. B's model "
    "with the mask): no run learns x_j with fewer layers than the exact causal minimum for x_j."
)
_D2_PAPER = (
    f"Not in the paper, which only expects more layers than its bound (Sec. 5: 'in practice, we can "
    f"expect the number of required layers to be even higher'); our hypothesis: training needs at "
    f"most {GAP_MAX} layer(s) more than the exact causal minimum to learn x_D, at every D."
)


def _criterion(rows: Sequence[dict]) -> str:
    thr = sorted({round(r["threshold"], 4) for r in rows})
    chains = sorted({r["chains"] for r in rows})
    return (f"learned = final partial loss below {' / '.join(map(str, thr))} "
            f"(0.5 scaled to the 1 - 1/N plateau, N = {'/'.join(map(str, chains))})")


def claim_d1(rows: Sequence[dict]) -> Claim:
    """D1: no seed's run learns x_j with fewer layers than the causal minimum for x_j.

    PASS needs positive evidence: some x_j tried below its causal minimum *and* learned at or
    above it (not learning below the minimum says nothing if x_j is never learned at all).
    """
    if not rows:
        return Claim(SECTION, "D1", _D1_PAPER, "the depth sweep has no results", NOT_RUN)
    violations = [
        f"D={r['depth']} L={r['layers']} x{r['position']} seed {s} (final partial {r['final_partial'][s]:.3f}, "
        f"causal minimum {r['causal_min']})"
        for r in rows if r["layers"] < r["causal_min"] for s in r["seeds"] if r["learned"][s]
    ]
    if violations:
        return Claim(
            SECTION, "D1", _D1_PAPER,
            f"VIOLATION OF THE LOWER BOUND in {len(violations)} run(s): {'; '.join(violations)}. "
            f"A bug (e.g. leaked targets or positions) or a flaw in Assumptions 1-2; {_criterion(rows)}",
            FAIL,
        )
    learned_at_or_above = {(r["depth"], r["position"]) for r in rows if r["layers"] >= r["causal_min"] and r["learned_all"]}
    below = [r for r in rows if r["layers"] < r["causal_min"]]
    informative = [r for r in below if (r["depth"], r["position"]) in learned_at_or_above]
    if not informative:
        missing = (
            "no run had fewer layers than a causal minimum (include smaller --layers)" if not below
            else "positions tried below their causal minimum were never learned at or above it, so not "
                 "learning them below it shows nothing (train longer or add layers)"
        )
        return Claim(SECTION, "D1", _D1_PAPER, f"no violation, but {missing}; {_criterion(rows)}", INCONCLUSIVE)
    n_runs = sum(len(r["seeds"]) for r in informative)
    pairs = sorted({(r["depth"], r["position"]) for r in informative})
    return Claim(
        SECTION, "D1", _D1_PAPER,
        f"0 of {n_runs} seed runs below the causal minimum learned their position, over {len(pairs)} "
        f"(D, x_j) pairs that are learned with enough layers ({', '.join(f'D={d} x{j}' for d, j in pairs)}); "
        f"{_criterion(rows)}",
        PASS,
    )


def d2_per_depth(rows: Sequence[dict]) -> list[dict]:
    """D2's verdict per D (see :func:`claim_d2`), with the reason in words."""
    out = []
    for t in phase_table(rows):
        D, cmin, tmin, tried = t["depth"], t["causal_min"], t["trained_min"], t["layers_tried"]
        window = [L for L in tried if cmin <= L <= cmin + GAP_MAX]
        if tmin is None:
            verdict = INCONCLUSIVE
            why = (f"x{D} never learned in every seed within layers {span(tried)} in {rows[0]['steps']} steps: "
                   "train longer or try more layers")
        elif tmin < cmin:
            verdict, why = FAIL, f"x{D} learned with {tmin} layers, below the causal minimum {cmin} (see D1)"
        elif tmin - cmin <= GAP_MAX:
            verdict, why = PASS, f"x{D} learned with {tmin} layers, causal minimum {cmin} (gap {tmin - cmin})"
        elif window:
            # Layers within the allowed gap were tried and did not learn x_D in every seed.
            verdict = FAIL
            why = f"x{D} needs {tmin} layers, causal minimum {cmin} (gap {tmin - cmin}; {span(window)} tried, not learned)"
        else:
            verdict = INCONCLUSIVE
            why = (f"x{D} learned with {tmin} layers, causal minimum {cmin}, but no layer count in "
                   f"{cmin}..{cmin + GAP_MAX} was tried: the gap is at most {tmin - cmin}")
        out.append({"depth": D, "verdict": verdict, "reason": why, "gap": t["gap"]})
    return out


def claim_d2(rows: Sequence[dict]) -> Claim:
    """D2: for every D, x_D is learned (every seed) within GAP_MAX layers of the causal minimum.

    FAIL: some D learned only further above the minimum although layers within the gap were
    tried (or below the minimum); INCONCLUSIVE: some D never learned x_D within the layers tried
    (training budget or depth, we cannot tell) or the gap window was not tried; PASS otherwise.
    """
    if not rows:
        return Claim(SECTION, "D2", _D2_PAPER, "the depth sweep has no results", NOT_RUN)
    per = d2_per_depth(rows)
    verdicts = {p["verdict"] for p in per}
    verdict = FAIL if FAIL in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS
    shown = "; ".join(f"D={p['depth']} {p['verdict']}: {p['reason']}" for p in per)
    return Claim(
        SECTION, "D2", _D2_PAPER,
        f"threshold: gap <= {GAP_MAX} layer(s) in every seed; {shown}; {_criterion(rows)}",
        verdict,
    )


def depth_claims(rows: Sequence[dict]) -> list[Claim]:
    return [claim_d1(rows), claim_d2(rows)]


def claims_from_folder(out: str | Path) -> list[Claim]:
    """D1 and D2 re-evaluated from a depth folder's ``results.jsonl`` (NOT RUN when absent)."""
    return depth_claims(read_results(out))


def write_claims(out: str | Path, rows: Sequence[dict] | None = None) -> list[Claim]:
    """Judge a depth folder (its ``results.jsonl``, or ``rows``) and write ``claims.json``."""
    from stackedheads.state.write import atomic_write_json

    found = depth_claims(read_results(out) if rows is None else rows)
    atomic_write_json(Path(out) / "claims.json", [c.to_dict() for c in found])
    return found


LAYERS_COLUMNS = ("D", "layers tried", "trained x_D", "trained x_1..x_D", "causal min", "no-mask min",
                  "paper bound", "gap", "D2")


def layers_rows(table: Sequence[dict], d2: Sequence[dict]) -> dict:
    """Trained vs theoretical layers per D as text cells (the CLI's table, the report's and the
    README's): ``{"columns": [...], "rows": [[...], ...]}``; "never" where x_D was not learned in
    every seed, "-" per position likewise."""
    verdict = {p["depth"]: p["verdict"] for p in d2}
    rows = []
    for r in table:
        per = " ".join("-" if v is None else str(v) for v in r["trained_min_per_position"].values())
        rows.append([
            str(r["depth"]), span(r["layers_tried"]), "never" if r["trained_min"] is None else str(r["trained_min"]),
            per, str(r["causal_min"]), str(r["no_mask_min"]), str(r["paper_bound"]),
            "-" if r["gap"] is None else f"{r['gap']:+d}", verdict.get(r["depth"], ""),
        ])
    return {"columns": list(LAYERS_COLUMNS), "rows": rows}
