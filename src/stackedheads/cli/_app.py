"""What every command module shares: the typer app, the stderr console, the progress bar and
the parsers and help texts of options that several commands take."""

from __future__ import annotations

from contextlib import contextmanager

import typer
from rich.console import Console
from typer.core import TyperGroup

from stackedheads.errors import UsageError

# The verbs as `stackedheads --help` lists them: panels in the pipeline's order (reproduce; the
# stages; judging; language models; the maintainers' verbs last), each verb with the one line shown
# beside it (short enough for one line at 80 columns; the verb's own --help keeps its docstring).
VERB_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Reproduce the paper", (
        ("reproduce", "every stage into one folder, then its HTML report"),
    )),
    ("The stages, in the pipeline's order", (
        ("prompts", "retrieval questions in five formulations (Sec. 3-4)"),
        ("theory", "minimum layers, information-flow model (Sec. 5)"),
        ("train", "one ensemble of transformers (Sec. 7-9)"),
        ("sweep", "grids of training runs: Figure 4, depth"),
        ("attention", "attention maps per layer and head (App. C)"),
        ("circuit", "discover or validate circuits (Sec. 8, App. E)"),
        ("emergence", "attention per circuit path over training (Sec. 9)"),
    )),
    ("Judging", (
        ("claims", "re-judge every claim of a folder from its files"),
        ("seeds", "Sec. 8-9 seed by seed; recipes by distance"),
        ("report", "write a folder's offline HTML report"),
    )),
    ("Language models (Sec. 4)", (
        ("models", "the local models --model names; fetch one"),
        ("llm-bench", "a language model on the formulations (Fig. 2)"),
        ("llm-compare", "several llm-bench folders side by side"),
        ("llm-circuit", "which heads carry each hop inside a language model (beyond)"),
    )),
    ("Maintainers: the published references", (
        ("publish", "keep a run's small files in results/"),
        ("publish-piece", "add one piece of a Sec. 8-9 run to a reference"),
        ("results-index", "write results/README.md again"),
    )),
)
OTHER_PANEL = "Other verbs"  # a verb no panel names (each verb belongs in one: tests/test_cli_help.py)
_PLACES = {verb: (panel, line) for panel, verbs in VERB_PANELS for verb, line in verbs}


