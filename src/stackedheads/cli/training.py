"""``train``, ``sweep figure4`` and ``sweep depth``: training runs and grids of them (Sec. 7 and beyond)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from stackedheads.cli._app import (
    THREADS_HELP,
    WORKERS_HELP,
    app,
    apply_threads,
    console,
    parse_floats,
    parse_names,
    parse_seeds,
    progress_bar,
)


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
        "grad_clip": grad_clip, "betas": parse_floats(betas, "--betas") if betas is not None else None,
        "decay_exempt": parse_names(decay_exempt) if decay_exempt is not None else None,
        "eval_every": eval_every, "ckpt_every": ckpt_every, "device": device, "dtype": dtype,
        "seeds": parse_seeds(seeds) if seeds is not None else None, "mlp": False if no_mlp else None,
        "compile": True if compile_ else None,
    }
    cfg = replace(base, task=task, **{k: v for k, v in over.items() if v is not None})
    apply_threads(threads, cfg.device)
    bar, factory = progress_bar(f"train {out.name}")
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
    bar, factory = progress_bar("figure4")
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
        seeds=parse_seeds(seeds) if seeds is not None else None,
        device=device, dtype=dtype,
    )
    depth.check_folder(spec, out)  # before the progress bar, so a refusal is one line
    bar, factory = progress_bar("depth")
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


