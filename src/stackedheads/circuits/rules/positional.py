"""Positional rules: a fixed sequence position (``p<k>``) or a fixed offset back (``t-<d>``).

Such a head reads whatever token sits there, whichever chain it belongs to: not the paper's
content-based retrieval (Sec. 8, Fig. 5) but a shortcut the layout allows. Sec. 6 groups the
pairs by step and only shuffles the chains within a step, so with few chains a fixed position
holds the answer in a large share of the sequences (docs/results.md, "Shortcuts": a 1-layer model at N = 2, D = 1
reads positions 1 and 3 and lets its MLP choose). Their paths are :data:`~.POSITIONAL`
(``p7``, ``t-3``) and are reported as shortcuts, apart from retrieval paths.

Position 0 is ``first-token`` (a sink) and offset 1 is ``previous``, both built-in; these
families name the others (:mod:`.measured` holds the general case: a row's own map by
position). No depth bounds them (the length is ``N (2D + 1)``), so they are
:func:`~.parametric`: discovery tries the best-fitting few of each (:func:`propose_positions`,
:func:`propose_offsets`).
"""

from __future__ import annotations

import re

import torch

from stackedheads.circuits.rules import RULES, AttentionRule, Library, parametric, positions
from stackedheads.tasks.vectors import Meta

TOP = 3  # members proposed per role: the best-fitting positions (offsets); more only cost searches


def _best(masses: torch.Tensor, counts: torch.Tensor, name, first: int) -> dict[str, float]:
    """The ``TOP`` best of ``masses / counts`` (entries from index ``first``), by name."""
    mean = torch.where(counts > 0, masses / counts.clamp(min=1), torch.full_like(masses, -1.0))
    mean[:first] = -1.0
    best = mean.argsort(descending=True, stable=True)[:TOP]
    return {name(int(k)): float(mean[k]) for k in best if mean[k] >= 0}


def propose_positions(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor, lib: Library, masses) -> dict[str, float]:
    """The fixed positions ``k >= 1`` a role's tokens attend to most: mean attention on ``k``
    over the role's tokens after ``k`` (where the rule applies)."""
    pos = positions(meta)
    T = pos.shape[1]
    rows = observed * of_role[..., None]  # (B, T, T)
    after = (pos[..., None] > torch.arange(T)) & of_role[..., None]  # token t after column k
    return _best((rows * after).sum((0, 1)), after.sum((0, 1)).float(), lambda k: f"p{k}", 1)


def propose_offsets(observed: torch.Tensor, meta: Meta, of_role: torch.Tensor, lib: Library, masses) -> dict[str, float]:
    """The offsets ``d >= 2`` back a role's tokens attend to most: mean attention on ``t - d``
    over the role's tokens at ``t >= d``."""
    T = observed.shape[-1]
    masses_, counts = torch.zeros(T), torch.zeros(T)
    for d in range(2, T):
        diag = observed.diagonal(offset=-d, dim1=-2, dim2=-1)  # (B, T - d): [b, t] = observed[b, t + d, t]
        mine = of_role[:, d:]
        masses_[d], counts[d] = (diag * mine).sum(), mine.sum()
    return _best(masses_, counts, lambda d: f"t-{d}", 2)


def fixed_position(k: int) -> AttentionRule:
    """Every token reads position ``k`` where it comes after it; earlier tokens read themselves."""

    def target(meta: Meta) -> torch.Tensor:
        pos = positions(meta)
        return torch.where(pos > k, torch.full_like(pos, k), pos)

    return AttentionRule(target, rank=(4, 0), links=lambda role, i, depth: f"p{k}", shortcut=True)


def fixed_offset(d: int) -> AttentionRule:
    """Every token reads the position ``d`` before it; the first ``d`` read themselves."""

    def target(meta: Meta) -> torch.Tensor:
        pos = positions(meta)
        return torch.where(pos >= d, pos - d, pos)

    return AttentionRule(target, rank=(4, 1), links=lambda role, i, depth: f"t-{d}", shortcut=True)


@RULES.register("p<k>")
@parametric(propose_positions)
def parse_position(name: str, lib: Library) -> AttentionRule | None:
    """``p7``: position 7 (``k >= 1``; position 0 is ``first-token``)."""
    m = re.fullmatch(r"p([1-9]\d*)", name)
    return fixed_position(int(m[1])) if m else None


@RULES.register("t-<d>")
@parametric(propose_offsets)
def parse_offset(name: str, lib: Library) -> AttentionRule | None:
    """``t-3``: three positions back (``d >= 2``; one back is ``previous``)."""
    m = re.fullmatch(r"t-([2-9]|[1-9]\d+)", name)
    return fixed_offset(int(m[1])) if m else None

