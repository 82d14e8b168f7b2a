"""One training job: ``(TrainConfig, run dir) -> run dir`` (Section 7.1).

A job trains an ensemble of E models that share a shape and differ in seed: member ``e`` with
seed ``s`` has its own initialisation, its own training set (the task with seed ``s``), its own
data order and its own optimizer state, so it follows the trajectory it would follow alone.
All members are validated on the same held-out set (the task seed's validation split).

The run folder is self-describing:

* ``config.json`` -- the :class:`TrainConfig`;
* ``metrics.csv`` -- one row per (step, seed): train loss, val loss, partial val losses per
  chain position ``x_1..x_D`` (IC), wall time;
* ``checkpoints/step_XXXXXX.safetensors`` -- model, AdamW state and RNG state, with a
  SHA-256 of the tensors and one of the header (step, config) in the header (checked on load);
* ``summary.json`` -- per seed, the final val loss (mean over the last 100 steps, Sec. 7.1)
  and the final partial losses.

Running a job again on its folder resumes from the last checkpoint and ends with the same
numbers as an uninterrupted run. The folder is locked while a process trains in it; state
files are written atomically; a damaged last checkpoint falls back to the one before.

The training recipe (Section 7.1: "following the recipe of Radford et al. (2019)") is explicit
in :class:`TrainConfig`: warm-up, learning-rate schedule, per-member gradient clipping, Adam
betas and weight-decay exemptions. The defaults are the plain recipe the first round used
(constant lr, no clipping); the paper presets use :data:`GPT2_RECIPE` (see the README's
"Training recipe" section for the measurements behind the choice).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from stackedheads.errors import UsageError
from stackedheads.model import EnsembleTransformer, ModelConfig, clip_grad_norm_per_member_
from stackedheads.perf import keep_freed_memory
from stackedheads.storage import FolderLock, atomic_write_json, check_seeds, read_state_json
from stackedheads.tasks.vectors import (
    Batch,
    VectorTaskConfig,
    batch_indices,
    make_batch,
)

# "tf32": float32 tensors, TensorFloat-32 matmuls on a CUDA GPU (10-bit mantissa products,
# float32 accumulation): several times the float32 matmul rate of an A100/H100.
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16}
SCHEDULES = ("constant", "cosine", "linear")
# Parameter families that may be exempt from weight decay (GPT-2/nanoGPT exempt norms and biases).
DECAY_EXEMPTIONS = ("norm", "bias", "embed")

# GPT-2's recipe as we read it (Radford et al. 2019 via nanoGPT): linear warm-up, cosine decay
# to 10% of the peak, gradient clipping at 1.0 per member, no decay on LayerNorm gains and
# biases. Measured on sec9 (issue 13): val MSE 0.570 with the plain recipe, 0.0039 with this.
GPT2_RECIPE = {
    "schedule": "cosine", "min_lr_ratio": 0.1, "grad_clip": 1.0, "decay_exempt": ("norm", "bias"),
}


@dataclass(frozen=True)
class TrainConfig:
    task: VectorTaskConfig = field(default_factory=VectorTaskConfig)
    n_layers: int = 2
    n_heads: int = 8
    d_model: int = 128
    d_head: int | None = None
    mlp: bool = True
    seeds: tuple[int, ...] = (0,)
    batch_size: int = 512
    steps: int = 10_000
    lr: float = 1e-3
    weight_decay: float = 0.1
    # --- the recipe (Sec. 7.1 names GPT-2's; these fields make each choice explicit) ---
    warmup_steps: int = 0  # linear warm-up from lr/warmup_steps to lr
    schedule: str = "constant"  # after warm-up: constant, cosine or linear decay ...
    min_lr_ratio: float = 0.1  # ... down to this fraction of lr at the last step
    grad_clip: float = 0.0  # per-member gradient-norm clipping; 0 = off
    betas: tuple[float, float] = (0.9, 0.999)  # Adam's (beta1, beta2)
    decay_exempt: tuple[str, ...] = ()  # of DECAY_EXEMPTIONS: no weight decay on these
    # Steps per "epoch" on the epoch axis of plots and claims. None: n_train // batch_size.
    # Sec. 9.1 counts 6,400 steps as 800 epochs (8 steps/epoch), which 262k examples at batch
    # 256 (1,024 steps/epoch) contradict; the sec9 presets follow the paper's arithmetic.
    steps_per_epoch: int | None = None
    eval_every: int = 100
    final_window: int = 100  # "final val loss": mean over the last 100 steps, each evaluated
    ckpt_every: int = 1000
    keep_checkpoints: bool = True  # emergence (Sec. 9) needs every checkpoint; else keep the last
    device: str = "cpu"
    dtype: str = "float32"
    # torch.compile the model for training and evaluation: on a GPU it fuses a 24-layer step's
    # many small kernels; on a 2-core CPU it measured no faster (benchmarks/train_throughput.py).
    compile: bool = False

    def __post_init__(self) -> None:
        if not self.seeds:
            raise UsageError("at least one seed is needed")
        if len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"seeds must be distinct, got {list(self.seeds)}")
        for name in ("steps", "batch_size", "eval_every", "ckpt_every", "final_window"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "weight_decay", "min_lr_ratio", "grad_clip"):
            if not math.isfinite(getattr(self, name)):
                raise UsageError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise UsageError("lr must be > 0 and weight decay >= 0")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise UsageError(f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip < 0:
            raise UsageError(f"grad_clip must be >= 0 (0 = off), got {self.grad_clip}")
        if self.warmup_steps < 0 or self.warmup_steps >= self.steps:
            raise UsageError(f"warmup_steps must lie in [0, steps), got {self.warmup_steps}")
        if len(self.betas) != 2 or not all(math.isfinite(b) and 0 <= b < 1 for b in self.betas):
            raise UsageError(f"betas must be two numbers in [0, 1), got {list(self.betas)}")
        bad = set(self.decay_exempt) - set(DECAY_EXEMPTIONS)
        if bad:
            raise UsageError(f"decay_exempt takes {', '.join(DECAY_EXEMPTIONS)}, got {sorted(bad)}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise UsageError(f"steps_per_epoch must be >= 1, got {self.steps_per_epoch}")
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.dtype == "tf32" and not self.device.startswith("cuda"):
            raise UsageError("dtype tf32 is a CUDA matmul mode: use it with --device cuda (float32 on a CPU)")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise UsageError(f"device must be cpu or cuda, got {self.device!r}")
        if self.batch_size > self.task.n_train:
            raise UsageError(f"batch size {self.batch_size} exceeds n_train {self.task.n_train}")
        self.model_config()  # validates the architecture

    def model_config(self) -> ModelConfig:
        t = self.task
        return ModelConfig(
            d_in=t.d_in, d_out=t.d_out, n_queries=t.chains, n_layers=self.n_layers,
            n_heads=self.n_heads, d_model=self.d_model, d_head=self.d_head, mlp=self.mlp,
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("seeds", "betas", "decay_exempt"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Inverse of :meth:`to_dict`; a config written before a field existed gets its default."""
        if not isinstance(d, dict) or not isinstance(d.get("task"), dict) or not isinstance(d.get("seeds"), list):
            raise UsageError("a training config must be a JSON object with 'task' and 'seeds'")
        d = dict(d)
        d["task"] = VectorTaskConfig.from_dict(d["task"])
        d["seeds"] = check_seeds(d["seeds"], "config.json")  # seeds name folders elsewhere
        for k in ("seeds", "betas", "decay_exempt"):
            if k in d:
                d[k] = tuple(d[k])
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise UsageError(f"unknown training config fields {sorted(unknown)}")
        try:
            return cls(**d)
        except TypeError as e:
            raise UsageError(f"bad training config: {e}") from None

    def lr_at(self, step: int) -> float:
        """Learning rate of update ``step`` (0-based): a pure function of the step, so a resumed
        run follows the same schedule without storing scheduler state."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        span = max(1, self.steps - self.warmup_steps - 1)
        p = min(1.0, (step - self.warmup_steps) / span)
        if self.schedule == "cosine":
            decay = 0.5 * (1.0 + math.cos(math.pi * p))
        else:
            decay = 1.0 - p
        return self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay)

    def epoch(self, step: int | float) -> float:
        """``step`` on the epoch axis (see ``steps_per_epoch``)."""
        per = self.steps_per_epoch or max(1, self.task.n_train // self.batch_size)
        return step / per

    def eval_steps(self) -> set[int]:
        """Steps (1-based, after the update) at which validation runs."""
        tail = range(max(1, self.steps - self.final_window + 1), self.steps + 1)
        return set(range(self.eval_every, self.steps + 1, self.eval_every)) | set(tail)


def partial_losses(pred: torch.Tensor, target: torch.Tensor, cfg: VectorTaskConfig) -> torch.Tensor:
    """MSE per member and chain position: ``(E, D)`` for IC, ``(E, 1)`` (``x_D``) otherwise.

    Summed per sequence first, then over sequences: a reduction to few outputs from many
    inputs is split per thread by PyTorch, which would make the bits depend on the thread count.
    """
    err = (pred.float() - target.float()) ** 2  # (E, B, N, d_out)
    E, B, N, _ = err.shape
    positions = cfg.depth if cfg.ic else 1
    return err.view(E, B, N, positions, cfg.dims).sum(dim=(2, 4)).sum(dim=1) / (B * N * cfg.dims)


def member_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each member's mean squared error, ``(E,)``: the training loss (summed over members, each
    gradient is its member's own). Reduced per sequence, then over sequences (thread-invariant,
    as :func:`partial_losses`)."""
    err = (pred.float() - target.float()) ** 2  # (E, B, N, d_out)
    return err.sum(dim=(2, 3)).sum(dim=1) / err[0].numel()


