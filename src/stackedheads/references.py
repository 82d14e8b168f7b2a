"""Reference results: the small files of a finished run, kept in the repository's ``results/``.

A reference folder ``results/<name>/`` holds what a reader needs to check a run without
re-running it (DEVELOPERS.md: configs, metrics, summaries, circuits, figures, the command, the
commit, the machine and the wall time; never checkpoints or model files) and a
``reference.json`` that says how it was made. :func:`publish` writes one from a run folder;
:func:`load_all` reads them back for the report, re-judging each folder's claims from its files.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.storage import atomic_write_json

REFERENCE_FILE = "reference.json"
KEPT_SUFFIXES = (".json", ".jsonl", ".csv", ".png", ".svg", ".txt", ".md")
MAX_FILE_BYTES = 2_000_000  # a reference is small files only; a bigger one is a mistake


@dataclass(frozen=True)
class Reference:
    """How a reference folder was made.

    Args:
        name: the folder's name under ``results/``.
        title: one line for the report.
        command: the command that produced the run, as typed.
        commit: the git commit the run's code came from.
        machine: CPU or GPU model, cores, OS.
        wall_s: the run's wall time in seconds (None when unknown).
        notes: what was cut or differs from the paper's settings.
        files: the files kept, relative to the folder.
    """

    name: str
    title: str
    command: str
    commit: str
    machine: str
    wall_s: float | None
    date: str
    notes: str = ""
    files: list[str] = field(default_factory=list)


def machine() -> str:
    """The CPU model and core count (and the GPU when torch sees one), plus the OS."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = " (AVX-512)" if "avx512f" in text else " (AVX2)" if "avx2" in text else ""
    except OSError:
        pass
    return f"{cpu}{flags}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores, {platform.system()} {platform.release()}"


def git_commit(where: Path) -> str:
    r = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def publish(src: str | Path, dest: str | Path, *, title: str, command: str, commit: str,
            wall_s: float | None, notes: str = "", include: tuple[str, ...] = ()) -> Reference:
    """Copy ``src``'s small top-level files (and those matching the ``include`` globs, e.g.
    ``discovered/seed*/circuit.json``) into ``dest`` and write its ``reference.json``."""
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise UsageError(f"{src} is not a folder")
    chosen = [p for p in sorted(src.iterdir()) if p.is_file() and p.suffix in KEPT_SUFFIXES and not p.name.startswith(".")]
    for pattern in include:
        chosen += [p for p in sorted(src.glob(pattern)) if p.is_file() and p.suffix in KEPT_SUFFIXES]
    big = [p for p in chosen if p.stat().st_size > MAX_FILE_BYTES]
    if big:
        raise UsageError(f"{big[0]} is over {MAX_FILE_BYTES // 1_000_000} MB: a reference keeps small files only")
    files = []
    for p in dict.fromkeys(chosen):
        rel = p.relative_to(src)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest / rel)
        files.append(rel.as_posix())
    ref = Reference(dest.name, title, command, commit, machine(), wall_s, time.strftime("%Y-%m-%d"), notes, files)
    atomic_write_json(dest / REFERENCE_FILE, asdict(ref))
    return ref


REPOSITORY_RESULTS = Path(__file__).resolve().parents[2] / "results"  # beside src/ in a checkout


def results_dir() -> Path | None:
    """The repository's ``results/`` (None when the package runs from elsewhere or it is absent)."""
    return REPOSITORY_RESULTS if REPOSITORY_RESULTS.is_dir() else None


def load(folder: Path) -> dict:
    """One reference for the report: how it was made, its claims re-judged from its files (those
    of the stages it ran), its figures and its tables."""
    from stackedheads import claims as claims_mod

    ref = json.loads((folder / REFERENCE_FILE).read_text(encoding="utf-8"))
    try:
        found = claims_mod.folder_claims(folder)
    except UsageError:
        found = [claims_mod.Claim(**c) for c in json.loads((folder / "claims.json").read_text())] if (folder / "claims.json").exists() else []
    tables = []
    if (folder / "phase.json").exists() and (folder / "results.jsonl").exists():
        from stackedheads.claims import beyond
        from stackedheads.depth import read_results

        phase = json.loads((folder / "phase.json").read_text(encoding="utf-8"))
        tables.append({"title": "Layers needed per D: trained (every seed) vs theory",
                       **beyond.layers_rows(phase, beyond.d2_per_depth(read_results(folder)))})
    # A reference covers the stages it ran: the others' NOT RUN rows would only be noise.
    found = [c for c in found if c.verdict != claims_mod.NOT_RUN]
    return {**ref, "claims": found, "tables": tables, "folder": folder}


def load_all(root: Path | None) -> list[dict]:
    """Every reference folder under ``root`` (``results/``), by name."""
    if root is None or not root.is_dir():
        return []
    return [load(p) for p in sorted(root.iterdir()) if (p / REFERENCE_FILE).exists()]
