"""How attention changes over training, layer by layer: a diagnostic for runs that stay on the
1 - 1/N plateau (``stackedheads attention RUN --over-training``).

For every checkpoint of one ensemble member, on the same validation sequences, each head's

* **entropy**: the mean entropy (nats) of its attention rows, every query row after the first
  (the first can attend only to itself), beside a uniform row's (the mean of ``log(t + 1)``);
* **positional**: the share of rows (those with three keys or more) that put more than half of
  their attention on one absolute key position in at least 90% of the sequences. Chains are shuffled within a step (Sec. 6), so a head that
  reads content moves between sequences; a positional row does not. The paper's first head
  (8.2 i, first to second token of each pair) is positional too: a high share is a description,
  not a fault;
* **top key**: the key position most positional rows read, and the share of all rows that do (one
  key for nearly every row is a head that copies one fixed token everywhere, or an attention sink).

A layer whose entropy falls near 0 with its rows fixed on positions has a saturated softmax: its
gradients through the pattern vanish, and it stops searching for content to retrieve.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from stackedheads.errors import UsageError
from stackedheads.report.plots import pyplot, save_figure
from stackedheads.state.write import atomic_write_json

N_SEQS = 256  # validation sequences per checkpoint
FIXED = 0.9  # a row is positional when one key holds more than half its attention in this share of sequences


def head_stats(pattern: torch.Tensor) -> dict:
    """One head's pattern ``(B, T, T)`` (causal: row t has keys 0..t) summarised as above."""
    p = pattern.float()
    _, t, _ = p.shape
    rows = range(1, t)
    ent = -(p * p.clamp_min(1e-12).log()).sum(-1)[:, 1:].mean().item()
    uniform = sum(torch.log(torch.tensor(r + 1.0)).item() for r in rows) / len(rows)
    # Per row, the share of sequences in which each key holds more than half of the attention (at
    # most one key can): positional when one key does so in FIXED of them.
    held = (p > 0.5).float().mean(0)  # (T, T)
    # Rows with at least three keys: with two, a near-uniform row already gives one of them half.
    chosen = range(2, t)
    fixed = [int(held[r].argmax()) for r in chosen if held[r].max() >= FIXED]
    top = Counter(fixed).most_common(1)
    return {"entropy": ent, "uniform_entropy": uniform, "positional": len(fixed) / len(chosen),
            "top_key": top[0][0] if top else None, "top_key_rows": top[0][1] / len(chosen) if top else 0.0}


def attention_over_training(run_dir: str | Path, out: str | Path, seed: int | None = None) -> dict:
    """Every checkpoint of one member (default: the run's first seed): per layer and head the
    statistics of :func:`head_stats`; writes ``attention_stats.json`` and a figure of entropy and
    positional share per layer against the step."""
    from stackedheads.training import load_model, validation_batch
    from stackedheads.training.checkpoints import list_checkpoints

    ckpts = list_checkpoints(Path(run_dir))
    if not ckpts:
        raise UsageError(f"{run_dir} has no checkpoints")
    steps, layers = [], {}
    for step, path in ckpts:
        model, cfg, _ = load_model(path)
        seed = cfg.seeds[0] if seed is None else seed
        if seed not in cfg.seeds:
            raise UsageError(f"{run_dir} has seeds {list(cfg.seeds)}, not {seed}")
        batch = validation_batch(cfg)[:N_SEQS]
        member = model.member(cfg.seeds.index(seed))
        with torch.no_grad():
            _, cache = member.run_with_cache(batch.inputs, batch.meta, names=member.pattern_names())
        steps.append(step)
        for l in range(member.config.n_layers):
            pat = cache[f"blocks.{l}.attn.hook_pattern"][0]  # (B, H, T, T)
            for h in range(pat.shape[1]):
                layers.setdefault(f"L{l}.{h}", []).append(head_stats(pat[:, h]))
    result = {"run": str(run_dir), "seed": seed, "sequences": N_SEQS, "fixed_share": FIXED,
              "steps": steps, "heads": layers}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "attention_stats.json", result)
    result["files"] = plot_over_training(result, out)
    return result


def plot_over_training(result: dict, out: Path) -> list[str]:
    plt = pyplot()
    heads = list(result["heads"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    cmap = plt.get_cmap("viridis")
    for i, key in enumerate(heads):
        color = cmap(i / max(len(heads) - 1, 1))
        series = result["heads"][key]
        axes[0].plot(result["steps"], [s["entropy"] for s in series], color=color, label=key)
        axes[1].plot(result["steps"], [s["positional"] for s in series], color=color)
    axes[0].axhline(uniform_entropy(result), color="grey", ls=":", label="uniform")
    axes[0].set(xlabel="step", ylabel="mean row entropy (nats)", title=f"seed {result['seed']}: attention entropy")
    axes[1].set(xlabel="step", ylabel="share of rows", ylim=(0, 1.02),
                title=f"rows with more than half their attention on one key position in >= {FIXED:.0%} of sequences")
    axes[0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return save_figure(fig, out, "attention_over_training")


def uniform_entropy(result: dict) -> float:
    """A uniform row's mean entropy at this sequence length (the same for every head)."""
    return next(iter(result["heads"].values()))[0]["uniform_entropy"]


def table_rows(result: dict, columns: int = 5) -> tuple[list[int], list[list[str]]]:
    """Up to ``columns`` checkpoints spread over the run (the first and last among them), and a
    row per head: entropy, positional share and top key at each."""
    steps = result["steps"]
    n = min(columns, len(steps))
    idx = sorted({round(i * (len(steps) - 1) / max(n - 1, 1)) for i in range(n)})
    rows = []
    for key, series in result["heads"].items():
        cells = [f"{s['entropy']:.2f} {s['positional']:.0%}" + ("" if s["top_key"] is None else f" k{s['top_key']}")
                 for s in (series[i] for i in idx)]
        rows.append([key, *cells])
    return [steps[i] for i in idx], rows
