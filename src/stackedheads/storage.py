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


def read_bytes(path: str | Path, what: str, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them: a larger file (or /dev/zero, which never
    ends) is one line instead of a read that fills memory or never returns."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a file ({what})")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{path} is over {limit // 2**20} MiB ({what}): not a file this command writes")
    return data


def read_text(path: str | Path, what: str, limit: int = MAX_READ_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a decoding error is the caller's to report)."""
    return read_bytes(path, what, limit).decode("utf-8")


def read_state_json(path: str | Path, what: str, expect: type = dict) -> Any:
    """A JSON state file, or one line saying it is damaged and what to do."""
    path = Path(path)
    try:
        data = json.loads(read_text(path, what, MAX_STATE_BYTES))
    except FileNotFoundError:
        raise UsageError(f"{path} is missing ({what})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{path} is damaged (not valid JSON; {what}): delete it to rebuild it") from None
    if not isinstance(data, expect):
        raise UsageError(f"{path} has the wrong shape ({what}: expected a JSON {expect.__name__}): delete it to rebuild it")
    return data


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
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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


def lock_holder(folder: str | Path) -> str | None:
    """Who holds ``folder``'s lock now (None when no one does), without creating a lock file."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
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
DONE = "done.json"
_VOUCHES = "vouches"  # the done marker's list of the files it vouches for (relative paths)


def folder_kinds(folder: str | Path) -> set[str]:
    """The kinds of output folder ``folder`` holds (empty for a new, empty or foreign folder)."""
    folder = Path(folder)
    found = {kind for name, kind in _MARKER_FILES.items() if (folder / name).is_file()}
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        config = None  # no config, or a damaged one: its owner reports that in one line
    if isinstance(config, dict):
        found |= {kind for key, kind in _CONFIG_KEYS.items() if key in config}
    return found


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
            json.loads(text)
        elif path.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
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
      in the same folder), or a file where the folder should be, creating nothing.
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
        self.missing: Path | None = None  # set by done(): the vouched-for file that is gone or damaged

    def check(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path} exists and is not a folder; choose another 'out'", fields=("out",))
        other = sorted(folder_kinds(self.path) - {self.kind, *self.shares}) if self.path.is_dir() else []
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
        self.missing = None
        path = self.path / DONE
        if not path.exists():
            return None
        saved = read_state_json(path, what)
        vouched = saved.pop(_VOUCHES, [])  # markers written before it vouched for files trust as before
        if not isinstance(vouched, list) or not all(isinstance(f, str) for f in vouched):
            raise UsageError(f"{path} is damaged (its list of files): delete it to run the work again (it resumes)")
        bad = next((f for f in vouched if not _parses(self.path / f)), None)
        if bad is not None:
            self.missing = self.path / bad
            return None
        return saved
