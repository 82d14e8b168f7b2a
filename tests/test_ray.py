"""The Ray executor on a real local Ray cluster: same results as local, and a killed worker
is retried and resumes from its checkpoint."""

import os
import signal
import threading

import pytest

ray = pytest.importorskip("ray")

from stackedheads import presets
from stackedheads.sweeps import figure4  # noqa: E402
from stackedheads.claims import sec7  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.execution.executors import LocalExecutor, RayExecutor, make_executor  # noqa: E402

pytestmark = pytest.mark.slow  # real subprocesses, servers or whole pipelines: `make test-fast` skips them


@pytest.fixture(scope="module")
def cluster():
    ex = RayExecutor(num_cpus=2, object_store_memory=10**8, max_retries=3)
    ex._init()
    yield ex
    ray.shutdown()


def read(path):
    return path.read_bytes()


@pytest.fixture(scope="module")
def local_smoke(tmp_path_factory):
    """The smoke Figure 4 sweep in this process, once: what every executor must reproduce."""
    out = tmp_path_factory.mktemp("local") / "local"
    rows = figure4.run_figure4(presets.figure4("smoke"), out, LocalExecutor())
    sec7.write_claims(out)
    return out, rows


def test_ray_sweep_is_identical_to_local(cluster, local_smoke, tmp_path):
    local, local_rows = local_smoke
    ray_rows = figure4.run_figure4(presets.figure4("smoke"), tmp_path / "ray", cluster)
    assert ray_rows == local_rows
    sec7.write_claims(tmp_path / "ray")
    assert read(tmp_path / "ray" / "summary.csv") == read(local / "summary.csv")
    assert read(tmp_path / "ray" / "claims.json") == read(local / "claims.json")
    # The jobs really ran in Ray workers, not in this process.
    pids = {line for p in (tmp_path / "ray").glob("runs/*/attempts.jsonl") for line in p.read_text().splitlines()}
    assert pids and all(f'"pid": {os.getpid()},' not in line for line in pids)


def _stall_first_attempt(run_job, victim: str, fifo):
    """``run_job`` wrapped for the Ray workers: the first attempt of job ``victim`` writes its
    pid into ``fifo`` once its first checkpoint is on disk (blocking until the test reads it)
    and then never finishes, so the test kills it past a known point, never after a guessed
    delay, and the job cannot end first. A local function, so Ray ships it by value (workers
    cannot import this module)."""

    def stalling(job, out, *args):
        import os
        import threading
        from pathlib import Path

        from stackedheads.execution import executors
        from stackedheads.training import checkpoints

        if job.name == victim and not (executors.run_dir(Path(out), job) / "attempts.jsonl").exists():
            write = checkpoints.write_checkpoint

            def write_then_stall(*a, **k):
                write(*a, **k)
                fifo.write_text(str(os.getpid()))
                threading.Event().wait()

            checkpoints.write_checkpoint = write_then_stall
        return run_job(job, out, *args)

    return stalling


def test_killed_worker_is_retried_and_resumes(cluster, tmp_path, monkeypatch):
    from stackedheads.execution import executors

    base = presets.SMOKE.override(steps=100, ckpt_every=25, eval_every=25)
    spec = figure4.Figure4Spec("kill-test", base, 2, 2, (2,), (0, 1))
    victim = tmp_path / "ray" / "runs" / spec.jobs()[0].name
    fifo = tmp_path / "stalled"
    os.mkfifo(fifo)
    killed = {}

    def kill_after_first_checkpoint():
        pid = int(fifo.read_text())  # opens when the worker does
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid

    # A daemon: were the job to fail before its checkpoint, nothing would open the FIFO.
    watcher = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    watcher.start()
    with monkeypatch.context() as m:
        m.setattr(executors, "run_job", _stall_first_attempt(executors.run_job, victim.name, fifo))
        figure4.run_figure4(spec, tmp_path / "ray", cluster)
    watcher.join()
    assert "pid" in killed, "the job finished before its worker could be killed"
    lines = (victim / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 2, lines
    assert f'"pid": {killed["pid"]},' in lines[0]
    assert '"resumed_from": 0' in lines[0] and '"resumed_from": 0' not in lines[1]
    figure4.run_figure4(spec, tmp_path / "local", LocalExecutor())
    assert read(tmp_path / "ray" / "summary.csv") == read(tmp_path / "local" / "summary.csv")


def test_executor_choice_errors():
    with pytest.raises(UsageError):
        make_executor("dask")
    with pytest.raises(UsageError):
        make_executor("local", address="127.0.0.1:6379")


def test_cli_ray_executor_matches_local(local_smoke, tmp_path, cli):
    """`sweep --executor ray` as a user's shell runs it (its own Ray cluster): the in-process
    local sweep's bytes."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "stackedheads", "sweep", "figure4", "--preset", "smoke", "--executor", "ray",
                        "--out", str(tmp_path / "ray")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Claims of Section 7.2" in r.stdout
    assert read(tmp_path / "ray" / "summary.csv") == read(local_smoke[0] / "summary.csv")
    r = cli("sweep", "figure4", "--preset", "smoke", "--executor", "local", "--ray-address", "auto", "--out", tmp_path / "x")
    assert r.code == 2 and r.err.count("\n") == 1


# --- An unreachable cluster

from helpers import refused_port  # noqa: E402


def test_unreachable_ray_address_fails_fast(capsys):
    pytest.importorskip("ray")
    from stackedheads.execution.executors import RayExecutor

    with refused_port() as port, pytest.raises(UsageError, match="cannot reach the Ray cluster at 127.0.0.1"):
        RayExecutor(f"127.0.0.1:{port}")
