"""The paper's claims, section by section, checked on a ``reproduce`` folder.

Each :class:`Claim` pairs a sentence of the paper with what the run measured and a verdict:

* ``PASS``: positive evidence for the paper's sentence;
* ``FAIL``: evidence against it;
* ``INCONCLUSIVE``: the run cannot decide; ``measured`` says what is missing (never a PASS);
* ``NOT RUN``: the stage that would measure it has no results.

The verdicts are computed from the stages' own files (``theory/theory.jsonl``,
``llm/results.json``, the Figure 4 run folders, ``circuits/``, ``emergence/``), so the report,
``stackedheads claims DIR`` and the command line agree with what is on disk.

Where a paper number depends on the problem size, the check says how it was carried over
(Section 7's thresholds scale with the 1 - 1/N plateau, see :func:`stackedheads.sweep.plateau_scaled`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "PASS", "FAIL", "INCONCLUSIVE", "NOT RUN"
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NOT_RUN)
SEC4 = "4 Large language models"
SEC5 = "5 Theory of information flow"
SEC7 = "7 Implicit curriculum and layers"
SEC8 = "8 Circuits of transformers A-C"
SEC9 = "9 Emergence in transformer D"
LLM_NEAR_PERFECT = 0.9  # Sec. 4: "almost perfectly for D <= 5", read as >= 90% correct


@dataclass(frozen=True)
class Claim:
    section: str
    id: str
    paper: str  # what the paper says
    measured: str  # what this run found
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def read_json(path: Path) -> dict | list | None:
    """A stage's JSON file, or None when the stage has not written it; a damaged one is a
    one-line error saying so."""
    from stackedheads.storage import read_state_json

    return read_state_json(path, "a stage's results", object) if path.exists() else None


def read_jsonl(path: Path) -> list[dict]:
    """A stage's JSON-lines file ([] when absent)."""
    if not path.exists():
        return []
    from stackedheads.errors import UsageError

    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError):
        rows = None
    if rows is None or not all(isinstance(r, dict) for r in rows):
        raise UsageError(f"{path} is damaged (a line is not a JSON object): delete its stage's done.json and re-run to rebuild it")
    return rows


def _verdict(ok: bool) -> str:
    return PASS if ok else FAIL


def _not_run(section: str, cid: str, paper: str, stage: str) -> Claim:
    return Claim(section, cid, paper, f"the {stage} stage has no results in this run", NOT_RUN)


def combine(verdicts) -> str:
    """One verdict from several (e.g. per seed): any FAIL fails; else any INCONCLUSIVE (or no
    verdict at all) is inconclusive; PASS needs every one to pass."""
    verdicts = list(verdicts)
    if FAIL in verdicts:
        return FAIL
    if not verdicts or any(v != PASS for v in verdicts):
        return INCONCLUSIVE
    return PASS


def order_of(steps: list[float | None]) -> str:
    """When x1..xD first did something (None: never) as evidence of the chain order (C2, E3, E4).

    ``out of order``: some x_k crosses strictly before x_j (j < k), or x_k crosses while x_j
    never does (even when x_k is the only one: x2 learned without x1 contradicts the order).
    ``undecided``: otherwise, fewer than two positions cross (no order to see). ``tie``: two
    positions first seen below the threshold at the same evaluation (they crossed within one
    evaluation interval, or one checkpoint interval). Otherwise ``in order``: strictly increasing.
    """
    seen_never = False
    for s in steps:
        if s is None:
            seen_never = True
        elif seen_never:
            return "out of order"
    crossed = [s for s in steps if s is not None]
    if len(crossed) < 2:
        return "undecided"
    if any(a > b for a, b in zip(crossed, crossed[1:])):
        return "out of order"
    if any(a == b for a, b in zip(crossed, crossed[1:])):
        return "tie"
    return "in order"


