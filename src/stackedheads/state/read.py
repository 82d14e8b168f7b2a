"""Reading state files: regular files only, bounded in size and nesting.

* :func:`open_regular`: a path that holds no regular file (a FIFO, a device, a folder) is one
  line, opened without blocking, so a FIFO named like a state file never hangs a read.
* :func:`read_bytes` / :func:`read_text`: at most a limit of bytes, else one line.
* :func:`parse_json` / :func:`read_state_json` / :func:`read_state_jsonl`: JSON nested at most
  :data:`MAX_JSON_DEPTH` deep, integers of at most :data:`MAX_JSON_DIGITS` digits; a file that
  is missing, damaged or of the wrong shape is one line naming it and saying what to do.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError

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