class _PipelineGroup(TyperGroup):
    """The app's verbs in :data:`VERB_PANELS`' order and panels, one line each; a verb no panel
    names comes last, under :data:`OTHER_PANEL`, with its docstring's first paragraph on one line."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, command in self.commands.items():
            panel, line = _PLACES.get(name, (OTHER_PANEL, None))
            command.rich_help_panel = panel
            command.short_help = line or " ".join((command.help or "").split("\n\n")[0].split())

    def list_commands(self, ctx) -> list[str]:
        return sorted(self.commands, key=lambda name: list(_PLACES).index(name) if name in _PLACES else len(_PLACES))


app = typer.Typer(
    name="stackedheads",
    help="Reproduce and extend 'Mechanism and Emergence of Stacked Attention Heads' (Musat, ICLR 2025).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_PipelineGroup,
)
console = Console(stderr=True)


def shown(value: object) -> str:
    """``value`` (a path, a label, a name a user typed) as rich prints it literally: every one
    printed in a markup string goes through here, so ``x[/]y`` or ``[exp1]/r`` is shown as typed
    rather than read as markup (a MarkupError, or a name with a part missing). Bytes of a path that
    are not UTF-8 (kept by Python as surrogates, printed as ``\\udcff``) show as U+FFFD."""
    from rich.markup import escape

    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate no byte stands for
            text = text.encode("utf-8", "replace").decode("utf-8")
    return escape(text)


LOG_EVERY_S = 60.0  # a progress line in a log (stderr not a terminal) at most this often


class _LogProgress:
    """Progress for a log file (``nohup``, a scheduler's job): rich draws no bar where stderr is no
    terminal, so a long run would say nothing for hours. One line per task at most every
    :data:`LOG_EVERY_S` seconds and at its end: the step, the pace since this process started
    (a resumed run starts mid-way) and the time left at that pace."""

    def __init__(self, clock=None) -> None:
        import time

        self.clock = clock or time.monotonic
        self.seen: dict[str, tuple[float, int, float]] = {}  # name -> (start time, start step, last line's time)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, name: str, step: int, total: int) -> None:
        now = self.clock()
        t0, s0, last = self.seen.setdefault(name, (now, step, now))
        # A line a minute, and one at the end (an unknown total has no end: a line a minute only).
        if (step < total or not total) and now - last < LOG_EVERY_S:
            return
        self.seen[name] = (t0, s0, now)
        line = f"{name}: {step:,}/{total:,} ({step / total:.0%})" if total else f"{name}: {step:,}"
        if step > s0 and now > t0:
            each = (now - t0) / (step - s0)
            line += f", {each:.3g} s each"
            if total:
                left = max(total - step, 0) * each
                line += (", done" if not left else ", under a minute left" if left < 60
                         else f", {left // 3600:.0f}h{left % 3600 // 60:02.0f}m left")
        console.print(line, highlight=False, markup=False, soft_wrap=True)  # one line in a log, however long

    def factory(self, name: str):
        return lambda step, total: self.update(name, step, total)


PROJECT_AFTER_S = 5.0  # the pace a projection is made from
PROJECT_ABOVE_S = 3600.0  # a task projected to take longer is announced


class _Projection:
    """One line on stderr early in a long task: the time it will take at its pace so far
    (``--steps 100000000``, 220 h, started without a word). Said, not refused: a long run may
    be meant."""

    def __init__(self, name: str, clock=None, say=None) -> None:
        import time

        self.name, self.clock = name, clock or time.monotonic
        self.say = say or (lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True))
        self.start: tuple[float, int] | None = None
        self.done = False

    def __call__(self, step: int, total: int) -> None:
        if self.done or not total:
            return
        now = self.clock()
        if self.start is None:
            self.start = (now, step)
            return
        t0, s0 = self.start
        if step <= s0 or now - t0 < PROJECT_AFTER_S:
            return
        self.done = True
        each = (now - t0) / (step - s0)
        left = max(total - step, 0) * each
        if left >= PROJECT_ABOVE_S:
            days = f" ({left / 86400:.1f} days)" if left >= 2 * 86400 else ""
            self.say(f"{self.name}: {total:,} steps at {each:.3g} s each: about {left // 3600:,.0f}h{left % 3600 // 60:02.0f}m"
                     f"{days} to go at this pace")


def _projected(name: str, update):
    projection = _Projection(name)

    def both(step: int, total: int) -> None:
        update(step, total)
        projection(step, total)

    return both


def progress_bar(description: str):
    """A rich progress bar on stderr (progress lines where stderr is no terminal: a log); returns
    (context manager, callback factory: name -> callback(step, total)). A task that will take
    over an hour at its first seconds' pace says so (:class:`_Projection`)."""
    bar, factory = _progress_bar(description)
    return bar, lambda name: _projected(name, factory(name))


def _progress_bar(description: str):
    if not console.is_terminal:
        log = _LogProgress()
        return log, log.factory
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
                tasks[name] = bar.add_task(shown(name), total=total, completed=step - 1)
            bar.update(tasks[name], completed=step)

        return update

    return bar, factory


THREADS_HELP = (
    "torch threads per training process (default: OMP_NUM_THREADS if set, else every core other work leaves "
    "idle when training starts, at most 4 beside a GPU). Recorded in the run's config.json and reused when it resumes: the same count gives the same bytes, another count the same numbers to rounding."
)
WORKERS_HELP = "Local jobs trained at once, each in its own process (default: one per core on the CPU, one on a GPU)."


def apply_threads(threads: int | None, device: str) -> None:
    from stackedheads.execution.process import check_threads, configure_process

    check_threads(threads)
    configure_process(threads, device)


def out_path(value) -> Path:
    """Every output path a verb takes (``parser=out_path``): never empty, since ``Path("")`` is the
    current folder (``--out ""`` wrote a run wherever the user stood), nor the filesystem root, nor
    a path inside a ``reproduce`` folder."""
    from pathlib import Path

    text = str(value)
    if not text.strip():
        raise typer.BadParameter("the output path is empty: give a folder or file name")
    path = Path(text)
    if path.resolve() == Path(path.resolve().anchor):
        raise typer.BadParameter(f"{text} is the filesystem root: give a folder under it")
    if path.is_symlink() and not path.exists():  # mkdir would say "File exists" of a path that is not there
        raise typer.BadParameter(f"{text} is a symbolic link to a path that does not exist: give a real path")
    from stackedheads.state.write import check_outside_reproduce

    try:
        check_outside_reproduce(path)  # a reproduce folder's stages are its own
    except UsageError as e:
        raise typer.BadParameter(str(e).replace("'out' ", "")) from None
    return path


def parse_seeds(text: str) -> tuple[int, ...]:
    from stackedheads.validation import check_seeds

    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    return check_seeds(seeds, "--seeds")


def parse_floats(text: str, option: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{option} must be comma-separated numbers, got {text!r}") from None


def parse_names(text: str) -> tuple[str, ...]:
    return () if text.strip() in ("", "none") else tuple(x.strip() for x in text.split(",") if x.strip())


# --- options generated from the training config -----------------------------------------------
# ``train`` takes one option per field of TrainConfig and its parts (task, model, optim), with
# the help of the field's metadata (``field(metadata={"help": ...})``): a new field is a new
# option, never a new edit here.

# Fields a run does not take from the command line: the task's seed (each member has its own)
# and the model's input/output sizes (they follow the task).
NOT_OPTIONS = {"seed", "d_in", "d_out", "n_queries", "n_ctx"}
# The flag of a field is "--" and its name with dashes, except these: train's shorter names
# kept from before its options were generated, and the flags of library arguments named
# otherwise (a UsageError names fields, the CLI shows their flags: see flag_text).
OPTION_NAMES = {
    "n_layers": "layers", "n_heads": "heads", "n_threads": "threads", "formulations": "formulation",
    "depths": "depth", "n_seqs": "seqs", "address": "ray-address", "cpus_per_job": "ray-cpus-per-job",
}


def flag(field: str, prefix: str = "--") -> str:
    """The flag that sets ``field`` (``prefix``: ``--llm-`` for reproduce's LLM choice)."""
    return prefix + OPTION_NAMES.get(field, field).replace("_", "-")


def flag_text(error: UsageError, flag_of=flag) -> str:
    """``error``'s message with each field it names written as its flag."""
    text = str(error)
    for name in error.fields:
        text = text.replace(f"'{name}'", flag_of(name))
    return text


@contextmanager
def own_flags(**flags: str):
    """A :class:`UsageError` raised inside names each field in ``flags`` as the flag given there
    (``depths="--depths"``: a field whose flag in this verb is not :func:`flag`'s) and every
    other field as :func:`flag` writes it."""
    try:
        yield
    except UsageError as e:
        raise UsageError(flag_text(e, lambda name: flags.get(name) or flag(name))) from None


def config_fields() -> list[tuple[str, type, str]]:
    """``(field name, Python type, help)`` of every option ``train`` generates, in --help order."""
    import dataclasses
    import typing

    from stackedheads.model.config import ModelConfig
    from stackedheads.tasks.vectors import VectorTaskConfig
    from stackedheads.training.config import OptimConfig, TrainConfig

    out = []
    for cls in (VectorTaskConfig, ModelConfig, OptimConfig, TrainConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in NOT_OPTIONS or f.name in ("task", "model", "optim"):
                continue
            out.append((f.name, hints[f.name], f.metadata.get("help", f.name.replace("_", " "))))
    return out


def config_parameters() -> list:
    """The generated options as ``inspect.Parameter``s (typer reads a command's signature)."""
    import inspect
    import typing

    params = []
    for name, tp, help_text in config_fields():
        option_flag = flag(name)
        base = typing.get_args(tp)[0] if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType) else tp
        if base is bool:
            option = typer.Option(None, f"{option_flag}/--no-{option_flag[2:]}", help=help_text)
            annotation = typing.Optional[bool]
        elif typing.get_origin(base) is tuple:  # seeds, betas, decay_exempt: a comma list
            option = typer.Option(None, option_flag, help=help_text + " (a comma list)")
            annotation = typing.Optional[str]
        else:
            option = typer.Option(None, option_flag, help=help_text)
            annotation = typing.Optional[base]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation))
    return params


def config_overrides(values: dict) -> dict:
    """The generated options' values as :meth:`TrainConfig.override` takes them (lists parsed,
    numbers finite: a NaN would reach config.json, which JSON cannot hold)."""
    import math

    parsers = {"seeds": parse_seeds, "betas": lambda t: parse_floats(t, "--betas"), "decay_exempt": parse_names}
    for name, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{flag(name)} must be a finite number, got {value}")
    return {k: parsers[k](v) if k in parsers and v is not None else v for k, v in values.items()}
