"""Attention maps (Appendix C): per layer and head, on validation sequences and on average.

Axes are labelled by token: ``B2`` is chain B's symbol x_2 at its first occurrence, ``B2'`` at
its second, ``qB`` chain B's query. Because chains are shuffled within a step, single
sequences differ; the *mean* map first puts every sequence's tokens in a canonical order
(steps deepest first, chains A, B, ... within a step, then the queries) and then averages,
so patterns compare across sequences.
"""

from __future__ import annotations

from pathlib import Path

import torch

from stackedheads.report.plots import pyplot, save_figure
from stackedheads.tasks.vectors import FIRST, QUERY, Meta


def labels(meta: Meta, b: int) -> list[str]:
    out = []
    for c, k, r in zip(meta.chain[b].tolist(), meta.chain_pos[b].tolist(), meta.role[b].tolist(), strict=True):
        letter = chr(ord("A") + c)
        out.append(f"q{letter}" if r == QUERY else f"{letter}{k}" + ("" if r == FIRST else "'"))
    return out


def canonical_order(meta: Meta) -> torch.Tensor:
    """``(B, T)``: for each canonical slot, the position holding that token in each sequence."""
    B, T = meta.role.shape
    N = int(meta.query_chain.shape[1])
    D = (T // N - 1) // 2
    # Canonical slot of every token: pair k sits in block D - k, chains in order, then queries.
    slot = torch.where(
        meta.role == QUERY,
        2 * N * D + meta.chain,
        2 * N * (D - meta.pair) + 2 * meta.chain + (meta.role != FIRST).long(),
    )
    return slot.argsort(dim=1)


def canonical_labels(meta: Meta) -> list[str]:
    order = canonical_order(meta)
    lab = labels(meta, 0)
    return [lab[i] for i in order[0].tolist()]


def mean_patterns(patterns: torch.Tensor, meta: Meta) -> torch.Tensor:
    """``(H, T, T)`` average of ``patterns`` ``(B, H, T, T)`` with tokens in canonical order."""
    order = canonical_order(meta)  # (B, T)
    B, H, T, _ = patterns.shape
    rows = order[:, None, :, None].expand(B, H, T, T)
    cols = order[:, None, None, :].expand(B, H, T, T)
    return patterns.gather(2, rows).gather(3, cols).mean(0)


def _heatmap(ax, mat, lab, title):
    ax.imshow(mat, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(lab)), lab, rotation=90, fontsize=6)
    ax.set_yticks(range(len(lab)), lab, fontsize=6)
    ax.set_title(title, fontsize=8)


def plot_maps(patterns: dict[int, torch.Tensor], meta: Meta, out: str | Path, n_seqs: int = 4) -> list[str]:
    """Write ``layer{l}.png`` (heads x sequences, plus the mean), ``grid.png`` and ``mean.png``.

    ``patterns``: ``{layer: (B, H, T, T)}`` of one model.
    """
    plt = pyplot()

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    layers = sorted(patterns)
    H = patterns[layers[0]].shape[1]
    n_seqs = min(n_seqs, meta.role.shape[0])
    means = {l: mean_patterns(patterns[l], meta) for l in layers}
    clabels = canonical_labels(meta)
    for l in layers:
        fig, axes = plt.subplots(H, n_seqs + 1, figsize=(3.2 * (n_seqs + 1), 3.2 * H), squeeze=False)
        for h in range(H):
            for s in range(n_seqs):
                _heatmap(axes[h][s], patterns[l][s, h].numpy(), labels(meta, s), f"L{l}.{h} seq {s}")
            _heatmap(axes[h][n_seqs], means[l][h].numpy(), clabels, f"L{l}.{h} mean ({meta.role.shape[0]} seqs)")
        files += save_figure(fig, out, f"layer{l}", dpi=110, formats=("png",))
    for name, mats, lab in (("grid", {l: patterns[l][0] for l in layers}, labels(meta, 0)), ("mean", means, clabels)):
        fig, axes = plt.subplots(H, len(layers), figsize=(2.6 * len(layers), 2.6 * H), squeeze=False)
        for i, l in enumerate(layers):
            for h in range(H):
                _heatmap(axes[h][i], mats[l][h].numpy(), lab, f"L{l}.{h}")
        fig.suptitle("sequence 0" if name == "grid" else "mean over sequences, canonical order", fontsize=9)
        files += save_figure(fig, out, name, dpi=110)
    return files


def attention_maps(run_dir: str | Path, out: str | Path, checkpoint: int | None = None, seqs: int = 4, seed: int | None = None, n_mean: int = 256) -> list[str]:
    """Appendix C for one member of a run (default: its first seed)."""
    from stackedheads.errors import UsageError, brief
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    model, cfg, _ = load_model(checkpoint_for(run_dir, checkpoint))
    seed = cfg.seeds[0] if seed is None else seed
    if seed not in cfg.seeds:
        raise UsageError(f"{run_dir} has seeds {brief(list(cfg.seeds))}, not 'seed' {seed}", fields=("seed",))
    if seqs < 1:
        raise UsageError(f"'seqs' must be >= 1, got {seqs}", fields=("seqs",))
    batch = validation_batch(cfg)[: max(seqs, n_mean)]
    member = model.member(cfg.seeds.index(seed))
    _, cache = member.run_with_cache(batch.inputs, batch.meta, names=member.pattern_names())
    patterns = {l: cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(member.config.n_layers)}
    return plot_maps(patterns, batch.meta, out, n_seqs=seqs)
