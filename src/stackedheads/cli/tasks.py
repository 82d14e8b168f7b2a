"""``prompts`` and ``theory``: the questions (Sec. 4, App. A) and the minimum layers (Sec. 5, App. B)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from stackedheads.cli._app import (
    out_path,
    app,
    console,
    shown,
)
from stackedheads.errors import UsageError
from stackedheads.tasks.formulations import FORMULATIONS

# Formulation names for --help, from the registry (a new formulation module shows up here).
_NAMES = ", ".join(FORMULATIONS)
_FIXED = ", ".join(name for name, f in FORMULATIONS.items() if not f.variable_depth)


@app.command("prompts")
def prompts_cmd(
    formulation: str = typer.Option(..., "--formulation", "-f", help=f"One of: {_NAMES}."),
    depth: Optional[int] = typer.Option(None, "--depth", "-d", help=f"Retrieval steps D (default: the formulation's; fixed for {_FIXED})."),
    chains: int = typer.Option(4, "--chains", "-c", help="Interleaved chains N."),
    n: int = typer.Option(1, "--n", help="Number of questions (at most 100000 per call; use several --seed for more)."),
    seed: int = typer.Option(0, "--seed", help="Seed; question i is a pure function of (arguments, seed, i)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=out_path, help="Write JSON lines here instead of stdout."),
    export: Optional[Path] = typer.Option(
        None, "--export", parser=out_path, help="Also write a dataset and task files for lm-evaluation-harness and inspect_ai here."
    ),
) -> None:
    """Generate retrieval questions (Section 4, Appendix A) as JSON lines."""
    from stackedheads.tasks import prompts

    if not 1 <= n <= prompts.MAX_QUESTIONS:
        raise UsageError(f"--n must be between 1 and {prompts.MAX_QUESTIONS}, got {n}")
    if export is not None:
        from stackedheads.state.write import RunFolder

        RunFolder(export, "prompts export").check()  # not into another output's folder
    questions = prompts.generate_many(formulation, depth=depth, chains=chains, n=n, seed=seed)
    if export is not None:
        from stackedheads.llm.export import export_questions

        from stackedheads.state.write import RunFolder

        with RunFolder(export, "prompts export").lock("prompts --export"):  # no other process writes it meanwhile
            written = export_questions(questions, export)
        for path in written:
            console.print(f"wrote {shown(path)}")
    lines = "".join(json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions)
    if out is None:
        sys.stdout.write(lines)
    else:
        from stackedheads.state.write import atomic_write_text

        atomic_write_text(out, lines)
        console.print(f"wrote {len(questions)} questions to {shown(out)}")


@app.command("theory")
def theory_cmd(
    max_depth: int = typer.Option(12, "--max-depth", "-m", help="Tabulate D = 1..M (M at most 200: the cost grows as M^3)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line instead of a table."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=out_path, help="Also write theory.jsonl and the plot (PNG, SVG) here."),
) -> None:
    """Minimum layers to retrieve x_D under the information-flow model (Section 5, Appendix B)."""
    from stackedheads import theory

    if out is not None:
        from stackedheads.state.write import RunFolder

        RunFolder(out, "theory table").check()  # not into another output's folder, before the work
    rows = theory.theory_table(max_depth)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r.to_dict()) + "\n")
    else:
        table = Table(title="Minimum layers (information-flow model)")
        for col in ("D", "ceil(log3 2D)", "no mask", "causal", "causal per x_j, j=1..D"):
            table.add_column(col, justify="right" if col != "causal per x_j, j=1..D" else "left")
        for r in rows:
            per = " ".join(str(v) for v in r.min_layers_causal_per_position)
            table.add_row(str(r.depth), str(r.paper_bound), str(r.min_layers), str(r.min_layers_causal), per)
        Console().print(table)
    if out is not None:
        from stackedheads.state.write import RunFolder

        with RunFolder(out, "theory table").lock("theory"):  # no other process writes the folder meanwhile
            written = theory.save_table(rows, out)
        for p in written:
            console.print(f"wrote {shown(p)}")


