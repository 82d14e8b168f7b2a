"""``stackedheads reproduce``: every stage of the paper, in order, into one folder.

Stages, each in its own sub-folder (``out/<stage>/``):

1. ``theory``    -- the information-flow table and plot (Section 5, Appendix B);
2. ``prompts``   -- sample questions of the five formulations (Section 4, Appendix A);
3. ``llm``       -- the LLM benchmark (Section 4, Figure 2);
4. ``figure4``   -- the IC vs non-IC sweep over layers and seeds, claims C1-C3 (Section 7);
5. ``circuits``  -- transformers A to C: training, attention maps (Appendix C) and the
   discovered circuits (Section 8, Figure 5, Appendix E);
6. ``emergence`` -- transformer D: training with dense checkpoints, its circuit, and the
   attention per path across checkpoints (Section 9, Figures 6-7, Appendix D).

A stage writes ``done.json`` (its summary, wall time and the files it wrote) last, so re-running
skips finished stages, unless one of those files is missing or damaged: then the stage runs
again and rebuilds it (:class:`~stackedheads.state.write.RunFolder`). An interrupted stage resumes
from what it left (training checkpoints, the benchmark's per-sample log, finished sweep runs).
The HTML report (:mod:`stackedheads.report.html`) is written
from the folder afterwards (the CLI does it); this module never imports the report, and the
names both use live in :mod:`stackedheads.state.layout`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from stackedheads import theory
from stackedheads.state import layout
from stackedheads.errors import UsageError, public_url
from stackedheads.execution.executors import Executor, Job, LocalExecutor, run_dir
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN, stage_done
from stackedheads.state.read import read_state_json
from stackedheads.state.write import RunFolder, atomic_write_text
from stackedheads.sweeps.figure4 import Figure4Spec
from stackedheads.tasks import prompts
from stackedheads.training import TrainConfig

# progress(label, done, total): one call per unit of work, for one display of the whole run.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class LLMChoice:
    """Which language model the ``llm`` stage asks (Section 4). No secrets: the API key is read
    from the environment variable named by ``api_key_env``."""

    backend: str = "llamacpp"
    model: str = "smollm2"
    mode: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 1
    threads: int | None = None

    def __post_init__(self) -> None:  # before reproduce() writes anything
        from stackedheads.llm.backends._base import check_env_name

        check_env_name(self.api_key_env)  # a key typed here reached config.json, summary.json and the report
        if self.concurrency < 1:
            raise UsageError(f"'concurrency' must be >= 1, got {self.concurrency}", fields=("concurrency",))
        from stackedheads.execution.process import check_threads

        check_threads(self.threads)  # one rule for every verb that takes threads

    def check(self) -> None:
        """Refuse now what would stop the llm stage at once: config.json records the choice
        before the stages run, and a corrected re-run must not find another choice there."""
        from stackedheads.llm.backends import check_backend

        check_backend(self.backend, llm_models(self), self.backend_options())

    def backend_options(self) -> dict:
        """What this choice sets for its backend; None (or this class's default) leaves the
        backend's own default, since a backend refuses options it does not take."""
        return {
            "mode": self.mode, "base_url": self.base_url, "n_threads": self.threads,
            "api_key_env": None if self.api_key_env == LLMChoice.api_key_env else self.api_key_env,
            "concurrency": None if self.concurrency == LLMChoice.concurrency else self.concurrency,
        }

    def public(self) -> dict:
        """The choice as it may be written: no credentials in the URL."""
        return {**asdict(self), "base_url": public_url(self.base_url)}


def _write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2))


@dataclass(frozen=True)
class LLMStage:
    n: int  # questions per formulation at its default depth (Sec. 4: 500)
    few_shot: int = 3
    max_draws: int = 10
    max_tokens: int = 16
    equation_depths: tuple[int, ...] = ()  # Fig. 2 right: equations accuracy vs D
    # ``model`` may name several models, comma-separated: one sub-folder each, one Figure 2.
    model: LLMChoice | None = field(default_factory=LLMChoice)  # None: the user must name one
    other_depths: tuple[int, ...] = ()  # the other variable-depth formulations' accuracy vs D (kingdoms: D <= 5)
    depth_n: int | None = None  # questions per cell of the D sweeps (None: n)


