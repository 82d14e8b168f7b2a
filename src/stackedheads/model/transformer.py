"""The transformer of Sections 7.1, 8.1 and 9.1, as an ensemble of E independent models.

The paper trains GPT-2-style transformers ("the recipe of Radford et al. (2019)", Sec. 7.1)
on continuous vectors instead of tokens, so the token embedding becomes a linear input
projection and the unembedding a linear readout at the N query positions (Sec. 6):

    x: (B, T, d_in) -> W_in -> [pre-LN block] x n_layers -> ln_f -> last N positions -> W_readout
    block:  x = x + attn(ln1(x));  x = x + mlp(ln2(x))      (mlp optional, Sec. 9.1)

By default no positional embedding is learned: positions arrive inside the inputs (Sec. 6),
and there is no dropout (Sec. 7.1). ``pos_embed="learned"`` adds GPT-2's learned position
table after the input projection, one of the choices the paper leaves open. The paper's sizes, all expressible with :class:`ModelConfig`:

* Sec. 7.1: 1-8 layers, 8 heads, d_model 128 (and 8 seeds per size);
* Sec. 8.1: 12 layers, 1 head, d_model 128 (transformers A, B, C);
* Sec. 9.1: 24 layers, 1 head, d_model 512, d_head 16, no MLP (transformer D).

Ensembles. The paper trains many small models that differ only in their seed. Running them
one by one leaves an accelerator idle, so :class:`EnsembleTransformer` holds E models of the
same shape: every parameter has a leading E axis and every matmul is batched over it. Member
e is initialised from its own ``torch.Generator`` seeded with ``seeds[e]``, and nothing in the
forward pass mixes members, so member e of an ensemble is the same model as an ensemble of
one with seed ``seeds[e]`` -- same initial weights, same outputs, and (with a per-member loss
and a per-element optimiser such as AdamW) the same training trajectory.

Hook points (TransformerLens style). ``blocks.{l}.attn.hook_pattern`` is the attention pattern
after the softmax, ``(E, B, H, T_query, T_key)``; ``blocks.{l}.hook_resid_post`` the residual
stream after block l, ``(E, B, T, d_model)``. Observing or replacing them is how the circuit
analysis of App. E works: :meth:`EnsembleTransformer.run_with_cache` reads patterns,
:meth:`EnsembleTransformer.run_with_hooks` replaces them with rule-built ones (uniform,
identity, one-hot "attend here" maps). Hooks live for one call only.

Shapes in comments: E ensemble members, B batch, T positions, H heads, d widths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from stackedheads.errors import UsageError
from stackedheads.model.config import CHOICES, ModelConfig, _is_int
from stackedheads.model.factored import factored_forward

# A hook function: fn(activation, meta=..., hook_name=...) -> replacement or None (keep).
HookFn = Callable[..., Tensor | None]

INIT_STD = 0.02  # GPT-2's normal init (Radford et al., 2019; as in nanoGPT)
# TransformerLens's init_mode "gpt2" when initializer_range is unset: every weight matrix
# N(0, 0.8 / sqrt(d_model)), no residual scaling (HookedTransformerConfig).
TL_INIT_GAIN = 0.8
LN_EPS = 1e-5


# ----------------------------------------------------------------------------- pieces


def ensemble_linear(x: Tensor, W: Tensor, b: Tensor) -> Tensor:
    """``x @ W + b`` for each member. x: (E, ..., d_in), W: (E, d_in, d_out), b: (E, d_out).

    One batched matmul over E (``baddbmm``): members never see each other's weights.
    """
    E, d_in = x.shape[0], x.shape[-1]
    out = torch.baddbmm(b.unsqueeze(1), x.reshape(E, -1, d_in), W)  # (E, rest, d_out)
    return out.reshape(*x.shape[:-1], W.shape[-1])


def residual_linear(resid: Tensor, x: Tensor, W: Tensor, b: Tensor) -> Tensor:
    """``resid + x @ W + b`` for each member (a block's output added to the residual stream).

    The residual rides on the matmul as baddbmm's input: at Sec. 9.1's width the residual
    stream, not the matmuls, is what a CPU step spends its time on, so passes over it count.
    The bias: when x is narrow beside the stream (Sec. 9.1's 16-wide head into a 512-wide
    stream) it rides in the matmul too, as a column of ones in x and a row of W, which saves a
    pass over the output forward and the bias gradient's pass backward (the matmul's weight
    gradient holds it); otherwise it is added in place, cast to the output's dtype first (a
    float32 bias added in place to a bfloat16 output takes a float32 round trip of it).
    """
    E = x.shape[0]
    x2, r2 = x.reshape(E, -1, x.shape[-1]), resid.reshape(E, -1, resid.shape[-1])
    if 4 * x.shape[-1] <= W.shape[-1]:
        ones = x2.new_ones(E, x2.shape[1], 1)
        out = torch.baddbmm(r2, torch.cat([x2, ones], dim=-1), torch.cat([W, b.unsqueeze(1)], dim=1))
    else:
        out = torch.baddbmm(r2, x2, W)
        out.add_(b.unsqueeze(1).to(out.dtype))
    return out.view(resid.shape)


class HookPoint(nn.Module):
    """Identity with a name: a place to observe or replace an activation (TransformerLens).

    Hooks are ordinary PyTorch forward hooks, registered for one call by
    :meth:`EnsembleTransformer.hooks`; a hook that returns a tensor replaces the activation.
    """

    def forward(self, x: Tensor) -> Tensor:
        return x

    @property
    def is_active(self) -> bool:
        """True when a forward hook listens here (ours do). nnsight uses no hooks, so to read
        patterns through nnsight set ``model.slow_attention = True``."""
        return bool(self._forward_hooks)


class LayerNorm(nn.Module):
    """LayerNorm with a gain and bias per ensemble member, (E, d), folded into the next linear.

    Every LayerNorm of the model feeds one linear map (ln1 -> W_qkv, ln2 -> W_up, ln_f ->
    W_readout), and ``(xhat * g + b) @ W + c == xhat @ (g[:, None] * W) + (b @ W + c)``. So the
    normalisation runs without an affine (torch's fused kernel, per row) and the gain and bias
    enter the linear's weights: no pass over the activations for the affine in either direction,
    and autograd takes the gain and bias gradients from the weight gradient the matmul computes
    anyway. It is also what makes a low-precision step fast: the activations stay in the compute
    dtype (bfloat16 under autocast) end to end, while the gain and bias stay float32 parameters.
    """

    def __init__(self, n_members: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_members, d))
        self.bias = nn.Parameter(torch.empty(n_members, d))

    def forward(self, x: Tensor) -> Tensor:
        """The normalised activations with the affine applied, (E, ..., d): for reading them
        (hooks, analysis); the model itself calls :meth:`linear`."""
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return F.layer_norm(x, x.shape[-1:], eps=LN_EPS) * self.weight.view(shape) + self.bias.view(shape)

    def linear(self, x: Tensor, W: Tensor, b: Tensor) -> Tensor:
        """``LN(x) @ W + b`` per member, with the affine folded into W and b (see the class)."""
        W_folded = self.weight.unsqueeze(-1) * W  # (E, d, d_out)
        b_folded = torch.baddbmm(b.unsqueeze(1), self.bias.unsqueeze(1), W).squeeze(1)
        return ensemble_linear(F.layer_norm(x, x.shape[-1:], eps=LN_EPS), W_folded, b_folded)


class Attention(nn.Module):
    """Causal multi-head self-attention, with the pattern exposed as ``hook_pattern``.

    Fast path: fused ``scaled_dot_product_attention`` (never materialises the pattern).
    Slow path, taken only when ``hook_pattern`` is listened to or ``slow`` is set:
    explicit softmax, so the pattern can be read or replaced. A replaced pattern is used
    as given (pattern @ V): building a valid, causal pattern is the caller's job (App. E).
    """

    def __init__(self, cfg: ModelConfig, n_members: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.head_dim
        d_attn = cfg.n_heads * cfg.head_dim  # may differ from d_model (Sec. 9.1)
        self.W_qkv = nn.Parameter(torch.empty(n_members, cfg.d_model, 3 * d_attn))
        self.b_qkv = nn.Parameter(torch.empty(n_members, 3 * d_attn))
        self.W_O = nn.Parameter(torch.empty(n_members, d_attn, cfg.d_model))
        self.b_O = nn.Parameter(torch.empty(n_members, cfg.d_model))
        self.hook_pattern = HookPoint()

    def forward(self, resid: Tensor, ln: LayerNorm, slow: bool = False, queries: int | None = None) -> Tensor:
        """``resid + attn(ln(resid))``; resid: (E, B, T, d_model). ``queries=N`` computes only
        the last N rows (keys and values still span every position): the last layer, whose other
        rows nothing reads. Returns (E, B, T or N, d_model)."""
        E, B, T, _ = resid.shape
        H, dh = self.n_heads, self.d_head
        qkv = ln.linear(resid, self.W_qkv, self.b_qkv)  # (E, B, T, 3 H dh)
        # Fold E into the batch: attention never mixes members, and (E*B, H, T, dh) is
        # the layout the fused kernels want.
        q, k, v = qkv.view(E * B, T, 3, H, dh).permute(2, 0, 3, 1, 4)  # each (E*B, H, T, dh)

        if queries is not None:
            q, resid = q[:, :, -queries:], resid[:, :, -queries:]
            # Query i sits at position T - N + i and sees keys up to there (SDPA's is_causal
            # would align the mask top-left instead).
            mask = torch.ones(queries, T, dtype=torch.bool, device=resid.device).tril(T - queries)
            z = _attention(q, k, v, mask)  # (E*B, H, N, dh)
            T = queries
        elif slow or self.hook_pattern.is_active:
            causal = torch.ones(T, T, dtype=torch.bool, device=resid.device).tril()
            pattern = self.hook_pattern(causal_softmax(q, k, causal).view(E, B, H, T, T))  # may be replaced
            pattern = broadcast_pattern(pattern, (E, B, H, T, T)).to(v.device, v.dtype)
            z = pattern.reshape(E * B, H, T, T) @ v  # (E*B, H, T, dh)
        else:
            z = _attention(q, k, v)  # (E*B, H, T, dh)

        z = z.transpose(1, 2).reshape(E, B, T, H * dh)  # heads side by side
        return residual_linear(resid, z, self.W_O, self.b_O)  # (E, B, T, d_model)


def causal_softmax(q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
    """The attention pattern ``softmax(q k^T / sqrt(d_head))`` where ``mask`` allows, in float32
    (in a low compute dtype the scores come from its matmul and are normalised in float32, as
    mixed-precision attention does). q: (..., T_q, dh), k: (..., T, dh) -> (..., T_q, T)."""
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Causal attention (``mask``: which keys each query sees; None: the usual causal mask).

    Fused SDPA, except on a CPU in a low compute dtype: torch's CPU flash kernel then runs its
    backward 2-6x slower than an explicit product (measured at the sec9 and sec8 shapes: T = 36,
    d_head = 16 and T = 28, d_head = 128), and T is a few dozen positions, so the explicit
    pattern costs little memory. There :func:`_explicit_attention`.
    """
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        return _explicit_attention(q, k, v, mask)
    # Not cuDNN's kernel: its backward failed at the sec9 shape on an H200 in bfloat16 (torch
    # 2.11, "mha_graph.execute(...).is_good()"); flash and memory-efficient cover these shapes.
    with sdpa_kernel(SDPA_BACKENDS):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d_head) + mask) v`` in float32, returned in ``v``'s dtype.

    q, k, v are (batch, H, T, d_head) with d_head a few dozen: the attention is a small part of a
    step's bytes, while the (T x T) scores are where rounding would matter. So the three are cast
    to float32 once, the mask enters as an additive bias of the scores' product (one
    ``baddbmm``: no masked_fill, division or casts of the scores, forward or backward), and only
    the output is cast back: three ops over the scores each way instead of seven.
    """
    Tq, T, dh = q.shape[-2], k.shape[-2], q.shape[-1]
    if mask is None:
        mask = torch.ones(Tq, T, dtype=torch.bool, device=q.device).tril(T - Tq)
    bias = torch.zeros(Tq, T, device=q.device, dtype=torch.promote_types(q.dtype, torch.float32)).masked_fill_(~mask, float("-inf"))
    wide = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for a float64 model
    with torch.autocast(q.device.type, enabled=False):  # float32 products, whatever autocast says
        qf, kf, vf = (t.to(wide).reshape(-1, t.shape[-2], dh) for t in (q, k, v))
        scores = torch.baddbmm(bias, qf, kf.transpose(1, 2), alpha=1.0 / math.sqrt(dh))
        z = torch.bmm(scores.softmax(dim=-1), vf)
    return z.view(*q.shape[:-1], dh).to(v.dtype)


SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def broadcast_pattern(pattern: Tensor, shape: tuple[int, int, int, int, int]) -> Tensor:
    """Expand a replacement pattern to (E, B, H, T, T).

    Accepts (E, B, H, T, T), (B, H, T, T) (same for every member) and (B, T, T) (same for
    every member and head) -- the shapes rule-built patterns come in. Plain right-aligned
    broadcasting would misread (B, T, T) as (H, T, T), hence the explicit cases.
    """
    if pattern.ndim == 3:  # (B, T, T)
        pattern = pattern[None, :, None]
    elif pattern.ndim == 4:  # (B, H, T, T)
        pattern = pattern[None]
    elif pattern.ndim != 5:
        raise UsageError(
            f"a replacement pattern must have 3, 4 or 5 dims, got {tuple(pattern.shape)}"
        )
    try:
        return pattern.expand(shape)
    except RuntimeError:
        raise UsageError(
            f"replacement pattern of shape {tuple(pattern.shape)} does not broadcast to "
            f"(E, B, H, T, T) = {shape}"
        ) from None


class MLP(nn.Module):
    """GPT-2 MLP: d_model -> 4 d_model -> GELU (tanh approximation) -> d_model."""

    def __init__(self, cfg: ModelConfig, n_members: int) -> None:
        super().__init__()
        d_mlp = 4 * cfg.d_model
        self.W_up = nn.Parameter(torch.empty(n_members, cfg.d_model, d_mlp))
        self.b_up = nn.Parameter(torch.empty(n_members, d_mlp))
        self.W_down = nn.Parameter(torch.empty(n_members, d_mlp, cfg.d_model))
        self.b_down = nn.Parameter(torch.empty(n_members, cfg.d_model))

    def forward(self, resid: Tensor, ln: LayerNorm) -> Tensor:  # resid + mlp(ln(resid)), (E, B, T, d_model)
        h = F.gelu(ln.linear(resid, self.W_up, self.b_up), approximate="tanh")
        return residual_linear(resid, h, self.W_down, self.b_down)


class Block(nn.Module):
    """Pre-LN residual block (GPT-2): x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, cfg: ModelConfig, n_members: int) -> None:
        super().__init__()
        self.ln1 = LayerNorm(n_members, cfg.d_model)
        self.attn = Attention(cfg, n_members)
        # Sec. 9.1 removes the MLPs: no module at all, so no parameters and no FLOPs.
        self.ln2 = LayerNorm(n_members, cfg.d_model) if cfg.mlp else None
        self.mlp = MLP(cfg, n_members) if cfg.mlp else None
        self.hook_resid_post = HookPoint()

    def forward(self, x: Tensor, slow: bool = False, queries: int | None = None) -> Tensor:
        """x: (E, B, T, d_model) -> (E, B, T, d_model), or the last ``queries`` rows only."""
        x = self.attn(x, self.ln1, slow=slow, queries=queries)
        if self.mlp is not None:
            x = self.mlp(x, self.ln2)
        return self.hook_resid_post(x)

    @property
    def observed(self) -> bool:
        """A hook listens to this block: it then computes every row, as hooks expect."""
        return self.attn.hook_pattern.is_active or self.hook_resid_post.is_active


