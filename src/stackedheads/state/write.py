"""State files that survive crashes, full disks and two writers, and the output folders that hold them.

* :func:`atomic_write_text` / :func:`atomic_write_json`: write to a temporary file in the same
  folder, fsync, then rename, so a reader sees the old file or the new one, never a torn one;
  :func:`replace_folder` does the same for a whole folder.
* :class:`RunFolder`: an output folder of one kind (a training run, a Figure 4 sweep, an
  analysis output, ...): a folder that holds another kind is refused before anything is
  written there, and its done marker is trusted only while every file it vouches for is there
  and parses; the settings its run recorded (config.json, sweep.json, ...) are checked against
  those asked for, in one message for every kind. A path inside a ``reproduce`` folder is that
  folder's own (:func:`check_outside_reproduce`).

Reading (:mod:`stackedheads.state.read`), locks (:mod:`stackedheads.state.locks`) and the checks of
seeds and path components (:mod:`stackedheads.validation`) live in modules of their own; their
names are importable from here too.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, brief, redact_written
from stackedheads.state.locks import LOCK_NAME, FolderLock, first_missing, lock_holder, remove_empty_folders
from stackedheads.state.read import (
    MAX_JSON_DEPTH,
    MAX_JSON_DIGITS,
    MAX_READ_BYTES,
    MAX_STATE_BYTES,
    json_depth,
    not_regular,
    open_regular,
    parse_json,
    read_bytes,
    read_state_json,
    read_state_jsonl,
    read_text,
)
from stackedheads.validation import MAX_SEED, check_seeds, safe_component

__all__ = [  # the re-exported names are part of this module's interface
    "LOCK_NAME", "FolderLock", "first_missing", "lock_holder", "remove_empty_folders",
    "MAX_JSON_DEPTH", "MAX_JSON_DIGITS", "MAX_READ_BYTES", "MAX_STATE_BYTES", "json_depth", "not_regular",
    "open_regular", "parse_json", "read_bytes", "read_state_json", "read_state_jsonl", "read_text",
    "MAX_SEED", "check_seeds", "safe_component",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "replace_folder", "check_apart",
    "DONE", "ANALYSIS_KINDS", "REPRODUCE_KIND", "folder_kinds", "require_kind", "enclosing_reproduce",
    "check_outside_reproduce", "flat", "intact", "RunFolder",
]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    if path.is_symlink():  # a rename would replace the link itself, leaving its target as it was
        raise UsageError(f"{path} is a symbolic link: writing would replace the link, not its target; give the target's path")
    if path.is_dir():  # the rename would fail naming our temp file, not the user's path
        raise UsageError(f"{path} is a folder: give a file's path")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # The one path that is no regular file and still written: /dev/null, given as 'out' to
        # throw the output away (bytes go through it as a shell redirect sends them). Any other
        # (a FIFO would hang the writer until a reader came, a device would take the bytes) is
        # refused, as every reader refuses it.
        if _is_dev_null(path):
            with open(path, "wb") as f:
                f.write(data)
            return
        raise not_regular(path, mode, "an output file; remove it and run again")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.filename is None:  # a write or fsync on a descriptor (a full disk) names no file: name it
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _is_dev_null(path: Path) -> bool:
    try:
        return os.path.samefile(path, os.devnull)
    except OSError:
        return False


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (38, 22, 95):  # ENOSYS, EINVAL, EOPNOTSUPP: the kernel or file system cannot
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def replace_folder(staging: str | Path, dest: str | Path) -> None:
    """Put the complete folder ``staging`` (a sibling of ``dest``) in ``dest``'s place, whatever
    ``dest`` held going with it: a reader sees the old folder or the new one, never a mix (with
    RENAME_EXCHANGE; elsewhere two renames, between which a crash leaves the old folder beside
    ``dest`` under a hidden name, not lost)."""
    import shutil

    staging, dest = Path(staging), Path(dest)
    if not dest.exists():
        os.rename(staging, dest)
    elif _exchange(staging, dest):
        shutil.rmtree(staging)  # now the old folder
    else:
        old = dest.with_name(f".{dest.name}.{os.getpid()}.old")
        os.rename(dest, old)
        os.rename(staging, dest)
        shutil.rmtree(old)
    _fsync_dir(dest.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    # Last line of defence: a registered secret that can be no word of the run's never reaches a
    # state file (errors.redact_written says how the others are kept out).
    atomic_write_bytes(path, redact_written(text).encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def check_apart(out: str | Path, inputs: list, option: str = "out") -> None:
    """Refuse an output folder that is one of the ``inputs`` or lies inside one: its files would
    mix with (or overwrite) those it is made from."""
    where = Path(out).resolve()
    for given in inputs:
        source = Path(given).resolve()
        if where == source or source in where.parents:
            raise UsageError(f"'{option}' {out} lies inside the input {given}; choose a folder outside it", fields=(option,))


# --- what a folder holds, and what it has finished -------------------------------------------------

# Each kind of output folder, recognised by a file only that kind writes at its top, or by the
# keys of its config.json (three kinds write one). The names are those the writing modules use
# (sweep.SPEC_FILE, depth.SPEC_FILE, llm.bench.SAMPLES, ...); they live here because those
# modules import this one.
_MARKER_FILES = {
    "sweep.json": "figure4 sweep",
    "depth.json": "depth sweep",
    "samples.jsonl": "llm-bench run",
    "comparison.json": "llm comparison",
    "metrics.csv": "training run",
}
_CONFIG_KEYS = {"task": "training run", "identity": "llm-bench run", "preset": "reproduce run"}
# Analysis outputs, recognised by the files their verb writes (theory.save_table, the timelines of
# emergence, discovery's circuits, circuits.maps' figures, llm.export's folders).
_ANALYSIS_FILES = {
    "theory.jsonl": "theory table",
    "seed*/timeline.json": "emergence output",
    "seed*/circuit.json": "discovered circuits",
    "mean.png": "attention maps",
    "attention_stats.json": "attention maps",
    "lm_eval": "prompts export",
}
ANALYSIS_KINDS = frozenset(_ANALYSIS_FILES.values())
REPRODUCE_KIND = "reproduce run"
DONE = "done.json"
_VOUCHES = "vouches"  # the done marker's list of the files it vouches for (relative paths)


def folder_kinds(folder: str | Path) -> set[str]:
    """The kinds of output folder ``folder`` holds (empty for a new, empty or foreign folder)."""
    folder = Path(folder)
    found = {kind for name, kind in _MARKER_FILES.items() if (folder / name).is_file()}
    try:
        config = read_state_json(folder / "config.json", "a run's configuration")
    except (OSError, UsageError):
        config = None  # no config, or a damaged one: its owner reports that in one line
    if isinstance(config, dict):
        found |= {kind for key, kind in _CONFIG_KEYS.items() if key in config}
    found |= {kind for pattern, kind in _ANALYSIS_FILES.items() if next(iter(folder.glob(pattern)), None) is not None}
    return found


def require_kind(folder: str | Path, kind: str, what: str = "run folder") -> None:
    """Refuse ``folder`` unless it holds ``kind`` (a reproduce or benchmark folder has a
    config.json too, which would be read as the wrong thing), naming what it holds."""
    kinds = folder_kinds(folder)
    if kind not in kinds:
        held = ", ".join(sorted(kinds)) or f"no {kind}"
        raise UsageError(f"{folder} is not a {what} (it holds {held}); give a {kind}'s folder")


def enclosing_reproduce(path: str | Path) -> Path | None:
    """The ``reproduce`` folder that ``path`` lies inside (not ``path`` itself), or None: its
    stage folders (theory, circuits/maps, emergence/timeline, report, ...) are written by
    ``reproduce`` alone, which vouches for them in each stage's done marker."""
    where = Path(path).resolve()
    for parent in where.parents:
        if (parent / "config.json").is_file() and REPRODUCE_KIND in folder_kinds(parent):
            return parent
    return None


