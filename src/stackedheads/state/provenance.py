"""Where a result was computed: the machine, the code's commit and the software.

The same seed gives the same bytes only on the same commit, machine, thread count and dtype,
and a paper-size training outlives a session: it is resumed from checkpoints, sometimes on
another machine or at a later commit. So a training run appends one line per
start or resume to its ``segments.jsonl`` (:func:`record_segment`), and steps ``[from_step,
next from_step)`` ran where that line says; :func:`~stackedheads.publishing.publish.publish` records
the publishing machine the same way.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from stackedheads.state.write import atomic_write_text, read_text

SEGMENTS_FILE = "segments.jsonl"
_CODE = Path(__file__).resolve().parent


def machine() -> str:
    """The CPU model, its widest vector extension (AVX-512 or AVX2) and core count, plus the OS."""
    cpu = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    flags = " (AVX-512)" if "avx512f" in text else " (AVX2)" if "avx2" in text else ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}{flags}, {cores} cores, {platform.system()} {platform.release()}"


def _git(where: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=False)
    except OSError:  # no git on this machine
        return None


def git_commit(where: Path = _CODE) -> str:
    """The commit checked out where ``where`` lies ("unknown" outside a repository or without git)."""
    r = _git(where, "rev-parse", "HEAD")
    return r.stdout.strip() if r is not None and r.returncode == 0 else "unknown"


def git_dirty(where: Path = _CODE) -> bool | None:
    """Whether tracked files under ``where``'s repository differ from its commit (None when unknown):
    a run's code is then not exactly the commit it names."""
    r = _git(where, "status", "--porcelain", "--untracked-files=no")
    return bool(r.stdout.strip()) if r is not None and r.returncode == 0 else None


def record_segment(run_dir: Path, from_step: int, settings: dict) -> dict:
    """Append to ``run_dir``'s segments.jsonl the line for a (re)start at ``from_step``: the UTC
    time, the commit (and whether the work tree differed from it), the machine, Python and torch,
    and ``settings`` (thread count, dtype, device...). The file is rewritten atomically, so a
    crash leaves the old lines or the new ones, never a torn line."""
    import torch  # only a training run, which has it loaded already, records segments

    line = {"from_step": from_step, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": git_commit(), "dirty": git_dirty(), "machine": machine(),
            "python": platform.python_version(), "torch": torch.__version__, **settings}
    if str(settings.get("device", "cpu")).startswith("cuda") and torch.cuda.is_available():
        line["gpu"] = torch.cuda.get_device_name(torch.device(settings["device"]))
    path = Path(run_dir) / SEGMENTS_FILE
    old = read_text(path, "a run's segments") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(path, old + json.dumps(line, sort_keys=True) + "\n")
    return line


def read_segments(run_dir: Path) -> list[dict]:
    """The lines of ``run_dir``'s segments.jsonl, oldest first ([] for a run without one, as
    runs trained before it existed; a line that does not parse is skipped)."""
    path = Path(run_dir) / SEGMENTS_FILE
    if not path.is_file():
        return []
    out = []
    for text in read_text(path, "a run's segments").splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and isinstance(line.get("from_step"), int):
            out.append(line)
    return out


def trained_on(run_dirs) -> str | None:
    """Where the runs in ``run_dirs`` trained, from their segments.jsonl: each distinct machine
    once, in the order first met (a GPU as "GPU (its host)"), joined by "; "; None where no run
    kept segments. A reference published on one machine from runs trained on another (a lent
    GPU) names the machines that did the work, not the one that copied the files."""
    seen = []
    for d in run_dirs:
        for line in read_segments(d):
            host = str(line.get("machine", "unknown machine"))
            where = f"{line['gpu']} ({host})" if line.get("gpu") else host
            if where not in seen:
                seen.append(where)
    return "; ".join(seen) or None
