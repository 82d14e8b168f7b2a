"""``stackedheads seeds`` on a terminal of 80 to 120 columns: no number broken across lines, no
line wider than the terminal; a table too wide turns its seeds into columns or is cut into parts
that repeat the first column, and a last line says that ``--markdown`` and ``--json`` print it
whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stackedheads.recipe_screen.render import LIST_CAP, _is_list, _need, _title_parts, _units, _wrapped, fit_tables, text_lines

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"\S*\d\S*")
TABLE_LINE = re.compile(r"^[│┃]")


def cells(head: list[str], rows: list[list[str]]) -> list[str]:
    return [*head, *(c for r in rows for c in r)]


def whole_numbers(console_out: str) -> set[str]:
    """Every word holding a digit in the console's table lines, with the box's characters and a
    trailing comma dropped."""
    words = set()
    for line in console_out.splitlines():
        if TABLE_LINE.match(line):
            for part in re.split(r"[│┃]", line):
                words |= {w.rstrip(",") for w in NUMBER.findall(part)}
    return words


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("folders", [["results/sec9/gpt2"], ["results/sec9/tl-stack+lr-3e-4", "results/sec9/gpt2"],
                                     ["results/sec8/gpt2"]], ids=["sec9-gpt2", "two-recipes", "sec8-gpt2"])
def test_no_number_is_broken_at_any_width(cli, monkeypatch, columns, folders):
    from stackedheads import recipe_screen

    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.chdir(ROOT)
    r = cli("seeds", *folders)
    assert r.code == 0, r.err
    assert max(len(s) for s in r.out.splitlines()) <= columns
    runs = recipe_screen.collect_seeds([ROOT / f for f in folders], [])
    tables = [recipe_screen.seed_table(run) for run in runs]
    head, rows = recipe_screen.distance_table(runs)
    if rows:
        tables.append((head, rows))
    if state := recipe_screen.screen(runs):
        tables.append(recipe_screen.screen_table(state))
    want = {w.rstrip(",") for h, rs in tables for c in cells(h, rs) for w in NUMBER.findall(str(c))}
    shown = whole_numbers(r.out)
    assert not want - shown, f"numbers not shown whole at {columns} columns: {sorted(want - shown)[:10]}"
    assert not shown - want, f"pieces of numbers at {columns} columns: {sorted(shown - want)[:10]}"
    if columns < 120 or len(folders) > 1:
        assert "--markdown or --json prints each whole" in r.out.splitlines()[-1]


def test_a_wide_per_seed_table_turns_its_seeds_into_columns(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT)
    r = cli("seeds", "results/sec9/gpt2")
    header = next(s for s in r.out.splitlines() if s.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["measure", "seed 0", "seed 1", "seed 2", "seed 3"]
    assert any(re.match(r"^│ final val MSE\s+│ 0\.0024\s+│", s) for s in r.out.splitlines())


def test_fit_tables_cuts_a_table_and_repeats_its_first_column():
    from rich.console import Console

    head = ["run", *(f"measure {i}" for i in range(8))]
    rows = [["a-long-run-name", *(f"{1234567.0 + i:,.4f}" for i in range(8))], ["b", *("-" for _ in range(8))]]
    tables = fit_tables("t", head, rows, 60)
    assert len(tables) > 1
    seen = []
    for t in tables:
        names = [c.header for c in t.columns]
        assert names[0] == "run" and t.title.endswith(f"of {len(tables)})")
        seen += names[1:]
        for c in t.columns:
            assert c.width >= max(_need(x) for x in [c.header, *c._cells])
        console = Console(width=60, record=True, file=open("/dev/null", "w"))
        console.print(t)
        assert max(len(s) for s in console.export_text().splitlines()) <= 60
    assert seen == head[1:]
    one = fit_tables("t", head[:3], [r[:3] for r in rows], 120)
    assert len(one) == 1 and one[0].title == "t"


def test_the_narrowest_cell_keeps_numbers_whole():
    assert _need("400 800 1,040") == 13  # a list of numbers stays on one line
    assert _need("1,040 1,120 1,360 1,600 1,840 2,000") == 5  # one wider than LIST_CAP wraps between numbers
    assert _need("L2.0 s7->t-1,") == 8
    assert _need("an-extraordinarily-long-word 7") == 14  # a word without a digit may fold


FOLDERS = [["results/sec9/gpt2"], ["results/sec9/tl-stack+lr-3e-4", "results/sec9/gpt2"], ["results/sec8/gpt2"]]


def console_tables(folders: list[str]):
    from stackedheads import recipe_screen

    runs = recipe_screen.collect_seeds([ROOT / f for f in folders], [])
    tables = [recipe_screen.seed_table(run) for run in runs]
    head, rows = recipe_screen.distance_table(runs)
    if rows:
        tables.append((head, rows))
    if state := recipe_screen.screen(runs):
        tables.append(recipe_screen.screen_table(state))
    return runs, tables


def cell_lines(console_out: str) -> list[str]:
    """Each table line's cells, one string each, their spaces collapsed."""
    return [" ".join(part.split()) for line in console_out.splitlines() if TABLE_LINE.match(line)
            for part in re.split(r"[│┃]", line)]


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("folders", FOLDERS, ids=["sec9-gpt2", "two-recipes", "sec8-gpt2"])
def test_a_list_of_numbers_a_recipe_setting_and_a_line_s_numbers_stay_whole(cli, monkeypatch, columns, folders):
    """At 80-120 columns, each list of numbers in a cell (a step per position, "10 of 24", the
    passing counts) is on one line of its cell; each "name value" of a run's recipe on one line of
    its title; each word of the lines under a table whole on one line."""
    from stackedheads.recipe_screen.render import distribution_lines
    from stackedheads.recipe_screen.rows import recipe_text

    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.chdir(ROOT)
    r = cli("seeds", *folders)
    assert r.code == 0, r.err
    runs, tables = console_tables(folders)
    shown = [f" {c} " for c in cell_lines(r.out)]
    lists = {u for h, rs in tables for c in cells(h, rs) for u in _units(c) if _is_list(u) and len(u) <= LIST_CAP}
    assert len(lists) >= 3, "the tables hold no list of numbers: the test would prove nothing"
    broken = sorted(u for u in lists if not any(f" {u} " in c for c in shown))
    assert not broken, f"lists of numbers broken across lines at {columns} columns: {broken[:5]}"
    lines = r.out.splitlines()
    for run in runs:
        parts = _title_parts(recipe_text(run.recipe))
        split = [p for p in parts if not any(p in line for line in lines)]
        assert not split, f"recipe settings split across the title's lines at {columns} columns: {split}"
    text = {w for line in lines if not TABLE_LINE.match(line) for w in line.split()}
    words = {w for run in runs for line in distribution_lines(run) for w in line.split() if any(c.isdigit() for c in w)}
    assert not words - text, f"words of the lines under a table broken at {columns} columns: {sorted(words - text)[:5]}"


