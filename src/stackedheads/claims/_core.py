"""What every claim shares: the verdicts, a :class:`Claim`, combining verdicts, reading a
stage's files, and the :class:`Section` registry. (The chain-order statistic is a measurement:
:mod:`stackedheads.emergence.ordering`.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stackedheads.registry import Registry
from stackedheads.claims.stage_files import NUM, Each, expect, read_json, read_jsonl  # noqa: F401 (what claims read files with)

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "PASS", "FAIL", "INCONCLUSIVE", "NOT RUN"
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NOT_RUN)
# A claim whose readings (:mod:`.readings`) disagree: never counted as a pass.
DEPENDS = "DEPENDS ON READING"
# How a seed's text starts where its model has not learned the task (:func:`.circuits.learned`):
# the claims the paper states for every transformer are judged over the seeds that learned, and
# this one is counted as not learned, never dropped.
NOT_LEARNED = "the model has not learned the task"


@dataclass(frozen=True)
class Judged:
    """One reading of a claim: its verdict over the seeds, the text, and each seed's verdict."""

    reading: str
    primary: bool
    verdict: str
    measured: str
    seeds: dict[str, str]


@dataclass(frozen=True)
class Claim:
    section: str
    id: str
    paper: str  # what the paper says
    measured: str  # what this run found, under the primary reading
    # The verdict the claim leads with: the primary reading's where the paper's words fix it
    # (``primary_fixed``), else the robust verdict (the common one, or DEPENDS ON READING).
    verdict: str
    readings: tuple[Judged, ...] = ()  # every reading the paper's words allow (empty: one way to measure it)
    seeds: dict[str, str] = field(default_factory=dict)  # each seed's verdict on it alone, as ``verdict`` leads
    primary_fixed: bool = True  # whether the paper's words choose the primary reading (docs/verdicts.md)

    @property
    def primary_verdict(self) -> str:
        """The primary reading's verdict (the only one, for a claim measured one way)."""
        return next((r.verdict for r in self.readings if r.primary), self.verdict)

    @property
    def robust_verdict(self) -> str:
        """The verdict every reading gives, or :data:`DEPENDS` where they differ."""
        found = {r.verdict for r in self.readings} or {self.verdict}
        return found.pop() if len(found) == 1 else DEPENDS

    @property
    def robustness(self) -> str:
        """"robust" (one way to measure it, or every reading agrees) or which readings give which."""
        if self.robust_verdict != DEPENDS:
            return "robust" if self.readings else "one reading"
        by: dict[str, list[str]] = {}
        for r in self.readings:
            by.setdefault(r.verdict, []).append(r.reading)
        return "depends on reading: " + "; ".join(f"{v} under {', '.join(names)}" for v, names in by.items())

    def to_dict(self) -> dict:
        return {**asdict(self), "readings": [asdict(r) for r in self.readings], "headline": self.verdict,
                "primary_verdict": self.primary_verdict, "robust_verdict": self.robust_verdict,
                "robustness": self.robustness}

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        """A claim as :meth:`to_dict` wrote it (a claims.json written before readings has none)."""
        return cls(d["section"], d["id"], d["paper"], d["measured"], d["verdict"],
                   tuple(Judged(**r) for r in d.get("readings", ())), dict(d.get("seeds") or {}),
                   d.get("primary_fixed", True))


def learned_only(results: list[tuple[str, str, str]]) -> tuple[str, str]:
    """One verdict from ``(seed, verdict, text)`` per seed, and the "k of n" that says how
    (:func:`count_line`, then ": "; "" over one seed): the seeds whose model has not learned
    (:data:`NOT_LEARNED`) are counted, not judged; with none learned the claim is INCONCLUSIVE."""
    judged = [v for _, v, t in results if not t.startswith(NOT_LEARNED)]
    verdict = combine(judged) if judged else INCONCLUSIVE
    idle = [s for s, _, t in results if t.startswith(NOT_LEARNED)]
    line = count_line({s: v for s, v, _ in results}, idle)
    return verdict, line + ": " if line else ""


def count_line(seeds: dict[str, str], idle: list[str]) -> str:
    """"PASS on 2 of 4 seeds; not learned on 1 of 4 (seed 3: not judged)": each verdict's seeds
    among those that learned, then those that did not ("" over fewer than two seeds)."""
    n = len(seeds)
    if n < 2:
        return ""
    counts = [f"{v} on {k} of {n} seeds" for v in (PASS, FAIL, INCONCLUSIVE, DEPENDS)
              if (k := sum(w == v and s not in idle for s, w in seeds.items()))]
    if idle:
        counts.append(f"not learned on {len(idle)} of {n} (seed{'s' if len(idle) > 1 else ''} {', '.join(idle)}: not judged)")
    return "; ".join(counts)


