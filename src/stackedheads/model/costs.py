"""What a model costs: its parameters and a training step's FLOPs (for MFU)."""

from __future__ import annotations

from stackedheads.model.config import ModelConfig


def count_parameters(config: ModelConfig) -> int:
    """Parameters of one member (every weight, bias and LayerNorm gain)."""
    d, L, dh, H = config.d_model, config.n_layers, config.head_dim, config.n_heads
    attn = d * 3 * H * dh + 3 * H * dh + H * dh * d + d
    mlp = (d * 4 * d + 4 * d + 4 * d * d + d) if config.mlp else 0
    lns = 2 * d * (2 if config.mlp else 1)
    pos = config.n_ctx * d if config.pos_embed == "learned" else 0
    return config.d_in * d + d + pos + L * (attn + mlp + lns) + 2 * d + d * config.d_out + config.d_out


def flops_per_step(config: ModelConfig, batch: int, seq_len: int, n_members: int = 1) -> float:
    """Approximate FLOPs of one training step (forward + backward), for MFU.

    Counting convention of Kaplan et al. (2020) / PaLM (Chowdhery et al., 2022, App. B):
    a matmul with P weights costs 2 P FLOPs per token forward and 4 P backward, hence
    6 P per token; attention adds QK^T and AV, 2 * 2 T d_head per token, head and layer
    forward, so 12 L H d_head T per token for forward + backward. Per step::

        flops = n_members * batch * (6 * (P_tok * T + P_read * N) + 12 * L * H * d_head * T * T)

    where P_tok are the matmul weights applied at every position (W_in, qkv, W_O, MLP),
    P_read = d_model * d_out is the readout applied at the N = n_queries positions only,
    and T = seq_len. Left out: biases, LayerNorm, softmax, GELU, residual adds, the loss
    and the optimiser -- a few percent with the MLP, more (~10-15%) for the thin MLP-free
    model of Sec. 9.1, so MFU there is a lower bound. Slightly overcounted: W_in's backward
    needs no input gradient (4 P, not 6 P; d_in is tiny). The causal mask is *not*
    credited: like PaLM we count the full T x T scores although fused kernels skip the
    masked half, so MFU is comparable with the usual numbers.
    """
    d, L, dh, H, T = config.d_model, config.n_layers, config.head_dim, config.n_heads, seq_len
    per_layer = d * 3 * H * dh + H * dh * d + (8 * d * d if config.mlp else 0)
    p_tok = config.d_in * d + L * per_layer
    p_read = d * config.d_out
    per_sequence = 6 * (p_tok * T + p_read * min(config.n_queries, T)) + 12 * L * H * dh * T * T
    return float(n_members * batch * per_sequence)


# --------------------------------------------------------------------------- measured costs
# What a step actually executes, op by op, for a roofline: the FLOPs and bytes of each operator
# family against the machine's measured matmul peak and memory bandwidth (benchmarks/
# train_throughput.py). Families by op name without its namespace (aten's, or this package's
# ``stackedheads::add_product_``; a trailing * matches a prefix), first match wins;
# "elementwise, copies, reductions" takes the rest.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matmuls", ("bmm", "baddbmm", "addbmm", "addmm", "mm", "matmul", "linear", "_linear_pointwise", "add_product_")),
    ("attention (softmax, mask)", ("softmax", "_softmax", "_safe_softmax", "_softmax_backward_data", "masked_fill",
                                   "masked_fill_", "tril", "_scaled_dot_product*", "scaled_dot_product*")),
    ("LayerNorm", ("native_layer_norm", "native_layer_norm_backward", "var_mean", "rsqrt")),
    ("MLP activation", ("gelu", "gelu_backward")),
    ("casts (float32 <-> bfloat16)", ("_to_copy",)),
    ("optimizer", ("_fused_adamw_", "_fused_adam_")),
)
OTHER_FAMILY = "elementwise, copies, reductions"


def _base(name: str) -> str:
    """An op's name without namespace and overload: ``aten.bmm.default`` -> ``bmm``."""
    return name.split(".")[1] if name.startswith(("aten.", "stackedheads.")) else name


def op_family(name: str) -> str:
    """The family of an op by its name (``aten.bmm.default`` -> "matmuls")."""
    base = _base(name)
    for family, names in FAMILIES:
        if base in names or any(n.endswith("*") and base.startswith(n[:-1]) for n in names):
            return family
    return OTHER_FAMILY