def member_batches(cfg: TrainConfig, step: int, caches: list[dict], device: str | None = None) -> Batch:
    """Training batch ``step`` for every member, stacked: inputs ``(E, B, T, 2K)``.

    Member ``e`` draws from the task with its own seed, in its own order; one call generates
    all of them (``device``: on the accelerator itself). ``meta`` is member 0's (training
    never reads it).
    """
    idx = torch.stack([batch_indices(cfg.task.n_train, cfg.batch_size, seed, step, cache)
                       for seed, cache in zip(cfg.seeds, caches)])  # (E, B)
    seeds = torch.tensor(cfg.seeds, dtype=torch.int64)[:, None].expand_as(idx)
    b = make_batch(cfg.task, idx.reshape(-1), "train", seeds=seeds, device=device)
    E, B = idx.shape
    return Batch(
        inputs=b.inputs.view(E, B, *b.inputs.shape[1:]),
        targets=b.targets.view(E, B, *b.targets.shape[1:]),
        symbols=b.symbols.view(E, B, *b.symbols.shape[1:]),
        meta=b.meta[:B],
    )


def validation_batch(cfg: TrainConfig) -> Batch:
    """The fixed held-out set every member is evaluated on."""
    return make_batch(cfg.task, range(cfg.task.n_val), "val")


