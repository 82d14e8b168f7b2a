"""The training loop: ``train(TrainConfig, run dir) -> summary`` (Sec. 7.1).

A job trains an ensemble of E models that share a shape and differ in seed: member ``e`` with
seed ``s`` has its own initialisation, its own training set (the task with seed ``s``), its own
data order and its own optimizer state, so it follows the trajectory it would follow alone.
All members are validated on the same held-out set. Running a job again on its folder resumes
from the last checkpoint and ends with the same numbers as an uninterrupted run; the folder is
locked while a process trains in it.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from stackedheads.errors import UsageError
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.execution.process import torch_threads
from stackedheads.state.provenance import record_segment
from stackedheads.state.write import RunFolder, atomic_write_json
from stackedheads.tasks.vectors import Batch
from stackedheads.training.checkpoints import (
    CheckpointWriter,
    checkpoint_path,
    list_checkpoints,
    resume_point,
    save_checkpoint,
    slim_older_checkpoints,
)
from stackedheads.training.config import DTYPES, TrainConfig, check_device, native_dtype
from stackedheads.training.data import member_batches, validation_batch
from stackedheads.training.evaluate import evaluate
from stackedheads.training.metrics import (
    covered_step,
    metric_columns,
    read_metrics,
    read_summary,
    run_is_complete,
    summarize,
    truncate_metrics,
)
from stackedheads.training.optim import make_optimizer
from stackedheads.training.step import compile_model, make_step


@contextmanager
def matmul_mode(dev: torch.device, dtype: str):
    """CUDA's TF32 matmul flags as the run's dtype asks, restored after (they are process-wide)."""
    if dev.type != "cuda":
        yield
        return
    flags = (torch.backends.cuda.matmul, torch.backends.cudnn)
    before = [f.allow_tf32 for f in flags]
    for f in flags:
        f.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        for f, b in zip(flags, before):
            f.allow_tf32 = b


KIND = "training run"  # what storage.folder_kinds calls a folder whose config.json has a task
CONFIG_FILE = "config.json"


def _check_finite(per_member: torch.Tensor, cfg: TrainConfig, step: int) -> None:
    bad = ~torch.isfinite(per_member.detach())
    if bool(bad.any()):
        seeds = [s for s, b in zip(cfg.seeds, bad.tolist()) if b]
        raise UsageError(
            f"training diverged: the loss of seed(s) {seeds} is not finite at step {step}; "
            f"lower 'lr' (now {cfg.optim.lr}) or set 'grad_clip'; checkpoints up to the last finite one are kept",
            fields=("lr", "grad_clip"),
        )


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
) -> dict:
    """Train (or resume) the ensemble ``cfg`` in ``run_dir``; returns ``summary.json``'s content.

    ``cfg.dtype`` "auto" and ``cfg.threads`` None are made concrete (:meth:`TrainConfig.resolved`)
    and recorded in config.json; a resumed run takes them from there. Training runs on
    ``threads`` intra-op threads and gives the caller's count back afterwards.
    ``progress(step, steps)`` is called after every step. ``stop_after`` stops early (tests of
    interruption) without writing the summary.
    """
    if not isinstance(cfg, TrainConfig):  # train(None, path) from the API: one line, not an AttributeError
        raise UsageError(f"'cfg' must be a TrainConfig, got {type(cfg).__name__}", fields=("cfg",))
    check_device(cfg.device)
    dev = torch.device(cfg.device)
    folder = RunFolder(run_dir, KIND)
    with folder.lock("a training run"):
        return _train_locked(cfg, folder, dev, progress, stop_after)


def _train_locked(cfg: TrainConfig, folder: RunFolder, dev: torch.device, progress, stop_after) -> dict:
    run_dir = folder.path
    recorded = folder.recorded(CONFIG_FILE, "a training run's config")
    if recorded is not None:
        # Read as a TrainConfig, not compared as JSON: config.json files of older versions
        # (flat, without the recipe's fields) describe the same runs.
        old = TrainConfig.from_dict(recorded, run_dir / CONFIG_FILE)
        cfg = cfg.resolved(old)
        folder.require_same(old.to_dict(), cfg.to_dict(), "another configuration")
        if run_is_complete(run_dir):
            return read_summary(run_dir, cfg)
    else:
        _say_dtype(cfg.dtype, cfg.device)
        cfg = cfg.resolved()
    with torch_threads(cfg.threads), matmul_mode(dev, cfg.dtype):
        return _train_steps(cfg, run_dir, dev, progress, stop_after, new=recorded is None)


def _say_dtype(requested: str, device: str) -> None:
    """One line on stderr when a new run on a CPU without native bfloat16 (no AVX512-BF16, no AMX
    tiles) asks for it: "auto" then trains in float32, what the CPU computes natively; an explicit
    "bfloat16" trains as asked (a run's dtype is part of its identity), in oneDNN's emulation,
    slower than float32."""
    if device != "cpu" or requested not in ("auto", "bfloat16") or native_dtype("cpu") == "bfloat16":
        return
    if requested == "auto":
        print("note: this CPU has no native bfloat16 (AVX512-BF16 or AMX): dtype 'auto' trains in float32", file=sys.stderr)
    else:
        print("warning: this CPU has no native bfloat16 (AVX512-BF16 or AMX): bfloat16 is emulated, slower than "
              "float32 (dtype 'auto' would train in float32)", file=sys.stderr)


def _build(cfg: TrainConfig, dev: torch.device) -> tuple[EnsembleTransformer, torch.optim.Optimizer]:
    """The ensemble and its optimiser; running out of memory is one line (nothing built is kept)."""
    try:
        model = EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds)).to(dev)
        return model, make_optimizer(model, cfg)
    except MemoryError:
        pass  # out of the handler first: its traceback holds what was built
    raise UsageError("out of memory while building the model: choose fewer 'n_layers', a smaller 'd_model' or fewer 'seeds'",
                     fields=("n_layers", "d_model", "seeds"))


def _train_steps(cfg: TrainConfig, run_dir: Path, dev: torch.device, progress, stop_after, new: bool = False) -> dict:
    dtype = DTYPES[cfg.dtype]
    model, opt = _build(cfg, dev)
    if new:  # recorded once the model exists: a run that could not start leaves no config to block the next
        atomic_write_json(run_dir / CONFIG_FILE, cfg.to_dict())
    columns = metric_columns(cfg)
    metrics_path = run_dir / "metrics.csv"
    wall0 = 0.0
    covered = covered_step(metrics_path, cfg)
    newest = max((step for step, _ in list_checkpoints(run_dir)), default=0)
    start = resume_point(run_dir, cfg.device, model, opt, at_most=covered)
    if newest > start and newest > covered:
        print(f"warning: {metrics_path} lacks rows after step {covered}; training again from step {start} to rebuild them",
              file=sys.stderr)
    if start:
        truncate_metrics(metrics_path, start, columns)
        rows = read_metrics(run_dir) if metrics_path.exists() else []
        wall0 = max((r["wall_s"] for r in rows), default=0.0)
    elif metrics_path.exists():
        metrics_path.unlink()  # a run killed before its first checkpoint starts over
    record_segment(run_dir, start, {"threads": cfg.threads, "dtype": cfg.dtype, "compile": cfg.compile,
                                    "cuda_graph": cfg.cuda_graph, "device": cfg.device})

    forward = compile_model(model) if cfg.compile else model  # the same parameters either way
    on_device = dev.type != "cpu"  # an accelerator generates its own batches (the CPU's, exactly)
    val = validation_batch(cfg)
    val = Batch(val.inputs.to(dev), val.targets.to(dev), val.symbols, val.meta)  # moved once, not per evaluation
    caches = [{} for _ in cfg.seeds]
    new_file = not metrics_path.exists()
    if cfg.keep_checkpoints and start == 0:
        save_checkpoint(checkpoint_path(run_dir, 0), model, opt, 0, cfg)  # Sec. 9: attention at init
    train_step = make_step(cfg, model, forward, opt, dtype)
    t0 = time.perf_counter()
    ckpt = CheckpointWriter()
    slimmed: set[Path] = set()  # older checkpoints already slimmed: each is read once a run
    with ckpt, open(metrics_path, "a", newline="") as mf:
        writer = csv.DictWriter(mf, fieldnames=columns, lineterminator="\n")
        if new_file:
            writer.writeheader()
        done = start
        for step in range(start, cfg.steps):
            batch = member_batches(cfg, step, caches, device=dev if on_device else None)
            per_member = train_step(batch.inputs, batch.targets, cfg.lr_at(step))
            done = step + 1
            save_now = done % cfg.ckpt_every == 0 or done == cfg.steps
            if cfg.is_eval_step(done) or save_now:
                _check_finite(per_member, cfg, done)  # a sync; only where we write anyway
            if cfg.is_eval_step(done):
                val_loss, partial = evaluate(forward, val, cfg)
                wall = wall0 + time.perf_counter() - t0
                train_loss = per_member.detach().cpu()
                for e, seed in enumerate(cfg.seeds):
                    row = {"step": done, "seed": seed, "train_loss": float(train_loss[e]), "val_loss": float(val_loss[e]), "wall_s": round(wall, 3)}
                    row.update({c: float(partial[e, j]) for j, c in enumerate(columns[4:-1])})
                    writer.writerow(row)
                mf.flush()
            if save_now:
                mf.flush()  # metrics up to here are on disk before the checkpoint that covers them
                # Keep the last two whole: a damaged newest one falls back to its predecessor.
                # Older kept ones lose their AdamW state (analysis reads weights only).
                if cfg.keep_checkpoints:
                    prune = lambda: slim_older_checkpoints(run_dir, slimmed)  # noqa: E731
                else:
                    prune = lambda: [p.unlink() for _, p in list_checkpoints(run_dir)[:-2]]  # noqa: E731
                ckpt.save(checkpoint_path(run_dir, done), model, opt, done, cfg, then=prune)
            if progress:
                progress(done, cfg.steps)
            if stop_after is not None and done >= stop_after:
                break
    if stop_after is not None and done >= stop_after:  # stopped early (tests): no summary
        return {}
    summary = summarize(run_dir, cfg)
    atomic_write_json(run_dir / "summary.json", summary)
    return summary
