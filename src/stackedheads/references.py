"""Reference results: the small files of a finished run, kept in the repository's ``results/``.

A reference folder ``results/<name>/`` holds what a reader needs to check a run without
re-running it (DEVELOPERS.md: configs, metrics, summaries, circuits, figures, the command, the
commit, the machine and the wall time; never checkpoints or model files) and a
``reference.json`` that says how it was made. :func:`publish` writes one from a run folder;
:func:`load_all` reads them back for the report, re-judging each folder's claims from its files.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from stackedheads.errors import UsageError
from stackedheads.provenance import machine
from stackedheads.storage import atomic_write_bytes, atomic_write_json, read_state_json

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
        date: the day it was published (YYYY-MM-DD).
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


def _checked_wall_s(wall_s: float | None) -> float | None:
    if wall_s is not None and not (math.isfinite(wall_s) and wall_s >= 0):
        raise UsageError(f"'wall_s' must be a finite number of seconds >= 0, got {wall_s}", fields=("wall_s",))
    return wall_s


def _inside(src: Path, p: Path) -> str:
    """``p``'s path under ``src`` (a file or a link to one); one line when it, or a folder on the
    way, is a symbolic link (a link could copy any file of the machine into the repository)."""
    rel = p.relative_to(src)
    for depth in range(1, len(rel.parts) + 1):
        if (src / Path(*rel.parts[:depth])).is_symlink():
            raise UsageError(f"{src / Path(*rel.parts[:depth])} is a symbolic link: publish copies the run's own files only")
    return rel.as_posix()


def _kept(src: Path, include: tuple[str, ...]) -> list[str]:
    """The files to keep, relative to ``src``: its small top-level files and the ``include`` matches."""
    chosen = [_inside(src, p) for p in sorted(src.iterdir())
              if p.suffix in KEPT_SUFFIXES and not p.name.startswith(".") and (p.is_symlink() or p.is_file())]
    for pattern in include:
        parts = PurePosixPath(pattern).parts
        if not pattern.strip() or PurePosixPath(pattern).is_absolute() or ".." in parts:
            raise UsageError(f"'include' {pattern!r}: a glob relative to {src}, inside it (no leading / and no '..')", fields=("include",))
        matched = [_inside(src, p) for p in sorted(src.glob(pattern)) if p.suffix in KEPT_SUFFIXES and (p.is_symlink() or p.is_file())]
        if not matched:
            raise UsageError(f"'include' {pattern!r} matches no {'/'.join(KEPT_SUFFIXES)} file in {src}", fields=("include",))
        chosen += matched
    return list(dict.fromkeys(chosen))


def git_ignored(paths: list[Path]) -> dict[Path, str]:
    """Which of ``paths`` (absolute; they need not exist) the git repository holding them ignores,
    with the pattern that does (``{}`` outside a repository or without git)."""
    if not paths:
        return {}
    where = paths[0].parent
    while not where.exists():
        where = where.parent
    try:
        r = subprocess.run(["git", "-c", "core.quotePath=off", "check-ignore", "-v", "-z", "--stdin"], cwd=where,
                           input="\0".join(map(str, paths)), capture_output=True, text=True, check=False)
    except OSError:
        return {}
    if r.returncode not in (0, 1):  # 128: not in a repository
        return {}
    fields = r.stdout.split("\0")
    # -v lists "source, line, pattern, path" per path, including those a "!pattern" re-includes.
    return {Path(path): f"{source}:{line}: {pattern}" for source, line, pattern, path in zip(*[iter(fields)] * 4)
            if not pattern.startswith("!")}


def publish(src: str | Path, dest: str | Path, *, title: str, command: str, commit: str,
            wall_s: float | None, notes: str = "", include: tuple[str, ...] = ()) -> Reference:
    """Copy ``src``'s small top-level files (and those matching the ``include`` globs, e.g.
    ``discovered/seed*/circuit.json``) into ``dest`` and write its ``reference.json``.

    Everything is checked before anything is written: a symbolic link, a glob reaching outside
    ``src``, a file over the size limit, a non-finite wall time, or a file that git would ignore
    where ``dest`` lies (a fresh clone would lack it) is one line and nothing is copied."""
    src, dest = Path(src), Path(os.path.abspath(dest))
    if not src.is_dir():
        raise UsageError(f"{src} is not a folder")
    wall_s = _checked_wall_s(wall_s)
    files = _kept(src, include)
    big = [f for f in files if (src / f).stat().st_size > MAX_FILE_BYTES]
    if big:
        raise UsageError(f"{src / big[0]} is over {MAX_FILE_BYTES // 1_000_000} MB: a reference keeps small files only")
    ignored = git_ignored([dest / f for f in files] + [dest / REFERENCE_FILE])
    if ignored:
        path, why = next(iter(ignored.items()))
        raise UsageError(f"{path} would be ignored by git ({why}), so a clone would lack it: "
                         f"anchor that pattern to its folder (e.g. /runs/) or publish elsewhere")
    for f in files:
        atomic_write_bytes(dest / f, (src / f).read_bytes())
    missing = missing_files(dest, files)
    if missing:  # e.g. removed by another process meanwhile: the reference would promise it
        raise UsageError(f"{dest / missing[0]} is missing after the copy; publish again")
    ref = Reference(dest.name, title, command, commit, machine(), wall_s, time.strftime("%Y-%m-%d"), notes, files)
    atomic_write_json(dest / REFERENCE_FILE, asdict(ref))
    return ref


def missing_files(folder: Path, files: list[str]) -> list[str]:
    """Those of ``files`` (listed by a reference) that ``folder`` lacks, or that would lie outside it."""
    return [f for f in files if PurePosixPath(f).is_absolute() or ".." in PurePosixPath(f).parts
            or not (folder / f).is_file()]


REPOSITORY_RESULTS = Path(__file__).resolve().parents[2] / "results"  # beside src/ in a checkout


def results_dir() -> Path | None:
    """The repository's ``results/`` (None when the package runs from elsewhere or it is absent)."""
    return REPOSITORY_RESULTS if REPOSITORY_RESULTS.is_dir() else None


def load(folder: Path) -> dict:
    """One reference for the report: how it was made, its claims re-judged from its files (those
    of the stages it ran), its figures and its tables."""
    from stackedheads import claims as claims_mod

    ref = read_state_json(folder / REFERENCE_FILE, "a reference's record")
    files = ref.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UsageError(f"{folder / REFERENCE_FILE} has the wrong shape (files: expected a list of paths)")
    missing = missing_files(folder, files)
    if missing:
        # Judged without it, the claims would silently change (a NOT RUN instead of a verdict).
        raise UsageError(f"{folder}: {REFERENCE_FILE} lists {missing[0]}, which is not a file in it "
                         f"({len(missing)} of {len(files)} listed files missing; a file git ignores is not in a clone)")
    from stackedheads import seeds

    tables = []
    try:
        found = claims_mod.folder_claims(folder)
    except UsageError:  # files the claims cannot judge: their verdicts as published
        found = [claims_mod.Claim(**c) for c in json.loads((folder / "claims.json").read_text())] if (folder / "claims.json").exists() else []
    try:  # Sections 8-9 seed by seed: the claims combine the seeds (any FAIL fails)
        tables.extend(seeds.seed_tables(seeds.folder_seeds(folder, folder.name)))
    except UsageError as e:  # a table the files cannot give: said in its place, the claims kept
        tables.append({"title": "Seed by seed (stackedheads seeds)", "columns": ["unavailable"], "rows": [[str(e)]]})
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
