"""The maintainers' verbs, ``--help``'s last panel: ``publish``, ``publish-piece`` and
``results-index`` keep the repository's reference results (``results/``) and their index."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stackedheads.cli._app import app, console, out_path, shown
from stackedheads.errors import UsageError
from stackedheads.publishing import references
from stackedheads.state.provenance import git_commit


@app.command("publish")
def publish_cmd(
    run_dir: Path = typer.Argument(..., help="A finished run, sweep or depth folder."),
    name: str = typer.Option(..., "--name", help="The folder to write under results/; one published before under this name is replaced as a whole."),
    title: str = typer.Option(..., "--title", help="One line for the report."),
    command: str = typer.Option(..., "--command", help="The command that made the run, as typed."),
    wall_s: Optional[float] = typer.Option(None, "--wall-s", help="The run's wall time in seconds."),
    commit: Optional[str] = typer.Option(None, "--commit", help="The commit the run's code came from (default: HEAD)."),
    notes: str = typer.Option("", "--notes", help="What was cut or differs from the paper's settings."),
    include: list[str] = typer.Option([], "--include", help="Extra files to keep, as globs inside RUN_DIR (repeatable; each must match a file; symbolic links are refused)."),
    results: Optional[Path] = typer.Option(None, "--results", parser=out_path, help="The results folder (default: the repository's results/)."),
) -> None:
    """Keep a run's small files (configs, metrics, summaries, claims, figures; never checkpoints) in results/NAME with how it was made.

    Refuses, before writing anything, a file that git would ignore in results/ (a clone would lack it), an
    unfinished or locked run, and a copy whose claims would read otherwise than the run's."""
    from stackedheads.publishing.publish import destination, publish

    root = results or references.REPOSITORY_RESULTS
    dest = destination(root, name)
    ref = publish(run_dir, dest, title=title, command=command,
                  commit=git_commit() if commit is None else commit,  # an empty --commit is refused, not HEAD
                  wall_s=wall_s, notes=notes, include=tuple(include), name=name)
    console.print(f"{shown(dest)}: {len(ref.files)} files kept")


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


@app.command("results-index")
def results_index_cmd(
    results: Optional[Path] = typer.Option(None, "--results", parser=out_path, help="The results folder (default: the repository's results/)."),
) -> None:
    """Write results/README.md again from every reference.json under it (`publish` keeps it current)."""
    from stackedheads.publishing.index import write_index

    root = results or references.REPOSITORY_RESULTS
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder")
    console.print(f"{shown(write_index(root))}: {len(references.reference_folders(root))} references")