@dataclass(frozen=True)
class ReproducePreset:
    name: str
    theory_max_depth: int
    prompts_per_formulation: int
    llm: LLMStage
    figure4: Figure4Spec  # the Figure 4 grid
    circuits: TrainConfig  # transformers A-C (one ensemble member each)
    emergence: TrainConfig  # transformer D (dense checkpoints)
    circuits_seeds: tuple[int, ...] = (0, 1, 2)
    emergence_seeds: tuple[int, ...] = (0, 1, 2, 3)  # Sec. 9 trains one transformer D; judged over four seeds as results/sec9 is
    maps_seqs: int = 4
    emergence_seqs: int = 32  # Sec. 9.1: 32 input sequences
    seed: int = 0
    # Circuit discovery's loss budget per chain position: App. E's absolute threshold (0.05) for
    # the paper's models; None: each position's unablated loss + circuit_tolerance (CPU twins,
    # whose losses are far above the paper's; the report states which was used).
    circuit_threshold: float | None = None
    circuit_tolerance: float = 0.04


@dataclass
class Context:
    """What every stage gets besides the preset."""

    executor: Executor | None = None
    progress: Progress | None = None
    device: str | None = None
    dtype: str | None = None
    llm: LLMChoice | None = None
    workers: int | None = None  # local executor: jobs at once, threads each
    threads: int | None = None

    def tick(self, label: str) -> Callable[[int, int], None] | None:
        return (lambda done, total: self.progress(label, done, total)) if self.progress else None

    def train_config(self, base: TrainConfig, seeds: tuple[int, ...]) -> TrainConfig:
        over = {k: v for k, v in (("device", self.device), ("dtype", self.dtype)) if v is not None}
        return replace(base, seeds=seeds, **over)

    def executor_for(self, stage: str) -> Executor:
        """The run's executor; by default this process, with a progress bar per job."""
        return self.executor or LocalExecutor(lambda job: self.tick(f"{stage}: {job.name}"), self.workers, self.threads)


# --- stages: (preset, stage folder, context) -> summary (JSON) -----------------------------------


