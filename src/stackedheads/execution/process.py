"""Process-level settings that make CPU training fast: the allocator, the thread count and
the OpenMP spin policy. They are the process's, so only the process's owner sets them: the CLI
and the worker processes call :func:`configure_process` (and :func:`set_openmp_policy` before
torch loads); library calls (``train``, ``run_job``) leave the caller's process as they found it
(:func:`torch_threads` scopes a thread count to a block).

Training allocates the same large activation tensors at every step. glibc serves blocks above
its mmap threshold (at most 32 MiB) with fresh ``mmap`` calls and gives them back on free, so
every step page-faults its activations in again: at paper sizes with an 8-member ensemble that
was 4.4 million minor faults and 9 s of kernel time per step (``benchmarks/ensemble_vs_loop.py``),
more than the arithmetic. Serving every block from the heap and keeping freed memory there
removes that cost; the price is that the process keeps its peak memory until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stackedheads.errors import UsageError

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


# --- threads ------------------------------------------------------------------------------------
# torch's CPU kernels run on libgomp threads that spin-wait between parallel regions (300,000
# spins by default). When another process holds one of a 2-core machine's cores, the spinning
# thread burns the core its partner needs and a 2-thread step ran 3.0x slower (quick preset, 300
# steps: 14.3 s idle, 42.8 s beside `yes`). With 1,000 spins it took 14.4 s idle and 26.8 s busy
# (54% of the idle throughput); OMP_WAIT_POLICY=PASSIVE took 23.0 s busy but 17.5 s idle.
# benchmarks/train_throughput.py measures it (idle and beside a busy process).
SPINCOUNT = "1000"
# Beside a GPU the CPU only feeds it: four sec9 trainings that each took every core of a 16-core
# host ran 37x slower than one; with 4 threads each, three ran as fast as one alone.
GPU_HOST_THREADS = 4


def openmp_env(threads: int | None = None) -> dict[str, str]:
    """The OpenMP variables a process we start gets: the spin policy above unless the user set
    one, and ``OMP_NUM_THREADS`` when ``threads`` is given. libgomp reads them once, when torch
    loads it, so they must be in place before ``import torch``."""
    env = {}
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        env["GOMP_SPINCOUNT"] = SPINCOUNT
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def set_openmp_policy() -> None:
    """Apply :func:`openmp_env` to this process (before torch is imported; the CLI does)."""
    os.environ.update(openmp_env())


def available_cores() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def default_threads(device: str, cores: int | None = None) -> int:
    """Intra-op threads for a training process given ``cores`` (None: every core this process
    may use, :func:`available_cores`): at most :data:`GPU_HOST_THREADS` when a GPU does the
    arithmetic, every core on the CPU.

    The count depends on the machine and the options only, never on the load when a run starts:
    a different count sums in another order, so a run on a busy machine would otherwise train
    other bytes, and its verdicts could differ from the same command's on an idle one. A run
    records its count (config.json) and keeps it when resumed.
    """
    n = cores if cores is not None else available_cores()
    return min(n, GPU_HOST_THREADS) if device.startswith("cuda") else n


# Threads per core a training process may ask for: more only slows it, and torch crashed
# (segmentation fault) starting 100,000 of them.
MAX_THREADS_PER_CORE = 4


def check_threads(threads: int | None, name: str = "threads") -> None:
    """Refuse a thread count below 1 or above :data:`MAX_THREADS_PER_CORE` per core here: the
    one rule for every verb that takes threads (training and the in-process language models;
    llama.cpp crashed at 100,000 and hung at 5,000). ``name``: the field that set it."""
    if threads is None:
        return
    most = MAX_THREADS_PER_CORE * available_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= most:
        raise UsageError(
            f"'{name}' must be a whole number between 1 and {most} ({MAX_THREADS_PER_CORE} per core of this machine), got {threads!r}",
            fields=(name,),
        )


def thread_count(threads: int | None, device: str = "cpu") -> int:
    """torch's intra-op thread count for training: ``threads`` if given, else what
    ``OMP_NUM_THREADS`` says (the user's override, torch's count now), else :func:`default_threads`."""
    import torch

    if threads is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    n = threads if threads is not None else default_threads(device)
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    return n


def apply_threads(threads: int | None, device: str = "cpu") -> int:
    """Set torch's intra-op thread count to :func:`thread_count`; a run started under it records
    it (:meth:`TrainConfig.resolved`). Returns the count in effect."""
    import torch

    n = thread_count(threads, device)
    if n != torch.get_num_threads():
        torch.set_num_threads(n)
    return n


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` (None: as it is) inside the block, the caller's
    restored after."""
    import torch

    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def configure_process(threads: int | None, device: str = "cpu") -> int:
    """The settings of a process that trains, in one place: the allocator
    (:func:`keep_freed_memory`: no page faults on a step's activations) and torch's thread count
    (:func:`apply_threads`). The CLI and the worker processes call it; returns the thread count."""
    keep_freed_memory()
    return apply_threads(threads, device)
