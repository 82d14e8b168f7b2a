"""The readings of a claim: each faithful way to measure what the paper leaves open, one of them
primary (docs/verdicts.md quotes the paper's words behind it).

A claim judged under several readings carries every reading's verdict. Where the paper's words
fix the primary reading (``fixed``), the claim leads with the primary verdict; where they do not,
it leads with the robust verdict (:attr:`~stackedheads.claims._core.Claim.robust_verdict`: the
common verdict, or ``DEPENDS ON READING``, never counted as a pass) and the primary is one
reading among the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stackedheads.claims._core import DEPENDS, NOT_LEARNED, Claim, Judged, count_line, lead_text, learned_only
from stackedheads.errors import UsageError


@dataclass(frozen=True)
class Reading:
    name: str
    means: str  # what it measures, in a line


@dataclass(frozen=True)
class Readings:
    """A claim's readings, the primary first, the paper's words behind it, and whether those
    words fix it (else the claim leads with its robust verdict)."""

    claim: str
    words: str  # the paper's sentence the primary reading follows
    readings: tuple[Reading, ...]
    fixed: bool = True

    @property
    def primary(self) -> str:
        return self.readings[0].name

    def names(self) -> list[str]:
        return [r.name for r in self.readings]


READINGS: dict[str, Readings] = {r.claim: r for r in (
    Readings("E1", "Sec. 9.2: 'After ablation, the mean squared error increases to 0.045'; App. E: 'a low validation loss (below 0.05)'", (
        Reading("combined-loss", "the combined ablation's validation loss over every position within the budget (App. E: below 0.05)"),
        Reading("per-position", "every chain position's partial loss of the combined ablation within its budget"),
    )),
    Readings("E2", "Sec. 9.2 (i): 'After 450 epochs of slow learning, an induction head that can retrieve token B emerges abruptly'", (
        Reading("first-head", "the head of the first path to cross 0.5: every path of it serving a position is new for x1 only"),
        Reading("first-path", "the first paths to cross 0.5 (at one checkpoint): each is new for x1 only"),
    )),
    # The sentence times each path; whether a position emerges with its first or its last new
    # path it does not say, and Sec. 9.2 (i)'s head "on layers 14 and 21" reads as the last.
    Readings("E3", "Sec. 9.2: 'I approximate the attention between checkpoints using linear interpolation ... the first epoch when the average attention goes above 0.5 for each attention path'", (
        Reading("first-path", "x_j emerges when its first new path crosses 0.5 (interpolated between checkpoints)"),
        Reading("retrieval-paths", "x_j emerges when its first new retrieval path crosses 0.5 (shortcuts excluded, as E2 excludes them)"),
        Reading("last-path-checkpoint", "x_j emerges at the checkpoint where its last new path is first seen above 0.5"),
        Reading("last-path", "x_j emerges when its last new path crosses 0.5 (interpolated)"),
        Reading("query-path", "x_j emerges when the query's path s0->s_2j crosses 0.5 (interpolated)"),
        Reading("hurt-most", "each path belongs to the position whose loss its removal raises most; x_j emerges at its first path's crossing"),
    ), fixed=False),
    Readings("A2", "App. E: 'For the attention heads that do not perform any useful computation, I replace the attention weights with either uniform attention or an identity matrix'", (
        Reading("ablation", "a head is useful when replacing its attention by uniform or the identity breaks the budget: its paths' removal (alone or in a redundant group), its rows following a map, its rows no rule nor baseline replaces; a failing combined ablation cannot decide"),
        Reading("held-out", "only the heads whose removal recorded on the held-out sequences breaks the budget; a failing combined ablation cannot decide"),
    )),
    Readings("A5", "Sec. 8.2: 'none of the transformers use the minimum number of attention heads required to solve the retrieval problem'", (
        Reading("ablation", "the circuit's useful heads, counted as A2 counts them, more than the causal minimum; a failing combined ablation cannot decide"),
        Reading("held-out", "the heads whose held-out removal breaks the budget, as A2's held-out reading counts them"),
    )),
    Readings("A3", "App. E: 'After performing the combined ablations (step 5), I find that the mean squared error increases slightly, but remains below 0.05'", (
        Reading("combined-loss", "the combined ablation's validation loss over every position below the budget (App. E: 0.05)"),
        Reading("per-position", "every chain position's partial loss of the combined ablation within its budget"),
    )),
    Readings("A4", "App. E: 'The only exceptions are the first useful layers of each transformer, which always attend to the previous position'", (
        Reading("attention", "the first useful head attends from every pair's second token to its first above 0.5"),
        Reading("paths", "the first useful head's useful paths link every pair's second token to its first"),
    )),
)}


def names_of(claim: str) -> list[str]:
    return READINGS[claim].names() if claim in READINGS else []


def check_names(names: list[str]) -> None:
    """One line (exit 2) naming an unknown reading and the known ones."""
    known = sorted({n for r in READINGS.values() for n in r.names()})
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"unknown reading {bad[0]!r}: the readings are {', '.join(known)}")


def judged(section: str, cid: str, paper: str, seeds: list[str],
           each: dict[str, Callable[[str], tuple[str, str]]]) -> Claim:
    """A claim over ``seeds`` under every reading of :data:`READINGS` (``each[name](seed) ->
    (verdict, text)``), each reading's verdict over the seeds that learned
    (:func:`~stackedheads.claims._core.learned_only`). The claim leads with the primary
    reading's verdict where the paper's words fix it, else with the robust verdict; per seed
    the same way."""
    spec = READINGS[cid]
    if set(each) != set(spec.names()):
        raise ValueError(f"{cid}: readings {sorted(each)} are not {spec.names()}")  # a bug, not input
    out = []
    for r in spec.readings:
        results = [(s, *each[r.name](s)) for s in seeds]
        verdict, count = learned_only(results)
        text = count + "; ".join(f"seed {s}: {t}" for s, _, t in results)
        out.append(Judged(r.name, r.name == spec.primary, verdict, text, {s: v for s, v, _ in results}))
    primary = out[0]
    if spec.fixed:
        return Claim(section, cid, paper, primary.measured, primary.verdict, tuple(out), dict(primary.seeds))
    per_seed = {s: common(r.seeds[s] for r in out) for s in seeds}
    idle = [s for s in seeds if all(f"seed {s}: {NOT_LEARNED}" in r.measured for r in out)]
    count = count_line(per_seed, idle)
    text = (f"over the readings, {count}; " if count else "") + f"under {primary.reading}: {primary.measured}"
    return Claim(section, cid, paper, text, common(r.verdict for r in out), tuple(out), per_seed, False)


def common(verdicts) -> str:
    """The verdict every reading gives, or DEPENDS ON READING."""
    found = set(verdicts)
    return found.pop() if len(found) == 1 else DEPENDS


def readings_table(found: list[Claim], only: list[str] | None = None):
    """Per claim with readings, a rich table of its readings x seeds (``only``: these readings),
    its caption saying whether the paper's words fix the primary reading, quoting them."""
    from rich.table import Table

    out = []
    for c in found:
        rows = [r for r in c.readings if not only or r.reading in only]
        if not rows:
            continue
        seeds = sorted({s for r in rows for s in r.seeds}, key=lambda s: int(s) if s.isdigit() else s)
        spec = READINGS.get(c.id)
        caption = None if spec is None else (
            f"primary {'fixed' if spec.fixed else 'not fixed'} by the paper's words: {spec.words}"
            + ("" if spec.fixed else "; the claim leads with the robust verdict"))
        t = Table(title=f"{c.id}: {c.verdict} ({lead_text(c)})", caption=caption)
        for col in ("reading", "primary", "verdict", *(f"seed {s}" for s in seeds)):
            t.add_column(col, no_wrap=col == "reading")
        for r in rows:
            t.add_row(r.reading, ("yes" if spec is None or spec.fixed else "yes, one among others") if r.primary else "",
                      r.verdict, *(r.seeds.get(s, "-") for s in seeds))
        out.append(t)
    return out
