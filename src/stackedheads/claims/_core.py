"""What every claim shares: the verdicts, a :class:`Claim`, combining verdicts, the chain-order
statistic, reading a stage's files, and the :class:`Section` registry."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.registry import Registry
from stackedheads.storage import read_state_json

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "PASS", "FAIL", "INCONCLUSIVE", "NOT RUN"
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NOT_RUN)


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
    return read_state_json(path, "a stage's results", object) if path.exists() else None


def read_jsonl(path: Path) -> list[dict]:
    """A stage's JSON-lines file ([] when absent)."""
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError):
        rows = None
    if rows is None or not all(isinstance(r, dict) for r in rows):
        raise UsageError(f"{path} is damaged (a line is not a JSON object): delete its stage's done.json and re-run to rebuild it")
    return rows


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


def from_files(stage_dir: Path, claims_of) -> list[Claim]:
    """A stage's claims; a file of the wrong shape (valid JSON that lacks what the claims read)
    is one line naming the stage, not a traceback."""
    try:
        return claims_of()
    except UsageError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(
            f"{stage_dir}: a file has the wrong shape ({type(e).__name__}: {str(e)[:80]}); "
            f"delete {stage_dir / 'done.json'} and re-run to rebuild the stage"
        ) from None



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
