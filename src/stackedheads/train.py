"""One training job: ``(TrainConfig, run dir) -> run dir`` (Section 7.1).

A job trains an ensemble of E models that share a shape and differ in seed: member ``e`` with
seed ``s`` has its own initialisation, its own training set (the task with seed ``s``), its own
data order and its own optimizer state, so it follows the trajectory it would follow alone.
All members are validated on the same held-out set (the task seed's validation split).

The run folder is self-describing:

* ``config.json`` -- the :class:`TrainConfig`;
* ``metrics.csv`` -- one row per (step, seed): train loss, val loss, partial val losses per
  chain position ``x_1..x_D`` (IC), wall time;
* ``checkpoints/step_XXXXXX.safetensors`` -- model, AdamW state and RNG state;
* ``summary.json`` -- per seed, the final val loss (mean over the last 100 steps, Sec. 7.1)
  and the final partial losses.

Running a job again on its folder resumes from the last checkpoint and ends with the same
numbers as an uninterrupted run.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from stackedheads.errors import UsageError
from stackedheads.model import EnsembleTransformer, ModelConfig
from stackedheads.perf import keep_freed_memory
from stackedheads.tasks.vectors import (
    Batch,
    VectorTaskConfig,
    batch_indices,
    make_batch,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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
    eval_every: int = 100
    final_window: int = 100  # "final val loss": mean over the last 100 steps, each evaluated
    ckpt_every: int = 1000
    keep_checkpoints: bool = True  # emergence (Sec. 9) needs every checkpoint; else keep the last
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if not self.seeds:
            raise UsageError("at least one seed is needed")
        if len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"seeds must be distinct, got {list(self.seeds)}")
        for name in ("steps", "batch_size", "eval_every", "ckpt_every", "final_window"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise UsageError("lr must be > 0 and weight decay >= 0")
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
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
        d["seeds"] = list(self.seeds)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        d["task"] = VectorTaskConfig.from_dict(d["task"])
        d["seeds"] = tuple(d["seeds"])
        return cls(**d)

    def eval_steps(self) -> set[int]:
        """Steps (1-based, after the update) at which validation runs."""
        tail = range(max(1, self.steps - self.final_window + 1), self.steps + 1)
        return set(range(self.eval_every, self.steps + 1, self.eval_every)) | set(tail)


def partial_losses(pred: torch.Tensor, target: torch.Tensor, cfg: VectorTaskConfig) -> torch.Tensor:
    """MSE per member and chain position: ``(E, D)`` for IC, ``(E, 1)`` (``x_D``) otherwise."""
    err = (pred.float() - target.float()) ** 2  # (E, B, N, d_out)
    E, B, N, _ = err.shape
    positions = cfg.depth if cfg.ic else 1
    return err.view(E, B, N, positions, cfg.dims).mean(dim=(1, 2, 4))


def member_batches(cfg: TrainConfig, step: int, caches: list[dict]) -> Batch:
    """Training batch ``step`` for every member, stacked: inputs ``(E, B, T, 2K)``."""
    batches = []
    for seed, cache in zip(cfg.seeds, caches):
        task = replace(cfg.task, seed=seed)
        idx = batch_indices(task.n_train, cfg.batch_size, seed, step, cache)
        batches.append(make_batch(task, idx, "train"))
    return Batch(
        inputs=torch.stack([b.inputs for b in batches]),
        targets=torch.stack([b.targets for b in batches]),
        symbols=torch.stack([b.symbols for b in batches]),
        meta=batches[0].meta,  # per-member metadata differs; training never reads it
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
        out.append((int(p.stem.split("_")[1]), p))
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


def save_checkpoint(path: Path, model: EnsembleTransformer, opt: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> None:
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    names = dict(model.named_parameters())
    inv = {id(p): n for n, p in names.items()}
    for group in opt.param_groups:
        for p in group["params"]:
            for k, v in opt.state[p].items():
                tensors[f"optim.{inv[id(p)]}.{k}"] = torch.as_tensor(v).detach().contiguous().cpu()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {"step": str(step), "config": json.dumps(cfg.to_dict())}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)  # atomic: a kill mid-write never leaves a torn checkpoint


def load_model(path: Path, device: str = "cpu") -> tuple[EnsembleTransformer, TrainConfig, int]:
    """The ensemble stored in a checkpoint, its config and its step."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    cfg = TrainConfig.from_dict(json.loads(meta["config"]))
    model = EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds))
    tensors = load_file(str(path), device=device)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    return model.to(device), cfg, int(meta["step"])


def _restore(path: Path, model: EnsembleTransformer, opt: torch.optim.Optimizer, device: str) -> int:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        step = int(f.metadata()["step"])
    tensors = load_file(str(path), device=device)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for name, p in model.named_parameters():
        state = {k.rsplit(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"optim.{name}.")}
        if state:
            opt.state[p] = state
    torch.set_rng_state(tensors["rng.torch"].cpu())
    return step


