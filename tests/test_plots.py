"""plots: figures written atomically, handed back whole inside keep_figures(), and a notebook's
inline backend left as it is."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import is_figure

from stackedheads.report import plots


def a_figure():
    fig, ax = plots.pyplot().subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_save_figure_writes_and_closes(tmp_path):
    fig = a_figure()
    paths = plots.save_figure(fig, tmp_path, "f")
    assert [p.rsplit("/", 1)[1] for p in paths] == ["f.png", "f.svg"] and all(is_figure(p) for p in paths)
    assert fig.number not in plots.pyplot().get_fignums() and not fig.axes  # closed and cleared


def test_keep_figures_hands_back_each_figure_whole(tmp_path):
    with plots.keep_figures() as outer:
        first = a_figure()
        plots.save_figure(first, tmp_path, "a")
        with plots.keep_figures() as inner:
            second = a_figure()
            plots.save_figure(second, tmp_path, "b")
        third = a_figure()
        plots.save_figure(third, tmp_path, "c")
    assert outer == [first, third] and inner == [second]
    assert all(f.axes for f in (first, second, third))  # whole: a notebook can still show them
    assert not plots.pyplot().get_fignums()  # closed to pyplot: none is shown twice
    assert is_figure(tmp_path / "b.png")
    after = a_figure()
    plots.save_figure(after, tmp_path, "d")
    assert not after.axes and outer == [first, third]  # outside the block: cleared as before


@pytest.mark.skipif(importlib.util.find_spec("matplotlib_inline") is None, reason="ipykernel (the `dev` extra) brings it")
def test_a_notebooks_inline_backend_is_kept_and_any_other_becomes_agg():
    code = ("import matplotlib; from stackedheads.report import plots; plots.pyplot(); "
            "print(matplotlib.get_backend())")
    for env_backend, want in (("module://matplotlib_inline.backend_inline", "inline"), ("svg", "agg")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                           env={**os.environ, "MPLBACKEND": env_backend})
        assert r.returncode == 0, r.stderr
        assert want in r.stdout.lower(), r.stdout
