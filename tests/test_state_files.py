"""The one reader of state files: regular files only (a FIFO named like one never hangs a
read), bounded in size and depth, and metrics.csv's values checked (losses finite and >= 0, a
whole file with its header), each refusal one line naming the file."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import copy_run
from helpers import one_error, refused

from stackedheads import presets
from stackedheads.state import read
from stackedheads.state import write
from stackedheads.errors import UsageError
from stackedheads.training.metrics import read_metrics, truncate_metrics


# --- regular files only ------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", [
    lambda p: write.read_state_json(p, "a state file"),
    lambda p: write.read_state_jsonl(p, "a state file"),
    lambda p: write.read_bytes(p, "a state file"),
])
def test_a_fifo_named_like_a_state_file_is_refused_not_read(tmp_path, reader):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # no writer: an open for reading would wait for ever
    with pytest.raises(UsageError, match=f"{fifo} is a FIFO"):
        reader(fifo)


def test_a_fifo_metrics_csv_is_refused(tmp_path):
    os.mkfifo(tmp_path / "metrics.csv")
    with pytest.raises(UsageError, match="metrics.csv is a FIFO"):
        read_metrics(tmp_path)


@pytest.mark.parametrize("name", ["summary.json", "metrics.csv"])
def test_seeds_on_a_fifo_state_file_says_so(cli, tmp_path, ckpt_run, name):
    from stackedheads.state import layout

    stage = tmp_path / "sec9"
    run = shutil.copytree(ckpt_run, layout.training_run(stage / "emergence", layout.EMERGENCE_RUN))
    (run / name).unlink()
    os.mkfifo(run / name)
    refused(cli("seeds", stage), str(run / name), "FIFO")


def test_train_with_a_fifo_lock_names_the_path(cli, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / ".lock")
    refused(cli("train", "--preset", "smoke", "--out", out), str(out / ".lock"), "FIFO")


def test_publish_of_a_run_with_a_fifo_lock_says_so(cli, tmp_path, ckpt_run):
    run = shutil.copytree(ckpt_run, tmp_path / "run")
    (run / ".lock").unlink(missing_ok=True)
    os.mkfifo(run / ".lock")
    r = cli("publish", run, "--name", "x", "--title", "t", "--command", "c", "--commit", "0123abc",
            "--results", tmp_path / "res")
    refused(r, ".lock", "FIFO")


def test_circuit_validate_refuses_a_fifo_circuit(cli, tmp_path, ckpt_run):
    fifo = tmp_path / "circuit.json"
    os.mkfifo(fifo)
    refused(cli("circuit", "validate", ckpt_run, "--circuit", fifo), str(fifo))


# --- bounded depth and size -------------------------------------------------------------------------


@pytest.mark.parametrize("text, words", [
    ("[" * 200_000 + "]" * 200_000, "nested deeper"),
    ('{"steps": ' + "9" * 100_000 + "}", "100000 digits"),
    ('{"a": ' * 150 + "1" + "}" * 150, "nested deeper"),
])
def test_hostile_json_is_one_line(tmp_path, text, words):
    path = tmp_path / "done.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=words) as e:
        write.read_state_json(path, "a state file", object)
    assert str(path) in str(e.value)
    (tmp_path / "x.jsonl").write_text('{"ok": 1}\n' + text + "\n")
    with pytest.raises(UsageError, match=rf"x.jsonl line 2 is damaged \(.*{words}"):
        write.read_state_jsonl(tmp_path / "x.jsonl", "a state file", object)
    assert not write.intact(path)


@pytest.mark.parametrize("text", ["[" * 200_000 + "]" * 200_000, '{"task": ' + "9" * 100_000 + "}"])
def test_hostile_config_json_is_one_line_for_every_reader(cli, tmp_path, ckpt_run, text):
    run = shutil.copytree(ckpt_run, tmp_path / "run")
    (run / "config.json").write_text(text)
    refused(cli("emergence", run, "--out", tmp_path / "e"), "config.json")
    refused(cli("attention", run, "--out", tmp_path / "m"), "config.json")


# --- metrics.csv: values and whole files --------------------------------------------------------------


def _metrics(tmp_path: Path, ckpt_run: Path) -> Path:
    run = shutil.copytree(ckpt_run, tmp_path / "run")
    return run


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "-inf"])
def test_an_impossible_loss_in_metrics_csv_is_refused_naming_file_and_row(tmp_path, ckpt_run, value):
    run = _metrics(tmp_path, ckpt_run)
    lines = (run / "metrics.csv").read_text().splitlines()
    head = lines[0].split(",")
    row = lines[2].split(",")
    row[head.index("val_x1")] = value
    lines[2] = ",".join(row)
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"metrics.csv row 2 .*val_x1 = '" + value.replace("-", r"\-")):
        read_metrics(run)


def test_an_empty_metrics_csv_is_named(tmp_path, ckpt_run):
    run = _metrics(tmp_path, ckpt_run)
    (run / "metrics.csv").write_text("")
    with pytest.raises(UsageError, match="metrics.csv is empty"):
        read_metrics(run)


def test_a_metrics_csv_with_another_header_is_named(tmp_path, ckpt_run):
    run = _metrics(tmp_path, ckpt_run)
    text = (run / "metrics.csv").read_text()
    (run / "metrics.csv").write_text("a,b,c\n" + text.split("\n", 1)[1])
    with pytest.raises(UsageError, match="header 'a,b,c'"):
        read_metrics(run)
    with pytest.raises(UsageError, match="is not that of metrics.csv"):
        truncate_metrics(run / "metrics.csv", 1, ["step", "seed", "train_loss", "val_loss", "val_x1", "wall_s"])
    assert (run / "metrics.csv").read_text() == "a,b,c\n" + text.split("\n", 1)[1]  # nothing lost


def test_a_metrics_csv_that_is_not_utf8_is_one_line(tmp_path):
    """Every verb (train resuming, claims, report, reproduce, seeds) reads metrics.csv through these two."""
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step,seed\n\xff\xfe\x00garbage\n")
    for read in (lambda: read_metrics(tmp_path), lambda: truncate_metrics(path, 1, ["step", "seed"])):
        with pytest.raises(UsageError, match="is damaged \\(not UTF-8 text\\)"):
            read()


def test_train_resuming_over_a_non_utf8_metrics_csv_is_one_line(tmp_path, cli):
    from stackedheads.training import train

    run = tmp_path / "t"
    train(presets.get("smoke").override(steps=20, ckpt_every=10), run, stop_after=15)  # a checkpoint at 10
    (run / "metrics.csv").write_bytes(b"step,seed\n\xff\xfe\n")
    code, _, err = cli("train", "--preset", "smoke", "--steps", 20, "--ckpt-every", 10, "--out", run)
    # One line refusing it, or (the resume's own rule for metrics it cannot use) a warning and
    # a rebuild: never a traceback.
    assert "Traceback" not in err and (code == 0 or (code == 2 and one_error(err))), err


@pytest.mark.parametrize("cut", ["mid-line", "whole lines"])
def test_a_truncated_metrics_csv_of_a_finished_run_is_named(tmp_path, ckpt_run, cut):
    run = _metrics(tmp_path, ckpt_run)
    text = (run / "metrics.csv").read_text()
    lines = text.splitlines(keepends=True)
    kept = "".join(lines[:3]) + (lines[3][:5] if cut == "mid-line" else "")
    (run / "metrics.csv").write_text(kept)
    with pytest.raises(UsageError, match="metrics.csv is truncated"):
        read_metrics(run)
    (run / "summary.json").unlink()  # still training: a line cut off by a crash is no damage
    assert len(read_metrics(run)) == 2


def test_seeds_names_a_damaged_metrics_csv(cli, tmp_path, ckpt_run):
    """`seeds` and `claims` on a stage whose run's metrics.csv lost its tail."""
    from stackedheads.state import layout

    stage = tmp_path / "sec9"
    run = shutil.copytree(ckpt_run, layout.training_run(stage / "emergence", layout.EMERGENCE_RUN))
    (run / "metrics.csv").write_bytes((run / "metrics.csv").read_bytes()[:300])
    refused(cli("seeds", stage), "metrics.csv is truncated")