def matmul_flops(name: str, shapes: list[tuple[int, ...]]) -> float:
    """FLOPs of a matmul-type op from its tensor arguments' shapes (2 per multiply-add); 0 for
    any other op. bmm/baddbmm: (b, n, k) @ (b, k, m); mm/addmm: (n, k) @ (k, m);
    ``stackedheads::add_product_(g, A, D)``: A (b, k, n) transposed @ D (b, k, m)."""
    base = _base(name)
    if base == "add_product_" and len(shapes) == 3:
        a, d = shapes[1], shapes[2]
        return 2.0 * a[0] * a[1] * a[2] * d[2]
    if base in ("bmm", "baddbmm") and len(shapes) >= 2:
        a, b = shapes[-2:]
        if len(a) == 3 and len(b) == 3:
            return 2.0 * a[0] * a[1] * a[2] * b[2]
    if base in ("mm", "addmm") and len(shapes) >= 2:
        a, b = shapes[-2:]
        if len(a) == 2 and len(b) == 2:
            return 2.0 * a[0] * a[1] * b[1]
    return 0.0


class OpTally:
    """Per operator family: calls, seconds, FLOPs and bytes moved by the ops run inside ``with``.

    A ``TorchDispatchMode`` under autograd, so it sees the backward's ops and the optimiser's as
    well as the forward's. Bytes: each tensor an op reads or writes, once (an expanded tensor by
    its storage, a view or an allocation moves none), which is what eager kernels move at least;
    a fused (compiled) step moves fewer. Seconds: each op's own, measured around it (the tally's
    bookkeeping is outside the clock).
    """

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}

    def __enter__(self) -> OpTally:
        from torch.utils._python_dispatch import TorchDispatchMode

        tally = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                import time

                t0 = time.perf_counter()
                out = func(*args, **(kwargs or {}))
                tally._add(func, args, kwargs or {}, out, time.perf_counter() - t0)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)

    def _add(self, func, args, kwargs, out, seconds: float) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        name = str(func)
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
        returns = func._schema.returns
        is_view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if is_view or func._schema.name.split("::")[-1] in ("empty", "empty_strided", "new_empty", "empty_like"):
            moved = 0
        else:
            moved = sum(_tensor_bytes(t) for t in ins + outs)
        row = self.rows.setdefault(op_family(name), {"calls": 0, "seconds": 0.0, "flops": 0.0, "bytes": 0.0})
        row["calls"] += 1
        row["seconds"] += seconds
        row["flops"] += matmul_flops(name, [tuple(t.shape) for t in ins])
        row["bytes"] += moved

    def scaled(self, factor: float) -> dict[str, dict[str, float]]:
        """The rows with every count multiplied by ``factor`` (e.g. 1/steps: per step)."""
        return {k: {n: v * factor for n, v in row.items()} for k, row in self.rows.items()}


def _tensor_bytes(t) -> int:
    """Bytes a kernel touches for ``t``: its elements, or its storage if smaller (an expanded view)."""
    own = t.numel() * t.element_size()
    try:
        return min(own, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return own


def roofline(rows: dict[str, dict[str, float]], peak_flops: float, bandwidth: float) -> dict[str, dict[str, float]]:
    """Each family's floor at this machine's limits and how near its measured time comes.

    ``floor_s = max(flops / peak_flops, bytes / bandwidth)``; ``bound`` names the larger term
    ("compute" or "memory"); ``of_floor`` = floor_s / seconds (1.0: at the machine's limit).
    A "step" row sums the families: its floor is the step's roofline time.
    """
    out = {}
    total = {"calls": 0.0, "seconds": 0.0, "flops": 0.0, "bytes": 0.0, "floor_s": 0.0}
    for fam, r in rows.items():
        compute, memory = r["flops"] / peak_flops, r["bytes"] / bandwidth
        floor = max(compute, memory)
        out[fam] = {**r, "floor_s": floor, "bound": "compute" if compute >= memory else "memory",
                    "of_floor": floor / r["seconds"] if r["seconds"] else 0.0,
                    "intensity": r["flops"] / r["bytes"] if r["bytes"] else 0.0}
        for k in total:
            total[k] += out[fam][k]
    out["step"] = {**total, "bound": "compute" if total["flops"] / peak_flops >= total["bytes"] / bandwidth else "memory",
                   "of_floor": total["floor_s"] / total["seconds"] if total["seconds"] else 0.0,
                   "intensity": total["flops"] / total["bytes"] if total["bytes"] else 0.0}
    return out