@torch.no_grad()
def evaluate(model: EnsembleTransformer, val: Batch, cfg: TrainConfig, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """``(val_loss (E,), partial (E, D))`` on the validation batch."""
    E = len(cfg.seeds)
    dev, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    sums, n = None, 0
    for i in range(0, val.inputs.shape[0], chunk):
        x = val.inputs[i : i + chunk].to(dev)
        y = val.targets[i : i + chunk].to(dev)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            pred = model(x.expand(E, *x.shape))
        part = partial_losses(pred, y.expand(E, *y.shape), cfg.task) * x.shape[0]
        sums = part if sums is None else sums + part
        n += x.shape[0]
    partial = (sums / n).cpu()
    return partial.mean(dim=1), partial


# --- checkpoints ------------------------------------------------------------------------------


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}.safetensors"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint, oldest first."""
    out = []
    for p in (Path(run_dir) / "checkpoints").glob("step_*.safetensors"):
        stem = p.stem.split("_")[-1]
        if stem.isdigit():
            out.append((int(stem), p))
    return sorted(out)


def checkpoint_for(run_dir: str | Path, step: int | None = None) -> Path:
    """The checkpoint of ``step`` (default: the last) of a run folder."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise UsageError(f"{run_dir} is not a run folder (no config.json)")
    ckpts = dict(list_checkpoints(run_dir))
    if not ckpts:
        raise UsageError(f"{run_dir} has no checkpoint yet")
    if step is None:
        return ckpts[max(ckpts)]
    if step not in ckpts:
        raise UsageError(f"{run_dir} has no checkpoint at step {step}; it has {sorted(ckpts)}")
    return ckpts[step]


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names and raw bytes, in name order: a flipped bit anywhere changes it."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _state_tensors(model: EnsembleTransformer, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Model and AdamW state as host tensors of their own (copies: training may go on)."""
    copy = lambda v: torch.as_tensor(v).detach().to("cpu", copy=True).contiguous()  # noqa: E731
    tensors = {f"model.{k}": copy(v) for k, v in model.state_dict().items()}
    inv = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            for k, v in opt.state[p].items():
                tensors[f"optim.{inv[id(p)]}.{k}"] = copy(v)
    # No global RNG state: training draws nothing from it (data, order and initialisation have
    # their own seeded generators), and torch seeds it afresh in every process, so storing it
    # would make two identical runs' checkpoints differ.
    return tensors


