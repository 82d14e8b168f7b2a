"""Section 9, Figures 6-7 and Appendix D: the emergence of transformer D's heads (E1-E4), one
function a claim."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stackedheads.circuits.paths import CircuitPath, key_kind
from stackedheads.claims._core import (
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    PASS,
    SECTIONS,
    Claim,
    Section,
    not_run,
    over_seeds,
)
from stackedheads.claims.judging import gated, no_summary, validation_readings, with_unfinished
from stackedheads.claims.readings import judged, names_of
from stackedheads.state.layout import EMERGENCE_RUN, timeline
from stackedheads.emergence.ordering import end_of_plateau, order_of
from stackedheads.claims.stage_files import (
    finished_metrics,
    loss_drops,
    new_paths,
    position_times,
    read_timeline,
    relabelled_timeline,
    stage_from_files,
    times_order,
    training_summary,
    unlabelled_text,
)

SEC9 = "9 Emergence in transformer D"
PAPER_STEPS = 6_400  # Sec. 9.1: 800 epochs, 6,400 steps at batch 256

_SEC9_PAPER = {
    "E1": "Ablating everything outside the circuit raises the MSE only slightly (0.031 to 0.045).",
    "E2": "After 450 epochs of slow learning, the first head to emerge is an induction head that retrieves token B (x1) only.",
    "E3": "Heads emerge one at a time in chain order, x1 then x2 and so on (the implicit curriculum).",
    "E4": "The partial losses drop in chain order: x1 first, then x2, x3, x4 (Fig. 6 right).",
}

Each = Callable[[str], tuple[str, str]]  # seed -> (verdict, text)


def emergence_claims(stage: dict | None, timeline_dir: Path | None,
                     drops: dict[str, dict[str, int | None] | None] | None = None) -> list[Claim]:
    """Section 9 from ``{"train", "circuits"}`` of transformer D and its timelines. E4 needs no
    circuit: a seed without a timeline is judged from ``drops`` (:func:`metric_drops`, the same
    crossings its timeline would hold), so every trained seed counts."""
    sec, ps, drops = SEC9, _SEC9_PAPER, drops or {}
    found = (stage or {}).get("circuits") or {}
    seeds = sorted(found, key=int)
    # Paths are named by where they attend: a path whose own attention ends under half serves
    # nothing (stages.relabelled_timeline).
    timelines = {s: relabelled_timeline(t, found[s]) if (t := read_timeline(timeline_dir / f"seed{s}" / "timeline.json",
                                                                            timeline_dir.parent)) else None
                 for s in seeds} if timeline_dir else dict.fromkeys(seeds)
    ctx = {"stage": stage, "found": found, "timelines": timelines, "drops": drops}
    e4_seeds = sorted(set(seeds) | set(drops), key=int)
    last = e4(ctx, e4_seeds) if e4_seeds else not_run(sec, "E4", ps["E4"], "emergence")
    if not seeds:
        if not drops:
            return [not_run(sec, k, p, "emergence") for k, p in ps.items() if k != "E4"] + [last]
        return [Claim(sec, k, p, "no circuits discovered: a trained run without them decides E4 only", NOT_RUN)
                for k, p in ps.items() if k != "E4"] + [last]

    def read(cid: str, make: Callable[[dict, str], Each]) -> Claim:
        return judged(sec, cid, ps[cid], seeds, {r: gated(stage, make(ctx, r), PAPER_STEPS) for r in names_of(cid)})

    return [read("E1", e1), read("E2", e2), read("E3", e3), last]


def named(key: str) -> str:
    """A path key, marked when it is a shortcut rather than the paper's retrieval."""
    kind = key_kind(key)
    return key if kind == "retrieval" else f"{key} ({kind} shortcut)"


def timed(ctx: dict, fn: Callable[[dict, str], tuple[str, str]]) -> Each:
    """``fn(timeline, seed)`` where the seed has a timeline, else INCONCLUSIVE saying so."""
    def run(s: str) -> tuple[str, str]:
        t = ctx["timelines"][s]
        return (INCONCLUSIVE, "no timeline") if not t else fn(t, s)

    return run


def e1(ctx: dict, reading: str) -> Each:
    """E1: App. E step 5 on transformer D, as A3 judges it (Sec. 9.2: 0.031 to 0.045)."""
    def run(s: str) -> tuple[str, str]:
        verdict, text = validation_readings(ctx["found"][s])[reading]
        return verdict, text + " (paper: 0.031 to 0.045)"

    return run


