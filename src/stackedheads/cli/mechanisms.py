"""``attention``, ``circuit`` and ``emergence``: what trained models do (Sec. 8-9, App. C-E)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from stackedheads.errors import UsageError
from stackedheads.cli._app import (
    out_path,
    app,
    console,
    parse_seeds,
    shown,
)


@app.command("attention")
def attention_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder (from train or sweep)."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Folder for the heatmaps."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
    seqs: int = typer.Option(4, "--seqs", help="Validation sequences drawn per layer."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Which ensemble member (default: the first)."),
    over_training: bool = typer.Option(
        False, "--over-training",
        help="Instead of maps: every checkpoint's attention entropy, rows fixed on one key position and top key, per head "
             "(a plateau diagnostic; writes attention_stats.json and a figure)."),
) -> None:
    """Attention maps per layer and head, single sequences and the mean by role (Appendix C); with
    --over-training, how each head's attention sharpens and settles on positions over the checkpoints."""
    from stackedheads.state import origins
    from stackedheads.state.write import RunFolder

    if over_training and checkpoint is not None:
        raise UsageError("--over-training reads every checkpoint: leave out --checkpoint")
    # Its figures never mix into another output's folder, nor with another run's or member's maps,
    # and no other process writes the folder meanwhile.
    with RunFolder(out, "attention maps").lock("attention"):
        origins.check_maps_out(run_dir, out, seed)
        origins.record_maps_out(run_dir, out, seed)
        if over_training:
            from stackedheads.circuits import saturation

            result = saturation.attention_over_training(run_dir, out, seed=seed)
        else:
            from stackedheads.circuits.maps import attention_maps

            files = attention_maps(run_dir, out, checkpoint=checkpoint, seqs=seqs, seed=seed)
    if over_training:
        steps, rows = saturation.table_rows(result)
        table = Table(title=f"seed {result['seed']}: attention over training")
        for col in ("head", *(f"step {s:,}" for s in steps)):
            table.add_column(col)
        for r in rows:
            table.add_row(*r)
        Console().print(table)
        Console().print(f"Each cell: the mean row entropy in nats (uniform: {saturation.uniform_entropy(result):.2f}), the share "
                        f"of rows with more than half their attention on one key position in >= {saturation.FIXED:.0%} of "
                        f"{result['sequences']} sequences, and the key most of those read.", highlight=False)
        console.print(f"wrote attention_stats.json and {len(result['files'])} figures to {shown(out)}")
        return
    console.print(f"wrote {len(files)} files to {shown(out)}")


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
    circuit: Path = typer.Option(..., "--circuit", "--spec", help="circuit.json (its info.seed picks the member); --spec is the old name."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
    n_val: int = typer.Option(512, "--n-val", min=1, help="Validation sequences the losses are measured on."),
    transformer_lens: bool = typer.Option(
        False, "--transformer-lens",
        help="Also recompute every row through TransformerLens (its forward pass, hooks and an MSE computed apart; "
             "the `interop` extra) and print both columns and their largest difference."),
) -> None:
    """Combined and per-path ablation losses of a circuit (Appendix E, steps 5 and 6); with
    --transformer-lens, each beside its recomputation through TransformerLens (docs/interop.md)."""
    if transformer_lens:
        from stackedheads.interop import check_run

        result = check_run(run_dir, circuit, checkpoint, n_val)
        table = Table(title=f"seed {result['seed']}: val MSE under each ablation of {shown(circuit)}")
        for col in ("ablation", "circuit validate", "TransformerLens"):
            table.add_column(col)
        for name, ours, theirs in result["rows"]:
            table.add_row(shown(name), f"{ours.loss:.6f}", f"{theirs.loss:.6f}")
        Console().print(table)
        Console().print(f"largest difference (losses and partial losses): {result['max_diff']:.2e}", highlight=False)
        return
    from stackedheads.circuits.ablate import validate_run

    rows = validate_run(run_dir, circuit, checkpoint=checkpoint, n_val=n_val)
    Console().print(_loss_table(rows, f"ablations of {shown(circuit)}"))


