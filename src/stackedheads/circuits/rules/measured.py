"""Measured maps: a row replaced by its own mean attention, by position (``position-map``) or by
position and the chain role each position holds (``position-role-map``).

App. E replaces a head that does "no useful computation" with uniform attention or the identity:
two maps that depend on the positions alone. A row no named rule explains may still attend by
position alone (docs/results.md, "Shortcuts": heads that follow positions rather than the roles s_i); its mean map
over sequences then reproduces it, while a row that reads by content loses what it read, since
the chains are shuffled within each step (Sec. 6) and average out. ``position-map`` is that
map. ``position-role-map`` also keys it by what each position holds relative to the token
(``s_j`` of its own chain, or of another): its weight on position k, when k holds that role,
is the row's mean attention there over the sequences where it does. It reproduces a row that
"reads position 3 when it holds its own chain's s6, else position 2" exactly, and any rule of
the library as a special case, yet knows nothing of the symbols: a row it reproduces within
budget computes from positions and chain roles, not from the symbols' values.

Both are measured by discovery on the search sequences and stored in circuit.json (the head's
``maps``, sparse: ``[t, k, w]`` or ``[t, k, cell, w]`` for the role's tokens t); the held-out
validation then uses the stored data. Discovery tries them last, after the baselines (the
simplest maps), for the rows nothing else explains (:mod:`..discover`). No path: they are
reported as shortcuts by their kind, and by what removing them breaks.
"""

from __future__ import annotations

import torch

from stackedheads.circuits.rules import POSITIONAL, RULES, AttentionRule, positions, s_index
from stackedheads.tasks.vectors import Meta

DIGITS = 4  # weights kept in circuit.json; smaller ones are dropped


def cells(meta: Meta) -> torch.Tensor:
    """``(B, T, T)``: the role key ``k`` holds for token ``t``: ``s_j`` of the token's own chain
    (cell ``S + j``) or of another chain (cell ``j``), ``S = 2D + 1``."""
    S = meta.paths.shape[-1]
    own = meta.chain[:, :, None] == meta.chain[:, None, :]
    return own.long() * S + s_index(meta)[:, None, :]


def _rows(of_role: torch.Tensor) -> torch.Tensor:
    """The positions of the role's tokens (Sec. 6's layout fixes each position's role)."""
    return of_role.any(0).nonzero().flatten()


def _self_where_empty(pat: torch.Tensor) -> torch.Tensor:
    """Rows with no weight (positions the map does not cover) attend to themselves."""
    empty = pat.sum(-1) <= 0
    return torch.where(empty[..., None], torch.eye(pat.shape[-1]).expand_as(pat), pat)


def measure_positions(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor) -> list:
    """``[t, k, w]``: the mean attention of the role's position ``t`` on ``k``."""
    mean = observed.double().mean(0)
    return [[t, k, round(float(mean[t, k]), DIGITS)] for t in _rows(of_role).tolist() for k in range(t + 1)
            if round(float(mean[t, k]), DIGITS) > 0]


def positions_pattern(meta: Meta, data: list) -> torch.Tensor:
    B, T = meta.role.shape
    dense = torch.zeros(T, T)
    for t, k, w in data:
        dense[t, k] = w
    return _self_where_empty(dense / dense.sum(-1, keepdim=True).clamp(min=1e-12)).expand(B, T, T)


def measure_cells(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor) -> list:
    """``[t, k, cell, w]``: the mean attention of the role's position ``t`` on ``k`` over the
    sequences where ``k`` holds ``cell`` (:func:`cells`)."""
    T, C = observed.shape[-1], 2 * meta.paths.shape[-1]
    key = ((torch.arange(T)[:, None] * T + torch.arange(T)) * C)[None] + cells(meta)  # (B, T, T)
    total = torch.zeros(T * T * C, dtype=torch.float64).scatter_add_(0, key.flatten(), observed.double().flatten())
    seen = torch.zeros(T * T * C, dtype=torch.float64).scatter_add_(0, key.flatten(), torch.ones(key.numel(), dtype=torch.float64))
    mean = (total / seen.clamp(min=1)).view(T, T, C)
    out = []
    for t in _rows(of_role).tolist():
        for k, c in (mean[t] > 0).nonzero().tolist():
            if round(float(mean[t, k, c]), DIGITS) > 0:
                out.append([t, k, c, round(float(mean[t, k, c]), DIGITS)])
    return out


def cells_pattern(meta: Meta, data: list) -> torch.Tensor:
    B, T = meta.role.shape
    dense = torch.zeros(T, T, 2 * meta.paths.shape[-1])
    for t, k, c, w in data:
        dense[t, k, c] = w
    pos = positions(meta)
    pat = dense[pos[..., None], pos[:, None, :], cells(meta)]  # (B, T, T): the weight of what k holds
    return _self_where_empty(pat / pat.sum(-1, keepdim=True).clamp(min=1e-12))


RULES.register("position-map", AttentionRule(
    spread=positions_pattern, measure=measure_positions, rank=(6, 0), shortcut=True, kind=POSITIONAL))
RULES.register("position-role-map", AttentionRule(
    spread=cells_pattern, measure=measure_cells, rank=(6, 1), shortcut=True, kind="position-role"))
