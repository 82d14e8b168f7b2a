"""The forward pass of an attention-only model (Sec. 9.1's transformer D) without its residual stream.

Transformer D has no MLP: every block adds ``z_l @ W_O_l + b_O_l`` to the stream, a map from
the head's ``d_attn`` (16 at Sec. 9.1) into ``d_model`` (512). So the stream entering block l is
a sum of narrow factors,

    h_l = u_0 M_0 + u_1 M_1 + ... + u_l M_l,
    u_0 = [x, 1] (and the position's one-hot with a learned table),  M_0 = [W_in; b_in (; W_pos)]
    u_j = [z_{j-1}, 1],                                               M_j = [W_O; b_O] of block j-1,

and the stream is read only through LayerNorms, each feeding one linear map (ln1 -> W_qkv,
ln_f -> W_readout; the gain and bias fold into that map, as in :class:`LayerNorm`). Writing
``Mc_j`` for ``M_j`` with each row's mean removed (``h C`` centres h, ``C = I - 11^T / d``):

    LN(h_l) @ W' = (h_l C @ W') / s_l,        h_l C @ W' = sum_j u_j (Mc_j W'),
    s_l^2 = |h_l C|^2 / d + eps,              |h_{l+1} C|^2 = |h_l C|^2 + 2 u_{l+1} . r_l + u_{l+1} Mc_{l+1} Mc_{l+1}^T u_{l+1},
    r_l = h_l C Mc_{l+1}^T = sum_j u_j (Mc_j Mc_{l+1}^T).

Every product with the 512-wide d_model is a product of weights, computed once a step
(``Mc_j W'`` and ``Mc_j Mc_m^T``, a few hundred rows); per position only the factors (width
``d_in + 1 + (d_attn + 1) l``) meet those products. At Sec. 9.1's size that is 2.4x fewer
multiply-adds a position than the dense step and no pass over a 512-wide activation, forward
or backward: the dense step's time went to those passes (docs/speed.md's roofline).

The algebra is exact; the floating-point sums are in another order, so the outputs agree with
:meth:`EnsembleTransformer.run_from`'s to rounding (``tests/test_factored.py`` holds them to
float64 and the gradients too). The norms' running sums and Gram terms are computed in float32
whatever the compute dtype: they are differences of larger terms, where bfloat16's rounding
would show. The model takes this path when nothing observes its stream: no MLP, no hook
listening, not ``slow_attention`` (:meth:`EnsembleTransformer.factorable`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def _centred(M: Tensor) -> Tensor:
    return M - M.mean(dim=-1, keepdim=True)


def _folded(ln, W: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """A LayerNorm's gain and bias folded into the linear map it feeds: (E, d, out), (E, out)."""
    return ln.weight.unsqueeze(-1) * W, torch.baddbmm(b.unsqueeze(1), ln.bias.unsqueeze(1), W).squeeze(1)


@torch.library.custom_op("stackedheads::add_product_", mutates_args=("g",))
def _add_product_(g: Tensor, A: Tensor, D: Tensor) -> None:
    """``g += A^T D`` in place: g (E, w, P), A (E, r, w), D (E, r, P). An op of its own so that a
    compiled backward keeps it in place (inductor re-inplaces a mutating custom op; an aten
    in-place product on an intermediate compiles to a new product and a copy)."""
    g.baddbmm_(A.transpose(1, 2), D)


@_add_product_.register_fake
def _(g: Tensor, A: Tensor, D: Tensor) -> None:
    return None


