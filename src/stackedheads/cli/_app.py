"""What every command module shares: the typer app, the stderr console, the progress bar and
the parsers and help texts of options that several commands take."""

from __future__ import annotations

import typer
from rich.console import Console

from stackedheads.errors import UsageError

app = typer.Typer(
    name="stackedheads",
    help="Reproduce and extend 'Mechanism and Emergence of Stacked Attention Heads' (Musat, ICLR 2025).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


def progress_bar(description: str):
    """A rich progress bar on stderr; returns (context manager, callback(step, total))."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    )
    tasks: dict[str, int] = {}

    def factory(name: str):
        def update(step: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total, completed=step - 1)
            bar.update(tasks[name], completed=step)

        return update

    return bar, factory


THREADS_HELP = (
    "torch threads per training process (default: OMP_NUM_THREADS if set, else every core the process may "
    "use, at most 4 beside a GPU; results are the same for any count)."
)
WORKERS_HELP = "Local jobs trained at once, each in its own process (default: one per core on the CPU, one on a GPU)."


def apply_threads(threads: int | None, device: str) -> None:
    from stackedheads.perf import apply_threads

    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    apply_threads(threads, device)


def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None


def parse_floats(text: str, option: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{option} must be comma-separated numbers, got {text!r}") from None


def parse_names(text: str) -> tuple[str, ...]:
    return () if text.strip() in ("", "none") else tuple(x.strip() for x in text.split(",") if x.strip())


