"""What one training job is: ``TrainConfig(task, model, optim, ...)`` (Sec. 7.1).

Three parts, each owned by the module that uses it: the task
(:class:`~stackedheads.tasks.vectors.VectorTaskConfig`, Sec. 6-7), the architecture
(:class:`~stackedheads.model.config.ModelConfig`, Sec. 7.1, 8.1, 9.1) and the optimiser and schedule
(:class:`OptimConfig`, "the recipe of Radford et al. (2019)"). What is left belongs to the run:
seeds, batch, steps, evaluation and checkpoints, device.

Configs are frozen dataclasses that serialise to JSON (``config.json`` of a run folder, the
header of every checkpoint). :meth:`TrainConfig.override` changes fields by name, e.g.
``cfg.override(n_layers=3, lr=3e-3, depth=4)``; the command line's options are generated from
these fields (:func:`stackedheads.cli.options`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

import torch

from stackedheads.validation import check_types
from stackedheads.errors import UsageError, brief
from stackedheads.model.config import ModelConfig
from stackedheads.execution.process import MAX_THREADS_PER_CORE, check_threads
from stackedheads.validation import check_seeds
from stackedheads.tasks.vectors import VectorTaskConfig

# "tf32": float32 tensors, TensorFloat-32 matmuls on a CUDA GPU (10-bit mantissa products,
# float32 accumulation): several times the float32 matmul rate of an A100/H100.
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16}
# "auto": bfloat16 where the device computes it natively (a CUDA GPU with bf16, a CPU with
# AVX512-BF16 or AMX), float32 elsewhere; resolved when a run folder is created and recorded in
# its config.json, so a resumed run keeps the dtype it started with (:meth:`TrainConfig.resolved`).
DTYPE_CHOICES = (*DTYPES, "auto")
# More steps than any run of the paper (24,000) by four orders of magnitude: a typo, refused
# before anything is written.
MAX_STEPS = 10**9
SCHEDULES = ("constant", "cosine", "linear")
# Parameter families that may be exempt from weight decay (GPT-2/nanoGPT exempt norms and biases).
DECAY_EXEMPTIONS = ("norm", "bias", "embed")
# Fields every version of config.json wrote (in the flat format too): one missing is damage, not
# an older file, so it is refused rather than defaulted.
REQUIRED_FIELDS = {
    "": ("seeds", "batch_size", "steps"),
    "task": ("chains", "depth", "dims", "ic", "n_train", "n_val"),
    "model": ("n_layers", "n_heads", "d_model"),
}
# ModelConfig's fields that follow from the task, not from the user.
MODEL_IO = ("d_in", "d_out", "n_queries", "n_ctx")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (Sec. 7.1: 1e-3)."})
    weight_decay: float = field(default=0.1, metadata={"help": (
        "decoupled weight decay (Sec. 7.1: 0.1; Loshchilov 2017)."
    )})
    warmup_steps: int = field(default=0, metadata={"help": (
        "linear warm-up from lr/warmup_steps to lr (0: none)."
    )})
    schedule: str = field(default="constant", metadata={"help": (
        "after warm-up, \"constant\", \"cosine\" or \"linear\" decay ..."
    )})
    min_lr_ratio: float = field(default=0.1, metadata={"help": (
        "... down to this fraction of lr at the last step (or at decay_steps)."
    )})
    decay_steps: int | None = field(default=None, metadata={"help": (
        "the step the decay reaches min_lr_ratio (nanoGPT's lr_decay_iters); None: the run's "
        "last step. At least steps; larger: the run is the start of a longer schedule."
    )})
    grad_clip: float = field(default=0.0, metadata={"help": (
        "gradient-norm clipping per ensemble member (0: off)."
    )})
    betas: tuple[float, float] = field(default=(0.9, 0.999), metadata={"help": "Adam's (beta1, beta2)."})
    decay_exempt: tuple[str, ...] = field(default=(), metadata={"help": (
        "parameter families without weight decay: \"norm\" (LayerNorm gains and biases), \"bias\", "
        "\"embed\" (the input projection)."
    )})

    def __post_init__(self) -> None:
        check_types(self)  # first: the checks below compare numbers
        for name in ("lr", "weight_decay", "min_lr_ratio", "grad_clip"):
            if not math.isfinite(getattr(self, name)):
                raise UsageError(f"'{name}' must be a finite number, got {getattr(self, name)}", fields=(name,))
        if self.lr <= 0:
            raise UsageError(f"'lr' must be > 0, got {self.lr}", fields=("lr",))
        if self.weight_decay < 0:
            raise UsageError(f"'weight_decay' must be >= 0, got {self.weight_decay}", fields=("weight_decay",))
        if self.schedule not in SCHEDULES:
            raise UsageError(f"'schedule' must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}", fields=("schedule",))
        if not 0 <= self.min_lr_ratio <= 1:
            raise UsageError(f"'min_lr_ratio' must lie in [0, 1], got {self.min_lr_ratio}", fields=("min_lr_ratio",))
        if self.grad_clip < 0:
            raise UsageError(f"'grad_clip' must be >= 0 (0 = off), got {self.grad_clip}", fields=("grad_clip",))
        if self.warmup_steps < 0:
            raise UsageError(f"'warmup_steps' must be >= 0, got {self.warmup_steps}", fields=("warmup_steps",))
        if len(self.betas) != 2 or not all(math.isfinite(b) and 0 <= b < 1 for b in self.betas):
            raise UsageError(f"'betas' must be two numbers in [0, 1), got {list(self.betas)}", fields=("betas",))
        bad = set(self.decay_exempt) - set(DECAY_EXEMPTIONS)
        if bad:
            raise UsageError(f"'decay_exempt' takes {', '.join(DECAY_EXEMPTIONS)}, got {sorted(bad)}", fields=("decay_exempt",))
        if self.decay_steps is not None:
            if isinstance(self.decay_steps, bool) or not isinstance(self.decay_steps, int) or not 0 < self.decay_steps <= MAX_STEPS:
                raise UsageError(f"'decay_steps' must be a whole number from 1 to {MAX_STEPS:,}, got {self.decay_steps!r}",
                                 fields=("decay_steps",))
            if self.schedule == "constant":
                raise UsageError("'decay_steps' sets where a decay ends: give it with 'schedule' cosine or linear",
                                 fields=("decay_steps", "schedule"))


# GPT-2's recipe as we read it (Radford et al. 2019 via nanoGPT): linear warm-up, cosine decay
# to 10% of the peak, gradient clipping at 1.0 per member, no decay on LayerNorm gains and
# biases. Measured on sec9: val MSE 0.570 with the plain recipe, 0.0039 with this.
GPT2_RECIPE = {"schedule": "cosine", "min_lr_ratio": 0.1, "grad_clip": 1.0, "decay_exempt": ("norm", "bias")}


@dataclass(frozen=True)
class TrainConfig:
    """One training job: an ensemble of ``len(seeds)`` models of one shape."""

    task: VectorTaskConfig = field(default_factory=VectorTaskConfig, metadata={"help": (
        "the vector task (Sec. 6-7)."
    )})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": (
        "the architecture; its input, output and query sizes follow the task."
    )})
    optim: OptimConfig = field(default_factory=OptimConfig, metadata={"help": "AdamW and the schedule."})
    seeds: tuple[int, ...] = field(default=(0,), metadata={"help": (
        "one ensemble member per seed (its initialisation, data and order)."
    )})
    batch_size: int = field(default=512, metadata={"help": "sequences per step and member (Sec. 7.1: 512)."})
    steps: int = field(default=10_000, metadata={"help": "optimiser steps (Sec. 7.1: 10k)."})
    steps_per_epoch: int | None = field(default=None, metadata={"help": (
        "the epoch axis of plots and claims; None: n_train // batch_size. Sec. 9.1 counts 6,400 "
        "steps as 800 epochs (8 steps per epoch), which its 262k examples at batch 256 (1,024 steps"
        " per epoch) contradict; the sec9 presets follow the paper's arithmetic."
    )})
    eval_every: int = field(default=100, metadata={"help": "validate every this many steps."})
    final_window: int = field(default=100, metadata={"help": (
        "the \"final validation loss\" is the mean over the last this many steps, each evaluated "
        "(Sec. 7.1: 100)."
    )})
    ckpt_every: int = field(default=1000, metadata={"help": "checkpoint every this many steps."})
    keep_checkpoints: bool = field(default=True, metadata={"help": (
        "keep every checkpoint (emergence, Sec. 9, reads them) or the last two."
    )})
    device: str = field(default="cpu", metadata={"help": "\"cpu\", \"cuda\" or \"cuda:N\"."})
    dtype: str = field(default="float32", metadata={"help": (
        "\"float32\", \"bfloat16\" (autocast: bfloat16 activations and matmuls, float32 weights, "
        "optimizer state, readout and loss), \"tf32\" (CUDA matmuls) or \"auto\" (bfloat16 where the "
        "device has it natively, else float32; resolved per run)."
    )})
    compile: bool = field(default=False, metadata={"help": (
        "torch.compile the model for training and evaluation. On a GPU it fuses a 24-layer step's "
        "many small kernels; on a 2-core CPU it measured no faster."
    )})
    cuda_graph: bool = field(default=False, metadata={"help": (
        "capture the optimiser step (forward, backward, clipping, AdamW) as one CUDA graph and "
        "replay it: a launch-bound GPU step (sec9: a few ms of work in 45 ms) runs as one launch. "
        "CUDA only; the same arithmetic as the eager step."
    )})
    threads: int | None = field(default=None, metadata={"help": (
        "torch's intra-op CPU threads while training. None: the caller's setting when the run "
        "starts; recorded in config.json and reused on resume, because the reductions of a step sum"
        " in an order that depends on the thread count (same count, same bytes)."
    )})

    def __post_init__(self) -> None:
        check_types(self)  # first: the checks below compare numbers (task, model, optim check their own)
        # The model reads the task's vectors and predicts at its queries: derived, never chosen.
        t = self.task
        io = {"d_in": t.d_in, "d_out": t.d_out, "n_queries": t.chains, "n_ctx": t.seq_len}
        if any(getattr(self.model, k) != v for k, v in io.items()):
            object.__setattr__(self, "model", replace(self.model, **io))
        if not self.seeds:
            raise UsageError("'seeds' is empty: at least one seed is needed", fields=("seeds",))
        check_seeds(self.seeds, "'seeds'", field="seeds")  # the API's seeds=(-1,) made a folder the CLI calls damaged
        if len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"'seeds' must be distinct, got {brief(list(self.seeds))}", fields=("seeds",))
        for name in ("steps", "batch_size", "eval_every", "ckpt_every", "final_window"):
            if getattr(self, name) < 1:
                raise UsageError(f"'{name}' must be >= 1, got {getattr(self, name)}", fields=(name,))
        if self.steps > MAX_STEPS:
            raise UsageError(f"'steps' must be <= {MAX_STEPS:,}, got {self.steps}", fields=("steps",))
        if self.threads is not None and self.threads < 1:
            # The upper bound is the machine's that trains (perf.check_threads, applied by
            # resolved()): a config.json written on a larger machine must stay readable here.
            raise UsageError(f"'threads' must be a whole number >= 1 (at most {MAX_THREADS_PER_CORE} per core of the "
                             f"machine that trains), got {self.threads}", fields=("threads",))
        if self.optim.warmup_steps >= self.steps:
            raise UsageError(f"'warmup_steps' must lie in [0, 'steps') = [0, {self.steps}), got {self.optim.warmup_steps}",
                             fields=("warmup_steps", "steps"))
        if self.optim.decay_steps is not None and self.optim.decay_steps < self.steps:
            # A decay that ends before the run would hold the floor lr for the rest, which a
            # changed --steps with a preset's decay_steps would do without a word.
            raise UsageError(f"'decay_steps' ({self.optim.decay_steps}) must be at least 'steps' ({self.steps}): "
                             "give 'decay_steps' equal to 'steps' to decay over the whole run", fields=("decay_steps", "steps"))
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise UsageError(f"'steps_per_epoch' must be >= 1, got {self.steps_per_epoch}", fields=("steps_per_epoch",))
        if self.dtype not in DTYPE_CHOICES:
            raise UsageError(f"'dtype' must be one of {', '.join(DTYPE_CHOICES)}, got {self.dtype!r}", fields=("dtype",))
        if self.dtype == "tf32" and not self.device.startswith("cuda"):
            raise UsageError("'dtype' tf32 is a CUDA matmul mode: use it with 'device' cuda (float32 on a CPU)",
                             fields=("dtype", "device"))
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise UsageError(f"'device' must be cpu, cuda or cuda:N, got {self.device!r}", fields=("device",))
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise UsageError("'cuda_graph' captures CUDA kernels: use it with 'device' cuda", fields=("cuda_graph", "device"))
        if self.cuda_graph and self.compile:
            raise UsageError("'cuda_graph' and 'compile' are two ways to cut a GPU step's launches: choose one",
                             fields=("cuda_graph", "compile"))
        if self.batch_size > self.task.n_train:
            raise UsageError(f"'batch_size' {self.batch_size} exceeds 'n_train' {self.task.n_train}", fields=("batch_size", "n_train"))

    def model_config(self) -> ModelConfig:
        return self.model

    @property
    def torch_dtype(self) -> torch.dtype:
        """The compute dtype of autocast ("auto" resolved for this machine)."""
        return DTYPES[native_dtype(self.device) if self.dtype == "auto" else self.dtype]

    def resolved(self, stored: TrainConfig | None = None) -> TrainConfig:
        """This config with "auto" dtype and unset threads made concrete: taken from ``stored``
        (the run folder's config.json, when resuming) or else from this machine and process."""
        dtype, threads = self.dtype, self.threads
        if threads is not None and (stored is None or stored.threads != threads):
            check_threads(threads)  # a count this run did not start with: this machine's bound
        check_fits(self)  # before the run allocates or records anything
        if dtype == "auto":
            dtype = stored.dtype if stored is not None and stored.dtype != "auto" else native_dtype(self.device)
        if threads is None:  # a folder from before threads were recorded keeps None: no identity to check
            threads = stored.threads if stored is not None else torch.get_num_threads()
        return replace(self, dtype=dtype, threads=threads)

    # --- changing fields by name -----------------------------------------------------------------

    def override(self, **values) -> TrainConfig:
        """A copy with fields changed by name: the run's own (``steps``, ``seeds``), the task's
        (``depth``, ``chains``), the model's (``n_layers``) or the optimiser's (``lr``). Names
        are unique across the parts (:func:`field_owner`); None leaves a field as it is."""
        parts: dict[str, dict] = {"": {}, "task": {}, "model": {}, "optim": {}}
        for name, value in values.items():
            if value is not None:
                parts[field_owner(name)][name] = value
        return replace(
            self, **parts[""],
            **{part: replace(getattr(self, part), **parts[part]) for part in ("task", "model", "optim") if parts[part]},
        )

    # --- JSON ------------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in MODEL_IO:
            d["model"].pop(k)
        d["seeds"] = list(self.seeds)
        d["optim"]["betas"] = list(self.optim.betas)
        d["optim"]["decay_exempt"] = list(self.optim.decay_exempt)
        return d

    @classmethod
    def from_dict(cls, d: dict, where: object = None) -> TrainConfig:
        """Inverse of :meth:`to_dict`. Also reads the flat configs of run folders written before
        the config was nested (model and optimiser fields at the top level); a field added since
        an older config was written gets its default, one that every version wrote
        (:data:`REQUIRED_FIELDS`) is damage. ``where``: the file read, named in a refusal."""
        if where is None:
            return cls._from_dict(d)
        try:
            return cls._from_dict(d)
        except UsageError as e:  # a value read from a file: the file is named, no option (nobody gave one)
            raise UsageError(f"{where}: {e}") from None

    @classmethod
    def _from_dict(cls, d: dict) -> TrainConfig:
        if not isinstance(d, dict) or not isinstance(d.get("task"), dict) or not isinstance(d.get("seeds"), list):
            raise UsageError("a training config must be a JSON object with 'task' and 'seeds'")
        d = dict(d)
        for part in ("model", "optim"):
            if not isinstance(d.get(part) or {}, dict):
                raise UsageError(f"a training config's {part!r} must be a JSON object, got {str(d[part])[:40]!r}")
        model = dict(d.pop("model", None) or {})
        optim = dict(d.pop("optim", None) or {})
        for name in list(d):  # the flat format
            owner = _OWNER.get(name)
            if owner == "model":
                model[name] = d.pop(name)
            elif owner == "optim":
                optim[name] = d.pop(name)
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise UsageError(f"unknown training config fields {sorted(unknown)}")
        given = {"": d, "task": d["task"], "model": model}
        missing = [f"{part}.{name}".lstrip(".") for part, names in REQUIRED_FIELDS.items() for name in names if name not in given[part]]
        if missing:  # emergence defaulted a missing model.n_layers to 2 without a word
            raise UsageError(f"a training config without {', '.join(missing)}: every version wrote it, so the file is damaged")
        for k in ("betas", "decay_exempt"):
            if k in optim:
                optim[k] = tuple(optim[k])
        task = d.pop("task")
        try:
            return cls(
                **{**d, "seeds": tuple(check_seeds(d["seeds"], "config.json"))},  # seeds name folders elsewhere
                task=VectorTaskConfig.from_dict(task),
                model=ModelConfig.from_dict({k: v for k, v in model.items() if k not in MODEL_IO}),
                optim=OptimConfig(**optim),
            )
        except TypeError as e:
            raise UsageError(f"bad training config: {e}") from None

    # --- schedule and axes -----------------------------------------------------------------------

    def lr_at(self, step: int) -> float:
        """Learning rate of update ``step`` (0-based): a pure function of the step, so a resumed
        run follows the same schedule without storing scheduler state."""
        o = self.optim
        if step < o.warmup_steps:
            return o.lr * (step + 1) / o.warmup_steps
        if o.schedule == "constant":
            return o.lr
        span = max(1, (o.decay_steps or self.steps) - o.warmup_steps - 1)
        p = min(1.0, (step - o.warmup_steps) / span)
        decay = 0.5 * (1.0 + math.cos(math.pi * p)) if o.schedule == "cosine" else 1.0 - p
        return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * decay)

    def epoch(self, step: int | float) -> float:
        """``step`` on the epoch axis (see ``steps_per_epoch``)."""
        per = self.steps_per_epoch or max(1, self.task.n_train // self.batch_size)
        return step / per

    def is_eval_step(self, step: int) -> bool:
        """Validation runs after update ``step`` (1-based): every ``eval_every`` steps and at each
        of the last ``final_window`` (a predicate, so memory does not grow with ``steps``)."""
        return 1 <= step <= self.steps and (step % self.eval_every == 0 or step > self.steps - self.final_window)

    def n_evals(self) -> int:
        """How many validations a whole run makes."""
        window = min(self.final_window, self.steps)
        regular = self.steps // self.eval_every
        in_window = regular - (self.steps - window) // self.eval_every  # counted in both
        return regular + window - in_window


def _owners() -> dict[str, str]:
    owners: dict[str, str] = {}
    for part, cls in (("task", VectorTaskConfig), ("model", ModelConfig), ("optim", OptimConfig)):
        for f in fields(cls):
            if f.name not in MODEL_IO:
                owners[f.name] = part
    for f in fields(TrainConfig):
        if f.name not in ("task", "model", "optim"):
            assert f.name not in owners, f"field {f.name} is ambiguous"
            owners[f.name] = ""
    return owners


_OWNER = _owners()  # field name -> the part of TrainConfig that holds it ("" for the run's own)


def field_owner(name: str) -> str:
    """Which part of :class:`TrainConfig` holds the field ``name``: "task", "model", "optim" or ""."""
    if name not in _OWNER:
        raise UsageError(f"no training config field {name!r}; fields are {', '.join(sorted(_OWNER))}")
    return _OWNER[name]


def native_dtype(device: str) -> str:
    """"bfloat16" where ``device`` computes it natively (autocast then runs the fast path),
    else "float32". CPUs: AVX512-BF16 (AMD Zen 4, Intel Cooper Lake on) or AMX tiles (Intel
    Sapphire Rapids on); elsewhere oneDNN emulates bf16 matmuls, slower than float32."""
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bfloat16" if native else "float32"


def check_device(device: str) -> None:
    """Refuse a CUDA device this machine lacks, before a run or a sweep writes anything (a
    corrected re-run must not find a config of the failed one)."""
    try:
        kind = torch.device(device).type
    except RuntimeError:  # e.g. cuda:x
        raise UsageError(f"'device' must be cpu, cuda or cuda:N, got {device!r}", fields=("device",)) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("'device' cuda was asked for but no CUDA device is available", fields=("device",))


# --- what a run needs of the machine ---------------------------------------------------------------


TENSOR_BYTES = 256  # the least a tensor costs beside its numbers (TensorImpl, storage, Python object)
MODULE_BYTES = 1024  # the least an nn.Module instance costs (its object and its dicts of parts and hooks)


def memory_needed(cfg: TrainConfig) -> list[tuple[str, int, str, dict[str, float]]]:
    """Lower bounds, in bytes, of what training ``cfg`` holds at once: ``(what, bytes, where,
    {option: its factor against the defaults})`` per part (``where``: "device" or "host").

    Lower bounds, so that a run refused could never have fitted: AdamW keeps four float32
    copies of every parameter; backward needs what each layer's operations saved per token (the
    input and output of each layer norm, q, k, v and the attention's output and log-sum-exp,
    the MLP's hidden layer before and after GELU); every layer is a handful of modules and five
    tensors per parameter (value, gradient, two AdamW moments, its step count); the validation
    set sits in memory as inputs and per-token metadata; each member keeps its epoch's order of
    the training set (8 bytes per example)."""
    m, t = cfg.model, cfg.task
    members, tokens = len(cfg.seeds), t.seq_len
    d, attn = m.d_model, m.n_heads * m.head_dim
    per_layer = 4 * d * attn + (8 * d * d if m.mlp else 0) + 4 * d
    params = m.n_layers * per_layer + d * (m.d_in + m.d_out)
    shape = {"n_layers": m.n_layers / 2, "d_model": (d / 128) ** 2, "seeds": members}
    saved = 4 * d + 4 * attn + m.n_heads + (8 * d if m.mlp else 0)  # numbers per token and layer
    width = 2 if cfg.dtype == "bfloat16" else 4
    objects = (5 + 2 * m.mlp) * MODULE_BYTES + 5 * (6 + 6 * m.mlp) * TENSOR_BYTES  # per layer
    return [
        ("the model and its optimizer state", 16 * params * members, "device", shape),
        ("a training step's activations", width * members * cfg.batch_size * tokens * saved * m.n_layers, "device",
         {"batch_size": cfg.batch_size / 512, "chains": t.chains / 4, "depth": t.depth / 3, **shape}),
        ("the layers' modules and tensors", objects * m.n_layers, "host", {"n_layers": m.n_layers / 2}),
        ("the validation set", t.n_val * tokens * (4 * (t.d_in + t.d_out) + 32), "host",
         {"n_val": t.n_val / 4096, "chains": t.chains / 4, "depth": t.depth / 3}),
        ("the training set's order", 8 * t.n_train * members, "host", {"n_train": t.n_train / 2**20, "seeds": members}),
    ]


def machine_memory(device: str) -> dict[str, int | None]:
    """Bytes of memory of this machine ("host": RAM, capped by a cgroup limit) and of
    ``device`` (a CUDA GPU's; the host's on a CPU); None where unknown."""
    from pathlib import Path

    host = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                host = int(line.split()[1]) * 1024
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max" and host is not None:
            host = min(host, int(limit))
    except (OSError, ValueError, IndexError):
        pass
    dev = host
    if device.startswith("cuda") and torch.cuda.is_available():
        dev = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return {"host": host, "device": dev}


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit in ("B", "PB") and n >= 1024 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PB"


def _too_big(cfg: TrainConfig, memory: dict[str, int | None]) -> tuple[str, str] | None:
    """None if training ``cfg`` fits ``memory``; else ``(the field that most makes it so, what
    it would need against what the machine has)``."""
    needs = memory_needed(cfg)
    one = memory["device"] == memory["host"]  # a CPU run: everything in the host's memory
    for where in ("host",) if one else ("device", "host"):
        have = memory[where]
        parts = [p for p in needs if one or p[2] == where]
        total = sum(p[1] for p in parts)
        if have is None or total <= have:
            continue
        what, _, _, factors = max(parts, key=lambda p: p[1])
        return max(factors, key=factors.get), (
            f"training would need at least {_size(total)} of memory (mostly {what}), more than this machine's {_size(have)}")
    return None


def check_fits(cfg: TrainConfig, memory: dict[str, int | None] | None = None) -> None:
    """Refuse, before anything is allocated or written, a run whose memory cannot fit this
    machine (``--d-model 1000000000`` and ``--n-train 10**12`` ended in an allocator traceback,
    ``--layers 100000`` grew until the kernel killed it), naming the option that makes it so
    with its value as typed (``100000``, not ``100,000``: a comma reads as a list)."""
    found = _too_big(cfg, memory or machine_memory(cfg.device))
    if found is not None:
        option, need = found
        value = _field_value(cfg, option)
        shown = f"({len(value)} of them)" if option == "seeds" else f"{value}"
        raise UsageError(f"'{option}' {shown}: {need}", fields=(option,))


def check_jobs_fit(jobs, axes: dict[str, tuple[str, str]] | None = None) -> None:
    """:func:`check_fits` for each of a grid's ``(name, config)`` jobs, the machine's memory read
    once per device (a sweep over ``--layers 1-100000`` was killed by the kernel after recording
    its grid). ``axes``: per config field the grid varies, the grid's own field and its values
    (``{"depth": ("depths", "1-100000")}``); a job refused for such a field names the grid's
    field and the job (``'depths' 1-100000: run ic-D613-L8: training would need ...``), not the
    field of one job's config, which the grid's user never typed. A job refused for any other
    field is named with the field as :func:`check_fits` names it."""
    memory: dict[str, dict] = {}
    for name, cfg in jobs:
        if cfg.device not in memory:
            memory[cfg.device] = machine_memory(cfg.device)
        found = _too_big(cfg, memory[cfg.device])
        if found is None:
            continue
        option, need = found
        if option in (axes or {}):
            grid_field, values = axes[option]
            raise UsageError(f"'{grid_field}' {values}: run {name}: {need}", fields=(grid_field,))
        try:
            check_fits(cfg, memory[cfg.device])
        except UsageError as e:
            raise UsageError(f"run {name}: {e}", fields=e.fields) from None


def _field_value(cfg: TrainConfig, name: str):
    owner = field_owner(name)
    return getattr(getattr(cfg, owner) if owner else cfg, name)