def check_outside_reproduce(path: str | Path, option: str = "out") -> None:
    """Refuse an output path inside a ``reproduce`` folder (:func:`enclosing_reproduce`)."""
    rep = enclosing_reproduce(path)
    if rep is not None:
        stage = Path(path).resolve().relative_to(rep).parts[0]
        raise UsageError(f"'{option}' {path} lies inside the reproduce folder {rep} (its {stage!r} files), which only "
                         "`reproduce` writes; choose a folder outside it", fields=(option,))


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested settings dict as ``{"optim.lr": 0.001, ...}`` (how differences are named)."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}{key}.").items()}
    return {prefix[:-1]: value}


def _differences(old: dict, new: dict, shown: int = 3) -> str:
    """``key: old there, new asked`` for the first few settings that differ (nested keys dotted)."""
    a, b = flat(old), flat(new)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k, "(none)") != b.get(k, "(none)")]
    text = "; ".join(f"{k}: {brief(a.get(k, '(none)'))} there, {brief(b.get(k, '(none)'))} asked" for k in keys[:shown])
    return text + (f"; {len(keys) - shown} more" if len(keys) > shown else "")


def _unset_fields_added(old, new):
    """``old`` with the keys ``new`` has as None and ``old`` lacks set to None: a setting added to
    a config after a folder was written, left unset (its None default), is the same setting as
    its absence, so the folder still resumes. The rule for new settings that follows: a None
    default must mean "as before the setting existed"."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return old
    filled = {k: _unset_fields_added(v, new.get(k)) for k, v in old.items()}
    return filled | {k: None for k, v in new.items() if v is None and k not in old}


_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"


def intact(path: str | Path) -> bool:
    """``path`` is a file that is whole as far as its kind shows: JSON and JSON lines parse, a
    PNG has its signature and its end chunk, an SVG opens and closes its ``<svg>`` element, a CSV
    has a header and rows of its width, and none of them is empty; any other file exists. A 0-byte figure (a full disk) or
    a garbage table is damaged, so a done marker no longer vouches for it and it is rebuilt."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.suffix not in (".json", ".jsonl", ".png", ".svg", ".csv"):
        return True
    try:
        data = read_bytes(path, "an output file")
        if path.suffix == ".png":
            return data.startswith(_PNG_START) and data.endswith(_PNG_END)
        text = data.decode("utf-8")
        if not text.strip():  # a 0-byte table or record (a full disk, a truncation) holds nothing it vouches for
            return False
        if path.suffix == ".json":
            parse_json(text, path, "an output file")
        elif path.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    parse_json(line, path, "an output file")
        elif path.suffix == ".svg":
            return "<svg" in text and text.rstrip().endswith("</svg>")
        else:
            rows = list(csv.reader(io.StringIO(text)))
            return bool(rows) and bool(rows[0]) and all(len(r) == len(rows[0]) for r in rows if r)
    except (OSError, UsageError, UnicodeDecodeError, ValueError, csv.Error):
        return False
    return True