# --- the job ----------------------------------------------------------------------------------


def metric_columns(cfg: TrainConfig) -> list[str]:
    parts = [f"val_x{j}" for j in range(1, cfg.task.depth + 1)] if cfg.task.ic else [f"val_x{cfg.task.depth}"]
    return ["step", "seed", "train_loss", "val_loss", *parts, "wall_s"]


def _truncate_metrics(path: Path, last_step: int, columns: list[str]) -> None:
    """Drop rows past the checkpoint we resume from: they will be produced again."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["step"]) <= last_step]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def read_metrics(run_dir: Path) -> list[dict]:
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return [{k: (float(v) if k not in ("step", "seed") else int(v)) for k, v in r.items()} for r in csv.DictReader(f)]


def summarize(run_dir: Path, cfg: TrainConfig) -> dict:
    """Per seed: final val loss = mean over the last ``final_window`` steps (Section 7.1)."""
    rows = read_metrics(run_dir)
    first_tail = cfg.steps - cfg.final_window + 1
    parts = [c for c in metric_columns(cfg) if c.startswith("val_x")]
    per_seed = {}
    for seed in cfg.seeds:
        tail = [r for r in rows if r["seed"] == seed and r["step"] >= first_tail]
        per_seed[str(seed)] = {
            "final_val_loss": sum(r["val_loss"] for r in tail) / len(tail),
            "final_partial": {p: sum(r[p] for r in tail) / len(tail) for p in parts},
            "steps_averaged": len(tail),
        }
    wall = max((r["wall_s"] for r in rows), default=0.0)
    return {"config": cfg.to_dict(), "seeds": per_seed, "wall_s": wall}


def run_is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / "summary.json").exists()


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
    keep_freed_memory()  # no page faults on the step's activations (stackedheads.perf)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.json"
    if cfg_path.exists():
        old = TrainConfig.from_dict(json.loads(cfg_path.read_text()))
        if old != cfg:
            raise UsageError(f"{run_dir} holds a run with another configuration; choose a new --out")
        if run_is_complete(run_dir):
            return json.loads((run_dir / "summary.json").read_text())
    else:
        cfg_path.write_text(json.dumps(cfg.to_dict(), indent=2))

    dev = torch.device(cfg.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for but no CUDA device is available")
    dtype = DTYPES[cfg.dtype]
    model = EnsembleTransformer(cfg.model_config(), seeds=list(cfg.seeds)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    columns = metric_columns(cfg)
    metrics_path = run_dir / "metrics.csv"
    start, wall0 = 0, 0.0
    ckpts = list_checkpoints(run_dir)
    if ckpts:
        start = _restore(ckpts[-1][1], model, opt, cfg.device)
        _truncate_metrics(metrics_path, start, columns)
        rows = read_metrics(run_dir) if metrics_path.exists() else []
        wall0 = max((r["wall_s"] for r in rows), default=0.0)
    elif metrics_path.exists():
        metrics_path.unlink()  # a run killed before its first checkpoint starts over

    val = validation_batch(cfg)
    eval_at = cfg.eval_steps()
    caches = [{} for _ in cfg.seeds]
    new_file = not metrics_path.exists()
    t0 = time.perf_counter()
    with open(metrics_path, "a", newline="") as mf:
        writer = csv.DictWriter(mf, fieldnames=columns)
        if new_file:
            writer.writeheader()
        for step in range(start, cfg.steps):
            batch = member_batches(cfg, step, caches)
            x, y = batch.inputs.to(dev, non_blocking=True), batch.targets.to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
                pred = model(x)
            # Sum of per-member means: each member's gradient is its own loss's gradient.
            per_member = ((pred.float() - y) ** 2).mean(dim=(1, 2, 3))
            opt.zero_grad(set_to_none=True)
            per_member.sum().backward()
            opt.step()
            done = step + 1
            if done in eval_at:
                val_loss, partial = evaluate(model, val, cfg)
                wall = wall0 + time.perf_counter() - t0
                train_loss = per_member.detach().cpu()
                for e, seed in enumerate(cfg.seeds):
                    row = {"step": done, "seed": seed, "train_loss": float(train_loss[e]), "val_loss": float(val_loss[e]), "wall_s": round(wall, 3)}
                    row.update({c: float(partial[e, j]) for j, c in enumerate(columns[4:-1])})
                    writer.writerow(row)
                mf.flush()
            if done % cfg.ckpt_every == 0 or done == cfg.steps:
                mf.flush()
                save_checkpoint(checkpoint_path(run_dir, done), model, opt, done, cfg)
                if not cfg.keep_checkpoints:
                    for s, p in list_checkpoints(run_dir):
                        if s < done:
                            p.unlink()
            if progress:
                progress(done, cfg.steps)
            if stop_after is not None and done >= stop_after:
                return {}
    summary = summarize(run_dir, cfg)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
