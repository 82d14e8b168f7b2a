"""``results-index``: the repository's reference results and their index (results/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stackedheads import references
from stackedheads.cli._app import app, console, out_path
from stackedheads.errors import UsageError


@app.command("results-index")
def results_index_cmd(
    results: Optional[Path] = typer.Option(None, "--results", parser=out_path, help="The results folder (default: the repository's results/)."),
) -> None:
    """Write results/README.md again from every reference.json under it (`publish` keeps it current)."""
    root = results or references.REPOSITORY_RESULTS
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder")
    console.print(f"{references.write_index(root)}: {len(references.reference_folders(root))} references")
