"""docs/results.md says what the tracked results hold: a per-seed table's verdicts are the
claims' (``seeds.md``: the verdict each claim leads with; a reading named in a column's header,
"E3 (first-path; hurt-most)", from ``claims.json``), the screen's table is what
``stackedheads seeds results/sec9/* --markdown`` prints, and "Distance D" in a recipe's section
is that recipe's median distance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stackedheads import claims
from stackedheads import recipe_screen
from stackedheads.claims import DEPENDS, FAIL, INCONCLUSIVE, PASS, published
from stackedheads.claims.readings import READINGS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
RESULTS = ROOT / "results"
VERDICT = re.compile(r"\b(DEPENDS ON READING|PASS|FAIL|INCONCLUSIVE|NOT RUN)\b")
CLAIM_COLUMN = re.compile(r"^([AE]\d)(?: \(([a-z-]+(?:; [a-z-]+)*)\))?$")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(heading, the lines up to the next heading) for each heading of the page."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def folder(heading: str) -> str | None:
    """The one result a section is about: the single ``results/<section>/<name>/`` its heading names."""
    named = re.findall(r"`results/((?:sec\d|depth)/[\w.+-]+)/`", heading)
    return named[0] if len(named) == 1 else None


def tables(lines: list[str]) -> list[list[list[str]]]:
    """Each markdown table of ``lines`` as rows of cells, the separator row left out."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def outside_parentheses(cell: str) -> str:
    depth, kept = 0, []
    for ch in cell:
        depth += ch == "("
        if depth == 0:
            kept.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(kept)


def primary_verdicts(name: str) -> dict[tuple[str, str], str]:
    """(seed, claim) -> verdict from the result's seeds.md (the verdict each claim leads with:
    its primary reading's, or its robust one where the paper's words choose no reading)."""
    (table, *_) = [t for t in tables((RESULTS / name / "seeds.md").read_text().splitlines()) if t[0][0] == "seed"]
    head = table[0]
    return {(row[0], h): v for row in table[1:] for h, v in zip(head, row) if re.fullmatch(r"[AE]\d", h)}


def reading_verdicts(name: str) -> dict[tuple[str, str, str], str]:
    """(seed, claim, reading) -> verdict from the result's claims.json."""
    return {(seed, c["id"], r["reading"]): v for c in json.loads((RESULTS / name / "claims.json").read_text())
            for r in c["readings"] for seed, v in (r.get("seeds") or {}).items()}


def claim_verdicts(name: str) -> dict[str, str]:
    """claim -> the verdict over the result's seeds (its primary reading), from claims.json."""
    return {c["id"]: c["verdict"] for c in json.loads((RESULTS / name / "claims.json").read_text())}


def verdict_tables():
    for heading, lines in sections(PAGE.read_text()):
        name = folder(heading)
        for table in tables(lines):
            columns = {i: h for i, h in enumerate(table[0]) if re.match(r"[AE]\d(?: \(|$)", h)}
            if columns:
                yield heading, name, table, columns


def test_the_page_has_per_seed_verdict_tables_of_both_sections():
    named = {name for _, name, _, _ in verdict_tables()}
    assert {"sec8/gpt2", "sec8/tl-stack+lr-3e-4", "sec9/gpt2", "sec9/tl-stack", "sec9/lr-3e-4"} <= named, named


def row_source(name: str, first: str) -> tuple[str, str | None]:
    """Which result and seed a row's first cell names: "2" (the section's result, seed 2),
    "over the three seeds" (the section's result, all its seeds: None), "`tl-stack`, seed 0"
    (that recipe of the same section, seed 0)."""
    if first.isdigit():
        return name, first
    if first.startswith("over the"):
        return name, None
    other = re.fullmatch(r"`([\w.+-]+)`, seed (\d+)", first)
    assert other, f"{name}: a verdict row {first!r} names no seed, no 'over the ... seeds' and no `recipe`, seed S"
    return f"{name.split('/')[0]}/{other.group(1)}", other.group(2)


