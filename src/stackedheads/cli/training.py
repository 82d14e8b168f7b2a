"""``train``, ``sweep figure4`` and ``sweep depth``: training runs and grids of them (Sec. 7 and beyond)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from stackedheads import recipes
from stackedheads.cli._app import (
    out_path,
    own_flags,
    THREADS_HELP,
    WORKERS_HELP,
    app,
    apply_threads,
    config_overrides,
    config_parameters,
    console,
    parse_seeds,
    progress_bar,
    shown,
)


def train_cmd(
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Run folder; running again resumes it."),
    preset: str = typer.Option("quick", "--preset", "-p", help="A training preset: paper, quick, quick-n4, smoke, sec8, sec8-quick, sec8-smoke, sec9, sec9-quick, sec9-smoke."),
    recipe: Optional[str] = typer.Option(None, "--recipe", help=recipes.help_text()),
    **fields,
) -> None:
    """Train an ensemble of GPT-2-style transformers on the vector task (Section 7.1).

    Every field of the training configuration is an option and overrides the preset.
    """
    from stackedheads import presets
    from stackedheads.state.write import RunFolder
    from stackedheads.training import train

    cfg = presets.get(preset, recipe).override(**config_overrides(fields))
    apply_threads(cfg.threads, cfg.device)  # the run records the count (config.json)
    RunFolder(out, "training run").check()  # not a sweep's or a benchmark's folder
    bar, factory = progress_bar(f"train {out.name}")  # the bar shows its names literally (_app.shown)
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
    console.print(f"run folder: {shown(out)}")


def _with_config_options(fn):
    """``fn``'s own options followed by one per training-config field (typer reads __signature__)."""
    import inspect

    sig = inspect.signature(fn)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    fn.__signature__ = sig.replace(parameters=own + config_parameters())
    return fn


app.command("train")(_with_config_options(train_cmd))


def _sweep_runner(name: str, executor: str, ray_address, ray_cpus_per_job: float, workers, threads):
    """The progress display, the executor and the per-job callback every sweep verb uses: local
    jobs report every step; Ray tasks run elsewhere, so a bar counts finished jobs instead."""
    from stackedheads.execution.executors import make_executor
    from stackedheads.execution.process import check_threads

    check_threads(workers, "workers")  # processes at once: the threads rule (1 to 4 per core)

    bar, factory = progress_bar(name)
    ray_options = {"cpus_per_job": ray_cpus_per_job} if executor == "ray" else {}
    per_step = (lambda job: factory(job.name)) if executor == "local" else None
    runner = make_executor(executor, ray_address, progress_factory=per_step, workers=workers, threads=threads, **ray_options)
    if executor == "local":
        return bar, runner, None
    jobs_bar = factory("jobs")
    return bar, runner, lambda job, i, n: jobs_bar(i, n)


sweep_app = typer.Typer(help="Grids of training runs (Figure 4).", no_args_is_help=True)
app.add_typer(sweep_app, name="sweep")


@sweep_app.command("figure4")
def sweep_figure4_cmd(
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Sweep folder; running again skips finished runs."),
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
    from stackedheads import presets
    from stackedheads.sweeps import figure4
    from stackedheads.claims import claims_table, sec7

    spec = presets.figure4(preset, device=device, dtype=dtype)
    bar, runner, on_done = _sweep_runner("figure4", executor, ray_address, ray_cpus_per_job, workers, threads)
    apply_threads(threads, spec.base.device)  # as train: local jobs may run in this process
    with bar:
        figure4.run_figure4(spec, out, runner, on_done=on_done)
    result = sec7.write_claims(out)
    Console().print(claims_table(sec7.figure4_claims(result), "Claims of Section 7.2 (Figure 4)"))
    console.print(f"summary: {shown(out / 'summary.csv')}  claims: {shown(out / 'claims.json')}  figure: {shown(out / 'figure4.png')}")


@sweep_app.command("depth")
def sweep_depth_cmd(
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Depth folder; running again skips finished runs."),
    preset: str = typer.Option("quick", "--preset", "-p", help="paper (GPU), quick (CPU, N = 2, under an hour), quick-n4 (CPU, N = 4, D = 1..3) or smoke."),
    depths: Optional[str] = typer.Option(None, "--depths", help="Retrieval steps D, e.g. 1-6 or 1,2,4 (default: the preset's)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layer counts, e.g. 1-8 (default: the preset's)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds per shape (default: the preset's)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps per run (default: the preset's); where D2 says 'train longer'."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls)."),
    executor: str = typer.Option("local", "--executor", help="local (in-process) or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    ray_cpus_per_job: float = typer.Option(1.0, "--ray-cpus-per-job", help="CPUs each Ray task asks for."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
) -> None:
    """Beyond the paper: IC runs over D x layers, the depth phase diagram beside the exact theory, claims D1-D2."""
    from stackedheads import presets
    from stackedheads.sweeps import depth
    from stackedheads.claims import beyond, claims_table

    with own_flags(depths="--depths"):  # the grid's field; llm-bench's 'depths' is --depth
        spec = presets.depth(
            preset,
            depths=depth.parse_ints(depths, "--depths") if depths is not None else None,
            layers=depth.parse_ints(layers, "--layers") if layers is not None else None,
            seeds=parse_seeds(seeds) if seeds is not None else None,
            device=device, dtype=dtype, steps=steps,
        )
        depth.check_folder(spec, out)  # before the progress bar, so a refusal is one line
        bar, runner, on_done = _sweep_runner("depth", executor, ray_address, ray_cpus_per_job, workers, threads)
        apply_threads(threads, spec.base.device)  # as train: local jobs may run in this process
        with bar:
            result = depth.run_depth(spec, out, runner, on_done=on_done)
    found = beyond.write_claims(out, result.rows)
    Console().print(_layers_table(result.table, beyond.d2_per_depth(result.rows)))
    Console().print(claims_table(found, beyond.SECTION))
    for c in found:
        if c.id == "D1" and c.verdict == "FAIL":  # the theory is a lower bound: a violation must not scroll by
            console.print(f"[bold red]D1 FAILED: a run learned below the exact causal minimum. {shown(c.measured)}[/]")
    console.print(f"summary: {shown(out / 'summary.csv')}  claims: {shown(out / 'claims.json')}  figure: {shown(out / 'depth_phase.png')}")




def _layers_table(table: list[dict], d2: list[dict]) -> Table:
    """Trained vs theoretical layers per D, with D2's verdict per D."""
    from stackedheads.claims import beyond

    cells = beyond.layers_rows(table, d2)
    t = Table(title="Layers needed per D: trained (every seed) vs theory")
    for col in cells["columns"]:
        t.add_column(col, justify="left" if col in ("trained x_1..x_D", "D2") else "right")
    for row in cells["rows"]:
        t.add_row(*row)
    return t
