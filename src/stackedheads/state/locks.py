"""Folder locks: an exclusive ``flock`` on ``<folder>/.lock`` for the life of one process's work.

A second process gets a one-line error naming the holder. The kernel drops the lock when its
holder dies, so a crashed run never leaves a stale lock behind. A lock taken with
``reentrant=True`` lets code in the same process lock the folder again (a job runner around
``train``); otherwise a second lock, even from this process, is refused. The lock file must be
a regular file (a FIFO there is one line, not a hang).
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.read import not_regular

LOCK_NAME = ".lock"

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
