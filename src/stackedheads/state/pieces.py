"""One result trained in pieces: training runs that hold different seeds of the same settings.

A paper-size training is longer than a session of a 2-core CPU (transformer D's four seeds, or
one of transformers A-C's 24,000-step seeds), so it is trained a seed or two
per run and the runs are read as one result. A stage folder keeps its training run at
``runs/<name>`` (:func:`stackedheads.state.layout.training_run`) and further pieces beside it at
``runs/<name>-<anything>`` (``runs/transformer-D-seed2``); the stage's readers (``claims``,
``seeds`` and the report's verdicts) go through :func:`combine`; ``publish`` of the stage's
folder keeps every piece's small files. A piece without its summary.json (still training) is
not part of the result: :func:`unfinished` names it.

Pieces combine when their settings are the same except for how they ran: the seeds (which must
not overlap), the thread count, ``compile``, ``cuda_graph`` and the device (each changes a loss only to
rounding), and whether every checkpoint was kept. Anything else that differs (the dtype, a schedule, the training set) makes them two
results, refused in one line that names the first settings that differ.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.write import flat, read_state_json

# How a piece ran, not what it trained: free to differ between the pieces of one result.
EXECUTION = ("seeds", "threads", "compile", "cuda_graph", "device", "keep_checkpoints")


def piece_dirs(stage_dir: Path, name: str) -> list[Path]:
    """The training runs of one stage: ``runs/<name>`` first, then ``runs/<name>-*`` by name."""
    runs = Path(stage_dir) / "runs"
    extra = sorted(p for p in runs.glob(f"{name}-*") if p.is_dir()) if runs.is_dir() else []
    return [p for p in [runs / name, *extra] if p.is_dir()]


def unfinished(stage_dir: Path, name: str) -> list[Path]:
    """The stage's pieces that have started (config.json) but not finished (no summary.json)."""
    return [d for d in piece_dirs(stage_dir, name) if (d / "config.json").exists() and not (d / "summary.json").exists()]


def _normalised(config: dict, where: Path) -> dict:
    """A run's config as today's code writes it (a field added since it was written gets the
    default that means "as before"), less the execution fields."""
    from stackedheads.training.config import TrainConfig  # torch: only when pieces are compared

    try:
        d = TrainConfig.from_dict(config).to_dict()
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return {k: v for k, v in flat(json.loads(json.dumps(d))).items() if k not in EXECUTION}


def differences(a: dict, b: dict, where_a: Path, where_b: Path) -> list[str]:
    """``key: a, b`` for each setting (dotted) in which two runs' configs differ, execution aside."""
    fa, fb = _normalised(a, where_a), _normalised(b, where_b)
    return [f"{k}: {fa.get(k, '(none)')} and {fb.get(k, '(none)')}" for k in dict.fromkeys([*fa, *fb])
            if fa.get(k, "(none)") != fb.get(k, "(none)")]


def combine(pieces: list[tuple[Path, dict]]) -> dict | None:
    """One training summary from the pieces' ``summary.json`` (``config``, ``seeds``,
    ``wall_s``), in order: the first piece's config with every seed, the seeds side by side,
    the wall times added, and ``pieces`` naming the folders. None when there is none; one
    piece is returned as it is. Refuses pieces of different settings or sharing a seed."""
    if not pieces:
        return None
    if len(pieces) == 1:
        return pieces[0][1]
    (first_dir, first), seen = pieces[0], {}
    for i, (d, s) in enumerate(pieces):
        if i:
            diff = differences(first["config"], s["config"], first_dir, d)
            if diff:
                raise UsageError(f"{d} and {first_dir} are not pieces of one result: their settings differ "
                                 f"({'; '.join(diff[:3])}{f'; {len(diff) - 3} more' if len(diff) > 3 else ''})")
        for seed in s["seeds"]:
            if seed in seen:
                raise UsageError(f"{d} and {seen[seed]} both hold seed {seed}: a seed belongs to one piece")
            seen[seed] = d
    seeds = sorted(seen, key=int)
    merged = {seed: next(s["seeds"][seed] for d, s in pieces if seed in s["seeds"]) for seed in seeds}
    config = {**first["config"], "seeds": [int(x) for x in seeds]}
    # The config stays the first piece's (a valid TrainConfig); ``devices`` names every piece's
    # device, the one execution field a reader of the result is shown (a CPU seed beside GPU ones).
    devices = list(dict.fromkeys(str(s["config"].get("device", "cpu")) for _, s in pieces))
    wall = sum(float(s.get("wall_s") or 0.0) for _, s in pieces)
    return {**first, "config": config, "seeds": merged, "wall_s": wall, "pieces": [d.name for d, _ in pieces], "devices": devices}


@dataclass(frozen=True)
class Result:
    """A stage's pieces as one result: the finished pieces' summaries combined (None when none has
    finished) and the pieces still training (started, no summary.json)."""

    summary: dict | None
    unfinished: list[Path]


def read_result(stage_dir: Path, name: str, check: Callable[[Path, dict], None] | None = None) -> Result:
    """The one rule for a stage trained in pieces, for every reader and ``publish``: each finished
    piece's summary.json must be a training summary (``config`` and ``seeds``), and the pieces
    combine (:func:`combine`: the same settings, no seed twice), else one line; the pieces still
    training are named (``publish`` refuses them, a reader says it does not count them). A
    summary's wall time, where it has one, is a number of seconds >= 0. ``check(path, summary)``:
    a reader's own check of each summary, before the pieces combine."""
    done = []
    for d in piece_dirs(stage_dir, name):
        if not (d / "summary.json").exists():
            continue
        s = read_state_json(d / "summary.json", "a training summary")
        if not isinstance(s, dict) or not isinstance(s.get("config"), dict) or not isinstance(s.get("seeds"), dict):
            raise UsageError(f"{d / 'summary.json'} is no training summary (it needs 'config' and 'seeds')")
        wall = s.get("wall_s", 0.0)
        if not isinstance(wall, (int, float)) or isinstance(wall, bool) or not math.isfinite(wall) or wall < 0:
            raise UsageError(f"{d / 'summary.json'}: 'wall_s' is no wall time in seconds ({str(wall)[:30]})")
        if check is not None:
            check(d / "summary.json", s)
        done.append((d, s))
    return Result(combine(done), unfinished(stage_dir, name))
