"""The published verdicts as Markdown: every table of verdicts and counts that the README and
docs/results.md show is written from the results' claims.json files (each re-judged by the
code, test_readings holds them current), never typed by hand. ``stackedheads results-index``
writes the blocks between :data:`START` and :data:`END` in those pages; a test compares them."""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import (
    DEPENDS,
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    PASS,
    Claim,
    count_line,
    not_learned,
)
from stackedheads.claims.readings import READINGS
from stackedheads.state.write import atomic_write_text, read_state_json

START = "<!-- verdicts: written by `stackedheads results-index` from results/*/claims.json; do not edit by hand -->"
END = "<!-- end of the verdicts written by `stackedheads results-index` -->"
# The results at the paper's own settings (the presets' recipe and the two the screen named); the
# other Section 9 recipes are counted together.
PAPER_RECIPES = ("gpt2", "tl-stack", "tl-stack+lr-3e-4")
ORDER = (PASS, FAIL, INCONCLUSIVE, DEPENDS)
WHERE = {"sec8": "[`results/sec8/*`]({page}#sec-8-transformers-a-c)", "sec9": "[`results/sec9/*`]({page}#the-recipe-screen)"}


def published(root: Path, group: str) -> dict[str, list[Claim]]:
    """Each result of ``results/<group>/`` by name: its claims as claims.json holds them."""
    out = {}
    for folder in sorted(p for p in (Path(root) / group).iterdir() if (p / "claims.json").exists()):
        out[folder.name] = [Claim.from_dict(d) for d in read_state_json(folder / "claims.json", "published claims", list)]
    return out


def count_text(c: Claim) -> str:
    """A claim's verdict and, over several seeds, its "k of n" (:func:`~._core.count_line`)."""
    line = count_line(c.seeds, not_learned(c))
    return f"{c.verdict} ({line})" if line else c.verdict


def claim_row(group: str, cid: str, results: dict[str, list[Claim]], page: str) -> str:
    """One table row: the claim, each paper-settings result's verdict with its count, the other
    recipes' verdicts counted, and each result's robustness."""
    mine = {name: next(c for c in cs if c.id == cid) for name, cs in results.items()}
    mine = {n: c for n, c in mine.items() if c.verdict != NOT_RUN}
    shown = [n for n in PAPER_RECIPES if n in mine]
    cells = [f"`{n}`: {count_text(mine[n])}" for n in shown]
    rest = [c.verdict for n, c in mine.items() if n not in shown]
    if rest:
        cells.append(f"the other {len(rest)} recipes: " + ", ".join(f"{v} {k}" for v in ORDER if (k := rest.count(v))))
    robust = "; ".join(f"`{n}` {mine[n].robustness}" for n in shown)
    if mine and not next(iter(mine.values())).primary_fixed:
        robust = "the paper's words choose no reading: the robust verdict leads; " + robust
    paper = next(iter(mine.values())).paper if mine else ""
    return f"| Sec. {group[3:]} | {cid} {paper} | {'; '.join(cells)} | {robust} | {WHERE[group].format(page=page)} |"


def verdicts_table(root: Path, page: str = "docs/results.md") -> list[str]:
    """The Sections 8-9 claims over the published results, a row a claim (``page``: where the
    evidence links point, "" within docs/results.md)."""
    lines = ["| paper | claim | verdict (k of n seeds) | readings | evidence |", "| --- | --- | --- | --- | --- |"]
    for group, ids in (("sec8", ("A1", "A2", "A3", "A4", "A5")), ("sec9", ("E1", "E2", "E3", "E4"))):
        results = published(root, group)
        lines += [claim_row(group, cid, results, page) for cid in ids]
    return lines


def e3_counts(root: Path) -> list[str]:
    """E3 under each reading over every published Section 9 seed that learned: how many seeds
    each verdict, and how many never learned (not judged)."""
    counts = {r.name: dict.fromkeys(ORDER[:3], 0) for r in READINGS["E3"].readings}
    idle = learned = 0
    for claims in published(root, "sec9").values():
        e3 = next(c for c in claims if c.id == "E3")
        for s in e3.seeds:
            if s in not_learned(e3):
                idle += 1
                continue
            learned += 1
            for r in e3.readings:
                counts[r.reading][r.seeds[s]] += 1
    lines = [f"| E3 reading | {' | '.join(ORDER[:3])} |", "| --- |" + " --- |" * 3]
    lines += [f"| {name}{' (primary)' if name == READINGS['E3'].primary else ''} | "
              + " | ".join(str(n[v]) for v in ORDER[:3]) + " |" for name, n in counts.items()]
    return lines + ["", f"Over {learned} seeds that learned, of {learned + idle} published (Section 9's results); "
                        f"{idle} never learned and are not judged."]


def block(root: Path, e3: bool = False) -> str:
    """The Markdown written between :data:`START` and :data:`END`: in the README the table, in
    docs/results.md (``e3``) the table and E3's readings counted."""
    lines = [START, "", *verdicts_table(root, "" if e3 else "docs/results.md")]
    if e3:
        lines += ["", *e3_counts(root)]
    return "\n".join([*lines, "", END])


def write_blocks(root: Path) -> list[Path]:
    """Rewrite the block in the repository's README.md and docs/results.md beside ``root``
    (pages without the markers are left alone); the pages written."""
    written = []
    for page, e3 in ((Path(root).parent / "README.md", False), (Path(root).parent / "docs" / "results.md", True)):
        if not page.exists() or START not in (text := page.read_text(encoding="utf-8")):
            continue
        head, rest = text.split(START, 1)
        if END not in rest:
            continue
        new = head + block(root, e3) + rest.split(END, 1)[1]
        if new != text:
            atomic_write_text(page, new)
            written.append(page)
    return written
