"""What every figure shares: matplotlib without a display, PNG and SVG side by side, and the
figures themselves for a notebook (:func:`keep_figures`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The lists of the open keep_figures() blocks, innermost last: save_figure hands each figure to them.
_KEEPERS: list[list] = []


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed, same output everywhere), or
    on a notebook's inline backend when one is set: switching it off would stop the notebook's
    own figures from showing."""
    import matplotlib

    if "inline" not in str(dict.__getitem__(matplotlib.rcParams, "backend")):  # read without resolving it
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def keep_figures() -> Iterator[list]:
    """The figures every plotting function draws inside the block, in order, still whole (their
    files are written as usual)::

        with plots.keep_figures() as figures:
            plot_circuit(circuit, "out/circuit")
        figures[0]        # a matplotlib Figure: a notebook shows it
    """
    kept: list = []
    _KEEPERS.append(kept)
    try:
        yield kept
    finally:
        _KEEPERS.remove(kept)


def save_figure(fig, out: str | Path, name: str, dpi: int = 150, formats: tuple[str, ...] = ("png", "svg")) -> list[str]:
    """Write ``out/name.png`` and ``out/name.svg`` (or ``formats``), close the figure, return
    the paths. Each file is rendered in memory and then written atomically: a full disk leaves
    the old figure (or none), never an empty or torn one. Inside :func:`keep_figures` the
    figure is closed to pyplot but left whole, for the block's list."""
    import io

    from stackedheads.state.write import atomic_write_bytes

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
    if _KEEPERS:
        _KEEPERS[-1].append(fig)
    else:
        fig.clf()
    pyplot().close(fig)
    return paths