def save_checkpoint(path: Path, model: EnsembleTransformer, opt: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> None:
    write_checkpoint(path, _state_tensors(model, opt), step, cfg)


class CheckpointWriter:
    """Writes checkpoints on a background thread: the state is copied to host memory at once,
    then hashing and writing overlap the next training steps (on a GPU a write held the step
    for about a second). One write in flight; its error surfaces at the next save or close.
    A kill mid-write loses only that checkpoint (written to a temporary file, then renamed)."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        self._pending = None

    def save(self, path: Path, model, opt, step: int, cfg: TrainConfig, then: Callable[[], None] | None = None) -> None:
        self.wait()
        tensors = _state_tensors(model, opt)

        def job() -> None:
            write_checkpoint(path, tensors, step, cfg)
            if then:
                then()

        self._pending = self._pool.submit(job)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_checkpoint(path: Path, tensors: dict[str, torch.Tensor], step: int, cfg: TrainConfig) -> None:
    """``tensors`` (host copies) to ``path`` with the header: step, config and checksums."""
    meta = {"step": str(step), "config": json.dumps(cfg.to_dict()), "sha256": _digest(tensors)}
    meta["header_sha256"] = _header_digest(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        save_file(tensors, str(tmp), metadata=meta)
    except SafetensorError as e:  # a full disk or a read-only folder: one line, not a traceback
        tmp.unlink(missing_ok=True)
        raise _os_error(e, tmp) from None
    tmp.replace(path)  # atomic: a kill mid-write never leaves a torn checkpoint


def _header_digest(meta: dict[str, str]) -> str:
    """SHA-256 of the header's step, config and tensor checksum: a flipped bit in the config
    could otherwise describe the same weights as another architecture."""
    return hashlib.sha256("\n".join(meta[k] for k in ("step", "config", "sha256")).encode()).hexdigest()


def _os_error(e: Exception, path: Path) -> OSError:
    """safetensors' I/O error as the OSError it wraps (``... (os error 28) ...``)."""
    import errno
    import os
    import re

    found = re.search(r"os error (\d+)", str(e))
    code = int(found.group(1)) if found else errno.EIO
    return OSError(code, os.strerror(code), str(path))


def read_checkpoint(path: Path, device: str = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and header of a checkpoint, verified against its SHA-256; one line if damaged."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
    except Exception as e:  # safetensors raises several types for a torn or foreign file
        raise UsageError(f"checkpoint {path} is damaged ({type(e).__name__}); delete it to resume from the one before") from None
    if "step" not in meta or "config" not in meta:
        raise UsageError(f"checkpoint {path} has no step/config header; it was not written by stackedheads")
    # Checkpoints written before checksums existed carry none; they are trusted as before.
    if "sha256" in meta and _digest(tensors) != meta["sha256"]:
        raise UsageError(f"checkpoint {path} fails its checksum (corrupted on disk); delete it to resume from the one before")
    if "header_sha256" in meta and ("sha256" not in meta or _header_digest(meta) != meta["header_sha256"]):
        raise UsageError(f"checkpoint {path} fails its checksum (its header is corrupted); delete it to resume from the one before")
    if device != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors, meta


def load_model(path: Path, device: str = "cpu") -> tuple[EnsembleTransformer, TrainConfig, int]:
    """The ensemble stored in a checkpoint, its config and its step."""
    tensors, meta = read_checkpoint(Path(path), device)
    try:  # a header from before checksums covered it may still be damaged
        cfg = TrainConfig.from_dict(json.loads(meta["config"]))
        step = int(meta["step"])
        model = EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds), init=False)
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    except (ValueError, TypeError, KeyError, RuntimeError) as e:  # UsageError is a ValueError
        raise UsageError(
            f"checkpoint {path} is damaged (its header does not describe its tensors: {type(e).__name__}); "
            "delete it to use the one before"
        ) from None
    return model.to(device), cfg, step


