import csv
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from stackedheads import presets
from stackedheads.errors import UsageError
from stackedheads.state.provenance import git_commit, machine, read_segments
from stackedheads.tasks.vectors import VectorTaskConfig
from stackedheads.training import (
    TrainConfig,
    list_checkpoints,
    load_model,
    partial_losses,
    read_metrics,
    train,
)

SMOKE = presets.SMOKE.override(seeds=(0, 1))


def metric_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_run_folder_is_self_describing(tmp_path):
    summary = train(SMOKE, tmp_path)
    cfg = TrainConfig.from_dict(json.loads((tmp_path / "config.json").read_text()))
    assert cfg == SMOKE.resolved()  # dtype and threads made concrete, as recorded
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert steps == [SMOKE.steps - SMOKE.ckpt_every, SMOKE.steps]  # keep_checkpoints=False keeps the last two
    rows = read_metrics(tmp_path)
    assert {r["seed"] for r in rows} == {0, 1}
    assert set(rows[0]) == {"step", "seed", "train_loss", "val_loss", "val_x1", "val_x2", "wall_s"}
    # Final val loss: every one of the last final_window steps is evaluated and averaged.
    tail = [r for r in rows if r["seed"] == 1 and r["step"] > SMOKE.steps - SMOKE.final_window]
    assert [r["step"] for r in tail] == list(range(SMOKE.steps - SMOKE.final_window + 1, SMOKE.steps + 1))
    s1 = summary["seeds"]["1"]
    assert s1["final_val_loss"] == pytest.approx(sum(r["val_loss"] for r in tail) / len(tail))
    assert s1["final_partial"]["val_x2"] == pytest.approx(sum(r["val_x2"] for r in tail) / len(tail))
    # The checkpoint reloads into a model that reproduces the logged validation loss.
    model, cfg2, step = load_model(list_checkpoints(tmp_path)[-1][1])
    assert step == SMOKE.steps and cfg2 == SMOKE.resolved() and model.n_members == 2


