"""The shape of one transformer (Sections 7.1, 8.1 and 9.1): :class:`ModelConfig`, with the
architecture's start choices the paper leaves open (:data:`CHOICES`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from stackedheads.errors import UsageError

# The choices Sec. 7.1 leaves open about the architecture's start; the
# first of each is what every preset uses.
CHOICES = {"in_init": ("gpt2", "torch"), "resid_scale": ("blocks", "sublayers"), "pos_embed": ("none", "learned"),
           "weight_init": ("gpt2", "transformer-lens")}
# The sizes that follow the task (a TrainConfig sets them): no option sets them, so an error about
# one names no option.
FOLLOW_THE_TASK = ("d_in", "d_out", "n_queries", "n_ctx")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of one transformer. Defaults: Sec. 7.1 with N = 4, K = 4, D = 3 (IC).

    In a :class:`~stackedheads.training.TrainConfig` the first three follow the task.
    """

    d_in: int = field(default=8, metadata={"help": (
        "input width, 2K: the token vector (K) and its positional encoding (K), Sec. 6."
    )})
    d_out: int = field(default=12, metadata={"help": (
        "output width per query: D*K with the implicit curriculum, K without (Sec. 7)."
    )})
    n_queries: int = field(default=4, metadata={"help": (
        "N; the readout is at the last n_queries positions (Sec. 6)."
    )})
    n_layers: int = field(default=2, metadata={"help": (
        "transformer layers (Sec. 7.1: 1-8; 8.1: 12; 9.1: 24)."
    )})
    n_heads: int = field(default=8, metadata={"help": (
        "attention heads per layer (Sec. 7.1: 8; 8.1, 9.1: 1)."
    )})
    d_model: int = field(default=128, metadata={"help": (
        "residual stream width (Sec. 7.1, 8.1: 128; 9.1: 512)."
    )})
    d_head: int | None = field(default=None, metadata={"help": (
        "head size; None is d_model // n_heads (GPT-2); Sec. 9.1 decouples it (16)."
    )})
    mlp: bool = field(default=True, metadata={"help": (
        "a GELU MLP of width 4 d_model after each attention (Sec. 9.1 removes them)."
    )})
    n_ctx: int = field(default=0, metadata={"help": (
        "sequence length, for a learned position table (follows the task; 0: unknown)."
    )})
    # The three below default to None, "as before they existed" (storage's rule for new settings),
    # which is their first choice: a run folder written before them resumes.
    in_init: str | None = field(default=None, metadata={"help": (
        "the input projection's initialisation: \"gpt2\" (None; N(0, 0.02), bias 0, as every GPT-2 "
        "weight) or \"torch\" (nn.Linear's default, U(-1/sqrt(d_in), 1/sqrt(d_in)) for weight and bias)."
    )})
    resid_scale: str | None = field(default=None, metadata={"help": (
        "the residual output projections' std: \"blocks\" (None; 0.02/sqrt(2 n_layers), nanoGPT, also "
        "without MLPs) or \"sublayers\" (0.02/sqrt(the residual sublayers: 2 per block with an MLP, 1 without))."
    )})
    pos_embed: str | None = field(default=None, metadata={"help": (
        "\"none\" (None; positions only inside the inputs, Sec. 6) or \"learned\" (GPT-2's position "
        "table, N(0, 0.02), added after the input projection)."
    )})
    weight_init: str | None = field(default=None, metadata={"help": (
        "\"gpt2\" (None; nanoGPT's N(0, 0.02), the residual projections scaled by resid_scale) or "
        "\"transformer-lens\" (TransformerLens's default: every weight matrix, the input projection and a "
        "position table included, N(0, 0.8/sqrt(d_model)), none scaled; 0.035 at d_model 512)."
    )})

    def __post_init__(self) -> None:
        for name in ("d_in", "d_out", "n_queries", "n_layers", "n_heads", "d_model"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise UsageError(f"'{name}' must be a whole number >= 1, got {value!r}",
                                 fields=() if name in FOLLOW_THE_TASK else (name,))
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise UsageError(
                    f"'d_model' {self.d_model} is not divisible by 'n_heads' {self.n_heads}; "
                    "pick another size or set 'd_head'", fields=("d_model", "n_heads", "d_head"),
                )
        elif not _is_int(self.d_head) or self.d_head < 1:
            raise UsageError(f"'d_head' must be None or a whole number >= 1, got {self.d_head!r}", fields=("d_head",))
        if not isinstance(self.mlp, bool):
            raise UsageError(f"'mlp' must be true or false, got {self.mlp!r}", fields=("mlp",))
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in (None, *allowed):
                raise UsageError(f"'{name}' must be one of {', '.join(allowed)}, got {getattr(self, name)!r}",
                                 fields=(name,))
            if getattr(self, name) == allowed[0]:  # the first choice named is the unset one: one setting, one spelling
                object.__setattr__(self, name, None)
        if self.weight_init and self.resid_scale:
            raise UsageError("'resid_scale' scales GPT-2's init; 'weight_init' transformer-lens scales no residual "
                             "projection", fields=("weight_init", "resid_scale"))
        if not _is_int(self.n_ctx) or self.n_ctx < 0:
            raise UsageError(f"'n_ctx' must be a whole number >= 0, got {self.n_ctx!r}")

    @property
    def head_dim(self) -> int:
        """The resolved head size: ``d_head``, or ``d_model // n_heads`` when it is None."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Inverse of :meth:`to_dict`. Unknown keys are an error (a typo would be silent)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UsageError(f"unknown ModelConfig keys {unknown}; known: {sorted(known)}")
        return cls(**d)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