def first_text(t: dict, first: list[str], reading: str) -> tuple[list[str], str]:
    """E2's first paths under ``reading`` (``first-head``: every serving path of their heads) and
    the text of the plateau before them."""
    per = t["epochs"][-1] / t["steps"][-1] if t["steps"][-1] else 0.0
    plateau, _, silent = end_of_plateau(t)
    text = "plateau before the first path serving a position: " + (
        "no such path emerged" if plateau is None else f"{plateau:.0f} steps = {plateau * per:.0f} epochs (paper: 450 epochs)"
    ) + (f" (earlier, with no measured role: {', '.join(map(named, silent))})" if silent else "")
    if reading == "first-head" and first:
        heads = {CircuitPath.parse(k)[:2] for k in first}
        first = sorted(k for k in t["serves"] if t["serves"][k] and CircuitPath.parse(k)[:2] in heads)
        text += "; first heads: " + ", ".join(f"L{l}.{h}" for l, h in sorted(heads))
    return first, text


def e2(ctx: dict, reading: str) -> Each:
    """E2: the first head to emerge serves x1 and is new for it only (Sec. 9.2 i), and is no
    shortcut (an induction head is content-based retrieval)."""
    def judge(t: dict, s: str) -> tuple[str, str]:
        serves = t["serves"]
        first, text = first_text(t, end_of_plateau(t)[1], reading)
        if not first:
            return INCONCLUSIVE, text + "; no path serving a position crossed 0.5" + unlabelled_text(t)
        # A path is new for x_j when it serves x_j but not x_(j-1) (as E3 times positions); the
        # induction head serves every later position too (they reuse it), but is new for x1 only.
        new = {k: [j for j in serves.get(k, []) if j - 1 not in serves.get(k, [])] for k in first}
        text += "; first: " + ", ".join(
            f"{named(k)} (serves {', '.join('x%d' % j for j in serves[k])}; new for {', '.join('x%d' % j for j in v)})"
            for k, v in new.items()
        ) + "; PASS needs it new for x1 and only x1, and every later x_j served by paths of its own" + unlabelled_text(t)
        return e2_verdict(t, new, text)

    return timed(ctx, judge)


def e2_verdict(t: dict, new: dict[str, list[int]], text: str) -> tuple[str, str]:
    """E2's verdict from the first paths and the positions each is new for."""
    shortcuts = [k for k in new if key_kind(k) != "retrieval"]
    if shortcuts and len(shortcuts) == len(new):
        return FAIL, text + f"; the first to emerge is a shortcut ({', '.join(map(named, shortcuts))}), not an induction head"
    if shortcuts:
        return INCONCLUSIVE, text + f" (a shortcut, {', '.join(map(named, shortcuts))}, emerges with it)"
    # A first path that is the only path serving x2.. may retrieve them too: "only" cannot be told.
    alone = [f"x{j}" for j in range(2, len(t["positions"]) + 1) if not new_paths(t["serves"], j)]
    if all(v == [1] for v in new.values()):
        if alone:
            return INCONCLUSIVE, text + f" ({', '.join(alone)} served by no path of its own: the first path may retrieve them too)"
        return PASS, text
    if any(v == [1] for v in new.values()):
        head_of = {k: CircuitPath.parse(k)[:2] for k in new}
        mixed = any(new[a] == [1] and new[b] != [1] and head_of[a] == head_of[b] for a in new for b in new)
        return INCONCLUSIVE, text + (
            " (the first head also carries a path new for a later position: it is not x1's alone)" if mixed
            else " (a tie at one checkpoint with a path new for a later position)")
    return FAIL, text