@pytest.mark.parametrize("heading, name, table, columns", list(verdict_tables()),
                         ids=lambda v: v if isinstance(v, str) and v.startswith(("sec", "#")) else "")
def test_a_per_seed_table_gives_the_verdicts_the_claims_give(heading, name, table, columns):
    """Verdict words outside parentheses are checked; words inside them are the cell's evidence."""
    assert name is not None, f"{heading}: a verdict table under a heading naming no one result"
    assert table[0][0] == "seed", f"{heading}: a verdict table's first column is the seed"
    checked = 0
    for row in table[1:]:
        if not VERDICT.search(" ".join(outside_parentheses(c) for c in row[1:])):
            continue  # the paper's row
        source, seed = row_source(name, row[0])
        primary, readings, combined = primary_verdicts(source), reading_verdicts(source), claim_verdicts(source)
        for i, header in columns.items():
            m = CLAIM_COLUMN.match(header)
            assert m, f"{name}: column {header!r}: a claim, then the readings it shows in parentheses, as `claims --readings` names them"
            claim, named = m.group(1), (m.group(2) or "").split("; ")
            if m.group(2):
                assert named[0] == READINGS[claim].primary, f"{name}: {header!r} names {named[0]} first, not the primary {READINGS[claim].primary}"
            said = VERDICT.findall(outside_parentheses(row[i]))
            if seed is None:  # the result over its seeds: the primary reading's verdict
                assert said[:1] == [combined[claim]], f"{name} over its seeds {claim}: the page says {said}, the claims {combined[claim]}"
                checked += 1
                continue
            assert len(said) == len(named), f"{source} seed {seed} {table[0][i]}: {row[i]!r}"
            for reading, verdict in zip(named, said):
                want = readings.get((seed, claim, reading)) if reading else primary[(seed, claim)]
                assert verdict == want, f"{source} seed {seed} {claim} ({reading or 'primary'}): the page says {verdict}, the claims {want}"
                checked += 1
    assert checked, f"{heading}: no seed row"


def screen_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| run | seeds | final val MSE | x1 below 0.8"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return lines[start:end]


@pytest.fixture(scope="module")
def screen():
    return recipe_screen.collect_seeds(sorted(p for p in (RESULTS / "sec9").iterdir() if p.is_dir()))


def test_the_screen_table_is_what_seeds_prints(screen):
    assert screen_table(PAGE.read_text()) == screen_table(recipe_screen.markdown(screen))


def test_a_recipe_sections_distance_is_its_median_distance(screen):
    distance = {f"sec9/{r.label}": r.summary()["distance"]["value"] for r in screen}
    checked = 0
    for heading, lines in sections(PAGE.read_text()):
        name = folder(heading)
        if name not in distance:
            continue
        for said in re.findall(r"\bDistance (?:at least )?(\d+\.\d\d)\b", " ".join(lines)):
            assert said == f"{distance[name]:.2f}", f"{heading}: Distance {said}, `seeds` {distance[name]:.2f}"
            checked += 1
    assert checked >= 5


# --- the tables written from the claims (`stackedheads results-index`), and what they rest on ---


def test_the_readme_and_results_page_tables_are_the_ones_the_claims_give():
    for page, e3 in ((ROOT / "README.md", False), (ROOT / "docs" / "results.md", True)):
        text = page.read_text(encoding="utf-8")
        assert published.START in text and published.END in text, page
        said = published.START + text.split(published.START, 1)[1].split(published.END, 1)[0] + published.END
        assert said == published.block(RESULTS, e3), f"{page} is stale: run `stackedheads results-index`"


