"""Where training jobs run: in this process (``local``) or on a Ray cluster (``ray``).

A job is one ensemble (runs that share a shape and train in one pass). Jobs are independent
and idempotent: a job re-run on its folder resumes from the last checkpoint or, if finished,
does nothing. That is what makes retries safe: a Ray task whose worker dies is simply run
again and picks up where the checkpoint left it.

Every attempt appends a line to ``<run>/attempts.jsonl`` (process id, host, the step it
resumed from), so a retry after a lost worker is visible in the run folder.

Ray writes results straight into the output folder, so that folder must be on a filesystem
every node sees (NFS, a shared volume); docs/speed.md says how to run on a cluster.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stackedheads.errors import UsageError
from stackedheads.state.layout import training_run
from stackedheads.model.costs import flops_per_step
from stackedheads.execution.process import (
    available_cores,
    check_threads,
    default_threads,
    openmp_env,
    thread_count,
    torch_threads,
)
from stackedheads.state.write import FolderLock
from stackedheads.training import TrainConfig, list_checkpoints, train

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Job:
    name: str  # also the run folder's name under <out>/runs/
    target: str  # "ic" or "non-ic": the IC or non-IC targets of Sec. 6 (summary.csv's "formulation")
    config: TrainConfig

    def to_dict(self) -> dict:
        return {"name": self.name, "target": self.target, "config": self.config.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        return cls(d["name"], d["target"], TrainConfig.from_dict(d["config"]))


def run_dir(out: Path, job: Job) -> Path:
    return training_run(out, job.name)


def run_job(
    job: Job, out: str | Path, progress: Callable[[int, int], None] | None = None, threads: int | None = None
) -> dict:
    """Train (or resume, or skip) one job into ``out/runs/<name>``; returns its summary.

    ``threads``: torch's intra-op threads for the job (default: :func:`perf.thread_count`); the
    caller's count is restored after.
    """
    folder = run_dir(Path(out), job)
    # Locked before the attempt is logged, so a refused second process logs nothing
    # (train() takes the same lock again, which a re-entrant lock allows).
    with FolderLock(folder, "training run", reentrant=True):
        ckpts = list_checkpoints(folder)
        attempt = {"pid": os.getpid(), "host": socket.gethostname(), "start": time.time(), "resumed_from": ckpts[-1][0] if ckpts else 0}
        with open(folder / "attempts.jsonl", "a") as f:
            f.write(json.dumps(attempt) + "\n")
        with torch_threads(thread_count(threads, job.config.device)):  # a new run records it; a resumed one keeps its own
            return train(job.config, folder, progress=progress)


class Executor(Protocol):
    def run(self, jobs: Sequence[Job], out: Path, on_done: Callable[[Job], None] | None = None) -> None: ...


def run_unfinished(jobs: Sequence[Job], out: Path, executor: Executor | None,
                   on_done: Callable[[Job, int, int], None] | None = None) -> int:
    """Run a grid's jobs whose run is not complete in ``out`` on ``executor`` (default: this
    machine), ``on_done(job, finished, to_run)`` after each; returns how many it ran."""
    from stackedheads.training import run_is_complete

    todo = [j for j in jobs if not run_is_complete(run_dir(out, j))]
    finished = 0

    def done(job: Job) -> None:
        nonlocal finished
        finished += 1
        if on_done:
            on_done(job, finished, len(todo))

    (executor or LocalExecutor()).run(todo, out, on_done=done)
    return len(todo)


class LocalExecutor:
    """This machine: one job after another in this process (``workers=1``), or ``workers``
    jobs at once in worker processes, each with ``threads`` intra-op threads.

    Why several workers: on a small CPU one small model's step cannot keep two threads busy
    (the quick Figure 4 sweep ran 1.2x faster as two 1-thread processes than as one 2-thread
    one), and single-thread workers lose least when another program takes a core. The default
    (``workers=None``) is one worker per core, at most one per job, on the CPU; one on a GPU.
    Every job's result is the same whichever worker runs it, at the thread count its config.json
    records (set once, when the job's folder is created).
    """

    def __init__(
        self,
        progress_factory: Callable[[Job], Callable[[int, int], None] | None] | None = None,
        workers: int | None = None,
        threads: int | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise UsageError(f"'workers' must be >= 1, got {workers}", fields=("workers",))
        check_threads(threads)
        self.progress_factory, self.workers, self.threads = progress_factory, workers, threads

    def plan(self, jobs: Sequence[Job]) -> tuple[int, int | None]:
        """``(workers, threads per worker)`` for these jobs (threads None: the process default)."""
        if not jobs:
            return 1, self.threads
        cuda = any(j.config.device.startswith("cuda") for j in jobs)
        cores = available_cores()
        small = max(_job_flops(j) for j in jobs) < SMALL_JOB_FLOPS
        workers = self.workers or (1 if cuda or small else min(len(jobs), cores))
        workers = min(workers, len(jobs))
        if workers == 1:
            return 1, self.threads
        return workers, self.threads or default_threads("cuda" if cuda else "cpu", max(1, cores // workers))

    def run(self, jobs: Sequence[Job], out: Path, on_done: Callable[[Job], None] | None = None) -> None:
        workers, threads = self.plan(jobs)
        if workers == 1:
            for job in jobs:
                run_job(job, out, self.progress_factory(job) if self.progress_factory else None, threads)
                if on_done:
                    on_done(job)
            return
        _run_in_processes(jobs, Path(out), workers, threads, self.progress_factory, on_done)


# A worker process costs ~3 s to start (importing torch); jobs below this many training FLOPs
# (about 10 s of a 2-core CPU) run in this process instead.
SMALL_JOB_FLOPS = 1e12


def _job_flops(job: Job) -> float:
    cfg = job.config
    return flops_per_step(cfg.model_config(), cfg.batch_size, cfg.task.seq_len, len(cfg.seeds)) * cfg.steps


def _run_in_processes(jobs, out: Path, workers: int, threads: int, progress_factory, on_done) -> None:
    """Run ``jobs`` as ``python -m stackedheads.execution.worker`` processes, ``workers`` at a time.

    Subprocesses rather than multiprocessing: a fresh interpreter picks up the OpenMP settings
    before torch loads, and nothing depends on how the caller's ``__main__`` was started.
    Progress comes back as lines on the worker's stdout; a job's one-line error as its stderr.
    """
    import subprocess
    import threading

    import stackedheads

    env = {**os.environ, **openmp_env(threads)}
    src = str(Path(stackedheads.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    queue, running = sorted(jobs, key=_job_flops, reverse=True), {}  # longest first: the shortest makespan

    def start(job: Job) -> None:
        spec = json.dumps({"job": job.to_dict(), "out": str(out), "threads": threads})
        proc = subprocess.Popen(
            [sys.executable, "-m", "stackedheads.execution.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env,
        )
        bar = progress_factory(job) if progress_factory else None
        err: list[str] = []
        # stdin closed before the readers start; stderr drained on its own so a chatty job never blocks.
        proc.stdin.write(spec)
        proc.stdin.close()
        readers = [threading.Thread(target=_relay, args=(proc.stdout, bar), daemon=True),
                   threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)]
        for t in readers:
            t.start()
        running[proc] = (job, readers, err)

    try:
        while queue or running:
            while queue and len(running) < workers:
                start(queue.pop(0))
            proc = _wait_any(running)
            job, readers, err = running.pop(proc)
            for t in readers:
                t.join()
            if proc.returncode != 0:
                lines = [line.strip() for line in err if line.strip()]
                msg = lines[-1] if lines else f"exit status {proc.returncode}"
                if proc.returncode == 2:  # the job's own one-line error (a bad config, a lock held)
                    raise _worker_error(msg)
                raise RuntimeError(f"training job {job.name} failed: {msg}")
            if on_done:
                on_done(job)
    finally:
        for proc in running:  # interrupted or failed: the others resume from their checkpoints
            proc.terminate()
        for proc in running:
            proc.wait()


def _worker_error(line: str) -> UsageError:
    """The UsageError a worker reported (its message and fields as JSON, see worker.py)."""
    try:
        said = json.loads(line)
        return UsageError(said["message"], tuple(said["fields"]))
    except (ValueError, TypeError, KeyError):  # not the worker's line: it failed before reporting
        return UsageError(line)


def _relay(stream, bar) -> None:
    for line in stream:
        done, _, total = line.partition(" ")
        if bar and done.isdigit() and total.strip().isdigit():
            bar(int(done), int(total))


def _wait_any(running: dict):
    """The first of ``running``'s processes to finish (polled: there is no portable wait-any)."""
    while True:
        for proc in running:
            if proc.poll() is not None:
                return proc
        time.sleep(0.05)


class RayExecutor:
    """Each job is a Ray task with its own resource request; lost workers are retried.

    ``address``: a running cluster (``ray start --head`` prints it), ``"auto"`` for the one
    this node belongs to, or None to start a local cluster in this process. A job asks for
    ``cpus_per_job`` CPUs and, when its config trains on CUDA, one GPU. ``max_retries`` counts
    re-runs after a worker or node dies; errors raised by the job itself (a bad config) are not
    retried.
    """

    def __init__(
        self,
        address: str | None = None,
        cpus_per_job: float = 1,
        max_retries: int = 3,
        num_cpus: int | None = None,
        object_store_memory: int | None = None,
    ) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError("the ray executor needs Ray: pip install 'stackedheads[ray]'") from None
        if not cpus_per_job > 0:  # also refuses nan
            raise UsageError(f"'cpus_per_job' must be > 0, got {cpus_per_job}", fields=("cpus_per_job",))
        if max_retries < 0:
            raise UsageError(f"'max_retries' must be >= 0, got {max_retries}", fields=("max_retries",))
        if address is not None:
            check_reachable(address)  # before any stage runs, so a typo costs seconds, not minutes
        self.address, self.cpus_per_job, self.max_retries = address, cpus_per_job, max_retries
        self.local_cluster = {"num_cpus": num_cpus, "object_store_memory": object_store_memory}

    def _init(self) -> None:
        import ray

        if ray.is_initialized():
            return
        # Workers import stackedheads from their own environment: install the package on every
        # node of a cluster (a local cluster shares this one).
        kwargs: dict = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
        if self.address is None:  # sizes of a cluster started here
            kwargs.update({k: v for k, v in self.local_cluster.items() if v is not None})
        try:
            ray.init(address=self.address, **kwargs)
        except ConnectionError as e:
            raise UsageError(f"cannot reach the Ray cluster at {self.address}: {e}") from None

    def run(self, jobs: Sequence[Job], out: Path, on_done: Callable[[Job], None] | None = None) -> None:
        import ray

        self._init()
        task = ray.remote(run_job)
        pending = {}
        for job in jobs:
            gpus = 1 if job.config.device.startswith("cuda") else 0
            # A task's threads come from the CPUs it asked for, so tasks never oversubscribe a node.
            threads = default_threads(job.config.device, max(1, int(self.cpus_per_job)))
            ref = task.options(
                num_cpus=self.cpus_per_job, num_gpus=gpus, max_retries=self.max_retries,
                retry_exceptions=False, name=f"stackedheads:{job.name}",
                runtime_env={"env_vars": openmp_env(threads)},
            ).remote(job, str(Path(out).resolve()), None, threads)
            pending[ref] = job
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                ray.get(ref)  # re-raises the job's own error, if any
                if on_done:
                    on_done(job)


RAY_CONNECT_TIMEOUT_S = 10.0  # ray.init itself retries an unreachable address for minutes


def check_reachable(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Fail in one line, within ``timeout``, when nobody listens at a Ray ``host:port``
    (``ray://host:port`` for Ray Client). ``auto`` and addresses without a port are left to Ray."""
    from urllib.parse import urlsplit

    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise UsageError(f"'address' {address!r} is not host:port", fields=("address",)) from None
    if not host or port is None:
        # Ray itself takes host:port, or ray://host with its client's port; anything else ended
        # in Ray's ValueError traceback ('not an address').
        if "://" not in address or not host or any(c.isspace() for c in address):
            raise UsageError(f"'address' {address!r} is not host:port (or auto, or ray://host[:port])", fields=("address",))
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def make_executor(
    name: str, address: str | None = None, progress_factory=None, workers: int | None = None,
    threads: int | None = None, **ray_options,
) -> Executor:
    if name not in EXECUTORS:  # before any option that only one of them takes is judged
        raise UsageError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}", fields=("executor",))
    if name == "local":
        if address is not None:
            raise UsageError("'address' needs the ray executor", fields=("address",))
        return LocalExecutor(progress_factory, workers, threads)
    if workers is not None or threads is not None:
        raise UsageError(
            "'workers' and 'threads' are for the local executor; Ray sizes tasks by 'cpus_per_job'",
            fields=("workers", "threads", "cpus_per_job"),
        )
    if name == "ray":
        return RayExecutor(address, **ray_options)
    raise UsageError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
