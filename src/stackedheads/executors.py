"""Where training jobs run: in this process (``local``) or on a Ray cluster (``ray``).

A job is one ensemble (runs that share a shape and train in one pass). Jobs are independent
and idempotent: a job re-run on its folder resumes from the last checkpoint or, if finished,
does nothing. That is what makes retries safe: a Ray task whose worker dies is simply run
again and picks up where the checkpoint left it.

Every attempt appends a line to ``<run>/attempts.jsonl`` (process id, host, the step it
resumed from), so a retry after a lost worker is visible in the run folder.

Ray writes results straight into the output folder, so that folder must be on a filesystem
every node sees (NFS, a shared volume); the README says how to run on a cluster.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stackedheads.errors import UsageError
from stackedheads.storage import FolderLock
from stackedheads.train import TrainConfig, list_checkpoints, train

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Job:
    name: str  # also the run folder's name under <out>/runs/
    formulation: str  # "ic" or "non-ic"
    config: TrainConfig

    def to_dict(self) -> dict:
        return {"name": self.name, "formulation": self.formulation, "config": self.config.to_dict()}


def run_dir(out: Path, job: Job) -> Path:
    return Path(out) / "runs" / job.name


def run_job(job: Job, out: str | Path, progress: Callable[[int, int], None] | None = None) -> dict:
    """Train (or resume, or skip) one job into ``out/runs/<name>``; returns its summary."""
    folder = run_dir(Path(out), job)
    # Locked before the attempt is logged, so a refused second process logs nothing
    # (train() takes the same lock again, which a re-entrant lock allows).
    with FolderLock(folder, "training run", reentrant=True):
        ckpts = list_checkpoints(folder)
        attempt = {"pid": os.getpid(), "host": socket.gethostname(), "start": time.time(), "resumed_from": ckpts[-1][0] if ckpts else 0}
        with open(folder / "attempts.jsonl", "a") as f:
            f.write(json.dumps(attempt) + "\n")
        return train(job.config, folder, progress=progress)


class Executor(Protocol):
    def run(self, jobs: Sequence[Job], out: Path, on_done: Callable[[Job], None] | None = None) -> None: ...


class LocalExecutor:
    """In-process, one job after another."""

    def __init__(self, progress_factory: Callable[[Job], Callable[[int, int], None] | None] | None = None) -> None:
        self.progress_factory = progress_factory

    def run(self, jobs: Sequence[Job], out: Path, on_done: Callable[[Job], None] | None = None) -> None:
        for job in jobs:
            run_job(job, out, self.progress_factory(job) if self.progress_factory else None)
            if on_done:
                on_done(job)


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
        if not cpus_per_job > 0 or max_retries < 0:  # also refuses nan
            raise UsageError("cpus_per_job must be > 0 and max_retries >= 0")
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
            ref = task.options(
                num_cpus=self.cpus_per_job, num_gpus=gpus, max_retries=self.max_retries,
                retry_exceptions=False, name=f"stackedheads:{job.name}",
            ).remote(job, str(Path(out).resolve()))
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
        raise UsageError(f"--ray-address {address!r} is not host:port") from None
    if not host or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def make_executor(name: str, address: str | None = None, progress_factory=None, **ray_options) -> Executor:
    if name == "local":
        if address is not None:
            raise UsageError("--ray-address needs --executor ray")
        return LocalExecutor(progress_factory)
    if name == "ray":
        return RayExecutor(address, **ray_options)
    raise UsageError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
