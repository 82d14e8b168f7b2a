"""``metrics.csv`` (one row per evaluated step and seed) and ``summary.json`` (per seed, the
final val loss: the mean over the last ``final_window`` steps, each evaluated, Sec. 7.1)."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.storage import atomic_write_json, atomic_write_text, read_state_json
from stackedheads.training.checkpoints import list_checkpoints
from stackedheads.training.config import TrainConfig


def metric_columns(cfg: TrainConfig) -> list[str]:
    parts = [f"val_x{j}" for j in range(1, cfg.task.depth + 1)] if cfg.task.ic else [f"val_x{cfg.task.depth}"]
    return ["step", "seed", "train_loss", "val_loss", *parts, "wall_s"]


def _parse_row(r: dict) -> dict | None:
    try:
        return {k: (int(v) if k in ("step", "seed") else float(v)) for k, v in r.items()}
    except (TypeError, ValueError):
        return None


def read_metrics(run_dir: Path) -> list[dict]:
    """Rows of metrics.csv; a last line cut off by a crash (no newline) is ignored."""
    path = Path(run_dir) / "metrics.csv"
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        parsed = _parse_row(r)
        if parsed is None or None in r:
            raise UsageError(f"{path} has a malformed row at step {r.get('step')!r}; delete the folder to retrain")
        rows.append(parsed)
    return rows


def truncate_metrics(path: Path, last_step: int, columns: list[str]) -> None:
    """Drop rows past the checkpoint we resume from (they will be produced again), and a
    partial last line left by a crash mid-write."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        parsed = _parse_row(r)
        if parsed is not None and None not in r and parsed["step"] <= last_step:
            rows.append(r)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)

    atomic_write_text(path, buf.getvalue())


def summarize(run_dir: Path, cfg: TrainConfig) -> dict:
    """Per seed: final val loss = mean over the last ``final_window`` steps (Section 7.1)."""
    rows = read_metrics(run_dir)
    first_tail = cfg.steps - cfg.final_window + 1
    parts = [c for c in metric_columns(cfg) if c.startswith("val_x")]
    per_seed = {}
    for seed in cfg.seeds:
        tail = [r for r in rows if r["seed"] == seed and r["step"] >= first_tail]
        if not tail:
            raise UsageError(f"{run_dir}: metrics.csv has no final-window rows for seed {seed}; delete the folder to retrain")
        per_seed[str(seed)] = {
            "final_val_loss": sum(r["val_loss"] for r in tail) / len(tail),
            "final_partial": {p: sum(r[p] for r in tail) / len(tail) for p in parts},
            "steps_averaged": len(tail),
        }
    wall = max((r["wall_s"] for r in rows), default=0.0)
    return {"config": cfg.to_dict(), "seeds": per_seed, "wall_s": wall}


def run_is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / "summary.json").exists()


def read_summary(run_dir: Path, cfg: TrainConfig) -> dict:
    """summary.json; when it is damaged but the run reached its last step, it is rebuilt from
    metrics.csv rather than lost."""
    run_dir = Path(run_dir)
    path = run_dir / "summary.json"
    try:
        summary = read_state_json(path, "a training run's summary")
        seeds = summary.get("seeds")
        if not isinstance(seeds, dict) or not all(
            isinstance(seeds.get(str(s)), dict) and isinstance(seeds[str(s)].get("final_val_loss"), (int, float))
            and isinstance(seeds[str(s)].get("final_partial"), dict)
            for s in cfg.seeds
        ):
            raise UsageError(f"{path} has the wrong shape (no final losses for seeds {list(cfg.seeds)}): delete it to rebuild it")
        return summary
    except UsageError:
        ckpts = list_checkpoints(run_dir)
        if not ckpts or ckpts[-1][0] != cfg.steps:
            raise
        print(f"warning: {run_dir / 'summary.json'} was damaged; rebuilt from metrics.csv", file=sys.stderr)
        summary = summarize(run_dir, cfg)
        atomic_write_json(run_dir / "summary.json", summary)
        return summary