_parses = intact  # the name done() has always used


class RunFolder:
    """An output folder of one ``kind`` ("figure4 sweep", "training run", ...; see
    :func:`folder_kinds`), or a stage folder of ``reproduce`` (no kind of its own).

    * :meth:`check` refuses a folder that holds another kind (``shares``: kinds that may live
      in the same folder), or a file where the folder should be, creating nothing. A writer of
      no kind (``kind`` None) is refused the folders of runs, sweeps and benchmarks only.
    * :meth:`lock` checks, then takes the folder's :class:`FolderLock`.
    * :meth:`mark_done` writes ``done.json`` last: a summary of the work and the list of files
      it vouches for (all but hidden files and checkpoints, which a finished run no longer needs
      and a user may delete to free space). :meth:`done` trusts it only while each of them
      exists and parses, so deleting a damaged file and running again rebuilds it.
    """

    def __init__(self, path: str | Path, kind: str | None = None, shares: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.kind = kind
        self.shares = shares
        self.missing: Path | None = None  # set by done(): the first vouched-for file that is gone or damaged
        self.missing_files: list[Path] = []  # set by done(): every one of them

    def check(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path} exists and is not a folder; choose another 'out'", fields=("out",))
        found = folder_kinds(self.path) if self.path.is_dir() else set()
        if self.kind is None:  # a writer that names no kind of its own: only the analysis outputs it may resume
            found -= ANALYSIS_KINDS
        other = sorted(found - {self.kind, *self.shares})
        if other:
            raise UsageError(f"{self.path} holds another kind of output ({', '.join(other)}); choose another 'out'", fields=("out",))

    def lock(self, what: str) -> FolderLock:
        self.check()
        return FolderLock(self.path, what)

    def recorded(self, name: str, what: str) -> dict | None:
        """The settings the folder's run recorded in ``name`` (config.json, sweep.json, ...);
        None in a new folder."""
        path = self.path / name
        return read_state_json(path, what) if path.exists() else None

    def require_same(self, old: dict, new: dict, other: str) -> None:
        """Refuse, naming what differs, a folder whose run was recorded with ``old`` settings
        when ``new`` are asked for (``other``: "another configuration", "another grid", ...)."""
        old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
        old = _unset_fields_added(old, new)
        if old != new:
            raise UsageError(
                f"{self.path} holds a {self.kind or 'run'} of {other} ({_differences(old, new)}); "
                "resume it with the same settings, or choose another 'out'", fields=("out",),
            )

    def settle(self, name: str, settings: dict, what: str, other: str) -> None:
        """Record ``settings`` in ``name`` in a new folder; in one that has them, check they are the same."""
        old = self.recorded(name, what)
        if old is not None:
            self.require_same(old, settings, other)
        atomic_write_json(self.path / name, settings)

    def mark_done(self, summary: dict) -> None:
        files = []
        for p in self.path.rglob("*"):
            parts = p.relative_to(self.path).parts
            if p.is_file() and parts != (DONE,) and "checkpoints" not in parts[:-1] and not any(x.startswith(".") for x in parts):
                files.append("/".join(parts))
        # Not atomic_write_json: a stage's summary may hold a NaN, which done.json has always accepted.
        atomic_write_text(self.path / DONE, json.dumps({**summary, _VOUCHES: sorted(files)}, indent=2))

    def done(self, what: str) -> dict | None:
        """The done marker's summary; None when there is none, or when a file it vouches for is
        missing or damaged (then :attr:`missing` names it, and the work must run again to
        rebuild it). A damaged marker is one line (:func:`read_state_json`)."""
        self.missing, self.missing_files = None, []
        path = self.path / DONE
        if not path.exists():
            return None
        saved = read_state_json(path, what)
        vouched = saved.pop(_VOUCHES, [])  # markers written before it vouched for files trust as before
        if not isinstance(vouched, list) or not all(isinstance(f, str) for f in vouched):
            raise UsageError(f"{path} is damaged (its list of files): delete it to run the work again (it resumes)")
        self.missing_files = [self.path / f for f in vouched if not _parses(self.path / f)]
        if self.missing_files:
            self.missing = self.missing_files[0]
            return None
        return saved
