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
from stackedheads.perf import set_openmp_policy

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
    n: int = typer.Option(1, "--n", help="Number of questions (at most 100000 per call; use several --seed for more)."),
    seed: int = typer.Option(0, "--seed", help="Seed; question i is a pure function of (arguments, seed, i)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write JSON lines here instead of stdout."),
    export: Optional[Path] = typer.Option(
        None, "--export", help="Also write a dataset and task files for lm-evaluation-harness and inspect_ai here."
    ),
) -> None:
    """Generate retrieval questions (Section 4, Appendix A) as JSON lines."""
    from stackedheads.tasks import prompts

    if not 1 <= n <= prompts.MAX_QUESTIONS:
        raise UsageError(f"--n must be between 1 and {prompts.MAX_QUESTIONS}, got {n}")
    questions = prompts.generate_many(formulation, depth=depth, chains=chains, n=n, seed=seed)
    if export is not None:
        from stackedheads.llm.export import export_questions

        for path in export_questions(questions, export):
            console.print(f"wrote {path}")
    lines = "".join(json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions)
    if out is None:
        sys.stdout.write(lines)
    else:
        from stackedheads.storage import atomic_write_text

        atomic_write_text(out, lines)
        console.print(f"wrote {len(questions)} questions to {out}")


@app.command("theory")
def theory_cmd(
    max_depth: int = typer.Option(12, "--max-depth", "-m", help="Tabulate D = 1..M (M at most 200: the cost grows as M^3)."),
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


THREADS_HELP = (
    "torch threads per training process (default: OMP_NUM_THREADS if set, else every core the process may "
    "use, at most 4 beside a GPU; results are the same for any count)."
)
WORKERS_HELP = "Local jobs trained at once, each in its own process (default: one per core on the CPU, one on a GPU)."


def _apply_threads(threads: int | None, device: str) -> None:
    from stackedheads.perf import apply_threads

    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    apply_threads(threads, device)


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{option} must be comma-separated numbers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return () if text.strip() in ("", "none") else tuple(x.strip() for x in text.split(",") if x.strip())


@app.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Run folder; running again resumes it."),
    preset: str = typer.Option("quick", "--preset", "-p", help="paper, quick, quick-n4, smoke, sec8, sec8-quick, sec8-smoke, sec9, sec9-quick, sec9-smoke."),
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
    warmup_steps: Optional[int] = typer.Option(None, "--warmup-steps", help="Linear lr warm-up steps (0 = none)."),
    schedule: Optional[str] = typer.Option(None, "--schedule", help="After warm-up: constant, cosine or linear decay."),
    min_lr_ratio: Optional[float] = typer.Option(None, "--min-lr-ratio", help="Decay floor, as a fraction of --lr."),
    grad_clip: Optional[float] = typer.Option(None, "--grad-clip", help="Per-member gradient-norm clipping (0 = off)."),
    betas: Optional[str] = typer.Option(None, "--betas", help="Adam betas, e.g. 0.9,0.95."),
    decay_exempt: Optional[str] = typer.Option(None, "--decay-exempt", help="No weight decay on: comma list of norm, bias, embed; or none."),
    pe: Optional[str] = typer.Option(None, "--pe", help="Positional code per token (Sec. 6) or per input pair (App. B Def. 3): token or pair."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds, trained together as an ensemble."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Validate every this many steps."),
    ckpt_every: Optional[int] = typer.Option(None, "--ckpt-every", help="Checkpoint every this many steps."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls)."),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile the model (GPU: fewer, fused kernels)."),
) -> None:
    """Train an ensemble of GPT-2-style transformers on the vector task (Section 7.1)."""
    from dataclasses import replace

    from stackedheads import presets
    from stackedheads.train import train

    base = presets.get(preset)
    task_over = {"depth": depth, "chains": chains, "dims": dims, "ic": ic, "n_train": n_train, "pe": pe}
    task = replace(base.task, **{k: v for k, v in task_over.items() if v is not None})
    over = {
        "n_layers": layers, "n_heads": heads, "d_model": d_model, "d_head": d_head,
        "batch_size": batch_size, "steps": steps, "lr": lr, "weight_decay": weight_decay,
        "warmup_steps": warmup_steps, "schedule": schedule, "min_lr_ratio": min_lr_ratio,
        "grad_clip": grad_clip, "betas": _floats(betas, "--betas") if betas is not None else None,
        "decay_exempt": _names(decay_exempt) if decay_exempt is not None else None,
        "eval_every": eval_every, "ckpt_every": ckpt_every, "device": device, "dtype": dtype,
        "seeds": _seeds(seeds) if seeds is not None else None, "mlp": False if no_mlp else None,
        "compile": True if compile_ else None,
    }
    cfg = replace(base, task=task, **{k: v for k, v in over.items() if v is not None})
    _apply_threads(threads, cfg.device)
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
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls)."),
    executor: str = typer.Option("local", "--executor", help="local (in-process) or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    ray_cpus_per_job: float = typer.Option(1.0, "--ray-cpus-per-job", help="CPUs each Ray task asks for."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
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
    runner = make_executor(executor, ray_address, progress_factory=per_step, workers=workers, threads=threads, **ray_options)
    with bar:
        result = sweep.run_figure4(
            spec, out, runner, on_done=(lambda job, i, n: jobs_bar(i, n)) if jobs_bar else None
        )
    Console().print(sweep.claims_table(result))
    console.print(f"summary: {out / 'summary.csv'}  claims: {out / 'claims.json'}  figure: {out / 'figure4.png'}")


@sweep_app.command("depth")
def sweep_depth_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Depth folder; running again skips finished runs."),
    preset: str = typer.Option("quick", "--preset", "-p", help="paper (GPU), quick (CPU, under an hour) or smoke."),
    depths: Optional[str] = typer.Option(None, "--depths", help="Retrieval steps D, e.g. 1-6 or 1,2,4 (default: the preset's)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layer counts, e.g. 1-8 (default: the preset's)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds per shape (default: the preset's)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls)."),
    executor: str = typer.Option("local", "--executor", help="local (in-process) or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    ray_cpus_per_job: float = typer.Option(1.0, "--ray-cpus-per-job", help="CPUs each Ray task asks for."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
) -> None:
    """Beyond the paper: IC runs over D x layers, the depth phase diagram beside the exact theory, claims D1-D2."""
    from stackedheads import depth
    from stackedheads.executors import make_executor

    spec = depth.depth_spec(
        preset,
        depths=depth.parse_ints(depths, "--depths") if depths is not None else None,
        layers=depth.parse_ints(layers, "--layers") if layers is not None else None,
        seeds=_seeds(seeds) if seeds is not None else None,
        device=device, dtype=dtype,
    )
    depth.check_folder(spec, out)  # before the progress bar, so a refusal is one line
    bar, factory = _progress("depth")
    ray_options = {"cpus_per_job": ray_cpus_per_job} if executor == "ray" else {}
    per_step = (lambda job: factory(job.name)) if executor == "local" else None
    jobs_bar = factory("jobs") if executor != "local" else None
    runner = make_executor(executor, ray_address, progress_factory=per_step, workers=workers, threads=threads, **ray_options)
    with bar:
        result = depth.run_depth(spec, out, runner, on_done=(lambda job, i, n: jobs_bar(i, n)) if jobs_bar else None)
    layers_table, claims_table = depth.tables(result)
    Console().print(layers_table)
    Console().print(claims_table)
    for c in result.claims:
        if c.id == "D1" and c.verdict == "FAIL":  # the theory is a lower bound: a violation must not scroll by
            console.print(f"[bold red]D1 FAILED: a run learned below the exact causal minimum. {c.measured}[/]")
    console.print(f"summary: {out / 'summary.csv'}  claims: {out / 'claims.json'}  figure: {out / 'depth_phase.png'}")


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
        from stackedheads.claims import _budget_text

        Console().print(_loss_table(d.table, f"seed {seed}: {_budget_text(s)}"))
        console.print(
            f"seed {seed}: useful heads {[tuple(h) for h in s['useful_heads']]} ({s['n_useful_heads']}; "
            f"theoretical minimum {s['theory_min_heads']}), unexplained {s['unexplained_heads']}"
        )
        if s["redundant_groups"]:
            console.print(f"seed {seed}: redundant groups (useful only together): {s['redundant_groups']}")
        if s["over_budget"]:
            console.print(f"seed {seed}: partial circuit: {', '.join(s['over_budget'])} over budget under the combined ablation")
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
    per = summary["steps_per_epoch"]  # the paper's epochs (Sec. 9.1: 8 steps each for sec9)
    table = Table(title="emergence: first step with mean attention > 0.5")
    for col in ("seed", "path", "step", "epoch"):
        table.add_column(col)
    for seed, s in summary["seeds"].items():
        for key, step in s["emerged"].items():
            table.add_row(str(seed), key, "never" if step is None else f"{step:.0f}", "-" if step is None else f"{step / per:.0f}")
    Console().print(table)
    for seed, s in summary["seeds"].items():
        shown = ", ".join(
            f"{x} " + ("-" if p["step"] is None else f"step {p['step']:.0f} (epoch {p['epoch']:.0f})") for x, p in s["positions"].items()
        )
        plateau = s["plateau_steps"]
        console.print(
            f"seed {seed}: positions emerge {s['order']} ({shown}); plateau before the first path: "
            + ("no path emerged" if plateau is None else f"{plateau:.0f} steps = {plateau / per:.0f} epochs (paper: 450 epochs)")
        )
    o = summary["ordering"]
    console.print(f"x1, x2, ... emerge strictly in order in {o['in_order']} of {o['decided']} decided runs (of {o['runs']}; {o['counts']})")


@app.command("reproduce")
def reproduce_cmd(
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke (about a minute), quick (make demo) or paper (GPU)."),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", "-o", help="Output folder; re-running resumes it."),
    executor: str = typer.Option("local", "--executor", help="Where training jobs run: local or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda, for every training stage."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls), for every training stage."),
    llm_backend: Optional[str] = typer.Option(None, "--llm-backend", help="llm stage: openai, llamacpp or hf (default: the preset's; paper: required)."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="llm stage: the model (see `llm-bench --help`)."),
    llm_mode: Optional[str] = typer.Option(None, "--llm-mode", help="llm stage: chat or completion."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="llm stage, openai: server URL."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", "--llm-api-key-env", help="llm stage, openai: variable holding the API key (never written)."),
    llm_concurrency: int = typer.Option(1, "--llm-concurrency", help="llm stage, openai: questions in flight."),
    llm_threads: Optional[int] = typer.Option(None, "--llm-threads", help="llm stage, llamacpp/hf: CPU threads."),
    skip: list[str] = typer.Option([], "--skip", help="A stage to leave out (repeatable): theory, prompts, llm, figure4, circuits, emergence."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
) -> None:
    """Run every stage of the paper into one folder (resumable), then write the HTML report."""
    from stackedheads.claims import claims_table, collect
    from stackedheads.executors import make_executor
    from stackedheads.reproduce import LLMChoice, reproduce

    if (llm_backend is None) != (llm_model is None):
        raise UsageError("give --llm-backend and --llm-model together")
    choice = None
    if llm_backend is not None:
        choice = LLMChoice(llm_backend, llm_model, llm_mode, llm_base_url, llm_api_key_env, llm_concurrency, llm_threads)
    runner = make_executor(executor, ray_address, workers=workers, threads=threads)  # validates the options
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
            preset, out, progress=progress, executor=runner, device=device, dtype=dtype, llm=choice, skip=tuple(skip),
            workers=workers, threads=threads,
        )
    table = Table(title=f"reproduce --preset {preset}")
    for col in ("stage", "wall time", "state"):
        table.add_column(col)
    for name, stage in summary["stages"].items():
        table.add_row(name, f"{stage['wall_s']:.1f} s", "done earlier" if stage.get("already_done") else "ran now")
    Console().print(table)
    Console().print(claims_table(collect(out)))
    console.print(f"report: {summary['report']}")


@app.command("claims")
def claims_cmd(
    run_dir: Path = typer.Argument(..., help="A `reproduce` folder or a `sweep figure4` folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the claims as a JSON list instead of a table."),
) -> None:
    """Re-evaluate every claim of a folder from its files (no training): PASS, FAIL, INCONCLUSIVE or NOT RUN."""
    from stackedheads.claims import claims_table, folder_claims

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder")
    found = folder_claims(run_dir)
    if as_json:
        sys.stdout.write(json.dumps([c.to_dict() for c in found], indent=2) + "\n")
    else:
        Console().print(claims_table(found, f"claims of {run_dir}"))


@app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="A folder written by `stackedheads reproduce`."),
) -> None:
    """Write DIR/report/index.html: claims vs measurements, every figure, configs and versions (offline)."""
    from stackedheads.report import write_report
    from stackedheads.storage import FolderLock

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder")
    with FolderLock(run_dir, "report"):  # not while `reproduce` writes the folder (and its report)
        path = write_report(run_dir)
    console.print(f"report: {path}")


