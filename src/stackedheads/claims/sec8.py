"""Section 8, Figure 5 and Appendices C and E: the circuits of transformers A-C (A1-A5)."""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SECTIONS,
    Claim,
    Section,
    not_run,
)
from stackedheads.claims.circuits import (
    first_head_pairs,
    first_head_paths,
    gated,
    heads_text,
    kept_below,
    no_summary,
    path_heads,
    per_seed,
    relabel_text,
    row_text,
    validation_readings,
    with_unfinished,
)
from stackedheads.claims.readings import judged, names_of
from stackedheads.layout import CIRCUITS_RUN
from stackedheads.stages import heads_in, relabelled, stage_from_files

SEC8 = "8 Circuits of transformers A-C"
PAPER_STEPS = 24_000  # Sec. 8.1: transformers A-C train for 24k steps at batch 128

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
        return [not_run(sec, k, p, "circuits") for k, p in ps.items()]
    train, found = stage["train"], stage["circuits"]
    if train is None:  # A1 reads the final losses and A2-A5 are gated on them
        return [Claim(sec, k, p, no_summary(stage), INCONCLUSIVE) for k, p in ps.items()]
    n_heads = heads_in(train["config"])
    depth = train["config"]["task"]["depth"]
    seeds = sorted(found, key=int)

    steps = train["config"].get("steps")

    def a1(s):
        # The model's own validation MSE (Sec. 8.2), not the circuit's: a partial circuit leaves
        # A1 as measured and makes A3 INCONCLUSIVE (see _validation).
        v = train["seeds"][s]["final_val_loss"]
        text = f"{v:.4f} (paper: < 0.01 after {PAPER_STEPS:,} steps)"
        if v < 0.01:
            return PASS, text
        if steps is not None and steps < PAPER_STEPS:
            # A run cut short of the paper's training cannot refute what the full run reaches.
            return INCONCLUSIVE, text + f"; this run trained {steps:,} steps: train the full {PAPER_STEPS:,} to decide"
        return FAIL, text

    labelled = {s: relabelled(found[s]) for s in seeds}  # rows named by where they attend

    def useful_heads(f: dict, counted: str) -> tuple[int, str]:
        """How many heads the (relabelled) circuit counts useful under A2's and A5's reading ``counted``."""
        if counted == "heads-with-paths":
            return len(path_heads(f)), "heads with useful paths or rows following a map"
        what = "heads with paths, mapped rows or unexplained rows"
        return (len({tuple(h) for h in f["useful_heads"]}) if "useful_heads" in f else f["n_useful_heads"]), what

    def a2(counted: str):
        def run(s):
            f = labelled[s]
            verdict, _ = validation_readings(found[s])["combined-loss"]
            useful, what = useful_heads(f, counted)
            idle = n_heads - useful
            text = (f"{useful} of {n_heads} heads useful ({what}: {heads_text(f)}){relabel_text(f)}; "
                    f"{idle} idle, PASS needs a strict majority idle (paper: 4 of 12 useful)")
            if verdict != PASS:
                return INCONCLUSIVE, text + "; the combined ablation does not stay below the budget, so the circuit cannot say which heads are useful"
            if useful == 0:
                return INCONCLUSIVE, text + "; no useful head found in a model that learned"
            return (PASS if idle > n_heads / 2 else FAIL), text

        return run

    def a4(reading: str):
        def run(s):
            f = labelled[s]
            every_pair, text = first_head_pairs(f, depth) if reading == "attention" else first_head_paths(f, depth)
            text += "; PASS needs every pair (paper: every pair, in all three transformers)" + relabel_text(f)
            below = kept_below(f)
            if below:
                rows = [(l, h, r) for l, h, r in f["unexplained_heads"] if (l, h) in below]
                return INCONCLUSIVE, text + (
                    f"; heads below it have rows no rule explains ({row_text(f, rows)}): "
                    "the first useful head may be one of them")
            if every_pair is None:
                return INCONCLUSIVE, text
            # The first useful head is known (no unexplained row below it) and its map is measured.
            return (PASS if every_pair else FAIL), text

        return run

    def a5(counted: str):
        def run(s):
            f = labelled[s]
            useful, what = useful_heads(f, counted)
            minimum = f["theory_min_heads"]
            text = (f"{useful} useful heads ({what}: {heads_text(f)}){relabel_text(f)}, causal minimum {minimum} "
                    "(paper: 4 where 3 suffice)")
            if useful > minimum:  # the heads found useful are a lower bound, partial circuit or not
                return PASS, text
            if validation_readings(found[s])["combined-loss"][0] != PASS:
                return INCONCLUSIVE, text + "; the circuit is partial (its combined ablation is not below the budget)"
            uncounted = {(l, h) for l, h, _ in f["unexplained_heads"]} - path_heads(f)
            if counted == "heads-with-paths" and useful + len(uncounted) > minimum:
                return INCONCLUSIVE, text + (f"; {len(uncounted)} more heads have rows no rule explains: "
                                             "the flow may pass through them")
            if useful < minimum:  # Theorem 1: fewer cannot solve the task, so the circuit misses heads
                return INCONCLUSIVE, text + "; fewer than the theory's minimum: the circuit misses heads"
            return FAIL, text

        return run

    def a3(reading: str):
        return lambda s: validation_readings(found[s])[reading]

    def read(cid: str, make) -> Claim:
        return judged(sec, cid, ps[cid], seeds, {r: gated(stage, make(r), PAPER_STEPS) for r in names_of(cid)})

    return [
        Claim(sec, "A1", ps["A1"], *reversed(per_seed(seeds, a1))),
        read("A2", a2), read("A3", a3), read("A4", a4), read("A5", a5),
    ]


def _folder_claims(run: Path) -> list[Claim]:
    stage_dir = Path(run) / "circuits"
    return with_unfinished(circuit_claims(stage_from_files(stage_dir, CIRCUITS_RUN)), stage_dir, CIRCUITS_RUN)


SECTIONS.register("sec8", Section(SEC8, 8, "circuits", _folder_claims))