# ----------------------------------------------------------------------------- model


class EnsembleTransformer(nn.Module):
    """E independent transformers of one shape, run as one batched module (Sec. 7.1).

    ``model(x)`` with x: (E, B, T, d_in) -- or (B, T, d_in), the same inputs for every
    member -- returns (E, B, n_queries, d_out): the readout at the last n_queries positions.

    Training note: to keep members independent, sum the per-member losses (e.g.
    :func:`stackedheads.training.member_mse`) rather than averaging over E, and
    clip gradients per member (:func:`clip_grad_norm_per_member_`), never jointly.
    """

    def __init__(self, config: ModelConfig, seeds: Sequence[int], *, init: bool = True) -> None:
        """``init=False`` leaves the parameters uninitialised (to load a checkpoint into)."""
        super().__init__()
        seeds = tuple(seeds)
        if not seeds or not all(_is_int(s) for s in seeds):
            raise UsageError(f"seeds must be a non-empty sequence of integers, got {seeds!r}")
        if config.pos_embed == "learned" and config.n_ctx < 1:
            raise UsageError("a learned position table needs 'n_ctx', the sequence length", fields=("n_ctx",))
        self.config, self.seeds = config, seeds
        self.slow_attention = False  # True: explicit softmax on every layer (debugging, nnsight)
        E, cfg = len(seeds), config

        # A linear input projection replaces GPT-2's token embedding (inputs are vectors).
        self.W_in = nn.Parameter(torch.empty(E, cfg.d_in, cfg.d_model))
        self.b_in = nn.Parameter(torch.empty(E, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg, E) for _ in range(cfg.n_layers))
        self.ln_f = LayerNorm(E, cfg.d_model)
        # A linear readout at the query positions replaces the unembedding (Sec. 6).
        self.W_readout = nn.Parameter(torch.empty(E, cfg.d_model, cfg.d_out))
        self.b_readout = nn.Parameter(torch.empty(E, cfg.d_out))
        # Registered last, so the other parameters keep their names and draws.
        self.W_pos = nn.Parameter(torch.empty(E, cfg.n_ctx, cfg.d_model)) if cfg.pos_embed == "learned" else None
        if init:
            self.reset_parameters()

    @property
    def n_members(self) -> int:
        return len(self.seeds)

    # ------------------------------------------------------------------ init

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 init, member by member, each from ``torch.Generator().manual_seed(seed)``.

        Weights ~ N(0, 0.02); the residual output projections (attn.W_O, mlp.W_down) get
        0.02 / sqrt(2 n_layers), because each block adds to the residual stream twice
        (``resid_scale="sublayers"``: the number of residual sublayers, n_layers without MLPs);
        biases 0; LayerNorm weights 1. Draws happen on the CPU in a fixed parameter order,
        so member e's weights depend on its seed only -- not on E, the device, or its
        neighbours -- which is what makes ensembles split and merge exactly. What the
        screen's choices add (a position table, the input projection's PyTorch default) is
        drawn from a generator of its own (:func:`_choice_generator`), so every other weight is
        the preset's, draw for draw, and choices combine without moving each other's draws.
        ``weight_init="transformer-lens"`` keeps every draw and scales it to TransformerLens's
        one std, 0.8/sqrt(d_model), residual projections included.
        """
        cfg = self.config
        sublayers = cfg.n_layers * (1 if cfg.resid_scale == "sublayers" and not cfg.mlp else 2)
        # TransformerLens's: the same draws, scaled to one std for every weight
        std = INIT_STD if cfg.weight_init is None else TL_INIT_GAIN / math.sqrt(cfg.d_model)
        residual_std = std / math.sqrt(sublayers) if cfg.weight_init is None else std
        bound = 1.0 / math.sqrt(cfg.d_in)  # nn.Linear: kaiming_uniform(a=sqrt(5)) and its bias
        for e, seed in enumerate(self.seeds):
            gen = torch.Generator().manual_seed(seed)
            for name, p in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if leaf == "W_pos":
                    continue
                if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
                    value = torch.ones(p.shape[1:])
                elif leaf.startswith("b_") or leaf == "bias":
                    value = torch.zeros(p.shape[1:])
                else:
                    value = torch.empty(p.shape[1:]).normal_(0.0, residual_std if leaf in ("W_O", "W_down") else std,
                                                             generator=gen)
                p[e].copy_(value)
            if self.W_pos is not None:
                g = _choice_generator(seed, "pos_embed")
                self.W_pos[e].copy_(torch.empty(self.W_pos.shape[1:]).normal_(0.0, std, generator=g))
            if cfg.in_init == "torch":
                g = _choice_generator(seed, "in_init")
                self.W_in[e].copy_(torch.empty(self.W_in.shape[1:]).uniform_(-bound, bound, generator=g))
                self.b_in[e].copy_(torch.empty(self.b_in.shape[1:]).uniform_(-bound, bound, generator=g))

    # ------------------------------------------------------------------ forward

    def forward(self, x: Tensor, meta: Any = None) -> Tensor:
        """x: (E, B, T, d_in) or (B, T, d_in) -> (E, B, n_queries, d_out).

        ``meta`` is not used by the forward pass; it is accepted so every entry point has
        the same signature, and :meth:`run_with_hooks` hands it to the hook functions.
        """
        if self.factorable:
            return factored_forward(self, self._inputs(x), _explicit_attention if x.device.type == "cpu" else _attention, LN_EPS)
        return self.run_from(self.embed(x))

    @property
    def factorable(self) -> bool:
        """Whether :meth:`forward` may skip the residual stream (:mod:`stackedheads.model.factored`):
        an attention-only model (Sec. 9.1) that nothing observes (no hook listening, not
        ``slow_attention``); the same outputs to rounding."""
        return not (self.config.mlp or self.slow_attention or any(block.observed for block in self.blocks))

    def _inputs(self, x: Tensor) -> Tensor:
        """Inputs as :meth:`forward` takes them, checked, as (E, B, T, d_in)."""
        E, cfg = self.n_members, self.config
        if x.ndim == 3:  # one batch for every member (e.g. a shared validation set)
            x = x.unsqueeze(0).expand(E, -1, -1, -1)
        if x.ndim != 4 or x.shape[0] != E or x.shape[-1] != cfg.d_in or x.shape[2] < cfg.n_queries:
            raise UsageError(
                f"expected inputs (E={E}, B, T>={cfg.n_queries}, d_in={cfg.d_in}), "
                f"got {tuple(x.shape)}"
            )
        if self.W_pos is not None and x.shape[2] > cfg.n_ctx:
            raise UsageError(f"inputs of {x.shape[2]} positions exceed the learned position table's {cfg.n_ctx}")
        return x

    def embed(self, x: Tensor) -> Tensor:
        """The residual stream entering block 0, (E, B, T, d_model), for inputs as
        :meth:`forward` takes them."""
        x = self._inputs(x)
        h = ensemble_linear(x, self.W_in, self.b_in)  # (E, B, T, d_model)
        if self.W_pos is not None:
            h = h + self.W_pos[:, None, : x.shape[2]].to(h.dtype)
        return h

    def run_from(self, h: Tensor, start: int = 0, streams: list[Tensor] | None = None) -> Tensor:
        """Blocks ``start``.. on ``h``, the residual stream entering block ``start``, then the
        readout: (E, B, n_queries, d_out), the bytes :meth:`forward` gives. ``streams`` (a
        list) receives the stream after each block but the last, which a later call may start
        from (circuit discovery reruns only the layers after the first it changes)."""
        cfg = self.config
        if not 0 <= start < cfg.n_layers:
            raise UsageError(f"start must be a block index below {cfg.n_layers}, got {start}")
        *body, last = self.blocks[start:]
        for block in body:
            h = block(h, slow=self.slow_attention)
            if streams is not None:
                streams.append(h)
        # Only the N query positions are read out (Sec. 6), so the last block computes only
        # their rows, unless a hook there wants every row.
        full = self.slow_attention or last.observed
        h = last(h, slow=self.slow_attention, queries=None if full else cfg.n_queries)
        h = h[:, :, -cfg.n_queries :]  # (E, B, N, d_model)
        # The readout runs in float32 whatever the compute dtype: it is N rows of the B x T the
        # step computes, and it is what the loss is taken of.
        with torch.autocast(h.device.type, enabled=False):
            return self.ln_f.linear(h.to(self.W_readout.dtype), self.W_readout, self.b_readout)  # (E, B, N, d_out)

    # ------------------------------------------------------------------ hooks

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by name, e.g. ``blocks.0.attn.hook_pattern``."""
        return {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}

    def pattern_names(self) -> list[str]:
        return [f"blocks.{l}.attn.hook_pattern" for l in range(self.config.n_layers)]

    @contextmanager
    def hooks(
        self, fwd_hooks: Iterable[tuple[str, HookFn]] = (), meta: Any = None
    ) -> Iterator[None]:
        """Attach ``(name, fn)`` hooks for the duration of a ``with`` block.

        ``fn(activation, meta=meta, hook_name=name)`` returns a replacement tensor or None
        (keep). Hooks are removed in ``finally``, so an exception leaves the model clean.
        """
        points = self.hook_points()
        handles = []
        try:
            for name, fn in fwd_hooks:
                if name not in points:
                    raise UsageError(f"no hook point {name!r}; known: {sorted(points)}")
                handles.append(points[name].register_forward_hook(_adapt(fn, name, meta)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def run_with_hooks(
        self, x: Tensor, meta: Any = None, fwd_hooks: Iterable[tuple[str, HookFn]] = ()
    ) -> Tensor:
        """One forward pass with ``fwd_hooks`` attached (observe or replace activations).

        Patterns handed to ``fn`` are (E, B, H, T, T); a replacement may also be (B, H, T, T)
        or (B, T, T) and is broadcast (:func:`broadcast_pattern`).
        """
        with self.hooks(fwd_hooks, meta):
            return self(x, meta)

    def run_with_cache(
        self,
        x: Tensor,
        meta: Any = None,
        names: Iterable[str] | Callable[[str], bool] | None = None,
        fwd_hooks: Iterable[tuple[str, HookFn]] = (),
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward pass that also returns ``{hook name: activation}`` (detached).

        ``names``: a list of hook names, a predicate on names, or None for every hook point
        (all patterns and residual streams). ``fwd_hooks`` run first, so the cache holds
        what the model actually used -- e.g. the patterns under an ablation.
        """
        points = self.hook_points()
        if names is None:
            selected = list(points)
        elif callable(names):
            selected = [n for n in points if names(n)]
        else:
            selected = list(names)
        cache: dict[str, Tensor] = {}

        def save(activation: Tensor, hook_name: str, **_: Any) -> None:
            cache[hook_name] = activation.detach()

        hooks = list(fwd_hooks) + [(name, save) for name in selected]
        out = self.run_with_hooks(x, meta, hooks)
        return out, cache

    # ------------------------------------------------------------------ split / merge

    def member(self, e: int) -> EnsembleTransformer:
        """An ensemble of one: a copy of member ``e`` (same device and dtype)."""
        if not -self.n_members <= e < self.n_members:
            raise UsageError(f"member {e} out of range for an ensemble of {self.n_members}")
        e %= self.n_members
        single = EnsembleTransformer(self.config, [self.seeds[e]], init=False)
        single.slow_attention = self.slow_attention
        state = {k: v.detach()[e : e + 1].clone() for k, v in self.state_dict().items()}
        single.load_state_dict(state, assign=True)  # assign: keep device and dtype
        return single



def _adapt(fn: HookFn, name: str, meta: Any) -> Callable[[nn.Module, Any, Tensor], Tensor | None]:
    """Turn ``fn(activation, meta=, hook_name=)`` into a PyTorch forward hook."""

    def hook(module: nn.Module, inputs: Any, output: Tensor) -> Tensor | None:
        result = fn(output, meta=meta, hook_name=name)
        if result is not None and name.endswith("hook_pattern"):
            # Broadcast here, not only in Attention, so later hooks (the cache) see the
            # full (E, B, H, T, T) pattern the model is about to use.
            result = broadcast_pattern(result, tuple(output.shape))
            result = result.to(device=output.device, dtype=output.dtype)
        return result

    return hook


def _choice_generator(seed: int, choice: str) -> torch.Generator:
    """A generator for the draws of one choice (``CHOICES``) of member ``seed``: apart from the
    seed's own stream and from the other choices' (a fixed odd multiplier mixes the seed, so seed
    s's stream for a choice is no other seed's main stream)."""
    stream = 1 + list(CHOICES).index(choice)
    return torch.Generator().manual_seed((seed * 0x9E3779B97F4A7C15 + stream) % 2**63)
