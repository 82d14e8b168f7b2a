"""Section 4 and Figure 2: language models answer the prompts (L1, L2), judged per model."""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import (
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    NUM,
    PASS,
    SECTIONS,
    Claim,
    Each,
    Section,
    expect,
    not_run,
)

SEC4 = "4 Large language models"
LLM_NEAR_PERFECT = 0.9  # Sec. 4: "almost perfectly for D <= 5", read as >= 90% correct


LLM_MIN_N = 20  # below this many questions a Wilson interval is too wide (~±0.2) to call a FAIL


def llm_claims(results: dict | None) -> list[Claim]:
    """L1 and L2, judged per model. ``results``: ``llm/comparison.json`` (several models), or
    one model's ``results.json``. With several models the ids name the model: ``L1 (m)``."""
    sec = SEC4
    p1 = "Large language models answer well above random guessing on all five formulations (Fig. 2)."
    p2 = "On the equations formulation, large language models are almost perfect for D <= 5 (Fig. 2)."
    if results and "models" in results:
        runs = [m for m in results["models"] if m.get("per_formulation")]
    elif results and results.get("per_formulation"):
        runs = [{**results, "model": results.get("identity", {}).get("model", "?")}]
    else:
        runs = []
    if not runs:
        return [not_run(sec, "L1", p1, "llm"), not_run(sec, "L2", p2, "llm")]
    out: list[Claim] = []
    for r in runs:
        model = r["model"]
        suffix = f" ({model})" if len(runs) > 1 else ""
        out += [Claim(sec, "L1" + suffix, p1, *_l1(model, r["per_formulation"])),
                Claim(sec, "L2" + suffix, p2, *_l2(model, r.get("per_depth", {}).get("equations", {})))]
    return out


def _l1(model: str, per_f: dict) -> tuple[str, str]:
    """PASS: every formulation's Wilson 95% lower bound above chance. FAIL: one is not, on
    enough questions to tell. INCONCLUSIVE: one is not, but on fewer than LLM_MIN_N."""
    above = {f: s["ci95"][0] > s["chance"] for f, s in per_f.items()}
    shown = "; ".join(
        f"{f} {s['accuracy']:.2f} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}] vs chance {s['chance']:.2f}"
        for f, s in per_f.items()
    )
    n = min(s["n"] for s in per_f.values())
    text = (f"{model}: {sum(above.values())} of {len(above)} formulations have the Wilson 95% lower bound above "
            f"chance ({shown}; n = {n} per formulation)")
    if all(above.values()):
        return text, PASS
    if any(not ok and per_f[f]["n"] >= LLM_MIN_N for f, ok in above.items()):
        return text, FAIL
    return text + f"; too few questions to decide (< {LLM_MIN_N} per formulation)", INCONCLUSIVE


def _l2(model: str, cells: dict) -> tuple[str, str]:
    """PASS: accuracy >= LLM_NEAR_PERFECT at every equations D <= 5 measured. FAIL: some
    D <= 5 whose Wilson upper bound is below it. INCONCLUSIVE: below it within the interval."""
    eq = {int(d): s for d, s in cells.items() if int(d) <= 5}
    if not eq:
        return f"{model}: no equations questions with D <= 5 in this run", NOT_RUN
    shown = ", ".join(f"D={d}: {eq[d]['accuracy']:.2f} [{eq[d]['ci95'][0]:.2f}, {eq[d]['ci95'][1]:.2f}] (n={eq[d]['n']})" for d in sorted(eq))
    text = f"{model}: {shown} (near-perfect read as >= {LLM_NEAR_PERFECT:.0%})"
    if all(s["accuracy"] >= LLM_NEAR_PERFECT for s in eq.values()):
        return text, PASS
    if any(s["ci95"][1] < LLM_NEAR_PERFECT for s in eq.values()):
        return text, FAIL
    return text + "; below 90% but the interval reaches it: too few questions to decide", INCONCLUSIVE




_SCORE = {"accuracy": NUM, "ci95": [NUM], "n": NUM}
_MODEL = {"model?": str, "per_formulation?": Each({**_SCORE, "chance": NUM}), "per_depth?": Each(Each(_SCORE))}
# What L1 and L2 read of a comparison (several models) or of one run's results.
LLM_RESULTS = {"models?": [_MODEL], **_MODEL}


def _llm_results(folder: Path) -> dict | None:
    """The LLM stage's comparison (several models) or its one run's results."""
    from stackedheads.llm.compare import load_comparison

    results = load_comparison(folder) if folder.is_dir() else None
    return None if results is None else expect(results, LLM_RESULTS, folder)


SECTIONS.register("sec4", Section(SEC4, 4, "llm", lambda run: llm_claims(_llm_results(Path(run) / "llm"))))