def claims_table(found: list[Claim], title: str = "the paper's claims"):
    """A rich table of claims: id, verdict (coloured) and the measurement behind it."""
    from rich.table import Table

    t = Table(title=title)
    for col in ("section", "id", "verdict", "this run"):
        t.add_column(col, overflow="fold")
    for c in found:
        colour = {PASS: "green", FAIL: "red", INCONCLUSIVE: "yellow"}.get(c.verdict, "dim")
        t.add_row(c.section, c.id, f"[{colour}]{c.verdict}[/{colour}]", c.measured)
    return t


# --- Section 4: language models -------------------------------------------------------------------


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
        return [_not_run(sec, "L1", p1, "llm"), _not_run(sec, "L2", p2, "llm")]
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


# --- Section 5: theory ----------------------------------------------------------------------------


def theory_claims(rows: list[dict] | None) -> list[Claim]:
    sec = SEC5
    p1 = "Theorem 1: with t < log3(2D) layers the last position cannot retrieve x_D."
    p2 = "The minimum number of layers grows logarithmically with D."
    p3 = "Causal masking can only raise the number of layers needed (Sec. 5: the bound ignores it)."
    if not rows:
        return [_not_run(sec, i, p, "theory") for i, p in (("T1", p1), ("T2", p2), ("T3", p3))]
    dmax = max(r["depth"] for r in rows)
    below = [r["depth"] for r in rows if r["min_layers"] < r["paper_bound"]]
    gaps = sorted({r["min_layers"] - r["paper_bound"] for r in rows})
    causal_lower = [r["depth"] for r in rows if r["min_layers_causal"] < r["min_layers"]]
    return [
        Claim(
            sec, "T1", p1,
            f"exact simulation of Assumptions 1-2, D = 1..{dmax}: the minimum is never below ceil(log3 2D)"
            + (f" (below at D = {below})" if below else ""),
            _verdict(not below),
        ),
        Claim(
            sec, "T2", p2,
            f"D = 1..{dmax}: the simulated minimum minus ceil(log3 2D) takes the values {gaps} "
            f"(minimum {rows[0]['min_layers']} layers at D = 1, {rows[-1]['min_layers']} at D = {dmax})",
            _verdict(not below and max(gaps) <= 1),
        ),
        Claim(
            sec, "T3", p3,
            f"D = 1..{dmax}: with causal masking the minimum is "
            f"{rows[-1]['min_layers_causal']} vs {rows[-1]['min_layers']} layers at D = {dmax}, never fewer"
            + (f" (fewer at D = {causal_lower})" if causal_lower else ""),
            _verdict(not causal_lower),
        ),
    ]


# --- Section 7: the Figure 4 sweep ----------------------------------------------------------------

_SEC7_PAPER = {
    "C0": "IC is essential: with IC the loss goes to near 0, far below non-IC (Fig. 4 left).",
    "C1": "Non-IC runs fail at D = 3 regardless of the number of layers: 100% end with validation loss above 0.7.",
    "C2": "In 100% of IC runs the partial losses go below 0.5 for x1 first, then x2, and so on.",
    "C3": "Later positions of the chain are harder and need more layers (Fig. 4 right).",
}


def figure4_claims(result: dict | None) -> list[Claim]:
    """Section 7's claims from :func:`stackedheads.sweep.claims` (or a sweep's claims.json)."""
    sec = SEC7
    if not result:
        return [_not_run(sec, k, p, "figure4") for k, p in _SEC7_PAPER.items()]
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


# --- Sections 8 and 9: circuits and emergence -----------------------------------------------------

# A circuit of a model that has not learned proves nothing: circuit and emergence claims need
# every chain position's final partial loss at most this fraction of the 1 - 1/N plateau (0.15
# for the paper's N = 4; its models reach < 0.01, Sec. 8.2, and 0.031, Sec. 9.2).
LEARNED_FRACTION = 0.2


