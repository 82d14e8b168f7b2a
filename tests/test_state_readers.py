"""The verbs reading a finished folder's state files (done.json, config.json, sweep.json,
summaries): what is damaged or impossible is one line naming the file, and a read-only verb
writes nothing. metrics.csv's reader: test_state_files.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import one_error, reproduce_folder



def _snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}  # a lock file stays by design


@pytest.mark.parametrize("done", ["[]", '{"wall_s": NaN}', '{"wall_s": -3}', '{"wall_s": "1 h"}'])
def test_claims_and_report_read_done_json_alike(tmp_path, cli, done):
    """claims and report read a done.json alike: [] and a "wall_s" that is NaN, negative or not a
    number are damage to both."""
    run = reproduce_folder(tmp_path)
    (run / "theory").mkdir()
    (run / "theory" / "done.json").write_text(done)
    before = _snapshot(run)
    for command in ("claims", "report"):
        code, _, err = cli(command, run)
        assert code == 2 and one_error(err), (command, err)
        assert str(run / "theory" / "done.json") in err, (command, err)
    assert _snapshot(run) == before


def test_report_on_a_wrong_typed_config_says_what_is_wrong(tmp_path, cli):
    """A config.json of the wrong types is named for what is wrong in it, not as missing."""
    run = tmp_path / "rep"
    run.mkdir()
    (run / "config.json").write_text('{"preset": "smoke", "llm": null}')
    code, _, err = cli("report", run)
    assert code == 2 and one_error(err), err
    assert "no config.json" not in err and f"{run / 'config.json'} is not a reproduce config" in err


def test_claims_on_a_sweep_with_a_negative_seed_names_sweep_json_and_writes_nothing(tmp_path, cli):
    from stackedheads import presets

    spec = presets.figure4("smoke").to_dict()
    spec["seeds"] = [-1]
    (tmp_path / "sweep.json").write_text(json.dumps(spec))
    before = _snapshot(tmp_path)
    code, _, err = cli("claims", tmp_path)
    assert code == 2 and one_error(err), err
    assert str(tmp_path / "sweep.json") in err and "seeds" in err
    assert "rebuilt" not in err and "retrain" not in err
    assert _snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def smoke_sweep(tmp_path_factory):
    from stackedheads import presets
    from stackedheads.sweeps import figure4

    out = tmp_path_factory.mktemp("sweep") / "sw"
    figure4.run_figure4(presets.figure4("smoke"), out)
    return out


@pytest.mark.parametrize("loss", [-5.0, "NaN"])
def test_claims_refuse_an_impossible_loss_and_rewrite_nothing(smoke_sweep, tmp_path, cli, loss):
    import shutil

    folder = tmp_path / "sw"
    shutil.copytree(smoke_sweep, folder)
    summary = next(iter(sorted(folder.glob("runs/*/summary.json"))))
    data = json.loads(summary.read_text())
    for s in data["seeds"].values():
        s["final_val_loss"] = loss
    summary.write_text(json.dumps(data).replace('"NaN"', "NaN"))
    before = _snapshot(folder)
    code, _, err = cli("claims", folder)
    assert code == 2 and one_error(err), err
    assert str(summary) in err and "final losses >= 0" in err and "rebuilt" not in err
    assert _snapshot(folder) == before
