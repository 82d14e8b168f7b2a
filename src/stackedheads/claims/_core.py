"""What every claim shares: the verdicts, a :class:`Claim`, combining verdicts, reading a
stage's files, and the :class:`Section` registry. (The chain-order statistic is a measurement:
:mod:`stackedheads.ordering`.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError
from stackedheads.registry import Registry
from stackedheads.storage import read_state_json

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


NUM = (int, float)  # a number in a shape (below)


@dataclass(frozen=True)
class Each:
    """In a shape: an object whose every value has ``shape`` (keys are seeds, positions...)."""

    shape: Any


def expect(data: Any, shape: Any, path: Path, stage_dir: Path | None = None) -> Any:
    """``data``, read from ``path``, if it has ``shape``; else one line saying the file is
    damaged and how to rebuild it. Claims check what they read where they read it, so that an
    error in a claim's own code stays a bug (a traceback), never advice to re-run.

    A shape is a type or a tuple of types (``type(None)`` for null), ``{key: shape}`` (keys
    ending in ``?`` may be absent), ``[shape]`` (a list of such items) or :class:`Each`."""

    def why(x: Any, sh: Any, where: str) -> str | None:
        if isinstance(sh, Each):
            if not isinstance(x, dict):
                return f"{where or 'the file'} is not an object"
            return next((w for k, v in x.items() if (w := why(v, sh.shape, f"{where}.{k}".lstrip(".")))), None)
        if isinstance(sh, dict):
            if not isinstance(x, dict):
                return f"{where or 'the file'} is not an object"
            for key, sub in sh.items():
                name = key.rstrip("?")
                if name not in x:
                    if key.endswith("?"):
                        continue
                    return f"{f'{where}.{name}'.lstrip('.')} is missing"
                if w := why(x[name], sub, f"{where}.{name}".lstrip(".")):
                    return w
            return None
        if isinstance(sh, list):
            if not isinstance(x, list):
                return f"{where or 'the file'} is not a list"
            return next((w for i, v in enumerate(x) if (w := why(v, sh[0], f"{where}[{i}]"))), None)
        types = sh if isinstance(sh, tuple) else (sh,)
        if isinstance(x, bool) and bool not in types and object not in types:  # JSON true is no number
            return f"{where} is not a number"
        return None if isinstance(x, sh) else f"{where or 'the file'} has the wrong type"

    problem = why(data, shape, "")
    if problem:
        stage = stage_dir if stage_dir is not None else path.parent
        raise UsageError(f"{path} has the wrong shape ({problem}): delete {stage / 'done.json'} and re-run to rebuild the stage")
    return data


def read_json(path: Path, shape: Any = object, stage_dir: Path | None = None) -> Any:
    """A stage's JSON file, or None when the stage has not written it; a damaged one (not
    JSON, or not of ``shape``: :func:`expect`) is a one-line error saying so."""
    if not path.exists():
        return None
    return expect(read_state_json(path, "a stage's results", object), shape, path, stage_dir)


def read_jsonl(path: Path, shape: Any = dict) -> list[dict]:
    """A stage's JSON-lines file ([] when absent), each line of ``shape``."""
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError):
        rows = None
    if rows is None or not all(isinstance(r, dict) for r in rows):
        raise UsageError(f"{path} is damaged (a line is not a JSON object): delete its stage's done.json and re-run to rebuild it")
    return expect(rows, [shape], path)


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