def e3(ctx: dict, reading: str) -> Each:
    """E3: x1, x2, ... emerge at strictly increasing times under ``reading``
    (:func:`stackedheads.claims.stage_files.position_times`)."""
    def judge(t: dict, s: str) -> tuple[str, str]:
        found = ctx["found"][s]
        if reading == "last-path-checkpoint" and t.get("emerged_seen") is None:
            return INCONCLUSIVE, (f"seed {s}'s timeline.json holds no checkpoint crossings (emerged_seen), "
                                  "which this reading needs: run emergence again to record them")
        times = position_times(t, reading, found)
        if reading == "hurt-most" and not any(paths for _, paths, _ in times.values()) and not found.get("losses"):
            return INCONCLUSIVE, f"the discovery's summary.json of seed {s} holds no per-path losses (losses), which this reading needs"
        unit = "checkpoint step" if reading == "last-path-checkpoint" else "step"
        shown = ", ".join(
            f"{x} " + (f"{unit} {w:.0f} (epoch {w * t['epochs'][-1] / t['steps'][-1]:.0f}) by {', '.join(map(named, paths))}"
                       if w is not None else status + (f" ({', '.join(map(named, paths))})" if paths else ""))
            for x, (w, paths, status) in times.items())
        order = times_order(times)
        verdict = {"in order": PASS, "out of order": FAIL}.get(order, INCONCLUSIVE)
        if verdict == PASS and any(w is None for w, _, _ in times.values()):
            verdict, order = INCONCLUSIVE, "in order so far, but not every position emerged"
        tie = "a tie at one checkpoint is not an order" if reading == "last-path-checkpoint" else "a tie is not an order"
        return verdict, f"{order}: {shown} (strictly increasing needed; {tie})" + mapped(t, found) + unlabelled_text(t)

    return timed(ctx, judge)


def mapped(t: dict, found: dict) -> str:
    """Positions no path of their own serves, with the rows that attend by position (and
    chain role) that do: the twin's mechanism there, which no path timeline follows."""
    rows = {k: v for k, v in found.get("serves", {}).items() if "->" not in k}
    said = []
    for j in range(1, len(t["positions"]) + 1):
        if not new_paths(t["serves"], j):
            by = [k for k, v in rows.items() if j in v and j - 1 not in v]
            if by:
                said.append(f"x{j} is served by {', '.join(by)}, which attend by position (and chain role), not along a path")
    return "; " + "; ".join(said) if said else ""


def e4(ctx: dict, seeds: list[str]) -> Claim:
    """E4: the partial losses drop in chain order, from each seed's timeline or, without one,
    its metrics.csv (every trained seed counts)."""
    stage = ctx["stage"]

    def one(s: str) -> tuple[str, str, str]:
        t = ctx["timelines"].get(s)
        falls = t["loss_drops"] if t else ctx["drops"].get(s)
        if falls is None:
            if stage and stage.get("train") is None and stage.get("missing"):
                return s, INCONCLUSIVE, "no timeline, and " + no_summary(stage)
            return s, INCONCLUSIVE, "no timeline, and no partial losses in the run's metrics.csv"
        shown = ", ".join(f"{k} {'never' if v is None else v}" for k, v in falls.items())
        order = t["loss_drop_order"] if t else order_of(list(falls.values()))
        verdict = {"in order": PASS, "out of order": FAIL}.get(order, INCONCLUSIVE)
        if verdict == PASS and None in falls.values():
            verdict, order = INCONCLUSIVE, "in order so far, but not every position dropped"
        return s, verdict, f"{order}: first evaluated step below the C2 threshold: {shown}" + ("" if t else " (metrics.csv)")

    return over_seeds(SEC9, "E4", _SEC9_PAPER["E4"], [one(s) for s in seeds])


def metric_drops(stage_dir: Path, run_name: str = EMERGENCE_RUN) -> dict[str, dict[str, int | None] | None]:
    """Per trained seed of the stage's finished pieces, each partial loss's first evaluated step
    below C2's threshold, from their metrics.csv; None for a seed whose rows are missing (E4
    then says so for it). {} for a run without partial losses (not IC) or not finished."""
    train = training_summary(stage_dir, run_name)
    if not train or not train["config"]["task"].get("ic", True):
        return {}
    rows = finished_metrics(stage_dir, run_name)
    return {s: loss_drops(rows, s, train["config"]["task"]) for s in train["seeds"]}


def _folder_claims(run: Path) -> list[Claim]:
    stage_dir = Path(run) / "emergence"
    found = emergence_claims(stage_from_files(stage_dir, EMERGENCE_RUN), timeline(stage_dir), metric_drops(stage_dir))
    return with_unfinished(found, stage_dir, EMERGENCE_RUN)


SECTIONS.register("sec9", Section(SEC9, 9, "emergence", _folder_claims))
