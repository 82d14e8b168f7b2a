"""Where a rule's tokens sit in the sequence: each token's ``s_i`` (Appendix B, Definition 1),
a path's two ends, and the mean attention a model puts on a path."""

from __future__ import annotations

import torch

from stackedheads import theory
from stackedheads.circuits.paths import Dst, dst_parts
from stackedheads.tasks.vectors import FIRST, QUERY, SECOND, Meta

ROLES = {"first": FIRST, "second": SECOND, "query": QUERY}


def s_index(meta: Meta) -> torch.Tensor:
    """``(B, T)``: the ``i`` of ``s_i`` each token is in its own chain."""
    return torch.where(
        meta.role == QUERY, 0, torch.where(meta.role == SECOND, 2 * meta.chain_pos, 2 * meta.chain_pos + 1)
    )


def chain_positions(meta: Meta) -> torch.Tensor:
    """``(B, N, 2D + 1)``: position of ``s_i`` of chain ``c`` (by chain id, not query slot)."""
    out = torch.empty_like(meta.paths)
    out.scatter_(1, meta.query_chain[..., None].expand_as(meta.paths), meta.paths)
    return out


def positions(meta: Meta) -> torch.Tensor:
    """``(B, T)``: each token's own position."""
    B, T = meta.role.shape
    return torch.arange(T).expand(B, T)


def role_sources(role: str, depth: int) -> list[int]:
    """The ``s_i`` a token role holds: the query s_0, second tokens s_2k, first tokens s_2k+1."""
    return {"query": [0], "second": list(range(2, 2 * depth + 1, 2)), "first": list(range(1, 2 * depth, 2))}[role]


def path_ends(meta: Meta, src: int, dst: Dst) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence positions of a path's ends, ``(rows, cols)``: ``s_src`` of every chain and what
    it reads, ``(B, N)`` each. For ``o<j>`` (the other chains' ``s_j``) every pair of a chain and
    another chain is one entry, ``(B, N (N - 1))``, so a path's mean attention there is per
    other chain's token. Where ``s_src`` cannot read ``dst`` in a sequence (it would read itself,
    or a later position: position 0 has nothing before it, another chain's token of its block may
    come after it), the entry is replaced by one of the same sequence that can, so that a path's
    mean attention is that of the tokens able to follow it (attention on oneself at position 0
    is 1 whatever the head does); a sequence with none reads a masked position (attention 0)."""
    cp = chain_positions(meta)
    rows = cp[:, :, src]
    kind, n = dst_parts(dst)
    if kind == "s":
        return rows, cp[:, :, n]
    if kind == "p":
        cols = torch.full_like(rows, n)
    elif kind == "t":
        cols = rows - n
    else:
        B, N = rows.shape
        other = ~torch.eye(N, dtype=torch.bool).expand(B, N, N)
        rows, cols = rows[:, :, None].expand(B, N, N)[other].view(B, -1), cp[:, None, :, n].expand(B, N, N)[other].view(B, -1)
    readable = (cols < rows) & (cols >= 0)
    pick = readable.float().argmax(-1, keepdim=True)  # a readable entry of the sequence
    masked = torch.tensor([0, meta.role.shape[1] - 1])  # row 0 cannot see the last position
    some = readable.any(-1, keepdim=True)
    rows = torch.where(readable, rows, torch.where(some, rows.gather(-1, pick), masked[0]))
    cols = torch.where(readable, cols, torch.where(some, cols.gather(-1, pick), masked[1]))
    return rows, cols


@torch.no_grad()
def path_attention(model, batch, paths) -> list[float]:
    """Mean attention of tokens ``s_src`` on ``s_dst`` (same chain, or position 0 for a sink
    path), per ``(layer, head, src, dst)`` path, for one member."""
    names = sorted({f"blocks.{l}.attn.hook_pattern" for l, *_ in paths})
    _, cache = model.run_with_cache(batch.inputs, batch.meta, names=names)
    B = batch.meta.role.shape[0]
    out = []
    for layer, head, src, dst in paths:
        pat = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, head]  # (B, T, T)
        rows, cols = path_ends(batch.meta, src, dst)  # (B, N) each
        out.append(float(pat[torch.arange(B)[:, None], rows, cols].mean()))
    return out


def pair_attention(model, batch, depth: int) -> list[list]:
    """Sec. 8.2 (i) as the paper read it, from the attention maps: every head's mean attention
    from the second token of each pair, ``s_2k``, on its first, ``s_2k-1`` (k = 1..D), as
    ``[[layer, head, [a_1, .., a_D]], ...]``."""
    cfg = model.config
    heads = [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    att = path_attention(model, batch, [(l, h, 2 * k, 2 * k - 1) for l, h in heads for k in range(1, depth + 1)])
    return [[l, h, att[i * depth:(i + 1) * depth]] for i, (l, h) in enumerate(heads)]


def one_hot(target: torch.Tensor, T: int) -> torch.Tensor:
    """``(B, T, T)`` patterns with all attention on ``target[b, t]``."""
    return torch.nn.functional.one_hot(target, T).float()


def uniform_causal(B: int, T: int) -> torch.Tensor:
    """``(B, T, T)``: uniform attention over the positions the causal mask allows."""
    tri = torch.ones(T, T).tril()
    return (tri / tri.sum(-1, keepdim=True)).expand(B, T, T)


def _reachable(i: int, dst: Dst, depth: int) -> bool:
    """Whether ``s_i`` can read ``dst`` in some sequence (causal attention, Sec. 6's layout)."""
    kind, n = dst_parts(dst)
    pos = theory.chain_order(depth)  # sequence position of each s_i within one chain
    if kind in ("s", "o") and not 0 <= n <= 2 * depth:
        return False
    if kind == "s":
        return bool(pos[n] < pos[i])
    if kind == "o":  # other chains' tokens of the same block may come first (shuffled within it)
        return bool(pos[n] // 2 <= pos[i] // 2)
    return True
