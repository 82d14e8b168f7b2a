"""``reproduce``, ``claims``, ``seeds`` and ``report``: the whole paper into one folder, and what it shows."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from stackedheads.publishing import references
from stackedheads.cli._app import (
    out_path,
    THREADS_HELP,
    WORKERS_HELP,
    app,
    apply_threads,
    console,
    flag,
    flag_text,
    progress_bar,
    shown,
)
from stackedheads.errors import UsageError
from stackedheads.llm.backends import BACKENDS


@contextmanager
def _llm_flags() -> Iterator[None]:
    """Errors about reproduce's LLM choice name its --llm-* flags: the fields of LLMChoice, and
    its backend's n_threads (set by --llm-threads)."""
    from stackedheads.reproduce import LLMChoice

    llm = {f.name for f in fields(LLMChoice)} | {"n_threads"}
    try:
        yield
    except UsageError as e:
        raise UsageError(flag_text(e, lambda name: flag(name, "--llm-" if name in llm else "--"))) from None


@app.command("reproduce")
def reproduce_cmd(
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke (about a minute), quick (make demo) or paper (GPU)."),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", "-o", parser=out_path, help="Output folder; re-running resumes it."),
    executor: str = typer.Option("local", "--executor", help="Where training jobs run: local or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, or 'auto'; default: a local cluster."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda, for every training stage."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 (autocast) or tf32 (CUDA matmuls), for every training stage."),
    llm_backend: Optional[str] = typer.Option(None, "--llm-backend", help=f"llm stage: {', '.join(BACKENDS)} (default: the preset's; paper: required)."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="llm stage: the model (see `llm-bench --help`)."),
    llm_mode: Optional[str] = typer.Option(None, "--llm-mode", help="llm stage: chat or completion."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="llm stage, openai: server URL."),
    llm_api_key_env: Optional[str] = typer.Option(None, "--llm-api-key-env", help="llm stage, openai: variable holding the API key (default: OPENAI_API_KEY; never written; a key of at least 8 characters is redacted from all output, a shorter one is not)."),
    llm_concurrency: Optional[int] = typer.Option(None, "--llm-concurrency", help="llm stage, openai: questions in flight (default: 1)."),
    llm_threads: Optional[int] = typer.Option(None, "--llm-threads", help="llm stage, llamacpp/hf: CPU threads (1 to 4 per core of this machine, as --threads)."),
    skip: list[str] = typer.Option([], "--skip", help="A stage to leave out (repeatable): theory, prompts, llm, figure4, circuits, emergence."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", help=THREADS_HELP),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Train seeds 0..N-1 of each transformer (circuits, emergence), N >= 2 (default: the preset's)."),
) -> None:
    """Run every stage of the paper into one folder (resumable), then write the HTML report."""
    from stackedheads import presets
    from stackedheads.claims import claims_table, collect
    from stackedheads.execution.executors import make_executor
    from stackedheads.report.html import write_report
    from stackedheads.reproduce import LLMChoice, reproduce, resolve_llm, with_seeds
    from stackedheads.state.locks import FolderLock

    chosen = with_seeds(presets.reproduce(preset), seeds)
    if (llm_backend is None) != (llm_model is None):
        raise UsageError("give --llm-backend and --llm-model together")
    given = {k: v for k, v in {"mode": llm_mode, "base_url": llm_base_url, "api_key_env": llm_api_key_env,
                               "concurrency": llm_concurrency, "threads": llm_threads}.items() if v is not None}
    choice = None
    if "llm" in skip and (given or llm_backend is not None):
        raise UsageError("--llm-* options do not apply with --skip llm")
    with _llm_flags():
        if llm_backend is not None:
            choice = LLMChoice(llm_backend, llm_model, **given)
        elif given:  # options for the preset's own model: validated (and refused where its backend lacks them) like any
            choice = replace(resolve_llm(chosen, None), **given)
        if "llm" not in skip:
            choice = resolve_llm(chosen, choice)
            choice.check()  # here, so that its errors name the --llm-* flags (reproduce() checks it again)
    from stackedheads.execution.process import check_threads

    check_threads(workers, "workers")  # processes at once: the threads rule (1 to 4 per core)
    runner = make_executor(executor, ray_address, workers=workers, threads=threads)  # validates the options
    apply_threads(threads, device or chosen.figure4.base.device)  # as train: local jobs may run in this process
    if executor == "local":
        runner = None  # reproduce trains local jobs itself, with a bar per job
    bar, factory = progress_bar("reproduce")
    updates: dict = {}

    def progress(label: str, done: int, total: int) -> None:
        if label not in updates:
            updates[label] = factory(label)
        updates[label](done, total)

    with bar:
        summary = reproduce(
            chosen, out, progress=progress, executor=runner, device=device, dtype=dtype, llm=choice, skip=tuple(skip),
            workers=workers, threads=threads,
        )
    with FolderLock(out, "report"):
        report = write_report(out, references.results_dir())
    table = Table(title=f"reproduce --preset {preset}")
    for col in ("stage", "wall time", "state"):
        table.add_column(col)
    for name, stage in summary["stages"].items():
        table.add_row(name, f"{stage['wall_s']:.1f} s", "done earlier" if stage.get("already_done") else "ran now")
    Console().print(table)
    Console().print(claims_table(collect(out)))
    console.print(f"report: {shown(report)}")


