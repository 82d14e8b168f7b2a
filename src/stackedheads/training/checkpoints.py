"""Checkpoints: ``checkpoints/step_XXXXXX.safetensors`` holds the model, the AdamW state and a
header (step, config, SHA-256 of the tensors and of the header), checked on load; a damaged
newest checkpoint falls back to the one before. Written on a background thread. A run that keeps
its checkpoints (Sec. 9's emergence reads every one) keeps the AdamW state in the newest two
only, which resuming needs: older ones are rewritten with the weights alone, a third of the
bytes."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from stackedheads.errors import UsageError
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.training.config import TrainConfig


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
    from stackedheads.state.write import require_kind

    require_kind(run_dir, "training run")
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
    _write(path, tensors, {"step": str(step), "config": json.dumps(cfg.to_dict())})


def _write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    meta = {**meta, "sha256": _digest(tensors)}
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
    """SHA-256 of the header's step, config, tensor checksum (and weights-only mark, where there
    is one): a flipped bit in the config could otherwise describe the same weights as another
    architecture."""
    keys = ("step", "config", "sha256") + (("weights_only",) if "weights_only" in meta else ())
    return hashlib.sha256("\n".join(meta[k] for k in keys).encode()).hexdigest()


def _header(path: Path) -> dict[str, str] | None:
    """A checkpoint's header without its tensors; None where it cannot be read."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return f.metadata() or {}
    except Exception:  # safetensors raises several types for a torn or foreign file
        return None


def slim_older_checkpoints(run_dir: Path, settled: set[Path] | None = None) -> None:
    """Rewrite every checkpoint but the newest two with its weights alone (atomically, as it was
    written). Resuming needs the AdamW state of the newest sound one, and a damaged newest falls
    back to its predecessor; analysis reads weights only. One that cannot be read is left as it
    is: resuming or analysis says so where it is read.

    ``settled``, kept by a caller that prunes after every save, holds the checkpoints already
    slimmed or left as they are: each is then read once in a run, not once per later save (a
    run checkpointing every 10 steps read its 200th save's 198 older headers)."""
    for step, path in list_checkpoints(run_dir)[:-2]:
        if settled is not None:
            if path in settled:
                continue
            settled.add(path)
        meta = _header(path)
        if meta is None or "weights_only" in meta:
            continue
        try:
            tensors, meta = read_checkpoint(path)
        except UsageError:
            continue
        weights = {k: v for k, v in tensors.items() if k.startswith("model.")}
        _write(path, weights, {"step": meta["step"], "config": meta["config"], "weights_only": "1"})


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
    _check_belongs(Path(path), meta)
    if device != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors, meta


class ForeignCheckpoint(UsageError):
    """A sound checkpoint that is not this run's: resuming from an earlier one would hide it."""


def _check_belongs(path: Path, meta: dict[str, str]) -> None:
    """A checkpoint copied in from another run (or renamed) must not be resumed or analysed as
    this run's: its file name's step must be its header's, and its config its run folder's."""
    stem = path.stem.split("_")[-1] if path.stem.startswith("step_") else ""
    if stem.isdigit() and meta["step"] != str(int(stem)):
        raise ForeignCheckpoint(
            f"checkpoint {path} holds step {meta['step'][:20]}, not {int(stem)} (copied from another run, or renamed?); "
            "move it out of the run folder"
        )
    run_config = path.parent.parent / "config.json"
    if path.parent.name != "checkpoints" or not run_config.exists():
        return
    from stackedheads.state.read import parse_json, read_state_json

    try:
        have = TrainConfig.from_dict(parse_json(meta["config"], path, "a checkpoint's header"))
    except (ValueError, TypeError):  # a damaged header (UsageError is a ValueError): load_model says so
        return
    if have != TrainConfig.from_dict(read_state_json(run_config, "a training run's config"), run_config):
        raise ForeignCheckpoint(
            f"checkpoint {path} was written by a run of another configuration than {run_config} "
            "(copied from another run?); move it out of the run folder"
        )


def _refuse_foreign(path: Path) -> None:
    """:class:`ForeignCheckpoint` for a checkpoint of another run, from its header alone."""
    meta = _header(path)
    if meta and "step" in meta and "config" in meta:  # a damaged one is not resumed from either way
        _check_belongs(Path(path), meta)


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


def resume_point(run_dir: Path, device: str, model: EnsembleTransformer, opt: torch.optim.Optimizer,
                 at_most: int | None = None) -> int:
    """Restore the newest checkpoint that verifies; damaged newer ones are set aside, not lost.
    ``at_most``: no later than this step (where metrics.csv lacks rows after it, they are
    trained again from the checkpoint before; 0 when none is that early)."""
    ckpts = list_checkpoints(run_dir)
    if at_most is not None and ckpts and ckpts[-1][0] > at_most:
        for _, path in (c for c in ckpts if c[0] > at_most):
            _refuse_foreign(path)  # skipped, but one copied in from another run is still said
        ckpts = [c for c in ckpts if c[0] <= at_most]
        if not ckpts:
            return 0
    weights_only = False
    for step, path in reversed(ckpts):
        try:
            tensors, meta = read_checkpoint(path, device)
        except ForeignCheckpoint:
            raise
        except UsageError as e:
            print(f"warning: {e}; resuming from an earlier checkpoint", file=sys.stderr)
            path.replace(path.with_suffix(".damaged"))
            continue
        if "weights_only" in meta:  # so are all before it: no AdamW state to go on from
            weights_only = True
            break
        _restore(tensors, model, opt)
        return step
    if weights_only:
        print(f"warning: {run_dir}: no checkpoint left to resume from keeps the optimiser's state; "
              "training again from step 0", file=sys.stderr)
        return 0
    if ckpts:
        raise UsageError(f"{run_dir}: no checkpoint verifies; delete the folder to start over")
    return 0