def _register_llm() -> None:
    from stackedheads.llm.cli import register

    register(app)


_register_llm()


# OSError numbers a user can fix by choosing other paths (exit 2); the rest (a full disk, an I/O
# error) are the environment's (exit 1).
_USER_ERRNOS = {"EACCES", "EPERM", "EROFS", "ENOTDIR", "EISDIR", "EEXIST", "ENOENT", "ENAMETOOLONG", "ELOOP"}


def _os_error_line(e: OSError) -> tuple[str, int]:
    import errno as errno_mod

    name = errno_mod.errorcode.get(e.errno or 0, "")
    what = e.strerror or type(e).__name__
    where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "") if e.filename else ""
    msg = f"{where}: {what}" if where else str(e) or what
    if name in ("ENOSPC", "EDQUOT"):
        msg += " (free some space and re-run: finished work is kept)"
    return msg, 2 if name in _USER_ERRNOS else 1


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors (exit 2 for user mistakes, 1 for the environment); any
    other error is a bug and keeps its traceback. Every line shown is redacted of secrets."""
    from stackedheads.errors import redact
    from stackedheads.llm.backends import BackendError

    def fail(msg: str, code: int) -> None:
        print(f"stackedheads: error: {redact(' '.join(msg.split()))}", file=sys.stderr)
        sys.exit(code)

    set_openmp_policy()  # before any command imports torch (stackedheads.perf says why)

    try:
        rv = app(args=argv, standalone_mode=False)
    except (UsageError, TyperException) as e:
        # typer vendors click: its usage errors are TyperExceptions with format_message().
        msg = e.format_message() if hasattr(e, "format_message") else str(e)
        if not msg.strip():  # a bare `stackedheads`: typer has already shown the help
            sys.exit(0)
        fail(msg, 2)
    except (typer.Abort, KeyboardInterrupt):
        rv = 130
    except BackendError as e:  # a server or model failed for good, e.g. during `reproduce`
        fail(f"{e} (answered questions are kept; re-run to resume)", 1)
    except OSError as e:
        fail(*_os_error_line(e))
    except Exception:  # a bug: keep the traceback, but never with a secret in it
        import traceback

        sys.stderr.write(redact(traceback.format_exc()))
        sys.exit(1)
    if rv == 130:  # Ctrl-C: typer returns 130 without a word, so say it here
        print("stackedheads: interrupted; run the same command again to resume", file=sys.stderr)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