def _learned(train: dict, seed: str) -> tuple[bool, str]:
    chains = train["config"]["task"]["chains"]
    limit = LEARNED_FRACTION * (1 - 1 / chains)
    parts = train["seeds"][seed]["final_partial"]
    bad = [k.removeprefix("val_") for k, v in parts.items() if not v <= limit]
    if not bad:
        return True, ""
    shown = ", ".join(f"{k.removeprefix('val_')} {v:.3f}" for k, v in parts.items())
    return False, (
        f"seed {seed}: the model has not learned the task ({shown}; every position must be <= {limit:.3g}, "
        f"{LEARNED_FRACTION:.0%} of the 1 - 1/N = {1 - 1 / chains:.3g} plateau): train longer"
    )


def _budget_text(found: dict) -> str:
    if found.get("threshold_kind") == "absolute":
        over = found.get("model_over_budget") or []
        return f"budget: absolute {found['threshold']:.3g} per position (App. E: below 0.05)" + (
            f"; {', '.join(over)} above it unablated get their own loss + {found.get('tolerance', 0):.3g}" if over else "")
    return (f"budget: each position's unablated loss + {found.get('tolerance', 0):.3g} (a CPU twin's relative "
            f"budget; App. E uses an absolute 0.05)")


def _validation(found: dict) -> tuple[str, str]:
    """App. E step 5 on the held-out sequences: the combined ablation, every row replaced
    (unexplained rows uniform), must keep every position within its budget."""
    un, comb, budgets = found["unablated"], found["combined"], found["budgets"]
    parts = ", ".join(f"x{j} {p:.3f}/{b:.3f}" for j, (p, b) in enumerate(zip(comb["partial"], budgets, strict=True), start=1))
    text = f"unablated {un['loss']:.4f}, combined ablation {comb['loss']:.4f} (per position loss/budget: {parts}; {_budget_text(found)})"
    over, unexplained = found["over_budget"], found["unexplained_heads"]
    if found.get("model_over_budget"):
        return INCONCLUSIVE, text + f"; the model's own loss is above the threshold for {', '.join(found['model_over_budget'])}"
    if not over:
        return PASS, text + (f"; {len(unexplained)} unexplained rows made uniform" if unexplained else "")
    if unexplained:
        return INCONCLUSIVE, text + (
            f"; partial circuit: {', '.join(over)} over budget with {len(unexplained)} unexplained rows made uniform "
            f"({', '.join(f'L{l}.{h} {r}' for l, h, r in unexplained)})"
        )
    return FAIL, text + f"; {', '.join(over)} over budget"


def _first_head_pairs(found: dict, depth: int) -> tuple[float | None, str]:
    """Sec. 8.2 (i): the fraction of pairs k = 1..D whose link s_2k -> s_2k-1 the lowest head
    with useful paths carries."""
    heads = found.get("heads_with_paths") or []
    if not heads:
        return None, "no head carries a useful path"
    low = min(tuple(h) for h in heads)
    carried = {(src, dst) for l, h, src, dst in found["paths"] if (l, h) == low}
    linked = [k for k in range(1, depth + 1) if (2 * k, 2 * k - 1) in carried]
    return len(linked) / depth, f"L{low[0]}.{low[1]} links {len(linked)} of {depth} pairs ({len(linked) / depth:.0%})"


def _kept_below(found: dict) -> list[tuple[int, int]]:
    """Heads with rows no rule explains below the lowest head with useful paths: they count as
    useful (A2), so the first useful head is one whose job is unknown."""
    heads = found.get("heads_with_paths") or []
    kept = sorted({(l, h) for l, h, _ in found.get("unexplained_heads", [])})
    if not heads:
        return kept
    low = min(tuple(h) for h in heads)
    return [k for k in kept if k < low]


def _per_seed(seeds, each) -> tuple[str, str]:
    """``each(seed) -> (verdict, text)`` over seeds, combined."""
    results = [(s, *each(s)) for s in seeds]
    return combine(v for _, v, _ in results), "; ".join(f"seed {s}: {t}" for s, _, t in results)