def _restore(tensors: dict[str, torch.Tensor], model: EnsembleTransformer, opt: torch.optim.Optimizer) -> None:
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for name, p in model.named_parameters():
        state = {k.rsplit(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"optim.{name}.")}
        if state:
            opt.state[p] = state


def _resume_point(run_dir: Path, device: str, model: EnsembleTransformer, opt: torch.optim.Optimizer) -> int:
    """Restore the newest checkpoint that verifies; damaged newer ones are set aside, not lost."""
    ckpts = list_checkpoints(run_dir)
    for step, path in reversed(ckpts):
        try:
            tensors, _ = read_checkpoint(path, device)
        except UsageError as e:
            print(f"warning: {e}; resuming from an earlier checkpoint", file=sys.stderr)
            path.replace(path.with_suffix(".damaged"))
            continue
        _restore(tensors, model, opt)
        return step
    if ckpts:
        raise UsageError(f"{run_dir}: no checkpoint verifies; delete the folder to start over")
    return 0


# --- optimizer ---------------------------------------------------------------------------------


def _exempt(name: str, exempt: tuple[str, ...]) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    if "norm" in exempt and (".ln" in f".{name}" and leaf in ("weight", "bias")):
        return True
    if "bias" in exempt and (leaf.startswith("b_") or (leaf == "bias" and ".ln" not in f".{name}")):
        return True
    return "embed" in exempt and leaf == "W_in"  # the input projection stands in for GPT-2's embedding


def make_optimizer(model: EnsembleTransformer, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (decoupled decay, Loshchilov 2017) with ``cfg.decay_exempt`` families undecayed."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if _exempt(name, cfg.decay_exempt) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    # fused: one kernel per step instead of a Python loop over tensors (measured 5-10% of a
    # CPU step at the sec9 and quick sizes, benchmarks/train_throughput.py).
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay, fused=True)


# --- metrics -----------------------------------------------------------------------------------


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


def _truncate_metrics(path: Path, last_step: int, columns: list[str]) -> None:
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
    from stackedheads.storage import atomic_write_text

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


# --- the job ----------------------------------------------------------------------------------


def _check_finite(per_member: torch.Tensor, cfg: TrainConfig, step: int) -> None:
    bad = ~torch.isfinite(per_member.detach())
    if bool(bad.any()):
        seeds = [s for s, b in zip(cfg.seeds, bad.tolist()) if b]
        raise UsageError(
            f"training diverged: the loss of seed(s) {seeds} is not finite at step {step}; "
            f"lower --lr (now {cfg.lr}) or set --grad-clip; checkpoints up to the last finite one are kept"
        )


