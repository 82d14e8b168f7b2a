"""What every figure shares: matplotlib without a display, PNG and SVG side by side."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed, same output everywhere)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: str | Path, name: str, dpi: int = 150) -> list[str]:
    """Write ``out/name.png`` and ``out/name.svg``, close the figure, return both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        p = out / f"{name}.{ext}"
        fig.savefig(p, dpi=dpi)
        paths.append(str(p))
    fig.clf()
    pyplot().close(fig)
    return paths
