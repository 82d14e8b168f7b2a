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
"""

from __future__ import annotations

import fcntl
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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


def atomic_write_text(path: str | Path, text: str) -> None:
    # Last line of defence: a registered secret never reaches a state file.
    atomic_write_bytes(path, redact_secrets(text).encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def read_state_json(path: str | Path, what: str, expect: type = dict) -> Any:
    """A JSON state file, or one line saying it is damaged and what to do."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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


def check_seeds(seeds: Any, where: str | Path) -> tuple[int, ...]:
    """Seeds read from a file: a non-empty list of integers (they name folders ``seed{s}``)."""
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(type(s) is int for s in seeds):
        raise UsageError(f"{where}: seeds must be a non-empty list of integers, got {str(seeds)[:60]}")
    return tuple(seeds)


_HELD: dict[Path, list] = {}  # folder -> [fd, depth]: re-entrant locks this process holds


class FolderLock:
    """Exclusive lock on an output folder for the life of one process's work on it."""

    def __init__(self, folder: str | Path, what: str = "this folder", reentrant: bool = False) -> None:
        self.folder = Path(folder)
        self.what = what
        self.reentrant = reentrant
        self._fd: int | None = None
        self._key: Path | None = None

    def __enter__(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        key = self.folder.resolve()
        if key in _HELD:  # held re-entrantly by this process: flock would refuse a second open
            _HELD[key][1] += 1
            self._key = key
            return self
        path = self.folder / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise UsageError(f"{self.folder} is in use by {holder}; wait for it to finish or choose another --out") from None
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
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