def stage_theory(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    rows = theory.theory_table(preset.theory_max_depth)
    return {"rows": len(rows), "files": theory.save_table(rows, out)}


def stage_prompts(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    counts = {}
    for form in prompts.FORMULATIONS:
        qs = prompts.generate_many(form, n=preset.prompts_per_formulation, seed=preset.seed)
        atomic_write_text(out / f"{form}.jsonl", "".join(json.dumps(q.to_dict()) + "\n" for q in qs))
        counts[form] = len(qs)
    return {"questions": counts}


def llm_models(choice: LLMChoice) -> list[str]:
    """The models of an LLM choice: ``model`` may be a comma-separated list."""
    names = [m.strip() for m in choice.model.split(",") if m.strip()]
    if not names:
        raise UsageError("'model' is empty", fields=("model",))
    return list(dict.fromkeys(names))


def llm_configs(spec: LLMStage, seed: int) -> list:
    """The benchmark passes of the stage: every formulation at the paper's depths, then
    the D sweeps (they share the D = 5 questions, asked once)."""
    from stackedheads.llm.bench import BenchConfig
    from stackedheads.llm.compare import depth_formulations

    common = {"seed": seed, "few_shot": spec.few_shot, "max_draws": spec.max_draws, "max_tokens": spec.max_tokens}
    configs = [BenchConfig(n=spec.n, **common)]
    dn = spec.depth_n or spec.n
    if spec.equation_depths:
        configs.append(BenchConfig(formulations=("equations",), depths=spec.equation_depths, n=dn, **common))
    for form in depth_formulations():
        if form == "equations":  # swept above, over its own depths (Fig. 2 right)
            continue
        depths = tuple(d for d in spec.other_depths if d <= prompts.max_depth(form))
        if depths:
            configs.append(BenchConfig(formulations=(form,), depths=depths, n=dn, **common))
    return configs


def stage_llm(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    from stackedheads.llm.backends import BACKENDS, make_backend
    from stackedheads.llm.bench import plan, run_bench
    from stackedheads.llm.compare import compare, model_dir_name

    spec, choice = preset.llm, ctx.llm
    assert choice is not None  # resolve_llm() ran before any stage
    names = llm_models(choice)
    configs = llm_configs(spec, preset.seed)
    per_model = sum(len(plan(c)) for c in configs)
    total = per_model * len(names)
    options = choice.backend_options()
    if choice.backend == "llamacpp" and choice.threads is None:
        # Every core the process may use, as training takes (llama.cpp's own default is half of
        # them), whatever else is running; recorded with the run.
        from stackedheads.execution.process import default_threads

        options["n_threads"] = default_threads("cpu")
    info = {**choice.public(), "threads": options["n_threads"]}  # what is written: the backend gets the URL as given
    # One model: the run folder is the stage folder itself; several: a sub-folder each.
    folders = {m: out if len(names) == 1 else out / model_dir_name(m) for m in names}
    prepare = BACKENDS[choice.backend].prepare
    if prepare is not None:
        for m in names:  # e.g. a download, done before the questions are timed
            prepare(m, (lambda label, d, t: ctx.progress(f"llm: {label}", d, t)) if ctx.progress else None)
    tick = ctx.tick("llm: questions")
    offset = 0
    wall: dict[str, float] = {}
    for m in names:
        t0 = time.perf_counter()
        for cfg in configs:
            # A backend is closed at the end of a run, so each pass gets its own.
            engine = make_backend(choice.backend, m, **options)
            run_bench(
                engine, cfg, folders[m], backend_info={**info, "model": m},
                progress=(lambda d, _t, o=offset: tick(o + d, total)) if tick else None,
            )
            offset += len(plan(cfg))
        wall[m] = round(time.perf_counter() - t0, 3)
    comparison = compare(list(folders.values()), out)
    return {
        "model": info,
        "models": names,
        "accuracy": {r["model"]: {f: s["accuracy"] for f, s in r["per_formulation"].items()} for r in comparison["models"]},
        "chance": {f: s["chance"] for f, s in comparison["models"][0]["per_formulation"].items()},
        "questions": total,
        "questions_per_model": per_model,
        "wall_s_per_model": wall,
        "s_per_question": {m: round(wall[m] / per_model, 3) for m in names},
    }


def stage_figure4(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    from stackedheads.sweeps import figure4
    from stackedheads.claims import sec7

    spec = preset.figure4.on(ctx.device, ctx.dtype)
    figure4.run_figure4(spec, out, ctx.executor_for("figure4"))
    return {"claims": {k: v["verdict"] for k, v in sec7.write_claims(out).items()}}


def _discover(preset: ReproducePreset, run: Path, out: Path) -> dict:
    from stackedheads.circuits.discover import DiscoverConfig, discover_run

    cfg = DiscoverConfig(tolerance=preset.circuit_tolerance, threshold=preset.circuit_threshold)
    return {str(seed): d.summary() for seed, d in discover_run(run, out, cfg=cfg).items()}


def stage_circuits(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    from stackedheads.circuits.maps import attention_maps

    cfg = ctx.train_config(preset.circuits, preset.circuits_seeds)
    job = Job(CIRCUITS_RUN, "ic", cfg)
    ctx.executor_for("circuits").run([job], out)
    run = run_dir(out, job)
    for seed in cfg.seeds:  # Appendix C: one set of maps per transformer
        attention_maps(run, layout.maps(out) / f"seed{seed}", seqs=preset.maps_seqs, seed=seed)
    discovered = _discover(preset, run, layout.discovered(out))
    return {"run": str(run.relative_to(out)), "train": read_state_json(run / "summary.json", "training summary"), "circuits": discovered}


def _same_training(run: Path, cfg: TrainConfig) -> bool:
    """Whether ``run`` is a finished training of exactly ``cfg`` (its threads and an "auto" dtype
    as the run resolved them: what this process would resolve them to)."""
    if not (run / "summary.json").is_file():
        return False
    try:
        stored = TrainConfig.from_dict(read_state_json(run / "config.json", "a training configuration"), run / "config.json")
    except UsageError:
        return False
    return cfg.resolved(stored) == stored


def _link_run(source: Path, dest: Path) -> None:
    """``dest`` as a copy of the finished run folder ``source``: its checkpoints as hard links
    where the file system allows them (a checkpoint is replaced, never written in place), every
    other file copied (a resumed run appends to its logs). Written into a temporary sibling and
    renamed, so an interrupted copy leaves no partial run behind."""
    import os
    import shutil

    tmp = dest.with_name(dest.name + ".linking")
    shutil.rmtree(tmp, ignore_errors=True)

    def link(src: str, dst: str) -> None:
        if src.endswith(".safetensors"):
            try:
                os.link(src, dst)
                return
            except OSError:  # another file system, or no hard links: a copy
                pass
        shutil.copy2(src, dst)

    shutil.copytree(source, tmp, copy_function=link, ignore=shutil.ignore_patterns(".*"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)


def stage_emergence(preset: ReproducePreset, out: Path, ctx: Context) -> dict:
    from stackedheads.emergence.timeline import emergence_run

    cfg = ctx.train_config(preset.emergence, preset.emergence_seeds)
    job = Job(EMERGENCE_RUN, "ic", cfg)
    # A D twin trained exactly as the circuits stage's A-C twin (the quick preset: the same
    # models, checkpointed every 10 steps) is that run: its files are taken, not trained again.
    shared = layout.training_run(out.parent / "circuits", CIRCUITS_RUN)
    if not run_dir(out, job).exists() and _same_training(shared, cfg):
        _link_run(shared, run_dir(out, job))
    ctx.executor_for("emergence").run([job], out)
    run = run_dir(out, job)
    discovered = _discover(preset, run, layout.discovered(out))
    summary = emergence_run(run, layout.timeline(out), layout.discovered(out), n_seqs=preset.emergence_seqs)
    return {
        "run": str(run.relative_to(out)),
        "train": read_state_json(run / "summary.json", "training summary"),
        "circuits": discovered,
        "ordering": summary["ordering"],
    }


def _unfinish_runs(stage: RunFolder) -> None:
    """A training run (``runs/<name>``) holding a file the stage's done marker vouched for that is
    now missing or damaged is no longer finished: its summary.json goes, so that the stage trains
    it again (from its checkpoints where they are kept) and the file is rebuilt."""
    for bad in stage.missing_files:
        run = next((p for p in bad.parents if p.parent.name == "runs" and stage.path in p.parents), None)
        if run is not None:
            (run / "summary.json").unlink(missing_ok=True)


# The stages that train: a device or dtype applies to them alone.
TRAINING_STAGES = ("figure4", "circuits", "emergence")

STAGES: dict[str, Callable[[ReproducePreset, Path, Context], dict]] = {
    "theory": stage_theory,
    "prompts": stage_prompts,
    "llm": stage_llm,
    "figure4": stage_figure4,
    "circuits": stage_circuits,
    "emergence": stage_emergence,
}


# Sections 8-9 are judged over the trained transformers, never on one: Sec. 8.2 states A2-A5 for
# "all transformers" (three in the paper) and Sec. 9 E1-E4 for a model whose seed is not chosen.
MIN_TWIN_SEEDS = 2


def check_twin_seeds(preset: ReproducePreset, skip: tuple[str, ...] = ()) -> None:
    """Refuse a preset whose circuits or emergence stage (when not skipped) trains fewer than
    :data:`MIN_TWIN_SEEDS` seeds, or repeats a seed: a verdict judged over seeds needs several."""
    for stage, seeds in (("circuits", preset.circuits_seeds), ("emergence", preset.emergence_seeds)):
        if stage in skip:
            continue
        if len(set(seeds)) != len(seeds) or len(seeds) < MIN_TWIN_SEEDS:
            raise UsageError(
                f"the {stage} stage judges its claims over seeds and needs at least {MIN_TWIN_SEEDS} distinct "
                f"seeds, got {list(seeds)}", fields=("seeds",),
            )


def with_seeds(preset: ReproducePreset, n: int | None) -> ReproducePreset:
    """The preset with seeds 0..n-1 for both trained stages (None: the preset's own)."""
    if n is None:
        return preset
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_TWIN_SEEDS:
        raise UsageError(f"'seeds' must be a whole number >= {MIN_TWIN_SEEDS} (the claims are judged over seeds), got {n!r}", fields=("seeds",))
    seeds = tuple(range(n))
    return replace(preset, circuits_seeds=seeds, emergence_seeds=seeds)


def resolve_llm(preset: ReproducePreset, choice: LLMChoice | None) -> LLMChoice:
    """The user's model, else the preset's; the paper preset has none of its own."""
    if choice is not None:
        return choice
    if preset.llm.model is None:
        raise UsageError(
            f"the {preset.name} preset benchmarks a model you name: give its 'backend' and 'model' "
            "(e.g. 'backend' openai 'model' gpt-4o), or 'skip' llm", fields=("backend", "model", "skip"),
        )
    return preset.llm.model


def reproduce(
    preset: ReproducePreset,
    out_dir: str | Path,
    progress: Progress | None = None,
    executor: Executor | None = None,
    device: str | None = None,
    dtype: str | None = None,
    llm: LLMChoice | None = None,
    skip: tuple[str, ...] = (),
    workers: int | None = None,
    threads: int | None = None,
) -> dict:
    """Run every stage not yet done (and not skipped) into ``out_dir``.

    Training jobs run on ``executor`` (default: this machine, ``workers`` processes of ``threads``
    threads, see :class:`~stackedheads.execution.executors.LocalExecutor`). Returns ``summary.json``.
    """
    unknown = [s for s in skip if s not in STAGES]
    if unknown:
        raise UsageError(f"unknown stage {unknown[0]!r} in 'skip'; stages are {', '.join(STAGES)}", fields=("skip",))
    check_twin_seeds(preset, skip)
    choice = None if "llm" in skip else resolve_llm(preset, llm)
    if choice is not None:
        choice.check()  # before anything is written
    ctx = Context(executor, progress, device, dtype, choice, workers, threads)
    # Bad --device / --dtype fail here, not after the stages before training have run.
    ctx.train_config(preset.circuits, preset.circuits_seeds)
    if device is not None and device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("'device' cuda was asked for but no CUDA device is available", fields=("device",))
    out = Path(out_dir)
    folder = RunFolder(out, "reproduce run")
    with folder.lock("reproduce"):  # a second process on the folder gets one line
        return _reproduce_locked(preset, folder, ctx, choice, device, dtype, skip, progress)


def _reproduce_locked(preset, folder: RunFolder, ctx: Context, choice, device, dtype, skip, progress) -> dict:
    out = folder.path
    config = {
        "preset": json.loads(json.dumps(asdict(preset))),
        "llm": choice.public() if choice else None,
        "device": device,
        "dtype": dtype,
    }
    config_path = out / "config.json"
    old = folder.recorded("config.json", "the run's configuration")
    if old is not None:
        shapes = {"preset": (dict,), "llm": (dict, type(None)), "device": (str, type(None)), "dtype": (str, type(None))}
        wrong = [k for k, types in shapes.items() if not isinstance(old.get(k), types)]
        if wrong:
            raise UsageError(f"{config_path} has the wrong shape ({', '.join(wrong)}): delete it and run again (finished stages are kept)")
        folder.require_same(old["preset"], config["preset"], "another preset")
        started = [n for n in TRAINING_STAGES if (out / n).exists()]
        for key in ("llm", "device", "dtype"):
            # A skipped or earlier-finished stage may leave a value unset: fill it, never change it.
            # Unset, the device and dtype are the preset's, which every training stage begun already uses.
            if old.get(key) is not None and config[key] is not None:
                folder.require_same({key: old[key]}, {key: config[key]}, "other settings")
            elif key != "llm" and old.get(key) is None and config[key] is not None and started:
                raise UsageError(f"{out} holds stages begun with the preset's {key} ({', '.join(started)}): resume it "
                                 f"without --{key}, or choose another 'out'", fields=("out",))
            config[key] = old.get(key) if config[key] is None else config[key]
    _write_json(config_path, config)

    stages: dict[str, dict] = {}
    names = [n for n in STAGES if n not in skip]
    started = time.perf_counter()
    for i, name in enumerate(names):
        if progress:
            progress("stages", i, len(names))
        stage = RunFolder(out / name)
        saved = stage_done(stage, name)
        if saved is not None:
            stages[name] = {**saved, "already_done": True}
            continue
        _unfinish_runs(stage)
        stage.path.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        result = STAGES[name](preset, stage.path, ctx)
        result["wall_s"] = round(time.perf_counter() - t0, 3)
        stage.mark_done(result)
        stages[name] = result
    if progress:
        progress("stages", len(names), len(names))
    summary = {
        "preset": preset.name,
        "stages": stages,
        "skipped_stages": list(skip),
        "wall_s_this_invocation": round(time.perf_counter() - started, 3),
    }
    _write_json(out / "summary.json", summary)
    return summary
