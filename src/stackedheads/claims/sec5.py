"""Section 5 and Appendix B: Theorem 1, logarithmic growth, causal masking (T1-T3)."""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import (
    SECTIONS,
    Claim,
    Section,
    not_run,
    NUM,
    read_jsonl,
    verdict_of,
)

SEC5 = "5 Theory of information flow"



# What the claims read of each line of theory.jsonl.
THEORY_ROW = {"depth": int, "min_layers": NUM, "paper_bound": NUM, "min_layers_causal": NUM}


def theory_claims(rows: list[dict] | None) -> list[Claim]:
    sec = SEC5
    p1 = "Theorem 1: with t < log3(2D) layers the last position cannot retrieve x_D."
    p2 = "The minimum number of layers grows logarithmically with D."
    p3 = "Causal masking can only raise the number of layers needed (Sec. 5: the bound ignores it)."
    if not rows:
        return [not_run(sec, i, p, "theory") for i, p in (("T1", p1), ("T2", p2), ("T3", p3))]
    dmax = max(r["depth"] for r in rows)
    below = [r["depth"] for r in rows if r["min_layers"] < r["paper_bound"]]
    gaps = sorted({r["min_layers"] - r["paper_bound"] for r in rows})
    causal_lower = [r["depth"] for r in rows if r["min_layers_causal"] < r["min_layers"]]
    return [
        Claim(
            sec, "T1", p1,
            f"exact simulation of Assumptions 1-2, D = 1..{dmax}: the minimum is never below ceil(log3 2D)"
            + (f" (below at D = {below})" if below else ""),
            verdict_of(not below),
        ),
        Claim(
            sec, "T2", p2,
            f"D = 1..{dmax}: the simulated minimum minus ceil(log3 2D) takes the values {gaps} "
            f"(minimum {rows[0]['min_layers']} layers at D = 1, {rows[-1]['min_layers']} at D = {dmax})",
            verdict_of(not below and max(gaps) <= 1),
        ),
        Claim(
            sec, "T3", p3,
            f"D = 1..{dmax}: with causal masking the minimum is "
            f"{rows[-1]['min_layers_causal']} vs {rows[-1]['min_layers']} layers at D = {dmax}, never fewer"
            + (f" (fewer at D = {causal_lower})" if causal_lower else ""),
            verdict_of(not causal_lower),
        ),
    ]




SECTIONS.register(
    "sec5", Section(SEC5, 5, "theory", lambda run: theory_claims(read_jsonl(Path(run) / "theory" / "theory.jsonl", THEORY_ROW)))
)