def check_device(device: str) -> None:
    """Refuse a CUDA device this machine lacks, before a run or a sweep writes anything (a
    corrected re-run must not find a config of the failed one)."""
    try:
        kind = torch.device(device).type
    except RuntimeError:  # e.g. cuda:x
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got {device!r}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for but no CUDA device is available")


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
) -> dict:
    """Train (or resume) the ensemble ``cfg`` in ``run_dir``; returns ``summary.json``'s content.

    ``progress(step, steps)`` is called after every step. ``stop_after`` stops early (tests of
    interruption) without writing the summary.
    """
    check_device(cfg.device)
    dev = torch.device(cfg.device)
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{run_dir} exists and is not a folder; choose another --out")
    with FolderLock(run_dir, "a training run"):
        return _train_locked(cfg, run_dir, dev, progress, stop_after)


def _train_locked(cfg: TrainConfig, run_dir: Path, dev: torch.device, progress, stop_after) -> dict:
    keep_freed_memory()  # no page faults on the step's activations (stackedheads.perf)
    cfg_path = run_dir / "config.json"
    if cfg_path.exists():
        old = TrainConfig.from_dict(read_state_json(cfg_path, "a training run's config"))
        if old != cfg:
            raise UsageError(f"{run_dir} holds a run with another configuration; choose a new --out")
        if run_is_complete(run_dir):
            return read_summary(run_dir, cfg)
    else:
        atomic_write_json(cfg_path, cfg.to_dict())

    dtype = DTYPES[cfg.dtype]
    if dev.type == "cuda":  # this process trains; its matmul mode is the run's
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.dtype == "tf32"
    model = EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds)).to(dev)
    opt = make_optimizer(model, cfg)
    columns = metric_columns(cfg)
    metrics_path = run_dir / "metrics.csv"
    wall0 = 0.0
    start = _resume_point(run_dir, cfg.device, model, opt)
    if start:
        _truncate_metrics(metrics_path, start, columns)
        rows = read_metrics(run_dir) if metrics_path.exists() else []
        wall0 = max((r["wall_s"] for r in rows), default=0.0)
    elif metrics_path.exists():
        metrics_path.unlink()  # a run killed before its first checkpoint starts over

    forward = torch.compile(model) if cfg.compile else model  # the same parameters either way
    on_device = dev.type != "cpu"  # an accelerator generates its own batches (the CPU's, exactly)
    val = validation_batch(cfg)
    val = Batch(val.inputs.to(dev), val.targets.to(dev), val.symbols, val.meta)  # moved once, not per evaluation
    eval_at = cfg.eval_steps()
    caches = [{} for _ in cfg.seeds]
    new_file = not metrics_path.exists()
    if cfg.keep_checkpoints and start == 0:
        save_checkpoint(checkpoint_path(run_dir, 0), model, opt, 0, cfg)  # Sec. 9: attention at init
    t0 = time.perf_counter()
    ckpt = CheckpointWriter()
    with ckpt, open(metrics_path, "a", newline="") as mf:
        writer = csv.DictWriter(mf, fieldnames=columns, lineterminator="\n")
        if new_file:
            writer.writeheader()
        done = start
        for step in range(start, cfg.steps):
            batch = member_batches(cfg, step, caches, device=dev if on_device else None)
            x, y = batch.inputs, batch.targets
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
                pred = forward(x)
            # Sum of per-member means: each member's gradient is its own loss's gradient.
            per_member = member_mse(pred, y)
            opt.zero_grad(set_to_none=True)
            per_member.sum().backward()
            if cfg.grad_clip > 0:
                clip_grad_norm_per_member_(model, cfg.grad_clip)
            lr = cfg.lr_at(step)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
            done = step + 1
            save_now = done % cfg.ckpt_every == 0 or done == cfg.steps
            if done in eval_at or save_now:
                _check_finite(per_member, cfg, done)  # a sync; only where we write anyway
            if done in eval_at:
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
                # Without kept checkpoints, keep the last two: a damaged newest one falls back to
                # its predecessor.
                prune = None if cfg.keep_checkpoints else lambda: [p.unlink() for _, p in list_checkpoints(run_dir)[:-2]]
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