def test_the_check_finds_a_list_broken_across_lines():
    """The cells as the test above reads them: a list wrapped between its numbers is not found whole."""
    out = "│ seed 1 │ 320 800 880   │\n│        │ 1,360         │\n"
    shown = [f" {c} " for c in cell_lines(out)]
    assert not any(" 320 800 880 1,360 " in c for c in shown)
    assert any(" 320 800 880 " in c for c in shown)


def test_cells_wrap_between_lists_of_numbers_and_words():
    assert _units("524 708 875 1,318 (in order)") == ["524 708 875 1,318", "(in", "order)"]
    assert _units("3, 1, 0, 4 of 4") == ["3, 1, 0, 4 of 4"]
    assert _units("455 754 976 - (inconclusive)") == ["455 754 976 -", "(inconclusive)"]
    assert _units("L2.0 s2->s1, L2.0 s7->t-1") == ["L2.0", "s2->s1,", "L2.0", "s7->t-1"]
    assert _units("x1 below 0.8 (epoch)") == ["x1", "below", "0.8", "(epoch)"]
    assert _wrapped("524 708 875 1,318 (in order)", 18) == "524 708 875 1,318\n(in order)"
    assert _wrapped("1,040 1,120 1,360 1,600 1,840 2,000 2,160", 12) == "1,040 1,120\n1,360 1,600\n1,840 2,000\n2,160"
    assert _title_parts("gpt2: sec9, lr 0.001, decay_exempt ['norm', 'bias'], pe token") == [
        "gpt2: sec9,", "lr 0.001,", "decay_exempt ['norm', 'bias'],", "pe token"]
    assert text_lines("range 0.0020-0.0059 and -0.0008 to -0.0001", 24) == ["  range 0.0020-0.0059", "    and -0.0008 to", "    -0.0001"]