def test_interrupted_run_resumes_to_identical_numbers(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    cfg = SMOKE.override(steps=24, ckpt_every=8, final_window=4)
    train(cfg, full)
    assert train(cfg, cut, stop_after=13) == {}  # stopped between checkpoints 8 and 16
    assert not (cut / "summary.json").exists()
    train(cfg, cut)
    assert metric_rows(cut) == metric_rows(full)
    a = json.loads((full / "summary.json").read_text())["seeds"]
    b = json.loads((cut / "summary.json").read_text())["seeds"]
    assert a == b
    # Each start names where its steps ran: the resume restarts at checkpoint 8, and a run
    # already complete is not a new segment.
    train(cfg, cut)
    lines = read_segments(cut)
    assert [s["from_step"] for s in lines] == [0, 8]
    resolved = cfg.resolved()
    for s in lines:
        assert (s["threads"], s["dtype"], s["device"], s["compile"], s["cuda_graph"]) == (resolved.threads, resolved.dtype, "cpu", False, False)
        assert s["machine"] == machine() and s["torch"] == torch.__version__
        assert s["commit"] == git_commit() and s["dirty"] in (True, False, None)


# `stackedheads train` whose first checkpoint write, once on disk, says so and never returns:
# training goes on to the next checkpoint (writing metrics past the first) and waits there, so
# the test kills it past a known point, never after a guessed delay, and it cannot finish first.
_STALL_AFTER_FIRST_CHECKPOINT = """
import sys, threading
from stackedheads.cli import main  # first: it sets the OpenMP policy before torch loads
from stackedheads.training import checkpoints

write = checkpoints.write_checkpoint

def write_then_stall(*args, **kwargs):
    write(*args, **kwargs)
    print("checkpointed", flush=True)
    threading.Event().wait()

checkpoints.write_checkpoint = write_then_stall
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_killed_process_resumes_exactly(tmp_path):
    """SIGKILL a real `stackedheads train` after its first checkpoint, run it again, compare."""
    args = ["train", "--preset", "smoke", "--steps", "150", "--ckpt-every", "50", "--eval-every", "25", "--seeds", "0,1"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run([sys.executable, "-m", "stackedheads", *args, "--out", str(full)], check=True, capture_output=True)
    proc = subprocess.Popen([sys.executable, "-c", _STALL_AFTER_FIRST_CHECKPOINT, *args, "--out", str(killed)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert "checkpointed\n" in iter(proc.stdout.readline, "")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list_checkpoints(killed), "the run never reached its first checkpoint"
    assert not (killed / "summary.json").exists(), "the run finished before it was killed"
    r = subprocess.run([sys.executable, "-m", "stackedheads", *args, "--out", str(killed)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert metric_rows(killed) == metric_rows(full)


def _tensor_names(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return set(f.keys()), f.metadata()


def test_a_run_reads_each_older_checkpoint_once_to_slim_it(tmp_path, monkeypatch):
    """Pruning after each save reads an older checkpoint's header once a run, not once per later
    save (quadratic in the checkpoints: a run saving every 10 steps slowed as it went)."""
    from stackedheads.training import checkpoints

    reads = []
    header = checkpoints._header
    monkeypatch.setattr(checkpoints, "_header", lambda path: reads.append(path) or header(path))
    train(SMOKE.override(steps=40, ckpt_every=4, keep_checkpoints=True), tmp_path / "run")
    older = [p for _, p in list_checkpoints(tmp_path / "run")[:-2]]
    assert len(older) == 9 and sorted(reads) == sorted(older)  # each once
    assert all("weights_only" in header(p) for p in older)


def test_kept_checkpoints_keep_the_optimiser_state_in_the_newest_two_only(tmp_path, capsys):
    """Older kept checkpoints hold the weights alone (what emergence reads); the newest two the
    AdamW state too, so a damaged newest one still resumes exactly."""
    cfg = SMOKE.override(steps=40, ckpt_every=8, keep_checkpoints=True)
    full = tmp_path / "full"
    train(cfg, full)
    ckpts = list_checkpoints(full)
    assert [s for s, _ in ckpts] == [0, 8, 16, 24, 32, 40]
    for step, path in ckpts:
        names, meta = _tensor_names(path)
        has_optim = any(n.startswith("optim.") for n in names)
        assert has_optim == (step >= 32) and ("weights_only" in meta) == (step < 32)
        assert any(n.startswith("model.") for n in names)
    # A slimmed checkpoint loads as the same weights it was written with.
    cut = tmp_path / "cut"
    train(cfg, cut, stop_after=16)
    whole, _, _ = load_model(dict(list_checkpoints(cut))[16])
    slim, _, step = load_model(dict(ckpts)[16])
    assert step == 16 and all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), slim.state_dict().values()))
    # The newest damaged: resumed from its predecessor, which kept the optimiser's state.
    broken = tmp_path / "broken"
    train(cfg.override(steps=40), broken, stop_after=32)
    newest = dict(list_checkpoints(broken))[32]
    newest.write_bytes(newest.read_bytes()[:-7])
    train(cfg, broken)
    assert "resuming from an earlier checkpoint" in capsys.readouterr().err
    assert metric_rows(broken) == metric_rows(full)
    # Nothing left to resume from but weights: trained again from step 0, to the same numbers.
    for step in (32, 40):
        dict(list_checkpoints(broken))[step].unlink()
    (broken / "summary.json").unlink()
    train(cfg, broken)
    assert "training again from step 0" in capsys.readouterr().err
    assert metric_rows(broken) == metric_rows(full)


def test_member_of_ensemble_trains_like_a_model_alone(tmp_path):
    cfg = SMOKE.override(seeds=(3, 5), steps=20, ckpt_every=20)
    train(cfg, tmp_path / "pair")
    train(cfg.override(seeds=(5,)), tmp_path / "alone")
    pair = [r for r in read_metrics(tmp_path / "pair") if r["seed"] == 5]
    alone = read_metrics(tmp_path / "alone")
    assert len(pair) == len(alone)
    for a, b in zip(pair, alone):
        assert a["step"] == b["step"]
        for k in ("train_loss", "val_loss", "val_x1", "val_x2"):
            assert a[k] == pytest.approx(b[k], abs=1e-5)
    # And different seeds really are different models.
    other = [r for r in read_metrics(tmp_path / "pair") if r["seed"] == 3]
    assert other[-1]["val_loss"] != pytest.approx(pair[-1]["val_loss"], abs=1e-6)


@pytest.mark.slow
def test_training_reaches_the_candidate_mean_plateau(tmp_path):
    # Predicting 0 costs 1.0; predicting the mean of the N = 2 candidates costs 1 - 1/N = 0.5.
    # Any working model and optimiser gets below 0.6 quickly; an untrained one stays near 1.
    cfg = SMOKE.override(seeds=(0,), d_model=64, n_heads=4, batch_size=128, steps=400, eval_every=50, ckpt_every=400)
    train(cfg, tmp_path)
    rows = read_metrics(tmp_path)
    assert rows[0]["step"] == 50 and rows[0]["val_loss"] > 0.6
    assert rows[-1]["val_loss"] < 0.6


def test_partial_losses_locate_the_error():
    task = VectorTaskConfig(chains=2, depth=3, dims=4)
    y = torch.randn(2, 5, 2, 12)
    pred = y.clone()
    pred[..., 4:8] += 1.0  # error only on x_2
    p = partial_losses(pred, y, task)
    assert p.shape == (2, 3)
    assert torch.allclose(p[:, 1], torch.ones(2)) and p[:, 0].abs().max() == 0 and p[:, 2].abs().max() == 0
    non_ic = replace(task, ic=False)
    assert partial_losses(pred[..., :4], y[..., :4], non_ic).shape == (2, 1)


def test_existing_folder_with_other_config_is_refused(tmp_path):
    train(SMOKE.override(steps=10, ckpt_every=10), tmp_path)
    with pytest.raises(UsageError):
        train(SMOKE.override(steps=12, ckpt_every=10), tmp_path)


@pytest.mark.parametrize(
    "kwargs",
    [dict(seeds=()), dict(seeds=(1, 1)), dict(steps=0), dict(lr=0.0), dict(dtype="float16"), dict(device="tpu"), dict(batch_size=10**7),
     dict(cuda_graph=True), dict(cuda_graph=True, device="cuda", compile=True)],
)
def test_bad_train_config(kwargs):
    with pytest.raises(UsageError):
        SMOKE.override(**kwargs)


def test_train_cli_bad_input_is_one_line(tmp_path, cli):
    r = cli("train", "--out", tmp_path / "never", "--preset", "smoke", "--dims", "3")
    assert r.code == 2 and r.err.count("\n") == 1 and "dims" in r.err and not (tmp_path / "never").exists()


def test_a_checkpoint_from_another_run_is_refused(tmp_path):
    """A checkpoint copied in from another run (its metadata says another step, or another
    config) is neither resumed by `train` nor analysed by `circuit discover`."""
    import shutil

    from stackedheads.circuits.discover import discover_run
    from stackedheads.training import checkpoint_path

    cfg = SMOKE.override(keep_checkpoints=True)
    other, run = tmp_path / "other", tmp_path / "run"
    train(cfg, other)
    train(cfg.override(lr=3e-3), tmp_path / "other-lr")
    train(cfg, run, stop_after=10)
    # Its step 20 copied in as this run's step 25: the name's step is not the header's.
    shutil.copy(checkpoint_path(other, 20), checkpoint_path(run, 25))
    with pytest.raises(UsageError, match="holds step 20, not 25"):
        train(cfg, run)
    with pytest.raises(UsageError, match="holds step 20, not 25"):
        discover_run(run, tmp_path / "circuits")
    # The right step of a run with another config.
    checkpoint_path(run, 25).unlink()
    shutil.copy(checkpoint_path(tmp_path / "other-lr", 20), checkpoint_path(run, 20))
    with pytest.raises(UsageError, match="another configuration"):
        train(cfg, run)
    with pytest.raises(UsageError, match="another configuration"):
        discover_run(run, tmp_path / "circuits")
    assert list_checkpoints(run)[-1][0] == 20  # refused, not set aside as damaged
    checkpoint_path(run, 20).unlink()
    assert train(cfg, run)["seeds"] == train(cfg, other)["seeds"]  # its own checkpoints resume as before


def _train_args(out, *args):
    return ("train", "--preset", "smoke", "--steps", "10", "--ckpt-every", "10", "--out", str(out), *args)


@pytest.mark.parametrize("args", [("--pe-base", "nan"), ("--pe-base", "inf"), ("--lr", "nan"),
                                  ("--seeds", "99999999999999999999"), ("--seeds", "-1")])
def test_bad_numbers_are_one_line_and_write_nothing(tmp_path, args, cli):
    """--pe-base nan, a seed beyond int64 and --seeds -1 are one line each and leave no folder
    behind to block the corrected run (sweep depth refuses the same)."""
    code, _, stderr = cli(*_train_args(tmp_path / "run", *args))
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert args[0] in stderr and not (tmp_path / "run").exists()
    code, _, stderr = cli(*_train_args(tmp_path / "run"))  # the corrected run
    assert code == 0, stderr


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["100000", "1000"])
def test_absurd_thread_counts_are_one_line(tmp_path, threads, cli_process):
    """--threads 100000 is one line, not a crash. A separate process: a crash must not take the
    test session with it."""
    r = cli_process(*_train_args(tmp_path / "run", "--threads", threads))
    assert r.code == 2 and "threads must" in r.err and "Traceback" not in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("part", ["model", "optim"])
def test_a_run_config_with_a_part_that_is_no_object_is_one_line(tmp_path, part, cli):
    """A run's config.json with "model": "x" is one line, not a traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**presets.get("smoke").to_dict(), part: "x"}))
    code, _, stderr = cli(*_train_args(run))
    assert code == 2 and "Traceback" not in stderr and f"'{part}' must be a JSON object" in stderr, stderr


def test_train_refuses_a_sweep_folder(tmp_path, cli):
    (tmp_path / "sweep.json").write_text(json.dumps(presets.figure4("smoke").to_dict()))
    code, _, stderr = cli(*_train_args(tmp_path))
    assert code == 2 and "another kind of output (figure4 sweep)" in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json"]


# --- Interrupts, filesystem errors, damaged checkpoint headers and summaries

import errno  # noqa: E402
from pathlib import Path  # noqa: E402

from conftest import copy_run  # noqa: E402
from helpers import one_error  # noqa: E402

from stackedheads.state import write  # noqa: E402


# `stackedheads train` that says on stdout when its first evaluation is done (training under way).
_SAY_WHEN_TRAINING = """
import sys
from stackedheads.cli import main  # first: it sets the OpenMP policy before torch loads
from stackedheads.training import loop

evaluate = loop.evaluate

def say_when_training(*args, **kwargs):
    if loop.evaluate is say_when_training:
        loop.evaluate = evaluate
        print("training", flush=True)
    return evaluate(*args, **kwargs)

loop.evaluate = say_when_training
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_sigint_during_train_is_one_line(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen(
        # -X faulthandler: a crash instead of the exit prints where each thread was.
        [sys.executable, "-X", "faulthandler", "-c", _SAY_WHEN_TRAINING, "train", "--preset", "smoke", "--steps", "1000000",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        # A test run started in the background inherits SIGINT ignored (POSIX shells do that to
        # background jobs); the user's terminal never does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    stderr = ""
    try:
        assert p.stdout.readline() == "training\n"
        for _ in range(3):  # Python drops a Ctrl-C that lands in a weakref callback: press it again
            p.send_signal(signal.SIGINT)
            try:
                _, stderr = p.communicate(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130 and "Traceback" not in stderr, (p.returncode, stderr[-4000:])
    assert "stackedheads: interrupted" in stderr and "resume" in stderr


def test_full_disk_while_checkpointing_is_one_line(tmp_path, monkeypatch, cli):
    from safetensors import SafetensorError

    from stackedheads.training import checkpoints

    def full(tensors, filename, metadata=None):
        raise SafetensorError(f'Error while serializing: I/O error: No space left on device (os error 28) at path "{filename}"')

    monkeypatch.setattr(checkpoints, "save_file", full)
    code, _, stderr = cli("train", "--preset", "smoke", "--out", str(tmp_path / "run"))
    assert code == 1 and one_error(stderr) and "No space left on device" in stderr
    assert not list((tmp_path / "run" / "checkpoints").glob("*.tmp"))


@pytest.mark.parametrize("err, code", [(errno.EROFS, 2), (errno.ENOSPC, 1)])
def test_train_state_write_failures_are_one_line(tmp_path, monkeypatch, err, code, cli):
    def fail(path, data):
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr(write, "atomic_write_bytes", fail)
    got, _, stderr = cli("train", "--preset", "smoke", "--out", str(tmp_path / "run"))
    assert got == code and one_error(stderr) and "config.json" in stderr


def _mangle_header(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))


def test_damaged_checkpoint_header_is_detected(ckpt_run, tmp_path, cli):
    from stackedheads.training import checkpoint_path, load_model

    run = copy_run(ckpt_run, tmp_path / "run")
    path = checkpoint_path(run, 20)
    # A config that still parses but describes another model (2 heads of 4 instead of 1 of 8
    # would read the same weights as another architecture), then one that no longer parses.
    _mangle_header(path, b'\\"d_head\\": 8', b'\\"d_head\\": 4')
    with pytest.raises(UsageError, match="checksum"):
        load_model(path)
    _mangle_header(path, b'\\"d_head\\": 4', b'\\"d_head\\": x')
    code, _, stderr = cli("attention", str(run), "--out", str(tmp_path / "maps"))
    assert code == 2 and one_error(stderr) and "step_000020" in stderr


def test_checkpoint_without_header_checksum_with_bad_config_is_one_line(ckpt_run, tmp_path):
    from safetensors.torch import load_file, save_file

    from stackedheads.training import checkpoint_path, load_model

    run = copy_run(ckpt_run, tmp_path / "run")
    path = checkpoint_path(run, 20)
    tensors = load_file(str(path))
    save_file(tensors, str(path), metadata={"step": "20", "config": '{"task": {"depth": 2'})  # an older file
    with pytest.raises(UsageError, match="damaged"):
        load_model(path)


def test_summary_of_the_wrong_shape_is_rebuilt(ckpt_run, tmp_path, cli):
    run = copy_run(ckpt_run, tmp_path / "run")
    good = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text("{}")
    code, _, stderr = cli("train", "--preset", "sec9-smoke", "--steps", "20", "--ckpt-every", "10", "--out", str(run))
    assert code == 0, stderr
    assert json.loads((run / "summary.json").read_text())["seeds"] == good["seeds"]


# --- a run that cannot start leaves nothing to block the next --------------------------------------


def test_out_of_memory_while_building_is_one_line_and_leaves_no_config(tmp_path, monkeypatch, cli):
    from stackedheads.training import loop

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(loop, "EnsembleTransformer", no_memory)
    out = tmp_path / "run"
    r = cli("train", "--preset", "smoke", "--out", out)
    assert r.code == 2 and one_error(r.err) and "out of memory while building the model" in r.err, r.err
    assert not out.exists()  # no config.json: the corrected run is no "other configuration"
    monkeypatch.undo()
    r = cli("train", "--preset", "smoke", "--out", out, "--steps", "10", "--final-window", "2")
    assert r.code == 0, r.err


def test_memory_of_a_very_deep_model_is_estimated_honestly():
    """`--layers 100000` of the smoke preset needed about 23.5 GB; the estimate said 5 GB."""
    from stackedheads import presets
    from stackedheads.training.config import memory_needed

    cfg = presets.get("smoke").override(n_layers=100_000)
    assert sum(p[1] for p in memory_needed(cfg)) >= 20 * 2**30


def test_redaction_without_memory_shows_nothing_unredacted(monkeypatch):
    from stackedheads import errors

    errors.register_secret("sk-secret-value-123")

    def no_memory(text):
        raise MemoryError

    monkeypatch.setattr(errors, "redact_secrets", no_memory)
    assert errors.redact("key sk-secret-value-123") == errors.NO_MEMORY


# --- a run's config.json with impossible values names the file -----------------------------------------


@pytest.mark.parametrize("change", [{"task": {"chains": None}}, {"optim": {"lr": "NaN"}}])
@pytest.mark.parametrize("verb", [["attention", "{run}", "--out", "{tmp}/maps"],
                                  ["circuit", "discover", "{run}", "--out", "{tmp}/d"],
                                  ["circuit", "validate", "{run}", "--circuit", "{tmp}/c.json"]])
def test_a_damaged_run_config_names_the_file_not_an_option(ckpt_run, tmp_path, cli, change, verb):
    run = copy_run(ckpt_run, tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    for part, values in change.items():
        config[part].update(values)
    (run / "config.json").write_text(json.dumps(config))
    head = {"layer": 0, "head": 0, "rules": "kept"}
    (tmp_path / "c.json").write_text(json.dumps({"depth": 2, "heads": [head]}))  # loads; the run's config is read next
    r = cli(*[a.format(run=run, tmp=tmp_path) for a in verb])
    assert r.code == 2 and one_error(r.err), r.err
    assert str(run / "config.json") in r.err and "--chains" not in r.err and "--lr" not in r.err, r.err


# --- process counts follow the threads rule -----------------------------------------------------------


@pytest.mark.parametrize("verb", [["sweep", "figure4", "--preset", "smoke"], ["sweep", "depth", "--preset", "smoke"],
                                  ["reproduce", "--preset", "smoke"]])
@pytest.mark.parametrize("workers", ["1000", "0"])
def test_absurd_worker_counts_are_one_line(tmp_path, cli, verb, workers):
    r = cli(*verb, "--out", tmp_path / "out", "--workers", workers)
    assert r.code == 2 and one_error(r.err) and "--workers must be a whole number between 1 and" in r.err, r.err
    assert not (tmp_path / "out").exists()
