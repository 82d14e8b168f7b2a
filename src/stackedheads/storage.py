"""State files that survive crashes, full disks and two writers.

* :func:`atomic_write_text` / :func:`atomic_write_json`: write to a temporary file in the same
  folder, fsync, then rename, so a reader sees the old file or the new one, never a torn one.
* :func:`read_state_json`: a state file that is missing, truncated or of the wrong shape is
  reported in one line (:class:`~stackedheads.errors.UsageError`) saying what to do.
* :class:`FolderLock`: an exclusive ``flock`` on ``<folder>/.lock``; a second process gets a
  one-line error naming the holder. The kernel drops the lock when its holder dies, so a
  crashed run never leaves a stale lock behind. A lock taken with ``reentrant=True`` lets code
  in the same process lock the folder again (a job runner around ``train``); otherwise a second
  lock, even from this process, is refused.
* :func:`safe_component`: a value read from a file (a seed, a model name) checked before it
  becomes part of a path, so no file can steer a write outside ``--out``.
* :class:`RunFolder`: an output folder of one kind (a training run, a Figure 4 sweep, ...): a
  folder that holds another kind is refused before anything is written there, and its done
  marker is trusted only while every file it vouches for is there and parses; the settings
  its run recorded (config.json, sweep.json, ...) are checked against those asked for, in
  one message for every kind.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import socket
import stat
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, redact_secrets

LOCK_NAME = ".lock"


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    if path.is_symlink():  # a rename would replace the link itself, leaving its target as it was
        raise UsageError(f"{path} is a symbolic link: writing would replace the link, not its target; give the target's path")
    if path.is_dir():  # the rename would fail naming our temp file, not the user's path
        raise UsageError(f"{path} is a folder: give a file's path")
    if path.exists() and not path.is_file():
        # A device or FIFO (/dev/null, a pipe): renaming a temp file over it would turn it into a
        # regular file, so the bytes go through it as a shell redirect sends them.
        with open(path, "wb") as f:
            f.write(data)
        return
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
    # Last line of defence: a registered secret never reaches a state file.
    atomic_write_bytes(path, redact_secrets(text).encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


MAX_STATE_BYTES = 64 * 2**20  # a JSON state file (config, summary, circuit, ...) is far smaller
MAX_READ_BYTES = 1024 * 2**20  # any file read whole (metrics.csv, samples.jsonl, a figure)
MAX_JSON_DEPTH = 100  # nesting of a state file; this program writes fewer than 10 levels
MAX_JSON_DIGITS = 40  # digits of an integer in a state file (a seed is at most 19)

_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def not_regular(path: Path, mode: int, what: str) -> UsageError:
    """The one line for a state file's path that holds no regular file (a FIFO would hang a read)."""
    kind = next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")
    return UsageError(f"{path} is {kind}, not a file ({what}): this program reads and writes regular files only")


