"""One validation of training configs for the command line, the API and config.json on disk."""

from __future__ import annotations

import json
import math

import pytest
from conftest import copy_run
from helpers import one_error, train_config

from stackedheads.errors import UsageError


@pytest.mark.parametrize("field, value, says", [
    ("steps", "10", "'steps' must be a whole number, got '10'"),
    ("steps", True, "'steps' must be a whole number, got True"),
    ("steps", math.nan, "'steps' must be a whole number, got nan"),
    ("steps", 10.5, "'steps' must be a whole number, got 10.5"),
    ("pe_base", math.inf, "'pe_base' must be a finite number, got inf"),
    ("lr", "0.1", "'lr' must be a finite number, got '0.1'"),
    ("chains", 2.0, "'chains' must be a whole number, got 2.0"),
    ("seeds", (-1,), "seeds must be a non-empty list of integers from 0 to 2**63-1"),
])
def test_api_refuses_what_the_cli_refuses_naming_the_field(field, value, says):
    from stackedheads import presets

    with pytest.raises(UsageError) as e:
        presets.get("smoke").override(**{field: value})
    assert says in str(e.value)


def test_api_train_without_a_config_is_one_usage_error(tmp_path):
    import stackedheads as sh

    with pytest.raises(UsageError, match="'cfg' must be a TrainConfig, got NoneType"):
        sh.train(None, tmp_path / "t")


def test_config_json_with_a_wrong_typed_field_is_one_line(tmp_path, cli):
    """"chains": null in a config.json, read by `train` resuming the folder, is one line."""
    run = tmp_path / "t"
    run.mkdir()
    cfg = train_config()
    cfg["task"]["chains"] = None
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("train", "--preset", "smoke", "--out", run)
    assert code == 2 and one_error(err), err
    assert "'chains' must be a whole number, got None" in err or "--chains must be a whole number, got None" in err


@pytest.mark.parametrize("part, field, value, says", [
    ("task", "chains", None, "'chains' must be a whole number, got None"),
    ("optim", "lr", "NaN", "'lr' must be a finite number, got 'NaN'"),
])
def test_a_config_json_field_of_the_wrong_type_names_the_file(tmp_path, cli, part, field, value, says):
    run = tmp_path / "t"
    run.mkdir()
    cfg = train_config()
    cfg[part][field] = value
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("train", "--preset", "smoke", "--out", run)
    assert code == 2 and one_error(err), err
    assert str(run / "config.json") in err and (says in err or says.replace(f"'{field}'", f"--{field}") in err), err


def test_emergence_refuses_a_config_without_n_layers(ckpt_run, tmp_path, cli):
    run = copy_run(ckpt_run, tmp_path / "run")
    cfg = json.loads((run / "config.json").read_text())
    del cfg["model"]["n_layers"]
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("emergence", run, "--out", tmp_path / "e", "--seqs", 4)
    assert code == 2 and one_error(err), err
    assert f"{run / 'config.json'}: a training config without model.n_layers" in err
    assert not (tmp_path / "e").exists()

