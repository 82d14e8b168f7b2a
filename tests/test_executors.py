"""The local executor's worker processes and the thread policy: results do not
depend on how many processes trained them (thread counts: tests/test_precision.py)."""

import json
import os
import subprocess
import textwrap
import sys
from dataclasses import replace

import pytest
import torch

from stackedheads import presets
from stackedheads.execution import process
from stackedheads.sweeps import figure4
from stackedheads.errors import UsageError
from stackedheads.execution.executors import Job, LocalExecutor, SMALL_JOB_FLOPS, _job_flops


@pytest.mark.slow
def test_worker_processes_give_the_same_bytes_as_one_process(tmp_path):
    spec = presets.figure4("smoke")
    seen: dict[str, list[int]] = {}

    def bars(job):
        return lambda done, total: seen.setdefault(job.name, []).append(done)

    one = figure4.run_figure4(spec, tmp_path / "one", LocalExecutor(workers=1, threads=1))
    two = figure4.run_figure4(spec, tmp_path / "two", LocalExecutor(bars, workers=2, threads=1))
    assert one == two
    assert (tmp_path / "one" / "summary.csv").read_bytes() == (tmp_path / "two" / "summary.csv").read_bytes()
    # Progress came back from the workers, ending at each job's last step.
    assert sorted(seen) == sorted(j.name for j in spec.jobs())
    assert all(v[-1] == spec.base.steps for v in seen.values())


def test_a_job_error_in_a_worker_is_one_usage_error(tmp_path):
    if __import__("torch").cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    jobs = [Job(f"j{i}", "ic", presets.SMOKE.override(device="cuda", seeds=(i,))) for i in range(2)]
    with pytest.raises(UsageError, match="no CUDA device"):
        LocalExecutor(workers=2, threads=1).run(jobs, tmp_path)


def test_plan_runs_small_jobs_here_and_large_ones_one_per_core(monkeypatch):
    monkeypatch.setattr("stackedheads.execution.executors.available_cores", lambda: 2)
    small = presets.figure4("smoke").jobs()
    large = presets.figure4("quick").jobs()
    assert max(_job_flops(j) for j in small) < SMALL_JOB_FLOPS < min(_job_flops(j) for j in large)
    assert LocalExecutor().plan(small) == (1, None)
    assert LocalExecutor().plan(large) == (2, 1)
    assert LocalExecutor(workers=1).plan(large) == (1, None)
    assert LocalExecutor(workers=8).plan(large[:3]) == (3, 1)  # never more workers than jobs
    cuda = [replace(j, config=j.config.override(device="cuda")) for j in large]
    assert LocalExecutor().plan(cuda) == (1, None)
    with pytest.raises(UsageError):
        LocalExecutor(workers=0)


def test_thread_defaults(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert process.default_threads("cpu", 16) == 16
    assert process.default_threads("cuda", 16) == process.GPU_HOST_THREADS
    assert process.default_threads("cuda", 2) == 2
    before = torch.get_num_threads()
    try:
        assert process.apply_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice wins over the default
        assert process.apply_threads(None) == 1
    finally:
        torch.set_num_threads(before)


def test_openmp_env_respects_the_users_policy(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert process.openmp_env(3) == {"GOMP_SPINCOUNT": process.SPINCOUNT, "OMP_NUM_THREADS": "3"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert process.openmp_env() == {}
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.slow
def test_cli_sets_the_spin_policy_before_torch_loads(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    # An import hook records the environment at the moment torch starts loading (libgomp reads
    # it then, once); the command itself trains, so torch surely loads.
    probe = textwrap.dedent("""
        import os, sys
        class Probe:
            def find_spec(self, name, path=None, target=None):
                if name == "torch":
                    print("AT TORCH", os.environ.get("GOMP_SPINCOUNT"), flush=True)
                    sys.meta_path.remove(self)
        sys.meta_path.insert(0, Probe())
        from stackedheads.cli import main
        main(["train", "--preset", "smoke", "--steps", "6", "--out", sys.argv[1]])
    """)
    r = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "run")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"AT TORCH {process.SPINCOUNT}"


# --- A job's run folder locked by another process

def test_sweep_job_in_a_locked_run_folder_logs_no_attempt(tmp_path, held):
    from stackedheads import presets
    from stackedheads.execution.executors import Job, run_dir, run_job

    job = Job("ic-D2-L1", "ic", presets.get("smoke"))
    held(run_dir(tmp_path, job))
    with pytest.raises(UsageError, match="in use by pid"):
        run_job(job, tmp_path)
    assert not (run_dir(tmp_path, job) / "attempts.jsonl").exists()


def test_library_calls_leave_the_callers_process_as_they_found_it(tmp_path, monkeypatch):
    """run_job and train set no process-wide state: the job trains at its own thread count and
    the caller's comes back; the allocator is the CLI's and the workers' (process.configure_process)."""
    from stackedheads.execution.executors import Job, run_job

    monkeypatch.setattr(process, "keep_freed_memory", lambda: pytest.fail("a library call changed the allocator"))
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    job = Job("ic-D2-L1", "ic", presets.get("smoke").override(steps=20, ckpt_every=10))
    run_job(job, tmp_path, threads=other)
    assert torch.get_num_threads() == before
    assert json.loads((tmp_path / "runs" / job.name / "config.json").read_text())["threads"] == other


def test_configure_process_sets_the_allocator_and_the_threads(monkeypatch):
    calls = []
    monkeypatch.setattr(process, "keep_freed_memory", lambda: calls.append("malloc") or True)
    before = torch.get_num_threads()
    try:
        assert process.configure_process(1) == 1 and torch.get_num_threads() == 1 and calls == ["malloc"]
    finally:
        torch.set_num_threads(before)
