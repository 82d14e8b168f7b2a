"""Shared fixtures. Heavy tests carry ``@pytest.mark.slow``; ``make test-fast`` leaves them out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest


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
