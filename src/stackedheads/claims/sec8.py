"""Section 8, Figure 5 and Appendices C and E: the circuits of transformers A-C (A1-A5), one
function a claim."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stackedheads.claims._core import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SECTIONS,
    Claim,
    Section,
    not_run,
    over_seeds,
)
from stackedheads.claims.judging import (
    ablation_heads,
    first_head_pairs,
    first_head_paths,
    gated,
    heads_text,
    held_out_heads,
    kept_below,
    no_summary,
    row_text,
    validation_readings,
    with_unfinished,
)
from stackedheads.claims.readings import judged, names_of
from stackedheads.state.layout import CIRCUITS_RUN
from stackedheads.claims.stage_files import heads_in, stage_from_files

SEC8 = "8 Circuits of transformers A-C"
PAPER_STEPS = 24_000  # Sec. 8.1: transformers A-C train for 24k steps at batch 128

_SEC8_PAPER = {
    "A1": "Transformers A, B and C reach a validation MSE below 0.01.",
    "A2": "Most attention heads do no useful computation; only a few carry the information flow.",
    "A3": "The reverse-engineered circuits pass ablation validation (App. E, step 5: loss below 0.05).",
    "A4": "In all three, the first useful head connects the first and second tokens of each pair (8.2 i).",
    "A5": "None uses the minimum number of heads the theory allows (all use 4 where 3 suffice; 8.2 ii).",
}

Each = Callable[[str], tuple[str, str]]  # seed -> (verdict, text)


def circuit_claims(stage: dict | None) -> list[Claim]:
    """Section 8 from ``{"train": run summary, "circuits": {seed: discovery summary}}``."""
    sec, ps = SEC8, _SEC8_PAPER
    if not stage or not stage.get("circuits"):
        return [not_run(sec, k, p, "circuits") for k, p in ps.items()]
    if stage["train"] is None:  # A1 reads the final losses and A2-A5 are gated on them
        return [Claim(sec, k, p, no_summary(stage), INCONCLUSIVE) for k, p in ps.items()]
    seeds = sorted(stage["circuits"], key=int)

    def read(cid: str, make: Callable[[dict, str], Each]) -> Claim:
        each = {r: gated(stage, make(stage, r), PAPER_STEPS) for r in names_of(cid)}
        return judged(sec, cid, ps[cid], seeds, each)

    return [a1(stage, seeds), read("A2", a2), read("A3", a3), read("A4", a4), read("A5", a5)]


def a1(stage: dict, seeds: list[str]) -> Claim:
    """A1: the model's own validation MSE (Sec. 8.2), not the circuit's: a partial circuit leaves
    A1 as measured and makes A3 INCONCLUSIVE."""
    train = stage["train"]
    steps = train["config"].get("steps")

    def one(s: str) -> tuple[str, str, str]:
        v = train["seeds"][s]["final_val_loss"]
        text = f"{v:.4f} (paper: < 0.01 after {PAPER_STEPS:,} steps)"
        if v < 0.01:
            return s, PASS, text
        if steps is not None and steps < PAPER_STEPS:
            # A run cut short of the paper's training cannot refute what the full run reaches.
            return s, INCONCLUSIVE, text + f"; this run trained {steps:,} steps: train the full {PAPER_STEPS:,} to decide"
        return s, FAIL, text

    return over_seeds(SEC8, "A1", _SEC8_PAPER["A1"], [one(s) for s in seeds])


def useful_heads(found: dict, reading: str) -> tuple[set[tuple[int, int]] | None, str]:
    """The heads A2 and A5 count useful under ``reading``, and how they were counted (App. E:
    a head is useful when replacing its attention by uniform or the identity breaks the budget)."""
    if reading == "ablation":
        return ablation_heads(found), "heads whose replacement by uniform or the identity breaks the budget"
    return held_out_heads(found), "heads whose removal recorded on the held-out sequences breaks the budget"


def combined_fails(found: dict) -> bool:
    """Whether App. E step 5's combined ablation is not below the budget (A3's primary reading)."""
    return validation_readings(found)["combined-loss"][0] != PASS


def a2(stage: dict, reading: str) -> Each:
    """A2: most heads idle (a strict majority); a circuit whose combined ablation fails cannot
    say which heads are useful."""
    n_heads = heads_in(stage["train"]["config"])

    def run(s: str) -> tuple[str, str]:
        f = stage["circuits"][s]
        heads, what = useful_heads(f, reading)
        if heads is None:
            return INCONCLUSIVE, f"the discovery's summary.json of seed {s} holds no per-path losses (losses), which this reading needs"
        idle = n_heads - len(heads)
        text = (f"{len(heads)} of {n_heads} heads useful ({what}: {heads_text(f, heads)}); "
                f"{idle} idle, PASS needs a strict majority idle (paper: 4 of 12 useful)")
        if combined_fails(f):
            return INCONCLUSIVE, text + "; the combined ablation does not stay below the budget, so the circuit cannot say which heads are useful"
        if not heads:
            return INCONCLUSIVE, text + "; no useful head found in a model that learned"
        return (PASS if idle > n_heads / 2 else FAIL), text

    return run


def a3(stage: dict, reading: str) -> Each:
    """A3: App. E step 5 under ``reading`` (:func:`~.circuits.validation_readings`)."""
    return lambda s: validation_readings(stage["circuits"][s])[reading]


def a4(stage: dict, reading: str) -> Each:
    """A4: the first useful head links every pair, read from its attention map (``attention``)
    or its useful paths (``paths``); unexplained rows below it leave it unknown."""
    depth = stage["train"]["config"]["task"]["depth"]

    def run(s: str) -> tuple[str, str]:
        f = stage["circuits"][s]  # the first head useful by ablation: labels do not decide it
        every_pair, text = first_head_pairs(f, depth) if reading == "attention" else first_head_paths(f, depth)
        text += "; PASS needs every pair (paper: every pair, in all three transformers)"
        below = kept_below(f)
        if below:
            rows = [(l, h, r) for l, h, r in f["unexplained_heads"] if (l, h) in below]
            return INCONCLUSIVE, text + (f"; heads below it have rows no rule explains ({row_text(f, rows)}): "
                                         "the first useful head may be one of them")
        if every_pair is None:
            return INCONCLUSIVE, text
        # The first useful head is known (no unexplained row below it) and its map is measured.
        return (PASS if every_pair else FAIL), text

    return run


def a5(stage: dict, reading: str) -> Each:
    """A5: more useful heads (counted as A2 counts them) than the causal minimum; a circuit whose
    combined ablation fails is partial and cannot say (as A2)."""

    def run(s: str) -> tuple[str, str]:
        f = stage["circuits"][s]
        heads, what = useful_heads(f, reading)
        if heads is None:
            return INCONCLUSIVE, f"the discovery's summary.json of seed {s} holds no per-path losses (losses), which this reading needs"
        minimum = f["theory_min_heads"]
        text = f"{len(heads)} useful heads ({what}: {heads_text(f, heads)}), causal minimum {minimum} (paper: 4 where 3 suffice)"
        if combined_fails(f):
            return INCONCLUSIVE, text + "; the circuit is partial (its combined ablation is not below the budget), so it cannot say how many heads the model uses"
        if len(heads) > minimum:
            return PASS, text
        uncounted = ablation_heads(f) - heads
        if uncounted and len(heads) + len(uncounted) > minimum:
            return INCONCLUSIVE, text + (f"; {len(uncounted)} more heads are useful by the search's ablations "
                                         f"({', '.join(f'L{l}.{h}' for l, h in sorted(uncounted))}): the flow may pass through them")
        if len(heads) < minimum:  # Theorem 1: fewer cannot solve the task, so the circuit misses heads
            return INCONCLUSIVE, text + "; fewer than the theory's minimum: the circuit misses heads"
        return FAIL, text

    return run


def _folder_claims(run: Path) -> list[Claim]:
    stage_dir = Path(run) / "circuits"
    return with_unfinished(circuit_claims(stage_from_files(stage_dir, CIRCUITS_RUN)), stage_dir, CIRCUITS_RUN)


SECTIONS.register("sec8", Section(SEC8, 8, "circuits", _folder_claims))
