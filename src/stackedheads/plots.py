"""What every figure shares: matplotlib without a display, PNG and SVG side by side."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed, same output everywhere)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: str | Path, name: str, dpi: int = 150, formats: tuple[str, ...] = ("png", "svg")) -> list[str]:
    """Write ``out/name.png`` and ``out/name.svg`` (or ``formats``), close the figure, return
    the paths. Each file is rendered in memory and then written atomically: a full disk leaves
    the old figure (or none), never an empty or torn one."""
    import io

    from stackedheads.storage import atomic_write_bytes

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = []
    for ext in formats:
        p = out / f"{name}.{ext}"
        buf = io.BytesIO()
        fig.savefig(buf, dpi=dpi, format=ext)
        atomic_write_bytes(p, buf.getvalue())
        paths.append(str(p))
    fig.clf()
    pyplot().close(fig)
    return paths
