"""What every claim shares: the verdicts, a :class:`Claim`, combining verdicts, reading a
stage's files, and the :class:`Section` registry. (The chain-order statistic is a measurement:
:mod:`stackedheads.ordering`.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads.registry import Registry
from stackedheads.stages import NUM, Each, expect, read_json, read_jsonl  # noqa: F401 (what claims read files with)

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "PASS", "FAIL", "INCONCLUSIVE", "NOT RUN"
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NOT_RUN)
# A claim whose readings (:mod:`.readings`) disagree: never counted as a pass.
DEPENDS = "DEPENDS ON READING"


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
    verdict: str  # the primary reading's verdict
    readings: tuple[Judged, ...] = ()  # every reading the paper's words allow (empty: one way to measure it)

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
        return {**asdict(self), "readings": [asdict(r) for r in self.readings],
                "robust_verdict": self.robust_verdict, "robustness": self.robustness}

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        """A claim as :meth:`to_dict` wrote it (a claims.json written before readings has none)."""
        return cls(d["section"], d["id"], d["paper"], d["measured"], d["verdict"],
                   tuple(Judged(**r) for r in d.get("readings", ())))


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


def claims_table(found: list[Claim], title: str = "the paper's claims"):
    """A rich table of claims: id, the primary reading's verdict (coloured), whether every
    reading agrees, and the measurement behind it."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for col in ("section", "id", "verdict", "readings", "this run"):
        t.add_column(col, overflow="fold")
    for c in found:
        colour = {PASS: "green", FAIL: "red", INCONCLUSIVE: "yellow"}.get(c.verdict, "dim")
        t.add_row(c.section, c.id, f"[{colour}]{c.verdict}[/{colour}]", escape(c.robustness), escape(c.measured))
    return t


def readings_table(found: list[Claim], only: list[str] | None = None):
    """Per claim with readings, a rich table of its readings x seeds (``only``: these readings)."""
    from rich.table import Table

    out = []
    for c in found:
        rows = [r for r in c.readings if not only or r.reading in only]
        if not rows:
            continue
        seeds = sorted({s for r in rows for s in r.seeds}, key=lambda s: int(s) if s.isdigit() else s)
        t = Table(title=f"{c.id}: {c.robust_verdict} ({c.robustness})")
        for col in ("reading", "primary", "verdict", *(f"seed {s}" for s in seeds)):
            t.add_column(col, no_wrap=col == "reading")
        for r in rows:
            t.add_row(r.reading, "yes" if r.primary else "", r.verdict, *(r.seeds.get(s, "-") for s in seeds))
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
