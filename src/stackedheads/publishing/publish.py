"""``publish``: a run's small files into the repository's ``results/<name>/``, with the
``reference.json`` that says how the run was made.

A reference keeps what a reader needs to check a run without re-running it (configs, metrics,
summaries, circuits, figures, the command, the commit, the machine and the wall time; never
checkpoints or model files). Everything is checked before anything is written, the copy is built
beside its destination and replaces it whole, and results/README.md is written again after
(:func:`stackedheads.publishing.index.write_index`). Reading references back is
:mod:`stackedheads.publishing.references`.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from stackedheads.errors import UsageError
from stackedheads.publishing.index import write_index
from stackedheads.publishing.references import REFERENCE_FILE, missing_files
from stackedheads.state import layout, pieces
from stackedheads.state.provenance import SEGMENTS_FILE, machine, trained_on
from stackedheads.state.write import (
    DONE,
    RunFolder,
    atomic_write_bytes,
    atomic_write_json,
    check_apart,
    first_missing,
    folder_kinds,
    lock_holder,
    read_bytes,
    remove_empty_folders,
    replace_folder,
)

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
        machine: where the runs trained (CPU or GPU model, cores, OS), from their segments.jsonl;
            the publishing machine where no run kept one.
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


NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def destination(root: str | Path, name: str) -> Path:
    """Where reference ``name`` goes under the results folder ``root``: ``name`` is one folder name
    or a path of them ("sec9/tl-stack"), each letters, digits, '.', '_', '+' and '-', starting with a
    letter or digit, so it stays under ``root``; one line otherwise."""
    parts = str(name).split("/")
    if not all(NAME_PART.fullmatch(p) for p in parts):
        raise UsageError(f"--name {str(name)[:80]!r}: folder names under the results folder joined by '/' "
                         "(sec9/tl-stack), each letters, digits, '.', '_', '+' and '-'", fields=("name",))
    return Path(root) / Path(*parts)


def publish(src: str | Path, dest: str | Path, *, title: str, command: str, commit: str,
            wall_s: float | None, notes: str = "", include: tuple[str, ...] = (), name: str | None = None) -> Reference:
    """Copy ``src``'s small top-level files (and those matching the ``include`` globs, e.g.
    ``discovered/seed*/circuit.json``) into ``dest`` and write its ``reference.json``.

    What ``claims`` judges a kind from is kept too (a Figure 4 sweep's runs/*/ summaries and
    metrics), and a copy whose claims would read otherwise than ``src``'s is refused. ``dest`` is
    built beside itself and replaces an earlier reference of that name as a whole.

    Everything is checked before anything is written: a symbolic link (in ``src`` or as
    ``dest``), a glob reaching outside ``src``, a file over the size limit, a non-finite wall
    time, an empty title or command, a commit that is no commit, an empty, unfinished or locked
    ``src``, or a file that git would ignore where ``dest`` lies (a fresh clone would lack it)
    is one line and nothing is copied.

    ``name`` is the reference's name, its path under the results folder (default: ``dest``'s own
    name, the results folder its parent); that folder's README.md is written again after
    (:func:`write_index`)."""
    src, dest = Path(src), Path(os.path.abspath(dest))
    name = dest.name if name is None else name
    destination(dest, name)  # the name's own rule
    if not dest.as_posix().endswith("/" + name):
        raise UsageError(f"{dest} is not where reference {name!r} goes (RESULTS/{name})")
    root = dest.parents[name.count("/")]
    if not src.is_dir():
        raise UsageError(f"{src} is not a folder")
    _check_record(title, command, commit, notes)
    wall_s = _checked_wall_s(wall_s)
    _check_dest(dest, src)
    _check_not_nested(root, dest, name)
    commit = _checked_commit(commit, dest)
    holder = lock_holder(src)
    if holder is not None:  # its files may change under the copy
        raise UsageError(f"{src} is in use by {holder}; publish it once that finishes")
    kinds = folder_kinds(src)
    _check_finished(src, kinds)
    files = _kept(src, include) + [f for pattern in _needed(kinds) for f in _matches(src, pattern)]
    files = list(dict.fromkeys(files))
    if not files:
        raise UsageError(f"{src} holds no file to publish ({'/'.join(KEPT_SUFFIXES)} at its top or matching --include)")
    big = [f for f in files if (src / f).stat().st_size > MAX_FILE_BYTES]
    if big:
        raise UsageError(f"{src / big[0]} is over {MAX_FILE_BYTES // 1_000_000} MB: a reference keeps small files only")
    for stage, run_name in (("circuits", layout.CIRCUITS_RUN), ("emergence", layout.EMERGENCE_RUN)):
        if (src / stage / "runs").is_dir():  # a stage trained in pieces is published as the one result claims reads
            result = pieces.read_result(src / stage, run_name)
            if result.unfinished:
                raise UsageError(f"{result.unfinished[0]} is still training (no summary.json): a piece of the result "
                                 "publishes once it has finished, or moves out of runs/")
    ignored = git_ignored([dest / f for f in files] + [dest / REFERENCE_FILE])
    if ignored:
        path, why = next(iter(ignored.items()))
        raise UsageError(f"{path} would be ignored by git ({why}), so a clone would lack it: "
                         f"anchor that pattern to its folder (e.g. /runs/) or publish elsewhere")
    # Built whole beside NAME, then put in its place: a name published again keeps none of the
    # old files (claims would judge them), and a reader never sees half of either.
    staging = dest.with_name(f".{dest.name}.{os.getpid()}.publish")
    _remove_stale_staging(dest)
    if staging.exists():
        shutil.rmtree(staging)  # left by a publish of this pid that crashed
    made = first_missing(dest.parent)  # removed again when the publish is refused
    try:
        for f in files:
            atomic_write_bytes(staging / f, read_bytes(src / f, "a file to publish", MAX_FILE_BYTES))
        missing = missing_files(staging, files)
        if missing:  # e.g. removed by another process meanwhile: the reference would promise it
            raise UsageError(f"{src / missing[0]} is missing after the copy; publish again")
        _check_same_claims(src, staging)
        runs = sorted({(staging / f).parent for f in files if Path(f).name == SEGMENTS_FILE})
        ref = Reference(name, title, command, commit, trained_on(runs) or machine(), wall_s,
                        time.strftime("%Y-%m-%d"), notes, files)
        atomic_write_json(staging / REFERENCE_FILE, asdict(ref))
        replace_folder(staging, dest)
        write_index(root)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
            if made is not None:
                remove_empty_folders(dest.parent, made)
    return ref


_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_stale_staging(dest: Path) -> None:
    """Remove the staging folders (``.NAME.<pid>.publish`` beside ``dest``) of publishes whose
    process is gone: a publish killed before it finished leaves its copy behind."""
    prefix = f".{dest.name}."
    if not dest.parent.is_dir():
        return
    for old in dest.parent.iterdir():
        pid = old.name[len(prefix):-len(".publish")] if old.name.startswith(prefix) and old.name.endswith(".publish") else ""
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)) and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)


def _checked_commit(commit: str, dest: Path) -> str:
    """The commit as reference.json records it: where a git repository holds ``dest``, one of its
    commits (an abbreviation written in full); elsewhere there is nothing to check it against,
    and its spelling (7 to 40 hexadecimal digits) is all that is checked."""
    where = dest.parent
    while not where.exists():
        where = where.parent
    try:
        found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=where,
                               capture_output=True, text=True, check=False)
        repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True, check=False)
    except OSError:  # no git
        return commit
    if found.returncode == 0:
        return found.stdout.strip()
    if repo.returncode == 0:
        raise UsageError(f"'commit' {commit} is not a commit of the repository at {repo.stdout.strip()}: give the commit "
                         "the run's code came from (git log shows them)", fields=("commit",))
    return commit


def _check_record(title: str, command: str, commit: str, notes: str = "") -> None:
    """What reference.json says of the run: a title, the command and a commit (hex, 7 to 40
    digits), and notes, each UTF-8 text (bytes that are not, given on a command line, could be
    written to no Markdown file: the index would fail after the reference was in place)."""
    for value, name in ((title, "title"), (command, "command"), (notes, "notes")):
        try:
            str(value).encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"'{name}' holds bytes that are not UTF-8 text: give it as UTF-8", fields=(name,)) from None
    for value, name in ((title, "title"), (command, "command")):
        if not str(value).strip():
            raise UsageError(f"'{name}' is empty: a reference says what it is and how it was made", fields=(name,))
    if not _COMMIT.fullmatch(str(commit)):
        raise UsageError(f"'commit' {str(commit)[:60]!r} is no commit (7 to 40 hexadecimal digits, as git shows one)", fields=("commit",))


def _check_dest(dest: Path, src: Path) -> None:
    """``dest`` may be new, or a reference folder that a publish replaces as a whole; a link
    (publish would write wherever it points), another folder, a place inside ``src`` (the copy
    would be part of what it copies) or holding it (the replaced folder would take ``src`` with
    it), or one under a file, is refused."""
    check_apart(dest, [src], "results")
    if Path(src).resolve().is_relative_to(dest.resolve()):
        raise UsageError(f"{src} lies inside {dest}, which the publish replaces: publish it from elsewhere")
    where = dest.parent
    while not where.exists() and not where.is_symlink():
        where = where.parent
    if not where.is_dir():
        raise UsageError(f"{where} is not a folder: give a results folder", fields=("results",))
    if dest.is_symlink():
        raise UsageError(f"{dest} is a symbolic link: publish writes inside the results folder only; remove the link")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} exists and is not a folder; choose another --name")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / REFERENCE_FILE).is_file():
        raise UsageError(f"{dest} is not a reference folder (no {REFERENCE_FILE}): publish replaces only a reference; choose another --name")


def _check_not_nested(root: Path, dest: Path, name: str) -> None:
    """A reference holds no other: one inside another would be deleted when the outer one is
    published again (it is replaced as a whole), and the index lists neither inside the other.
    So a name under a reference's folder, or one whose folder holds a reference below it, is
    refused."""
    for outer in dest.parents:
        if outer == root or root not in outer.parents:
            break
        if (outer / REFERENCE_FILE).is_file():
            raise UsageError(f"reference {name!r} would lie inside the reference {outer.relative_to(root).as_posix()!r}, "
                             "which publishing that one again would delete: choose a name outside it", fields=("name",))
    if dest.is_dir() and not dest.is_symlink():
        inner = next((p.parent for p in sorted(dest.rglob(REFERENCE_FILE)) if p.parent != dest), None)
        if inner is not None:
            raise UsageError(f"{dest} holds the reference {inner.relative_to(root).as_posix()!r}, which publishing "
                             f"{name!r} would delete: choose another name", fields=("name",))


# The last file each kind of folder writes: without it, the folder's work is unfinished.
_FINISHED = {"training run": "summary.json", "figure4 sweep": "claims.json", "depth sweep": "claims.json",
             "llm-bench run": "results.json", "reproduce run": "summary.json"}
# What `claims` reads of a kind beyond its top-level files (the sweep's runs judge Section 7).
_NEEDS = {"figure4 sweep": ("runs/*/config.json", "runs/*/summary.json", "runs/*/metrics.csv")}


def _check_finished(src: Path, kinds: set[str]) -> None:
    for kind in sorted(kinds):
        last = _FINISHED.get(kind)
        if last is not None and not (src / last).is_file():
            raise UsageError(f"{src} is an unfinished {kind} (no {last}): finish it, then publish")
    if "figure4 sweep" in kinds:
        from stackedheads.sweeps.figure4 import finished_jobs

        unfinished = finished_jobs(src)[2]
        if unfinished:
            raise UsageError(f"{src} is an unfinished figure4 sweep ({len(unfinished)} runs unfinished, e.g. {unfinished[0]}): finish it, then publish")
    for marker in sorted(src.rglob(DONE)):  # a stage's marker that no longer vouches for its files
        stage = RunFolder(marker.parent)
        if stage.done(f"{marker}") is None:
            raise UsageError(f"{stage.missing} is missing or damaged, so {marker.parent} is unfinished: run it again, then publish")


def _needed(kinds: set[str]) -> list[str]:
    return [pattern for kind in sorted(kinds) for pattern in _NEEDS.get(kind, ())]


def _matches(src: Path, pattern: str) -> list[str]:
    return [_inside(src, p) for p in sorted(src.glob(pattern)) if p.suffix in KEPT_SUFFIXES and (p.is_symlink() or p.is_file())]


def _check_same_claims(src: Path, copy: Path) -> None:
    """Every claim the copy judges is judged as ``src`` judges it, and a copy of a folder with
    verdicts has some: a reference whose claims change, or go NOT RUN, would misreport the run."""
    from stackedheads import claims as claims_mod

    try:
        own = {c.id: c for c in claims_mod.folder_claims(src)}
    except UsageError:
        return  # a folder `claims` does not judge (a training run, one model's benchmark)
    try:
        kept = [c for c in claims_mod.folder_claims(copy) if c.verdict != claims_mod.NOT_RUN]
    except UsageError as e:
        raise UsageError(f"the published copy of {src} cannot be judged ({e}); add what it needs with --include") from None
    changed = next((c for c in kept if c.id not in own or (own[c.id].verdict, own[c.id].measured) != (c.verdict, c.measured)), None)
    if changed is not None:
        raise UsageError(f"claim {changed.id} would read {changed.verdict} in the reference but "
                         f"{own[changed.id].verdict if changed.id in own else 'absent'} in {src}: add the files it is judged from with --include")
    if not kept and any(c.verdict != claims_mod.NOT_RUN for c in own.values()):
        raise UsageError(f"the published copy of {src} would judge none of its claims: add the files they are judged from with --include")
