"""``stackedheads reproduce``: every stage of the paper, in order, into one folder.

Each stage writes its own sub-folder and a ``done.json`` marker last, so re-running skips what
is finished and redoes only an interrupted stage. Stages grow as the project does; today:

1. ``theory``  -- the information-flow table and plot (Section 5, Appendix B);
2. ``prompts`` -- sample questions of the five formulations (Section 4, Appendix A);
3. ``figure4`` -- the IC vs non-IC sweep over layers and seeds, with claims C1-C3 (Section 7).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stackedheads import theory
from stackedheads.errors import UsageError
from stackedheads.executors import Executor
from stackedheads.tasks import prompts


@dataclass(frozen=True)
class ReproducePreset:
    name: str
    theory_max_depth: int
    prompts_per_formulation: int
    seed: int = 0


PRESETS = {
    "smoke": ReproducePreset("smoke", theory_max_depth=6, prompts_per_formulation=2),
    "quick": ReproducePreset("quick", theory_max_depth=20, prompts_per_formulation=5),
    "paper": ReproducePreset("paper", theory_max_depth=50, prompts_per_formulation=500),
}


def get_preset(name: str) -> ReproducePreset:
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def stage_theory(preset: ReproducePreset, out: Path, executor: Executor | None) -> dict:
    rows = theory.theory_table(preset.theory_max_depth)
    with open(out / "theory.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r.to_dict()) + "\n")
    figures = theory.plot_theory(rows, out)
    return {"rows": len(rows), "figures": figures}


def stage_figure4(preset: ReproducePreset, out: Path, executor: Executor | None) -> dict:
    from stackedheads import sweep

    result = sweep.run_figure4(sweep.figure4_spec(preset.name), out, executor)
    return {"claims": {k: v["pass"] for k, v in result.items()}}


def stage_prompts(preset: ReproducePreset, out: Path, executor: Executor | None) -> dict:
    counts = {}
    for form in prompts.FORMULATIONS:
        qs = prompts.generate_many(form, n=preset.prompts_per_formulation, seed=preset.seed)
        with open(out / f"{form}.jsonl", "w") as f:
            for q in qs:
                f.write(json.dumps(q.to_dict()) + "\n")
        counts[form] = len(qs)
    return {"questions": counts}


# A stage: (preset, its folder, the executor for training jobs) -> its summary.
STAGES: list[tuple[str, Callable[[ReproducePreset, Path, Executor | None], dict]]] = [
    ("theory", stage_theory),
    ("prompts", stage_prompts),
    ("figure4", stage_figure4),
]


def reproduce(
    preset_name: str,
    out_dir: str | Path,
    progress: Callable[[str], None] | None = None,
    executor: Executor | None = None,
) -> dict:
    """Run every stage not yet done into ``out_dir``; return the run's summary.

    Training jobs run on ``executor`` (default: in this process).
    """
    preset = get_preset(preset_name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "config.json"
    if config_path.exists():
        old = json.loads(config_path.read_text())
        if old.get("preset") != asdict(preset):
            raise UsageError(f"{out} holds a run of another preset; choose a new --out")
    else:
        config_path.write_text(json.dumps({"preset": asdict(preset)}, indent=2))
    stages = {}
    for name, fn in STAGES:
        stage_dir = out / name
        done = stage_dir / "done.json"
        if done.exists():
            stages[name] = {**json.loads(done.read_text()), "skipped": True}
            if progress:
                progress(f"{name}: already done")
            continue
        if progress:
            progress(f"{name}: running")
        stage_dir.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        result = fn(preset, stage_dir, executor)
        result["wall_s"] = round(time.perf_counter() - t0, 3)
        done.write_text(json.dumps(result, indent=2))
        stages[name] = result
    summary = {"preset": preset.name, "python": platform.python_version(), "stages": stages}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