def _gated(train: dict, each):
    """``each`` only where the seed's model has learned the task, else INCONCLUSIVE."""

    def run(s):
        ok, why = _learned(train, s)
        return each(s) if ok else (INCONCLUSIVE, why.split(": ", 1)[1])

    return run


_SEC8_PAPER = {
    "A1": "Transformers A, B and C reach a validation MSE below 0.01.",
    "A2": "Most attention heads do no useful computation; only a few carry the information flow.",
    "A3": "The reverse-engineered circuits pass ablation validation (App. E, step 5: loss below 0.05).",
    "A4": "In all three, the first useful head connects the first and second tokens of each pair (8.2 i).",
    "A5": "None uses the minimum number of heads the theory allows (all use 4 where 3 suffice; 8.2 ii).",
}


def circuit_claims(stage: dict | None) -> list[Claim]:
    """Section 8 from ``{"train": run summary, "circuits": {seed: discovery summary}}``."""
    sec, ps = SEC8, _SEC8_PAPER
    if not stage or not stage.get("circuits"):
        return [_not_run(sec, k, p, "circuits") for k, p in ps.items()]
    train, found = stage["train"], stage["circuits"]
    n_heads = train["config"]["n_layers"] * train["config"]["n_heads"]
    depth = train["config"]["task"]["depth"]
    seeds = sorted(found, key=int)

    def a1(s):
        # The model's own validation MSE (Sec. 8.2), not the circuit's: a partial circuit leaves
        # A1 as measured and makes A3 INCONCLUSIVE (see _validation).
        v = train["seeds"][s]["final_val_loss"]
        return (PASS if v < 0.01 else FAIL), f"{v:.4f} (paper: < 0.01)"

    def a2(s):
        f = found[s]
        useful = f["n_useful_heads"]
        idle = n_heads - useful
        text = (f"{useful} of {n_heads} heads useful ({len(f['heads_with_paths'])} with paths, "
                f"{len({(l, h) for l, h, _ in f['unexplained_heads']})} with unexplained rows, counted useful); "
                f"{idle} idle, PASS needs a strict majority idle (paper: 4 of 12 useful)")
        if useful == 0:
            return INCONCLUSIVE, text + "; no useful head found in a model that learned"
        return (PASS if idle > n_heads / 2 else FAIL), text

    def a4(s):
        frac, text = _first_head_pairs(found[s], depth)
        text += "; PASS needs 100% (paper: every pair, in all three transformers)"
        below = _kept_below(found[s])
        if below:
            return INCONCLUSIVE, text + (
                f"; heads below it have rows no rule explains ({', '.join(f'L{l}.{h}' for l, h in below)}): "
                "the first useful head may be one of them")
        if frac == 1.0:
            return PASS, text
        if found[s]["over_budget"] or found[s]["unexplained_heads"]:
            return INCONCLUSIVE, text + "; the circuit is partial (unexplained rows), the first head may be among them"
        return FAIL, text

    def a5(s):
        f = found[s]
        useful, minimum = f["n_useful_heads"], f["theory_min_heads"]
        text = f"{useful} useful heads, causal minimum {minimum} (paper: 4 where 3 suffice)"
        if useful > minimum:
            return PASS, text
        if f["over_budget"]:
            return INCONCLUSIVE, text + "; the circuit is partial"
        return FAIL, text

    out = [Claim(sec, "A1", ps["A1"], *reversed(_per_seed(seeds, a1)))]
    for cid, fn in (("A2", a2), ("A3", lambda s: _validation(found[s])), ("A4", a4), ("A5", a5)):
        out.append(Claim(sec, cid, ps[cid], *reversed(_per_seed(seeds, _gated(train, fn)))))
    return out