class _Grow(torch.autograd.Function):
    """``(A @ U, U)`` with ``U = cat(U_prev, u)``: a layer's product of the factors so far.

    The backward adds ``A^T dproj`` into the gradient that the next layer passed back for U, in
    place, and hands its first rows on as U_prev's: the factors' gradients are summed in one
    buffer over the layers, by the products themselves, instead of a product and a sum of two
    wide tensors a layer."""

    @staticmethod
    def forward(A: Tensor, U_prev: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        U = torch.cat([U_prev, u], dim=1)
        return torch.bmm(A, U), U

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0], output[1])
        ctx.w = inputs[1].shape[1]

    @staticmethod
    def backward(ctx, dproj: Tensor, dU: Tensor | None):
        A, U = ctx.saved_tensors
        if dU is None:  # U was not used after this layer
            g = torch.bmm(A.transpose(1, 2), dproj)
        else:  # dU is this layer's alone: the next layer's buffer, or the readout's
            g = dU
            _add_product_(g, A, dproj)
        dA = torch.bmm(dproj, U.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        return dA, g[:, : ctx.w] if ctx.needs_input_grad[1] else None, g[:, ctx.w :]


def factored_forward(model, x: Tensor, attention: Callable[..., Tensor], eps: float) -> Tensor:
    """``model(x)`` for an attention-only :class:`EnsembleTransformer`, computed from the stream's
    factors (module docstring): x (E, B, T, d_in) -> (E, B, n_queries, d_out). ``attention`` is the
    model's causal attention of (batch, H, T, d_head) q, k and v (and a mask of which keys each
    query sees, for the last block's N queries); ``eps`` its LayerNorm epsilon.

    Layout: a factor is (E, width, B T), positions last, so the factors so far are one contiguous
    concatenation of rows, grown by one concatenation a layer (:class:`_Grow`, whose backward sums
    the factors' gradients in one buffer), and each LayerNorm's map is one (E, out, width) x
    (E, width, B T) product in the compute dtype: the ``3 d_attn`` rows of the next q, k, v and the
    ``d_attn + 1`` rows of ``r``, which the norm's update sums in float32. q, k and v are formed from that
    product positions first, as the attention reads them, so the gradients of their bias and of
    the norm's scale are sums with the features innermost, which inductor vectorises (and a
    compiled evaluation copies the factors once a layer, not once per factor: docs/speed.md).
    """
    cfg = model.config
    E, B, T, _ = x.shape
    H, dh = cfg.n_heads, cfg.head_dim
    da, d, N = H * dh, cfg.d_model, cfg.n_queries
    blocks = list(model.blocks)
    L = len(blocks)
    wdt = model.W_in.dtype  # the parameters' dtype: float32 (or float64)
    off = x.device.type  # autocast is off inside: each product names its dtype
    # The compute dtype: the factors and their products in it (bfloat16 under autocast), the
    # attention, the norms and the readout in the parameters' dtype.
    cdt = torch.get_autocast_dtype(off) if torch.is_autocast_enabled(off) else wdt

    with torch.autocast(off, enabled=False):
        M0 = [model.W_in, model.b_in.unsqueeze(1)]
        if model.W_pos is not None:
            M0.append(model.W_pos[:, :T])
        Mc = [_centred(torch.cat(M0, dim=1))]  # (E, w_0, d)
        for block in blocks:
            Mc.append(_centred(torch.cat([block.attn.W_O, block.attn.b_O.unsqueeze(1)], dim=1)))  # (E, da + 1, d)

        def weights(l: int, W: Tensor) -> Tensor:
            """(E, out, w_l): factors 0..l against W (E, d, out)."""
            return torch.bmm(W.transpose(1, 2), torch.cat(Mc[: l + 1], dim=1).transpose(1, 2))

        parts = [x.to(wdt), x.new_ones(E, B, T, 1, dtype=wdt)]
        if model.W_pos is not None:
            parts.append(torch.eye(T, device=x.device, dtype=wdt).expand(E, B, T, T))
        u0 = torch.cat(parts, dim=-1).reshape(E, B * T, -1).transpose(1, 2).contiguous()  # (E, w_0, BT)
        G = torch.bmm(Mc[0], Mc[0].transpose(1, 2))
        sq = (torch.bmm(G, u0) * u0).sum(1)  # (E, BT): |h_0 C|^2
        U, u_next = u0.to(cdt), None

    for l, block in enumerate(blocks):
        with torch.autocast(off, enabled=False):
            W_qkv, b_qkv = _folded(block.ln1, block.attn.W_qkv, block.attn.b_qkv)
            # q, k, v's map and the next factor's rows (for r), one product: (E, 3 da + da + 1, w_l)
            A = weights(l, torch.cat([W_qkv, Mc[l + 1].transpose(1, 2)], dim=-1))
            if u_next is None:
                proj = torch.bmm(A.to(cdt), U)  # (E, 3 da + da + 1, BT)
            else:  # U grows by the factor the block before added
                proj, U = _Grow.apply(A.to(cdt), U, u_next.to(cdt))
            scale = torch.rsqrt(sq / d + eps)  # (E, BT): 1 / s_l
            # q, k, v = b + proj / s_l, formed positions first, as the attention reads them
            qkv = torch.addcmul(b_qkv.unsqueeze(1), proj[:, : 3 * da].transpose(1, 2), scale.unsqueeze(-1))  # (E, BT, 3 da)
            q, k, v = (t.transpose(2, 3).reshape(E * B, H, T, dh) for t in qkv.view(E, B, T, 3, H, dh).unbind(3))
            r = proj[:, 3 * da :].to(wdt)  # h_l C Mc_{l+1}^T
            if l < L - 1:
                z, P = attention(q, k, v), T  # (E B, H, T, dh)
            else:  # after the last block only the readout's N positions are read
                mask = torch.ones(N, T, dtype=torch.bool, device=x.device).tril(T - N)
                z, P = attention(q[:, :, -N:], k, v, mask), N
                # r and sq by an index, so that their gradients are a scatter of their own,
                # not a padding that inductor would recompute, unvectorised, in the wide kernels
                last = (torch.arange(B, device=x.device).unsqueeze(1) * T + torch.arange(T - N, T, device=x.device)).flatten()
                r, sq = (t.index_select(-1, last) for t in (r, sq))
                U = U.view(*U.shape[:-1], B, T)[..., -N:].flatten(-2)
            z = z.view(E, B, H, P, dh).permute(0, 2, 4, 1, 3).reshape(E, da, B * P)
            u_next = torch.cat([z, z.new_ones(E, 1, B * P)], dim=1)  # (E, da + 1, B P)
            G = torch.bmm(Mc[l + 1], Mc[l + 1].transpose(1, 2))  # (E, da + 1, da + 1)
            sq = sq + ((2 * r + torch.bmm(G, u_next)) * u_next).sum(1)
    U = torch.cat([U, u_next.to(cdt)], dim=1)  # (E, w_L, B N): the last block's factor

    # The readout at the last N positions: ln_f(h_L) @ W_readout + b, in float32.
    with torch.autocast(off, enabled=False):
        W_ro, b_ro = _folded(model.ln_f, model.W_readout, model.b_readout)
        scale = torch.rsqrt(sq.unsqueeze(1) / d + eps)
        out = torch.addcmul(b_ro.unsqueeze(-1), torch.bmm(weights(L, W_ro), U.to(wdt)), scale)  # (E, d_out, BN)
    return out.view(E, -1, B, N).permute(0, 2, 3, 1)
