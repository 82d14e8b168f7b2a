"""Process-level settings that make CPU training fast.

Training allocates the same large activation tensors at every step. glibc serves blocks above
its mmap threshold (at most 32 MiB) with fresh ``mmap`` calls and gives them back on free, so
every step page-faults its activations in again: at paper sizes with an 8-member ensemble that
was 4.4 million minor faults and 9 s of kernel time per step (``benchmarks/train_throughput.py``),
more than the arithmetic. Serving every block from the heap and keeping freed memory there
removes that cost; the price is that the process keeps its peak memory until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers from glibc's malloc.h
_M_MMAP_MAX = -4
_state = {"done": False}


def keep_freed_memory() -> bool:
    """Ask glibc malloc to never mmap and never give freed memory back; True if applied.

    Idempotent, and a no-op off glibc (macOS, musl, Windows), where it returns False.
    """
    if _state["done"]:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # glibc widens the int to size_t: -1 means "never trim".
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, -1) == 1
    _state["done"] = ok
    return ok
