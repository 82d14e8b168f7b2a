"""State files that survive crashes, full disks and two writers.

* :func:`atomic_write_text` / :func:`atomic_write_json`: write to a temporary file in the same
  folder, fsync, then rename, so a reader sees the old file or the new one, never a torn one.
* :func:`read_state_json`: a state file that is missing, truncated or of the wrong shape is
  reported in one line (:class:`~stackedheads.errors.UsageError`) saying what to do.
* :class:`FolderLock`: an exclusive ``flock`` on ``<folder>/.lock``; a second process gets a
  one-line error naming the holder. The kernel drops the lock when its holder dies, so a
  crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError

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
    atomic_write_bytes(path, text.encode("utf-8"))


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


class FolderLock:
    """Exclusive lock on an output folder for the life of one process's work on it."""

    def __init__(self, folder: str | Path, what: str = "this folder") -> None:
        self.folder = Path(folder)
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
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
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
