"""The ``stackedheads`` command line: thin wrappers that parse, call one library function, print.

Mistakes a user can make end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from typer.exceptions import TyperException

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
    export: Optional[Path] = typer.Option(
        None, "--export", help="Also write a dataset and task files for lm-evaluation-harness and inspect_ai here."
    ),
) -> None:
    """Generate retrieval questions (Section 4, Appendix A) as JSON lines."""
    from stackedheads.tasks import prompts

    if n < 1:
        raise UsageError(f"--n must be >= 1, got {n}")
    questions = prompts.generate_many(formulation, depth=depth, chains=chains, n=n, seed=seed)
    if export is not None:
        from stackedheads.llm.export import export_questions

        for path in export_questions(questions, export):
            console.print(f"wrote {path}")
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
        for p in theory.save_table(rows, out):
            console.print(f"wrote {p}")


def _progress(description: str):
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


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None


@app.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Run folder; running again resumes it."),
    preset: str = typer.Option("quick", "--preset", "-p", help="paper, quick, smoke, sec8, sec8-quick, sec8-smoke, sec9, sec9-quick, sec9-smoke."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Transformer layers."),
    heads: Optional[int] = typer.Option(None, "--heads", help="Attention heads per layer."),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="Residual stream width."),
    d_head: Optional[int] = typer.Option(None, "--d-head", help="Head size (default d_model / heads)."),
    no_mlp: bool = typer.Option(False, "--no-mlp", help="Remove the MLPs (Section 9.1)."),
    depth: Optional[int] = typer.Option(None, "--depth", help="Retrieval steps D."),
    chains: Optional[int] = typer.Option(None, "--chains", help="Chains N."),
    dims: Optional[int] = typer.Option(None, "--dims", help="Symbol dimensions K (even)."),
    ic: Optional[bool] = typer.Option(None, "--ic/--no-ic", help="Implicit curriculum targets x_1..x_D, or x_D only."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sequences per step and model."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps."),
    n_train: Optional[int] = typer.Option(None, "--n-train", help="Size of the finite training set."),
    lr: Optional[float] = typer.Option(None, "--lr", help="AdamW learning rate."),
    weight_decay: Optional[float] = typer.Option(None, "--weight-decay", help="Decoupled weight decay."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds, trained together as an ensemble."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Validate every this many steps."),
    ckpt_every: Optional[int] = typer.Option(None, "--ckpt-every", help="Checkpoint every this many steps."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 or bfloat16 (autocast)."),
) -> None:
    """Train an ensemble of GPT-2-style transformers on the vector task (Section 7.1)."""
    from dataclasses import replace

    from stackedheads import presets
    from stackedheads.train import train

    base = presets.get(preset)
    task_over = {"depth": depth, "chains": chains, "dims": dims, "ic": ic, "n_train": n_train}
    task = replace(base.task, **{k: v for k, v in task_over.items() if v is not None})
    over = {
        "n_layers": layers, "n_heads": heads, "d_model": d_model, "d_head": d_head,
        "batch_size": batch_size, "steps": steps, "lr": lr, "weight_decay": weight_decay,
        "eval_every": eval_every, "ckpt_every": ckpt_every, "device": device, "dtype": dtype,
        "seeds": _seeds(seeds) if seeds is not None else None, "mlp": False if no_mlp else None,
    }
    cfg = replace(base, task=task, **{k: v for k, v in over.items() if v is not None})
    bar, factory = _progress(f"train {out.name}")
    with bar:
        summary = train(cfg, out, progress=factory(f"train {out.name}"))
    table = Table(title=f"final validation loss (mean over the last {cfg.final_window} steps)")
    table.add_column("seed", justify="right")
    table.add_column("val loss", justify="right")
    parts = list(next(iter(summary["seeds"].values()))["final_partial"])
    for p in parts:
        table.add_column(p, justify="right")
    for seed, s in summary["seeds"].items():
        table.add_row(seed, f"{s['final_val_loss']:.4f}", *(f"{s['final_partial'][p]:.4f}" for p in parts))
    Console().print(table)
    console.print(f"run folder: {out}")


sweep_app = typer.Typer(help="Grids of training runs (Figure 4).", no_args_is_help=True)
app.add_typer(sweep_app, name="sweep")


@sweep_app.command("figure4")
def sweep_figure4_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Sweep folder; running again skips finished runs."),
    preset: str = typer.Option("quick", "--preset", "-p", help="paper (128 runs), quick or smoke."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 or bfloat16 (autocast)."),
    executor: str = typer.Option("local", "--executor", help="local (in-process) or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    ray_cpus_per_job: float = typer.Option(1.0, "--ray-cpus-per-job", help="CPUs each Ray task asks for."),
) -> None:
    """IC vs non-IC over layers x seeds: summary.csv, Figure 4 and the claims of Section 7.2."""
    from stackedheads import sweep
    from stackedheads.executors import make_executor

    spec = sweep.figure4_spec(preset, device=device, dtype=dtype)
    bar, factory = _progress("figure4")
    ray_options = {"cpus_per_job": ray_cpus_per_job} if executor == "ray" else {}
    # Local jobs report every step; Ray tasks run elsewhere, so count finished jobs instead.
    per_step = (lambda job: factory(job.name)) if executor == "local" else None
    jobs_bar = factory("jobs") if executor != "local" else None
    runner = make_executor(executor, ray_address, progress_factory=per_step, **ray_options)
    with bar:
        result = sweep.run_figure4(
            spec, out, runner, on_done=(lambda job, i, n: jobs_bar(i, n)) if jobs_bar else None
        )
    Console().print(sweep.claims_table(result))
    console.print(f"summary: {out / 'summary.csv'}  claims: {out / 'claims.json'}  figure: {out / 'figure4.png'}")


@app.command("attention")
def attention_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder (from train or sweep)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the heatmaps."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
    seqs: int = typer.Option(4, "--seqs", help="Validation sequences drawn per layer."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Which ensemble member (default: the first)."),
) -> None:
    """Attention maps per layer and head, single sequences and the mean by role (Appendix C)."""
    from stackedheads.circuits.maps import attention_maps

    files = attention_maps(run_dir, out, checkpoint=checkpoint, seqs=seqs, seed=seed)
    console.print(f"wrote {len(files)} files to {out}")


circuit_app = typer.Typer(help="Circuits: validate a circuit file, or discover one (Section 8, Appendix E).", no_args_is_help=True)
app.add_typer(circuit_app, name="circuit")


def _loss_table(rows, title: str) -> Table:
    from stackedheads.circuits.ablate import format_table

    table = Table(title=title)
    for col in ("ablation", "val MSE", "partial MSE x1..xD"):
        table.add_column(col)
    for row in format_table(rows):
        table.add_row(*row)
    return table


@circuit_app.command("validate")
def circuit_validate_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder."),
    spec: Path = typer.Option(..., "--spec", help="circuit.json (its info.seed picks the member)."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
) -> None:
    """Combined and per-path ablation losses of a circuit (Appendix E, steps 5 and 6)."""
    from stackedheads.circuits.ablate import validate_run

    rows = validate_run(run_dir, spec, checkpoint=checkpoint)
    Console().print(_loss_table(rows, f"ablations of {spec}"))


@circuit_app.command("discover")
def circuit_discover_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder (IC)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for seed*/circuit.json, losses, diagrams."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
    tolerance: float = typer.Option(0.04, "--tolerance", help="Loss budget over the unablated loss (App. E: 0.05 absolute)."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="An absolute loss threshold instead."),
) -> None:
    """Find every member's circuit automatically: the simplest head assignments that keep the loss low."""
    from stackedheads.circuits.discover import DiscoverConfig, discover_run

    found = discover_run(run_dir, out, checkpoint=checkpoint, cfg=DiscoverConfig(tolerance=tolerance, threshold=threshold))
    for seed, d in found.items():
        s = d.summary()
        Console().print(_loss_table(d.table, f"seed {seed}: threshold {d.threshold:.4f}"))
        console.print(
            f"seed {seed}: useful heads {[tuple(h) for h in s['useful_heads']]} ({s['n_useful_heads']}; "
            f"theoretical minimum {s['theory_min_heads']}), unexplained {s['unexplained_heads']}"
        )
    console.print(f"circuits: {out}/seed*/circuit.json")