def open_regular(path: str | Path, what: str):
    """``path`` opened for reading if it is a regular file: opened without blocking, so a FIFO
    or a device named like a state file is one line, never a read that waits for ever."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise not_regular(path, mode, what)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | Path, what: str, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: a larger file is one
    line instead of a read that fills memory."""
    path = Path(path)
    with open_regular(path, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{path} is over {limit // 2**20} MiB ({what}): not a file this command writes")
    return data


def read_text(path: str | Path, what: str, limit: int = MAX_READ_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a decoding error is the caller's to report)."""
    return read_bytes(path, what, limit).decode("utf-8")


class _TooLarge(ValueError):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise _TooLarge(f"an integer of {len(text)} digits")
    return int(text)


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply ``value`` nests lists and dicts (without recursion; stops past ``limit``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest if isinstance(value, (dict, list)) else 0


def parse_json(text: str, path: str | Path, what: str) -> Any:
    """``text`` as JSON, bounded: nesting deeper than :data:`MAX_JSON_DEPTH` or an integer of more
    than :data:`MAX_JSON_DIGITS` digits is one line naming ``path`` (not a RecursionError)."""
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        data = None
        problem = f"nested deeper than {MAX_JSON_DEPTH} levels"
    except _TooLarge as e:
        raise UsageError(f"{path} is damaged ({e}; {what}): delete it to rebuild it") from None
    except ValueError:
        raise UsageError(f"{path} is damaged (not valid JSON; {what}): delete it to rebuild it") from None
    else:
        problem = None if json_depth(data) <= MAX_JSON_DEPTH else f"nested deeper than {MAX_JSON_DEPTH} levels"
    if problem:
        raise UsageError(f"{path} is damaged ({problem}; {what}): delete it to rebuild it")
    return data


def read_state_json(path: str | Path, what: str, expect: type = dict) -> Any:
    """A JSON state file, or one line saying it is missing, not a regular file, damaged (not
    JSON, too deep, too large) or of the wrong shape, and what to do."""
    path = Path(path)
    try:
        data = parse_json(read_text(path, what, MAX_STATE_BYTES), path, what)
    except FileNotFoundError:
        raise UsageError(f"{path} is missing ({what})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is damaged (not valid JSON; {what}): delete it to rebuild it") from None
    if not isinstance(data, expect):
        raise UsageError(f"{path} has the wrong shape ({what}: expected a JSON {expect.__name__}): delete it to rebuild it")
    return data


def read_state_jsonl(path: str | Path, what: str, expect: type = dict, limit: int = MAX_READ_BYTES) -> list:
    """A JSON-lines state file as a list of ``expect`` (each line bounded as :func:`parse_json`)."""
    path = Path(path)
    try:
        text = read_text(path, what, limit)
    except FileNotFoundError:
        raise UsageError(f"{path} is missing ({what})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is damaged (not UTF-8 text; {what}): delete it to rebuild it") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            row = parse_json(line, f"{path} line {n}", what)
            if not isinstance(row, expect):
                raise UsageError(f"{path} line {n} has the wrong shape ({what}: expected a JSON {expect.__name__}): "
                                 "delete it to rebuild it")
            rows.append(row)
    return rows


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def safe_component(value: Any, what: str) -> str:
    """``str(value)`` if it is one harmless path component (no ``/``, ``..``, NUL, leading dot)."""
    text = str(value)
    if not _SAFE.match(text) or ".." in text:
        raise UsageError(f"{what} {text[:60]!r} cannot name a folder (letters, digits, . _ + - only)")
    return text


# Seeds name folders (``seed{s}``) and become int64 tensors and generator seeds: one rule for
# every command and file.
MAX_SEED = 2**63 - 1


def check_seeds(seeds: Any, where: str | Path) -> tuple[int, ...]:
    """Seeds given or read from a file: a non-empty list of integers from 0 to :data:`MAX_SEED`."""
    if (
        not isinstance(seeds, (list, tuple)) or not seeds
        or not all(type(s) is int and 0 <= s <= MAX_SEED for s in seeds)
    ):
        shown = list(seeds) if isinstance(seeds, tuple) else seeds
        raise UsageError(f"{where}: seeds must be a non-empty list of integers from 0 to 2**63-1, got {str(shown)[:60]}")
    return tuple(seeds)


_HELD: dict[Path, list] = {}  # folder -> [fd, depth]: re-entrant locks this process holds


class FolderLock:
    """Exclusive lock on an output folder for the life of one process's work on it."""

    def __init__(
        self, folder: str | Path, what: str = "this folder", reentrant: bool = False,
        elsewhere: str | None = "choose another 'out'",
    ) -> None:
        self.folder = Path(folder)
        self.what = what
        self.reentrant = reentrant
        self.elsewhere = elsewhere  # the way out besides waiting, naming 'out'; None where the command has no other folder
        self._fd: int | None = None
        self._key: Path | None = None
        self._new_folder: Path | None = None
        self._new_lock = False

    def __enter__(self) -> FolderLock:
        # What this lock brings into being, so that work refused before it wrote anything
        # leaves no folder and no .lock behind (__exit__).
        self._new_folder = self._outermost_missing(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        key = self.folder.resolve()
        if key in _HELD:  # held re-entrantly by this process: flock would refuse a second open
            _HELD[key][1] += 1
            self._key = key
            return self
        path = self.folder / LOCK_NAME
        self._new_lock = not path.exists()
        fd = _open_lock(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            alternative = f" or {self.elsewhere}" if self.elsewhere else ""
            raise UsageError(
                f"{self.folder} is in use by {holder}; wait for it to finish{alternative}", fields=("out",) if alternative else (),
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        self._fd = fd
        if self.reentrant:
            self._key = key
            _HELD[key] = [fd, 1]
        return self

    def __exit__(self, *exc: object) -> None:
        held = _HELD.get(self._key) if self._key is not None else None
        if held is not None:
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[self._key]
        if self._fd is not None:
            failed = exc and exc[0] is not None
            if failed and self._new_lock and not any(p.name != LOCK_NAME for p in self.folder.iterdir()):
                (self.folder / LOCK_NAME).unlink(missing_ok=True)  # still held: no one else can be at work here
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            if failed and self._new_folder is not None:
                remove_empty_folders(self.folder, self._new_folder)

    @staticmethod
    def _outermost_missing(folder: Path) -> Path | None:
        return first_missing(folder)


def first_missing(folder: str | Path) -> Path | None:
    """The first folder on the way to ``folder`` that does not exist yet (None: all do)."""
    missing = None
    for p in (Path(folder), *Path(folder).parents):
        if p.exists():
            break
        missing = p
    return missing


def remove_empty_folders(folder: Path, upto: Path) -> None:
    """Remove ``folder`` and its parents up to ``upto`` while they are empty (rmdir refuses a
    folder that something else wrote into meanwhile)."""
    for p in (folder, *folder.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == upto:
            return


def check_apart(out: str | Path, inputs: list, option: str = "out") -> None:
    """Refuse an output folder that is one of the ``inputs`` or lies inside one: its files would
    mix with (or overwrite) those it is made from."""
    where = Path(out).resolve()
    for given in inputs:
        source = Path(given).resolve()
        if where == source or source in where.parents:
            raise UsageError(f"'{option}' {out} lies inside the input {given}; choose a folder outside it", fields=(option,))


def _open_lock(path: Path, flags: int) -> int:
    """A descriptor of the lock file ``path``, which must be a regular file (flock on a FIFO
    fails without a path, and reading one waits for a writer)."""
    fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise not_regular(path, mode, "the folder's lock file; remove it")
    os.set_blocking(fd, True)
    return fd


def lock_holder(folder: str | Path) -> str | None:
    """Who holds ``folder``'s lock now (None when no one does), without creating a lock file."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = _open_lock(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
    finally:
        os.close(fd)
    return None


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
    text = "; ".join(f"{k}: {str(a.get(k, '(none)'))[:40]} there, {str(b.get(k, '(none)'))[:40]} asked" for k in keys[:shown])
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
    has a header and rows of its width; any other file exists. A 0-byte figure (a full disk) or
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
