"""Shared fixtures. Heavy tests carry ``@pytest.mark.slow``; ``make test-fast`` leaves them out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

# Under pytest-xdist (`make test`: two workers) each worker and what it starts trains on one
# thread: two workers of two libgomp threads each oversubscribe a 2-core machine, where a
# thread then spins waiting for a partner that has no core (stackedheads/execution/process.py). Set before
# any test module imports torch, which reads it once.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


class CliResult(NamedTuple):  # unpacks as `code, out, err = cli(...)`
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """``cli(*args)`` runs ``stackedheads ARGS`` in this process through the real entry point
    (exit codes, one-line errors, redaction) and returns its code, stdout and stderr. In-process,
    so what a test registered (a formulation, a backend, a rule, a claims section) is seen."""
    from stackedheads.cli import main

    def run(*args: object) -> CliResult:
        capsys.readouterr()  # what the test printed before is not the command's
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in args])
        captured = capsys.readouterr()
        code = e.value.code
        return CliResult(code if isinstance(code, int) else 1, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def cli_process():
    """``cli_process(*args, cwd=None, env=None, timeout=300)``: ``python -m stackedheads ARGS`` as a
    separate process, as a user's shell runs it (signals, a fresh interpreter)."""

    def run(*args: object, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> CliResult:
        r = subprocess.run([sys.executable, "-m", "stackedheads", *map(str, args)], capture_output=True,
                           text=True, cwd=cwd, env=env, timeout=timeout, check=False)
        return CliResult(r.returncode, r.stdout, r.stderr)

    return run


def is_figure(path: Path, min_px: int = 200) -> bool:
    """A real figure: a PNG Pillow decodes to at least ``min_px`` on each side, or an SVG
    document with drawn paths (not merely a non-empty file)."""
    path = Path(path)
    if path.suffix == ".svg":
        text = path.read_text(encoding="utf-8")
        return "<svg" in text and "<path" in text
    from PIL import Image

    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        return im.format == "PNG" and min(im.size) >= min_px


@pytest.fixture
def no_backoff(monkeypatch):
    """Retries follow at once: a test of what a failing server's retries end in waits out no
    backoff (reproduce's default of 5 retries is up to 15.5 s of it)."""
    from stackedheads.llm.backends import _base

    monkeypatch.setattr(_base, "backoff_delay", lambda *args, **kwargs: 0.0)


@pytest.fixture
def held():
    """``held(folder)``: hold the lock of a folder from a second process until the test ends."""
    import textwrap

    procs = []

    def hold(folder: Path):
        code = textwrap.dedent(f"""
            import sys, time
            from stackedheads.state.write import FolderLock
            with FolderLock({str(folder)!r}):
                print("held", flush=True)
                sys.stdin.read()
        """)
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "held"
        procs.append(p)
        return p

    yield hold
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


@pytest.fixture(scope="session")
def ckpt_run(tmp_path_factory):
    """A tiny finished run with every checkpoint (3 layers, 1 head, D=2). Tests that change it
    copy it first (:func:`copy_run`)."""
    from stackedheads import presets
    from stackedheads.training import train

    run = tmp_path_factory.mktemp("ckpt") / "run"
    train(presets.SEC9_SMOKE.override(steps=20, ckpt_every=10), run)
    return run


def copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """Transformer D's smoke twin trained as two pieces (seed 0; seed 1) and as one ensemble."""
    from stackedheads import presets
    from stackedheads.state.layout import EMERGENCE_RUN
    from stackedheads.training import train

    root = tmp_path_factory.mktemp("pieces")
    cfg = presets.get("sec9-smoke").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1)
    stage = root / "split" / "emergence" / "runs"
    train(cfg.override(seeds=(0,)), stage / EMERGENCE_RUN)
    train(cfg.override(seeds=(1,)), stage / f"{EMERGENCE_RUN}-seed1")
    train(cfg.override(seeds=(0, 1)), root / "whole" / "emergence" / "runs" / EMERGENCE_RUN)
    return root, cfg


@pytest.fixture(scope="session")
def kinds(tmp_path_factory):
    """A finished folder of each kind `publish` takes: figure4 sweep (``figure4``, its claims
    written), depth sweep (``depth``), training run (``train``), llm-bench runs (``shallow``,
    ``deep``) and their llm comparison (``comparison``). Tests that change one copy it first."""
    from helpers import DepthModel, bench_depth_model

    from stackedheads import presets
    from stackedheads.sweeps import depth
    from stackedheads.sweeps import figure4
    from stackedheads.claims import beyond, sec7
    from stackedheads.llm import compare
    from stackedheads.training import train

    root = tmp_path_factory.mktemp("kinds")
    figure4.run_figure4(presets.figure4("smoke"), root / "figure4")
    sec7.write_claims(root / "figure4")
    result = depth.run_depth(presets.depth("smoke"), root / "depth")
    beyond.write_claims(root / "depth", result.rows)
    train(presets.get("smoke"), root / "train")
    bench_depth_model(DepthModel(2, "shallow"), root / "shallow", n=3)
    bench_depth_model(DepthModel(9, "deep"), root / "deep", n=3)
    compare.compare([root / "shallow", root / "deep"], root / "comparison")
    return root


# The longest modules go out first (`make test` keeps collection order across its two workers):
# a long module collected last would leave one worker running it alone at the end.
FIRST = ("test_tutorial.py", "test_ray.py", "test_compile.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order