@app.command("emergence")
def emergence_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder saved with several checkpoints."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for timelines and plots."),
    circuits: Optional[Path] = typer.Option(None, "--circuits", help="Folder with seed*/circuit.json (default: discover them)."),
    seqs: int = typer.Option(32, "--seqs", help="Validation sequences per checkpoint (Sec. 9.1: 32)."),
) -> None:
    """Attention per circuit path across checkpoints, emergence steps and their order (Section 9)."""
    from stackedheads.emergence import emergence_run

    summary = emergence_run(run_dir, out, circuits, n_seqs=seqs)
    table = Table(title="emergence: first step with mean attention > 0.5")
    for col in ("seed", "path", "step"):
        table.add_column(col)
    for seed, s in summary["seeds"].items():
        for key, step in s["emerged"].items():
            table.add_row(str(seed), key, "never" if step is None else f"{step:.0f}")
    Console().print(table)
    o = summary["ordering"]
    console.print(f"x1, x2, ... retrieved in order in {o['in_order']} of {o['decided']} runs (of {o['runs']})")


@app.command("reproduce")
def reproduce_cmd(
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke (about a minute), quick (make demo) or paper (GPU)."),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", "-o", help="Output folder; re-running resumes it."),
    executor: str = typer.Option("local", "--executor", help="Where training jobs run: local or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda, for every training stage."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 or bfloat16 (autocast), for every training stage."),
    llm_backend: Optional[str] = typer.Option(None, "--llm-backend", help="llm stage: openai, llamacpp or hf (default: the preset's; paper: required)."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="llm stage: the model (see `llm-bench --help`)."),
    llm_mode: Optional[str] = typer.Option(None, "--llm-mode", help="llm stage: chat or completion."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="llm stage, openai: server URL."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", "--llm-api-key-env", help="llm stage, openai: variable holding the API key (never written)."),
    llm_concurrency: int = typer.Option(1, "--llm-concurrency", help="llm stage, openai: questions in flight."),
    llm_threads: Optional[int] = typer.Option(None, "--llm-threads", help="llm stage, llamacpp/hf: CPU threads."),
    skip: list[str] = typer.Option([], "--skip", help="A stage to leave out (repeatable): theory, prompts, llm, figure4, circuits, emergence."),
) -> None:
    """Run every stage of the paper into one folder (resumable), then write the HTML report."""
    from stackedheads.claims import FAIL, PASS
    from stackedheads.executors import make_executor
    from stackedheads.reproduce import LLMChoice, reproduce

    if (llm_backend is None) != (llm_model is None):
        raise UsageError("give --llm-backend and --llm-model together")
    choice = None
    if llm_backend is not None:
        choice = LLMChoice(llm_backend, llm_model, llm_mode, llm_base_url, llm_api_key_env, llm_concurrency, llm_threads)
    runner = make_executor(executor, ray_address)  # validates the pair
    if executor == "local":
        runner = None  # reproduce trains local jobs itself, with a bar per job
    bar, factory = _progress("reproduce")
    updates: dict = {}

    def progress(label: str, done: int, total: int) -> None:
        if label not in updates:
            updates[label] = factory(label)
        updates[label](done, total)

    with bar:
        summary = reproduce(
            preset, out, progress=progress, executor=runner, device=device, dtype=dtype, llm=choice, skip=tuple(skip)
        )
    table = Table(title=f"reproduce --preset {preset}")
    for col in ("stage", "wall time", "state"):
        table.add_column(col)
    for name, stage in summary["stages"].items():
        table.add_row(name, f"{stage['wall_s']:.1f} s", "done earlier" if stage.get("already_done") else "ran now")
    Console().print(table)
    claims = json.loads((out / "report" / "claims.json").read_text())
    ct = Table(title="the paper's claims")
    for col in ("section", "id", "verdict"):
        ct.add_column(col)
    for c in claims:
        colour = {PASS: "green", FAIL: "red"}.get(c["verdict"], "dim")
        ct.add_row(c["section"], c["id"], f"[{colour}]{c['verdict']}[/{colour}]")
    Console().print(ct)
    console.print(f"report: {summary['report']}")


@app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="A folder written by `stackedheads reproduce`."),
) -> None:
    """Write DIR/report/index.html: claims vs measurements, every figure, configs and versions (offline)."""
    from stackedheads.report import write_report

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder")
    console.print(f"report: {write_report(run_dir)}")


def _register_llm() -> None:
    from stackedheads.llm.cli import register

    register(app)


_register_llm()


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