def not_learned(c: Claim) -> list[str]:
    """The seeds a claim counted as not learned (its texts say so)."""
    texts = [r.measured for r in c.readings] or [c.measured]
    return [s for s in c.seeds if any(f"seed {s}: {NOT_LEARNED}" in t for t in texts)]


def over_seeds(section: str, cid: str, paper: str, results: list[tuple[str, str, str]]) -> Claim:
    """A claim measured one way, from ``(seed, verdict, text)`` per seed (:func:`learned_only`)."""
    verdict, count = learned_only(results)
    text = count + "; ".join(f"seed {s}: {t}" for s, _, t in results)
    return Claim(section, cid, paper, text, verdict, seeds={s: v for s, v, _ in results})


def verdict_of(ok: bool) -> str:
    return PASS if ok else FAIL


def not_run(section: str, cid: str, paper: str, stage: str) -> Claim:
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


def lead_text(c: Claim) -> str:
    """What a claim's verdict rests on: its robustness, and where the paper's words do not choose
    the primary reading, that the verdict is the robust one and what the primary gives."""
    if c.primary_fixed or not c.readings:
        return c.robustness
    primary = next(r for r in c.readings if r.primary)
    return (f"the paper's words choose no reading, so the robust verdict leads (primary {primary.reading}: "
            f"{primary.verdict}); {c.robustness}")


def coloured(text: str) -> str:
    """A verdict in rich markup, coloured as the tables colour it; other text as it is."""
    if text not in VERDICTS + (DEPENDS,):
        return text
    colour = {PASS: "green", FAIL: "red", INCONCLUSIVE: "yellow"}.get(text, "dim")
    return f"[{colour}]{text}[/{colour}]"


def claims_table(found: list[Claim], title: str = "the paper's claims"):
    """A rich table of claims: id, the verdict each leads with (coloured: the primary reading's,
    or the robust one where the paper's words do not choose), whether every reading agrees, and
    the measurement behind it."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for col in ("section", "id", "verdict", "readings", "this run"):
        t.add_column(col, overflow="fold")
    for c in found:
        t.add_row(c.section, c.id, coloured(c.verdict), escape(lead_text(c)), escape(c.measured))
    return t


def seed_rows(found: list[Claim]) -> list[dict]:
    """Per section whose claims were judged over several seeds, a table ``{"title", "columns",
    "rows"}`` (the report's shape): a row a seed, a column a claim, each cell the verdict the
    claim leads with on that seed alone (as ``seeds`` gives published results)."""
    out = []
    for section in dict.fromkeys(c.section for c in found):
        mine = [c for c in found if c.section == section and c.seeds]
        seeds = sorted({s for c in mine for s in c.seeds}, key=lambda s: int(s) if s.isdigit() else s)
        if len(seeds) < 2:
            continue
        rows = [[s, *(c.seeds.get(s, "-") for c in mine)] for s in seeds]
        rows.append([f"over {len(seeds)} seeds", *(c.verdict for c in mine)])
        out.append({"title": f"{section}: seed by seed", "columns": ["seed", *(c.id for c in mine)], "rows": rows})
    return out


def seeds_table(found: list[Claim]):
    """:func:`seed_rows` as rich tables (``claims DIR`` prints them under the claims)."""
    from rich.table import Table

    out = []
    for spec in seed_rows(found):
        t = Table(title=spec["title"])
        for col in spec["columns"]:
            t.add_column(col, no_wrap=True)
        for row in spec["rows"]:
            t.add_row(*(coloured(v) for v in row))
        out.append(t)
    return out


@dataclass(frozen=True)
class Section:
    """The claims of one section of the paper (or beyond it), checked on a ``reproduce`` folder.

    Args:
        title: the section as the report and the tables name it ("7 Implicit curriculum ...").
        order: where it sorts (the paper's section number).
        stage: the ``reproduce`` stage whose folder holds its files (errors name it).
        evaluate: ``(reproduce folder) -> [Claim]``, from the files alone (no training); every
            claim it can make appears, as NOT RUN when its stage has no results.
    """

    title: str
    order: float
    stage: str
    evaluate: Callable[[Path], list[Claim]]


# Built-in sections register themselves in this package's modules (sec4.py ... sec9.py).
SECTIONS: Registry[Section] = Registry("claims section", package="stackedheads.claims")
