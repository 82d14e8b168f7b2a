"""What a model costs: its parameters and a training step's FLOPs (for MFU)."""

from __future__ import annotations

from stackedheads.model_config import ModelConfig


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