@circuit_app.command("discover")
def circuit_discover_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder (IC)."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Folder for seed*/circuit.json, losses, diagrams."),
    checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="Step of the checkpoint (default: the last)."),
    tolerance: float = typer.Option(0.04, "--tolerance", help="Loss budget over the unablated loss (App. E: 0.05 absolute)."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="An absolute loss threshold instead."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Only these members, comma-separated (default: every seed); the others' files are left as they are."),
) -> None:
    """Find every member's circuit automatically: the simplest head assignments that keep the loss low."""
    from stackedheads.circuits.ablate import path_key
    from stackedheads.circuits.discover import DiscoverConfig, discover_run
    from stackedheads.state.origins import check_discovery_out
    from stackedheads.state.write import RunFolder

    RunFolder(out, "discovered circuits").check()
    only = None if seeds is None else parse_seeds(seeds)
    check_discovery_out(run_dir, out, only)  # never another run's circuits beside this one's
    found = discover_run(run_dir, out, checkpoint=checkpoint, cfg=DiscoverConfig(tolerance=tolerance, threshold=threshold),
                         seeds=only)
    for seed, d in found.items():
        s = d.summary()
        from stackedheads.claims.judging import budget_text

        Console().print(_loss_table(d.table, f"seed {seed}: {budget_text(s)}"))
        console.print(
            f"seed {seed}: useful heads {[tuple(h) for h in s['useful_heads']]} ({s['n_useful_heads']}; "
            f"theoretical minimum {s['theory_min_heads']}), retrieval heads {[tuple(h) for h in s['retrieval_heads']]}, "
            f"shortcut heads {[tuple(h) for h in s['shortcut_heads']]}, unexplained rows {len(s['unexplained_heads'])}"
        )
        for kind in ("positional", "cross-chain"):
            if s["paths_by_kind"][kind]:
                console.print(f"seed {seed}: {kind} shortcuts: {', '.join(map(path_key, s['paths_by_kind'][kind]))}")
        for d in s["diagnosis"]:  # held-out: where the rows no retrieval rule explains attend
            console.print(f"seed {seed}: {d['text']}", markup=False)
        if s["redundant_groups"]:
            console.print(f"seed {seed}: redundant groups (useful only together): {s['redundant_groups']}")
        if s["over_budget"]:
            what = "partial circuit" if s["unexplained_heads"] else "every row follows a rule, yet"
            console.print(f"seed {seed}: {what}: {', '.join(s['over_budget'])} over budget under the combined ablation")
    console.print(f"circuits: {shown(out)}/seed*/circuit.json")


@app.command("emergence")
def emergence_cmd(
    run_dir: Path = typer.Argument(..., help="A run folder saved with several checkpoints."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Folder for timelines and plots; its summary.json covers every seed timed into it (pieces of one result share it)."),
    circuits: Optional[Path] = typer.Option(None, "--circuits", help="Folder with seed*/circuit.json (default: discover them)."),
    seqs: int = typer.Option(32, "--seqs", help="Validation sequences per checkpoint (Sec. 9.1: 32)."),
) -> None:
    """Attention per circuit path across checkpoints, emergence steps and their order (Section 9)."""
    from stackedheads.emergence.timeline import emergence_run
    from stackedheads.state.origins import check_emergence_out, record_emergence_out
    from stackedheads.state.write import RunFolder, require_kind

    if (run_dir / "config.json").exists():  # a reproduce or benchmark folder is no run (a missing config: said below)
        require_kind(run_dir, "training run")
    RunFolder(out, "emergence output").check()
    check_emergence_out(run_dir, out)  # one run's seeds (or pieces of one result) per folder
    summary = emergence_run(run_dir, out, circuits, n_seqs=seqs)
    record_emergence_out(run_dir, out)
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
            f"seed {seed}: positions emerge {s['order']} ({shown}); plateau before the first path serving a position: "
            + ("no such path emerged" if plateau is None else f"{plateau:.0f} steps = {plateau / per:.0f} epochs (paper: 450 epochs)")
        )
    o = summary["ordering"]
    console.print(f"x1, x2, ... emerge strictly in order in {o['in_order']} of {o['decided']} decided runs (of {o['runs']}; {o['counts']})")