def test_results_index_writes_the_blocks_beside_its_results_folder(tmp_path, cli):
    import shutil

    shutil.copytree(RESULTS / "sec8", tmp_path / "results" / "sec8")
    shutil.copytree(RESULTS / "sec9" / "gpt2", tmp_path / "results" / "sec9" / "gpt2")
    (tmp_path / "README.md").write_text(f"# x\n\n{published.START}\nold\n{published.END}\n\nafter\n")
    code, _, err = cli("results-index", "--results", tmp_path / "results")
    assert code == 0, err
    text = (tmp_path / "README.md").read_text()
    assert "old" not in text and text.endswith("\n\nafter\n")
    assert "| Sec. 8 | A2 " in text and "`tl-stack`: FAIL" in text, text


def test_sec8_tl_stack_counts_the_heads_whose_ablation_breaks_the_budget():
    """App. E: removing L4.0's, L3.0's or L1.0's path breaks the budget (0.240, 0.108, 0.052):
    they count, whatever share of their row's attention their rule catches."""
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "tl-stack")}
    for cid in ("A2", "A5"):
        assert all(h in got[cid].measured for h in ("L1.0", "L3.0", "L4.0")), got[cid].measured
    assert got["A2"].verdict == FAIL and got["A2"].measured.startswith("seed 0: 6 of 12 heads useful")
    assert got["A5"].verdict == PASS and "L7.0" not in got["A2"].measured


def test_a5_is_undecided_while_circuits_fail_their_combined_ablation():
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "tl-stack+lr-3e-4")}
    assert got["A5"].verdict == INCONCLUSIVE and got["A5"].seeds == {"0": INCONCLUSIVE, "1": PASS, "2": INCONCLUSIVE}
    assert "PASS on 1 of 3 seeds; INCONCLUSIVE on 2 of 3 seeds" in got["A5"].measured


def test_a_claim_leads_with_the_robust_verdict_where_the_papers_words_do_not_choose():
    assert [cid for cid, spec in READINGS.items() if not spec.fixed] == ["E3"]
    for folder in sorted(RESULTS.glob("sec9/*/claims.json")):
        for c in json.loads(folder.read_text()):
            if c["id"] == "E3" and c["readings"]:
                assert c["headline"] == c["verdict"] == c["robust_verdict"] and not c["primary_fixed"], folder
                assert sum(r["primary"] for r in c["readings"]) == 1
            elif c["readings"]:
                assert c["verdict"] == c["primary_verdict"], (folder, c["id"])


def test_claims_prints_the_seed_by_seed_table_for_several_seeds(cli):
    code, out, err = cli("claims", RESULTS / "sec8" / "tl-stack+lr-3e-4")
    assert code == 0, err
    table = out[out.index("seed by seed"):]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["0", "1", "2", "over 3 seeds"]
    assert rows[1].split("│")[2:7] and all(v.strip() in (PASS, FAIL, INCONCLUSIVE, DEPENDS) for v in rows[1].split("│")[2:7])
    code, out, _ = cli("claims", RESULTS / "sec8" / "tl-stack")
    assert "seed by seed" not in out  # one seed: the claims table says it all


def test_seed_rows_give_each_claims_own_verdict_per_seed():
    found = claims.folder_claims(RESULTS / "sec9" / "tl-stack")
    (table,) = claims.seed_rows(found)
    assert table["columns"] == ["seed", "E1", "E2", "E3", "E4"]
    by = {c.id: c for c in found}
    for row in table["rows"][:-1]:
        assert row[1:] == [by[cid].seeds[row[0]] for cid in table["columns"][1:]]
    assert table["rows"][-1] == ["over 4 seeds", *(by[cid].verdict for cid in table["columns"][1:])]


def test_an_unlearned_seed_is_counted_not_judged():
    """results/sec8/gpt2 seed 2 never left the plateau: counted as such in every circuit claim's
    text, its INCONCLUSIVE not judged against the seeds that learned."""
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "gpt2")}
    for cid in ("A2", "A3", "A4", "A5"):
        assert "not learned on 1 of 3 (seed 2: not judged)" in got[cid].measured, got[cid].measured
    assert "seed 2" not in claims.published.count_text(got["A1"])  # A1 judges the loss itself
