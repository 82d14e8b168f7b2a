"""``metrics.csv`` (one row per evaluated step and seed) and ``summary.json`` (per seed, the
final val loss: the mean over the last ``final_window`` steps, each evaluated, Sec. 7.1)."""

from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.read import read_state_json, read_text
from stackedheads.state.write import atomic_write_json, atomic_write_text
from stackedheads.training.checkpoints import list_checkpoints
from stackedheads.training.config import TrainConfig


def metric_columns(cfg: TrainConfig) -> list[str]:
    parts = [f"val_x{j}" for j in range(1, cfg.task.depth + 1)] if cfg.task.ic else [f"val_x{cfg.task.depth}"]
    return ["step", "seed", "train_loss", "val_loss", *parts, "wall_s"]


def _metrics_text(path: Path) -> str:
    try:
        return read_text(path, "a training run's metrics")  # bounded, regular files only, as every state read
    except UnicodeDecodeError:
        raise UsageError(f"{path} is damaged (not UTF-8 text): it is no metrics.csv this program wrote") from None


def _check_header(path: Path, header: list[str] | None, columns: list[str] | None = None) -> None:
    """The header of metrics.csv: ``columns`` where known, else step, seed, ..., wall_s."""
    if header is None:
        raise UsageError(f"{path} is empty (no header): the file is damaged; delete it and train again")
    ok = header == columns if columns is not None else header[:2] == ["step", "seed"] and "wall_s" in header
    if not ok:
        raise UsageError(f"{path}: its header {','.join(header)[:80]!r} is not that of metrics.csv "
                         f"({','.join(columns or ['step', 'seed', '...', 'wall_s'])}): the file is damaged")


def _parse_row(r: dict) -> dict | None:
    """A row's numbers; None where one is missing, not a number, or impossible (a loss or a time
    that is not finite and >= 0, a negative step or seed)."""
    try:
        row = {k: (int(v) if k in ("step", "seed") else float(v)) for k, v in r.items()}
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) and v >= 0 for v in row.values()):
        return None
    return row


def _bad_row(path: Path, n: int, r: dict) -> UsageError:
    wrong = next((f"{k} = {v!r}" for k, v in r.items() if k is not None and _parse_row({k: v}) is None), "a missing value")
    return UsageError(f"{path} row {n} (step {str(r.get('step'))[:20]!r}): {wrong[:60]} is not a finite number >= 0; the file "
                      "is damaged: delete summary.json beside it and train again (the rows are rebuilt from the checkpoint before it)")


def _finished_run(run_dir: Path) -> tuple[int, list] | None:
    """(steps, seeds) of a finished run (summary.json beside its metrics), read from config.json;
    None for a run still training, or one whose config is no training config."""
    if not (run_dir / "summary.json").exists():
        return None
    try:
        config = read_state_json(run_dir / "config.json", "a training run's configuration")
    except (OSError, UsageError):
        return None
    steps, seeds = config.get("steps"), config.get("seeds")
    if type(steps) is not int or not isinstance(seeds, list):
        return None
    return steps, seeds


