"""``publish-piece`` and ``results-index``: the repository's reference results, published a piece at a time, and their index."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stackedheads.publishing import index, references
from stackedheads.cli._app import app, console, out_path, shown
from stackedheads.errors import UsageError


@app.command("results-index")
def results_index_cmd(
    results: Optional[Path] = typer.Option(None, "--results", parser=out_path, help="The results folder (default: the repository's results/)."),
) -> None:
    """Write results/README.md again from every reference.json under it (`publish` keeps it current)."""
    root = results or references.REPOSITORY_RESULTS
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder")
    console.print(f"{shown(index.write_index(root))}: {len(references.reference_folders(root))} references")


@app.command("publish-piece")
def publish_piece_cmd(
    name: str = typer.Argument(..., help="The result's folder under the results folder: sec9/RECIPE (transformer D) or sec8/RECIPE (transformers A-C)."),
    run: Path = typer.Argument(..., help="A finished `train` run holding the piece's seeds."),
    stage: Optional[str] = typer.Option(None, "--stage", help="emergence (transformer D, Sec. 9) or circuits (transformers A-C, Sec. 8); default: NAME's section's."),
    circuits: list[Path] = typer.Option([], "--circuits", help="A folder of seed*/ written by `circuit discover` (repeatable: each seed's from the first that holds it)."),
    timeline: list[Path] = typer.Option([], "--timeline", help="A folder of seed*/ written by `emergence` (repeatable; Sec. 9 only)."),
    maps: list[Path] = typer.Option([], "--maps", help="A folder of seed*/ written by `attention` (repeatable; Sec. 8 only)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="The commit RUN's code came from (default: this checkout's HEAD)."),
    note: str = typer.Option("", "--note", help="A further piece: how it ran (machine, sittings), added to its sentence in the notes; the seeds, losses and commit are written from RUN and --commit."),
    title: Optional[str] = typer.Option(None, "--title", help="The reference's title: needed by the first piece; a further piece keeps it unless given."),
    train_command: Optional[str] = typer.Option(None, "--train-command", help="The first piece: its train command without --seeds and --out."),
    notes: Optional[str] = typer.Option(None, "--notes", help="The first piece: the reference's notes."),
    results: Optional[Path] = typer.Option(None, "--results", parser=out_path, help="The results folder (default: the repository's results/)."),
) -> None:
    """Publish one piece of a result trained a few seeds at a time into RESULTS/NAME, beside the pieces there.

    The reference is written from what NAME holds plus RUN: publishing a piece again writes the same reference."""
    from stackedheads.publishing.piece import Piece, publish_piece

    dest, ref = publish_piece(Piece(name, run, stage, tuple(circuits), tuple(timeline), tuple(maps), commit, note, title,
                                    train_command, notes, results))
    console.print(f"{shown(dest)}: {len(ref.files)} files kept; pieces' training {ref.wall_s:.0f} s")
