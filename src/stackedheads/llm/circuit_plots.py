"""Figures of ``llm-circuit``: a layer x head map of each hop's effect, and the chain's path drawn
like Fig. 5 (positions across, layers up, one arrow per head that carries a hop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackedheads.report.plots import pyplot, save_figure

HOP_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def plot_summary(summary: dict[str, Any], out: str | Path) -> list[str]:
    """``hops.png/svg`` and ``path.png/svg`` in ``out``; none when no hop was measured."""
    hops = [h for h in summary["hops"] if h["mean_t"]]
    if not hops:
        return []
    return plot_hop_maps(summary, hops, out) + plot_path(summary, hops, out)


def _title(summary: dict[str, Any]) -> str:
    c = summary["config"]
    lo, hi = summary["ci95"]
    return (f"{c['model']}, {c['formulation']} D={summary['depth']}: accuracy {summary['correct']}/{summary['n']} "
            f"(95% [{lo:.2f}, {hi:.2f}], chance {summary['chance']:.2f}), {summary['analysed']} analysed")


def plot_hop_maps(summary: dict[str, Any], hops: list[dict], out: str | Path) -> list[str]:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(hops), figsize=(3.2 * len(hops) + 1, 5), squeeze=False)
    vmax = max(max(abs(v) for row in h["mean_t"] for v in row) for h in hops) or 1.0
    for ax, h in zip(axes[0], hops):
        im = ax.imshow(h["mean_t"], aspect="auto", origin="lower", cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(f"hop {h['k']}: t_{h['k']} (n={h['measured']})", fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        for cell in h["heads"][:3]:
            ax.scatter([cell["head"]], [cell["layer"]], s=40, facecolors="none", edgecolors="black")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="share of the link's effect (attribution)")
    fig.suptitle(_title(summary), fontsize=8)
    return save_figure(fig, out, "hops")


def _column(role: str) -> str:
    """The x-axis column of a token role: a link's fact, the question, the assistant turn."""
    if role.startswith("L"):
        return role
    return {"Q:x0": "Q:x0", "Q": "Q", "end": "end"}.get(role, "other")


def plot_path(summary: dict[str, Any], hops: list[dict], out: str | Path) -> list[str]:
    """Each carrying head as an arrow from the role it reads (source) to the role it writes
    (destination), at its layer, coloured by hop; the most frequent move per head."""
    plt = pyplot()
    D = summary["depth"]
    cols = ["other"]
    for k in range(D, 0, -1):  # facts are listed deepest step first (App. A.1)
        cols += [f"L{k}:x{k - 1}", f"L{k}", f"L{k}:x{k}"]
    cols += ["Q:x0", "Q", "end"]
    x = {c: i for i, c in enumerate(cols)}
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(cols)), 5))
    layers = summary["layers"] or 1
    for h in hops:
        colour = HOP_COLOURS[(h["k"] - 1) % len(HOP_COLOURS)]
        for cell in h["heads"][:4]:
            lay = cell["layer"] + 0.4 * (h["k"] - 1)  # a head in several hops' lists: one arrow per hop, apart
            src, dst = _head_move(h, cell)
            xs, xd = x.get(_column(src), 0), x.get(_column(dst), 0)
            ax.annotate("", xy=(xd, lay + 1), xytext=(xs, lay),
                        arrowprops=dict(arrowstyle="->", color=colour, lw=1 + 2 * min(cell["questions"], 10) / 10))
            ax.text(xd + 0.15 * h["k"], lay + 1.05, f"L{cell['layer']}H{cell['head']}", fontsize=7, color=colour, ha="left")
        ax.plot([], [], color=colour, label=f"hop {h['k']}")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=60, fontsize=7)
    ax.set_ylim(-0.5, layers + 1.5)
    ax.set_ylabel("layer (arrow: read at layer l, written into the stream after it)")
    ax.legend(fontsize=8)
    ax.set_title(_title(summary), fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out, "path")


def _head_move(hop: dict, cell: dict) -> tuple[str, str]:
    """The head's most frequent (source role, destination role) over the questions."""
    moves = cell.get("moves") or {}
    if moves:
        src, dst = max(moves.items(), key=lambda kv: kv[1])[0].split(" -> ")
        return src, dst
    return "other", "end"