# --- C2 never passes on impossible losses ----------------------------------------------------------------


@pytest.mark.slow
def test_negative_partial_losses_never_give_c2_a_verdict(cli, tmp_path, kinds):
    copy = shutil.copytree(kinds / "figure4", tmp_path / "fig4")
    for metrics in copy.glob("runs/ic-*/metrics.csv"):
        lines = metrics.read_text().splitlines()
        head = lines[0].split(",")
        for i in range(1, len(lines)):
            row = lines[i].split(",")
            row[head.index("val_x1")] = "-5"
            lines[i] = ",".join(row)
        metrics.write_text("\n".join(lines) + "\n")
    r = cli("claims", copy, "--json")
    if r.code == 0:
        c2 = next(c for c in json.loads(r.out) if c["id"] == "C2")
        assert c2["verdict"] == "INCONCLUSIVE" and "metrics.csv" in c2["measured"], c2
    else:
        refused(r, "metrics.csv", "val_x1 = '-5'")


# --- bounded reads ------------------------------------------------------------------------


def test_every_state_read_is_bounded(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(read, "MAX_STATE_BYTES", 1000)  # read_state_json's default
    monkeypatch.setattr(write, "MAX_STATE_BYTES", 1000)  # the re-exported name circuits.ablate passes
    big = tmp_path / "circuit.json"
    big.write_text(json.dumps({"paths": []}) + " " * 2000)
    refused(cli("circuit", "validate", tmp_path, "--circuit", big), "over")
    refused(cli("circuit", "validate", tmp_path, "--circuit", "/dev/zero"), "/dev/zero")  # would never end
    with pytest.raises(UsageError, match="over"):
        write.read_state_json(big, "a state file")


# --- a truncated metrics.csv -----------------------------------------------------------------


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(io.StringIO(path.read_text()))]


@pytest.mark.parametrize("damage", ["truncated", "malformed row"])
def test_a_truncated_metrics_csv_is_rebuilt_from_the_checkpoints(ckpt_run, tmp_path, damage, capsys):
    from stackedheads.training import train

    run = copy_run(ckpt_run, tmp_path / "run")
    full = _rows(run / "metrics.csv")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    if damage == "truncated":
        kept = lines[: len(lines) // 2]
    else:
        kept = lines[:3] + ["12,zero,x,y\n"] + lines[4:]  # a row lost to damage
    (run / "metrics.csv").write_text("".join(kept))
    assert len(list((run / "checkpoints").iterdir())) == 3  # every checkpoint is there
    again = train(presets.SEC9_SMOKE.override(steps=20, ckpt_every=10), run)
    assert _rows(run / "metrics.csv") == full
    assert again["seeds"] == summary["seeds"]
    assert "training again from step" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["sweep.json", "runs/*/summary.json", "runs/*/metrics.csv"])
def test_claims_on_a_fifo_state_file_of_a_sweep_says_so(cli_process, tmp_path, kinds, name):
    copy = shutil.copytree(kinds / "figure4", tmp_path / "fig4")
    path = sorted(copy.glob(name))[0]
    path.unlink()
    os.mkfifo(path)
    r = cli_process("claims", copy, timeout=120)  # a read that waited on the FIFO would time out here
    assert r.code == 2 and one_error(r.err) and str(path) in r.err and "FIFO" in r.err, r.err