_SEC9_PAPER = {
    "E1": "Ablating everything outside the circuit raises the MSE only slightly (0.031 to 0.045).",
    "E2": "After 450 epochs of slow learning, the first head to emerge is an induction head that retrieves token B (x1) only.",
    "E3": "Heads emerge one at a time in chain order, x1 then x2 and so on (the implicit curriculum).",
    "E4": "The partial losses drop in chain order: x1 first, then x2, x3, x4 (Fig. 6 right).",
}


def emergence_claims(stage: dict | None, timeline_dir: Path | None) -> list[Claim]:
    """Section 9 from ``{"train", "circuits"}`` of transformer D and its timelines."""
    sec, ps = SEC9, _SEC9_PAPER
    if not stage or not stage.get("circuits"):
        return [_not_run(sec, k, p, "emergence") for k, p in ps.items()]
    train, found = stage["train"], stage["circuits"]
    seeds = sorted(found, key=int)
    timelines = {s: read_json(timeline_dir / f"seed{s}" / "timeline.json") if timeline_dir else None for s in seeds}

    def e1(s):
        verdict, text = _validation(found[s])
        return verdict, text + " (paper: 0.031 to 0.045)"

    def timed(fn):
        def run(s):
            t = timelines[s]
            return (INCONCLUSIVE, "no timeline") if not t else fn(t)

        return run

    def e2(t):
        per = t["epochs"][-1] / t["steps"][-1] if t["steps"][-1] else 0.0
        plateau = t["plateau_steps"]
        text = "plateau before the first path: " + (
            "no path emerged" if plateau is None else f"{plateau:.0f} steps = {plateau * per:.0f} epochs (paper: 450 epochs)"
        )
        first = t["first_paths"]
        if not first:
            return INCONCLUSIVE, text + "; no path crossed 0.5"
        # A path is new for x_j when it serves x_j but not x_(j-1) (as E3 times positions); the
        # induction head serves every later position too (they reuse it), but is new for x1 only.
        new = {k: [j for j in t["serves"].get(k, []) if j - 1 not in t["serves"].get(k, [])] for k in first}
        text += "; first: " + ", ".join(
            f"{k} (serves {', '.join('x%d' % j for j in t['serves'].get(k, [])) or 'nothing measurable'}; "
            f"new for {', '.join('x%d' % j for j in v) or 'none'})" for k, v in new.items()
        ) + "; PASS needs it new for x1 and only x1, and every later x_j served by paths of its own"
        # A first path that is the only path serving x2.. may retrieve them too (one path serving
        # x1..x3): whether it retrieves x1 "only" cannot be told.
        alone = [x for j, (x, p) in enumerate(t["positions"].items(), start=1) if j > 1 and not p["new_paths"]]
        if all(v == [1] for v in new.values()) and alone:
            return INCONCLUSIVE, text + f" ({', '.join(alone)} served by no path of its own: the first path may retrieve them too)"
        if all(v == [1] for v in new.values()):
            return PASS, text
        if any(v == [1] for v in new.values()) or any(not v for v in new.values()):
            return INCONCLUSIVE, text + " (a tie at one checkpoint, or a path whose role is unmeasured)"
        return FAIL, text

    def e3(t):
        shown = ", ".join(
            f"{x} " + (f"step {p['step']:.0f} (epoch {p['epoch']:.0f}) by {', '.join(p['new_paths'])}" if p["step"] is not None
                       else p["status"] + (f" ({', '.join(p['new_paths'])})" if p["new_paths"] else ""))
            for x, p in t["positions"].items()
        )
        order = t["order"]
        verdict = {"in order": PASS, "out of order": FAIL}.get(order, INCONCLUSIVE)
        if verdict == PASS and any(p["step"] is None for p in t["positions"].values()):
            verdict, order = INCONCLUSIVE, "in order so far, but not every position emerged"
        return verdict, f"{order}: {shown} (strictly increasing checkpoints needed; a tie at one checkpoint is not an order)"

    def e4(t):
        drops = t["loss_drops"]
        shown = ", ".join(f"{k} {'never' if v is None else v}" for k, v in drops.items())
        order = t["loss_drop_order"]
        verdict = {"in order": PASS, "out of order": FAIL}.get(order, INCONCLUSIVE)
        if verdict == PASS and None in drops.values():
            verdict, order = INCONCLUSIVE, "in order so far, but not every position dropped"
        return verdict, f"{order}: first evaluated step below the C2 threshold: {shown}"

    return [
        Claim(sec, "E1", ps["E1"], *reversed(_per_seed(seeds, _gated(train, e1)))),
        Claim(sec, "E2", ps["E2"], *reversed(_per_seed(seeds, _gated(train, timed(e2))))),
        Claim(sec, "E3", ps["E3"], *reversed(_per_seed(seeds, _gated(train, timed(e3))))),
        Claim(sec, "E4", ps["E4"], *reversed(_per_seed(seeds, timed(e4)))),
    ]


