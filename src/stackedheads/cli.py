"""The ``stackedheads`` command line: thin wrappers that parse, call one library function, print.

Mistakes a user can make end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.exceptions import TyperException
from rich.console import Console
from rich.table import Table

from stackedheads.errors import UsageError

app = typer.Typer(
    name="stackedheads",
    help="Reproduce and extend 'Mechanism and Emergence of Stacked Attention Heads' (Musat, ICLR 2025).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


@app.command("prompts")
def prompts_cmd(
    formulation: str = typer.Option(..., "--formulation", "-f", help="equations, lives-with, kingdoms, functions or relatives."),
    depth: Optional[int] = typer.Option(None, "--depth", "-d", help="Retrieval steps D (default: the formulation's; fixed for functions and relatives)."),
    chains: int = typer.Option(4, "--chains", "-c", help="Interleaved chains N."),
    n: int = typer.Option(1, "--n", help="Number of questions."),
    seed: int = typer.Option(0, "--seed", help="Seed; question i is a pure function of (arguments, seed, i)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write JSON lines here instead of stdout."),
) -> None:
    """Generate retrieval questions (Section 4, Appendix A) as JSON lines."""
    from stackedheads.tasks import prompts

    if n < 1:
        raise UsageError(f"--n must be >= 1, got {n}")
    questions = prompts.generate_many(formulation, depth=depth, chains=chains, n=n, seed=seed)
    lines = "".join(json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions)
    if out is None:
        sys.stdout.write(lines)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(lines, encoding="utf-8")
        console.print(f"wrote {len(questions)} questions to {out}")


@app.command("theory")
def theory_cmd(
    max_depth: int = typer.Option(12, "--max-depth", "-m", help="Tabulate D = 1..M."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line instead of a table."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write theory.jsonl and the plot (PNG, SVG) here."),
) -> None:
    """Minimum layers to retrieve x_D under the information-flow model (Section 5, Appendix B)."""
    from stackedheads import theory

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
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "theory.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r.to_dict()) + "\n")
        for p in theory.plot_theory(rows, out):
            console.print(f"wrote {p}")


@app.command("reproduce")
def reproduce_cmd(
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke, quick or paper."),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", "-o", help="Output folder; re-running resumes it."),
) -> None:
    """Run every stage of the paper into one folder (resumable)."""
    from stackedheads.reproduce import reproduce

    summary = reproduce(preset, out, progress=lambda msg: console.print(f"[bold]reproduce[/bold] {msg}"))
    for name, stage in summary["stages"].items():
        state = "skipped (done)" if stage.get("skipped") else f"{stage['wall_s']:.1f} s"
        console.print(f"  {name:<10} {state}")
    console.print(f"summary: {out / 'summary.json'}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors with exit code 2 for user mistakes."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except (UsageError, TyperException) as e:
        # typer vendors click: its usage errors are TyperExceptions with format_message().
        msg = e.format_message() if hasattr(e, "format_message") else str(e)
        if not msg.strip():  # a bare `stackedheads`: typer has already shown the help
            sys.exit(0)
        print(f"stackedheads: error: {msg}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        print("stackedheads: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