def read_metrics(run_dir: Path) -> list[dict]:
    """Rows of metrics.csv, every value a finite number >= 0. A last line cut off by a crash (no
    newline) is ignored while the run trains; in a finished run the file must be whole (a
    truncated file would be judged on the rows left)."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.csv"
    text = _metrics_text(path)
    finished = _finished_run(run_dir)
    if text and not text.endswith("\n"):
        if finished is not None:
            raise UsageError(f"{path} is truncated (its last line is cut off) though the run finished: the file is damaged; "
                             "delete summary.json beside it and train again (the rows are rebuilt from the checkpoints)")
        text = text[: text.rfind("\n") + 1]
    rows = []
    reader = csv.DictReader(io.StringIO(text))
    _check_header(path, reader.fieldnames)
    for n, r in enumerate(reader, 1):
        parsed = _parse_row(r)
        if parsed is None or None in r:
            raise _bad_row(path, n, r)
        rows.append(parsed)
    if finished is not None:
        steps, seeds = finished
        missing = [s for s in seeds if max((r["step"] for r in rows if r["seed"] == s), default=0) < steps]
        if missing:
            raise UsageError(f"{path} is truncated (no row up to step {steps} for seed {missing[0]}) though the run finished: "
                             "the file is damaged; delete summary.json beside it and train again (the rows are rebuilt)")
    return rows


def covered_step(path: Path, cfg: TrainConfig) -> int:
    """The last step up to which metrics.csv holds every evaluation of every seed (rows from the
    first damaged one on do not count). A run resumes no later than this, so rows lost from a
    truncated or damaged file are trained again from a checkpoint, not the folder thrown away."""
    try:
        text = read_text(path, "a training run's metrics")
    except (OSError, UsageError, UnicodeDecodeError):
        return 0
    text = text[: text.rfind("\n") + 1]  # a last line cut off by a crash does not count
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames != metric_columns(cfg):
        return 0
    have = set()
    for r in reader:
        parsed = _parse_row(r)
        if parsed is None or None in r:
            break
        have.add((parsed["step"], parsed["seed"]))
    last = 0
    for step in range(1, cfg.steps + 1):
        if cfg.is_eval_step(step) and not all((step, s) in have for s in cfg.seeds):
            break
        last = step
    return last


def truncate_metrics(path: Path, last_step: int, columns: list[str]) -> None:
    """Drop rows past the checkpoint we resume from (they will be produced again), and a
    partial last line left by a crash mid-write."""
    if not path.exists():
        return
    text = _metrics_text(path)
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is not None:  # an empty file (a crash before its header) is rewritten whole
        _check_header(path, reader.fieldnames, columns)
    for r in reader:
        parsed = _parse_row(r)
        if parsed is None or None in r:
            break  # rows past a damaged one are not trusted (covered_step stops there too)
        if parsed["step"] <= last_step:
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
            raise UsageError(f"{run_dir}: metrics.csv has no final-window rows for seed {seed}; delete summary.json there "
                             "and train again: the rows are rebuilt from the checkpoint before them")
        per_seed[str(seed)] = {
            "final_val_loss": sum(r["val_loss"] for r in tail) / len(tail),
            "final_partial": {p: sum(r[p] for r in tail) / len(tail) for p in parts},
            "steps_averaged": len(tail),
        }
    wall = max((r["wall_s"] for r in rows), default=0.0)
    return {"config": cfg.to_dict(), "seeds": per_seed, "wall_s": wall}


def run_is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / "summary.json").exists()


def _loss(x: object) -> bool:
    """A loss this program writes: a finite number >= 0 (C0 passed on a summary's -5)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def read_summary(run_dir: Path, cfg: TrainConfig, rebuild: bool = True) -> dict:
    """summary.json; when it is damaged but the run reached its last step, it is rebuilt from
    metrics.csv rather than lost (``rebuild`` False: a read-only verb, which refuses instead)."""
    run_dir = Path(run_dir)
    path = run_dir / "summary.json"
    try:
        summary = read_state_json(path, "a training run's summary")
        seeds = summary.get("seeds")
        if not isinstance(seeds, dict) or not all(
            isinstance(seeds.get(str(s)), dict) and _loss(seeds[str(s)].get("final_val_loss"))
            and isinstance(seeds[str(s)].get("final_partial"), dict) and all(map(_loss, seeds[str(s)]["final_partial"].values()))
            for s in cfg.seeds
        ):
            raise UsageError(f"{path} has the wrong shape (no final losses >= 0 for seeds {list(cfg.seeds)}): delete it to rebuild it")
        return summary
    except UsageError:
        ckpts = list_checkpoints(run_dir)
        if not rebuild or not ckpts or ckpts[-1][0] != cfg.steps:
            raise
        print(f"warning: {run_dir / 'summary.json'} was damaged; rebuilt from metrics.csv", file=sys.stderr)
        summary = summarize(run_dir, cfg)
        atomic_write_json(run_dir / "summary.json", summary)
        return summary