def _id_ranges(ids: list[str]) -> str:
    """Claim ids with consecutive numbers of one letter as a range: L1, L2, T1, T2, T3 -> "L1-L2, T1-T3"."""
    import re

    groups: list[list[tuple[str, int]]] = []
    for cid in ids:
        m = re.fullmatch(r"([A-Za-z]+)(\d+)", cid)
        key = (m.group(1), int(m.group(2))) if m else (cid, -1)
        if groups and m and groups[-1][-1][0] == key[0] and groups[-1][-1][1] == key[1] - 1:
            groups[-1].append(key)
        else:
            groups.append([key])
    return ", ".join(f"{g[0][0]}{g[0][1]}" + (f"-{g[-1][0]}{g[-1][1]}" if len(g) > 1 else "") if g[0][1] >= 0 else g[0][0]
                     for g in groups)


@app.command("claims")
def claims_cmd(
    run_dir: Path = typer.Argument(..., help="A `reproduce`, `sweep figure4`, `sweep depth` or `llm-compare` folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the claims as a JSON list instead of a table."),
    readings: bool = typer.Option(False, "--readings", help="Also print each claim's readings x seeds table (docs/verdicts.md, 'Readings')."),
    reading: list[str] = typer.Option([], "--reading", help="Only these readings in the readings table (repeatable), e.g. --reading first-path."),
) -> None:
    """Re-evaluate every claim of a folder from its files (no training): PASS, FAIL, INCONCLUSIVE or NOT RUN,
    under the primary reading, with whether every reading of the paper agrees."""
    from stackedheads.claims import NOT_RUN, claims_table, folder_claims, readings_table, seeds_table
    from stackedheads.claims.readings import check_names

    check_names(reading)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder")
    found = folder_claims(run_dir)
    _note_absent_readings(run_dir, found, reading)
    if as_json:
        # --reading filters as the readings table does: the claims with one of those readings,
        # each with those readings only (its verdicts stay those over every reading)
        data = [c.to_dict() for c in found if not reading or any(r.reading in reading for r in c.readings)]
        for d in data if reading else ():
            d["readings"] = [r for r in d["readings"] if r["reading"] in reading]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    held = [c for c in found if c.verdict != NOT_RUN]  # the claims this folder's files can judge
    Console().print(claims_table(held or found, f"claims of {shown(run_dir)}"))
    if held and len(held) < len(found):
        others = _id_ranges([c.id for c in found if c.verdict == NOT_RUN])
        print(f"NOT RUN (nothing in this folder measures them): {others}")
    for table in seeds_table(found):  # a section judged over several seeds: its verdicts seed by seed
        Console().print(table)
    if readings or reading:
        for table in readings_table(found, reading):
            Console().print(table)


def _note_absent_readings(run_dir: Path, found: list, asked: list[str]) -> None:
    """One line on stderr for the asked readings no claim of ``run_dir`` has (a Section 8 folder
    has no first-path), naming those its claims have: an empty table or JSON list is then no
    mystery, and stdout stays the table or the JSON."""
    have = sorted({r.reading for c in found for r in c.readings})
    absent = [name for name in dict.fromkeys(asked) if name not in have]
    if absent:
        which = f"its claims' readings are {', '.join(have)}" if have else "its claims have no readings"
        print(f"stackedheads: note: no claim in {run_dir} has the reading {' or '.join(absent)}; {which}", file=sys.stderr)


@app.command("seeds")
def seeds_cmd(
    folders: list[Path] = typer.Argument(..., help="Folders with circuits/ or emergence/ stages (reproduce folders, results/sec8/gpt2, ...): several are set side by side."),
    label: list[str] = typer.Option([], "--label", help="A name per folder, in order (default: the folder's name)."),
    as_json: bool = typer.Option(False, "--json", help="Print the seeds, distributions and comparison as JSON."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print Markdown tables instead of the console's."),
) -> None:
    """Sections 8-9 seed by seed: final MSE, loss drops, plateau, circuit and each claim's verdict per seed, the
    distribution beside the paper, and which run (recipe) is closer to it."""
    from stackedheads import recipe_screen

    runs = recipe_screen.collect_seeds(folders, label)
    comparison = recipe_screen.compare(runs)  # refuses two runs under one label before anything is printed
    if as_json:
        data = {"runs": [r.to_dict() for r in runs], "paper": recipe_screen.PAPER, "comparison": comparison,
                "screen": recipe_screen.screen(runs)}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    if as_markdown:
        sys.stdout.write(recipe_screen.markdown(runs))
        return
    from stackedheads.recipe_screen.render import print_console

    print_console(runs, comparison, Console())


@app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="A folder written by `stackedheads reproduce`."),
) -> None:
    """Write DIR/report/index.html: claims vs measurements, every figure, configs and versions (offline)."""
    from stackedheads.report.html import check_folder, write_report
    from stackedheads.state.locks import FolderLock

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder")
    check_folder(run_dir)  # before the lock: a refused folder keeps no .lock
    with FolderLock(run_dir, "report", elsewhere=None):  # not while `reproduce` writes the folder (and its report)
        path = write_report(run_dir, references.results_dir())
    console.print(f"report: {shown(path)}")