def _stage_from_files(stage_dir: Path, run_name: str) -> dict | None:
    """A circuits/emergence stage's training summary and discovered circuits, from its files."""
    train = read_json(stage_dir / "runs" / run_name / "summary.json")
    found = {
        p.parent.name[4:]: read_json(p) for p in sorted((stage_dir / "discovered").glob("seed*/summary.json"))
    }
    if not train or not found:
        return None
    return {"train": train, "circuits": {s: f for s, f in found.items() if s in train["seeds"]}}


def figure4_folder_claims(folder: Path) -> list[Claim]:
    """Section 7's claims re-evaluated from a Figure 4 sweep folder (NOT RUN without one)."""
    if not (folder / "sweep.json").exists():
        return figure4_claims(None)
    from stackedheads.sweep import folder_claims

    return figure4_claims(folder_claims(folder))


def _llm_results(folder: Path) -> dict | None:
    """The LLM stage's comparison (several models) or its one run's results."""
    from stackedheads.llm.compare import load_comparison

    return load_comparison(folder) if folder.is_dir() else None


def collect(run: str | Path) -> list[Claim]:
    """Every claim of the paper re-evaluated from the files of the reproduce folder ``run``."""
    run = Path(run)
    return [
        *_from_files(run / "llm", lambda: llm_claims(_llm_results(run / "llm"))),
        *_from_files(run / "theory", lambda: theory_claims(read_jsonl(run / "theory" / "theory.jsonl"))),
        *_from_files(run / "figure4", lambda: figure4_folder_claims(run / "figure4")),
        *_from_files(run / "circuits", lambda: circuit_claims(_stage_from_files(run / "circuits", "transformers-A-C"))),
        *_from_files(run / "emergence", lambda: emergence_claims(
            _stage_from_files(run / "emergence", "transformer-D"), run / "emergence" / "timeline")),
    ]


def _from_files(stage_dir: Path, claims_of) -> list[Claim]:
    """A stage's claims; a file of the wrong shape (valid JSON that lacks what the claims read)
    is one line naming the stage, not a traceback."""
    from stackedheads.errors import UsageError

    try:
        return claims_of()
    except UsageError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(
            f"{stage_dir}: a file has the wrong shape ({type(e).__name__}: {str(e)[:80]}); "
            f"delete {stage_dir / 'done.json'} and re-run to rebuild the stage"
        ) from None


def folder_claims(folder: str | Path) -> list[Claim]:
    """``stackedheads claims DIR``: a reproduce folder's claims, or a Figure 4 sweep folder's."""
    from stackedheads.errors import UsageError

    folder = Path(folder)
    if (folder / "sweep.json").exists():
        return figure4_folder_claims(folder)
    if (folder / "config.json").exists() and "preset" in (read_json(folder / "config.json") or {}):
        return collect(folder)
    raise UsageError(f"{folder} is neither a reproduce folder nor a `sweep figure4` folder")
