"""``stackedheads --help`` lists the verbs in the pipeline's order, grouped in panels (reproduce;
the stages; judging; language models; the maintainers' verbs last), one unbroken line each at
80, 100 and 120 columns."""

from __future__ import annotations

import re

import pytest
import typer

from stackedheads.cli._app import OTHER_PANEL, VERB_PANELS, _PipelineGroup

PANEL_ORDER = ["Reproduce the paper", "The stages, in the pipeline's order", "Judging", "Language models (Sec. 4)",
               "Maintainers: the published references"]


def test_the_panels_are_the_pipelines_order():
    assert [panel for panel, _ in VERB_PANELS] == PANEL_ORDER
    verbs = [v for _, vs in VERB_PANELS for v, _ in vs]
    assert verbs[0] == "reproduce"
    stages = [v for v, _ in VERB_PANELS[1][1]]
    assert stages == ["prompts", "theory", "train", "sweep", "attention", "circuit", "emergence"]
    assert [v for v, _ in VERB_PANELS[-1][1]] == ["publish", "publish-piece", "results-index"]


def test_every_verb_has_a_panel_and_every_panel_verb_exists():
    from stackedheads.cli import app

    group = typer.main.get_command(app)
    placed = {v for _, vs in VERB_PANELS for v, _ in vs}
    assert not set(group.commands) - placed, f"verbs in no panel of cli/_app.py's VERB_PANELS: {sorted(set(group.commands) - placed)}"
    assert not placed - set(group.commands), f"VERB_PANELS names verbs that do not exist: {sorted(placed - set(group.commands))}"


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_help_lists_the_panels_in_order_one_line_a_verb(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    r = cli("--help")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert max(len(s) for s in lines) <= columns
    titles = [m.group(1) for s in lines if (m := re.match(r"^╭─ (.+?) ─", s))]
    assert titles == ["Options", *PANEL_ORDER]
    at = []
    for _, verbs in VERB_PANELS:
        for verb, line in verbs:
            found = [i for i, s in enumerate(lines) if re.match(rf"^│ {re.escape(verb)}\s{{2,}}", s)]
            assert len(found) == 1, f"`{verb}` is not on one line of --help at {columns} columns"
            assert line in lines[found[0]], f"`{verb}`'s help is broken across lines at {columns} columns"
            assert not re.match(r"^│ {3,}\S", lines[found[0] + 1]), f"`{verb}`'s help continues on the next line at {columns} columns"
            at.append(found[0])
    assert at == sorted(at), "the verbs are not listed in VERB_PANELS' order"


def test_a_verb_in_no_panel_comes_last_with_its_first_paragraph_on_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    app = typer.Typer(cls=_PipelineGroup, add_completion=False)

    @app.command("zz-new")
    def new() -> None:
        """A verb that no panel names,
        with a docstring over two lines.

        A second paragraph, not shown in the list."""

    @app.command("reproduce")
    def reproduce() -> None:
        """Not this text: the panel's line."""

    with pytest.raises(SystemExit):
        app(["--help"])
    out = capsys.readouterr().out
    titles = [m.group(1) for s in out.splitlines() if (m := re.match(r"^╭─ (.+?) ─", s))]
    assert titles == ["Options", "Reproduce the paper", OTHER_PANEL]
    assert "│ zz-new     A verb that no panel names, with a docstring over two lines." in out
    assert "second paragraph" not in out and "Not this text" not in out
