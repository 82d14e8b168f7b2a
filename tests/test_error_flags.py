"""An error names the flag a user typed: a training config's field as its option (``--n-val``, not
``n_val``), a grid's field as the sweep's own option (``--depths``, not train's ``--depth``), a
value as it was typed (no thousands comma, which reads as a list) and a long list never cut
inside an item."""

from __future__ import annotations

import re
import typing

import pytest
from helpers import one_error

from stackedheads import presets
from stackedheads.cli._app import config_fields, flag
from stackedheads.errors import UsageError, brief

GB = 2**30
# Every field train takes as an option whose name is not its flag's (n_val, not --n-val).
FIELD_NAMES = [name for name, _, _ in config_fields() if "_" in name]


def _bad_value(tp) -> str | None:
    """A value the option of type ``tp`` parses but the config refuses (None: a switch)."""
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is bool:
        return None
    return "bogus" if tp is str else "-1"  # every count, size, rate and list of them is refused at -1


BAD = [(name, _bad_value(tp)) for name, tp, _ in config_fields() if _bad_value(tp) is not None]


@pytest.fixture
def machine_of_24_gb(monkeypatch):
    """A machine of 24 GB of memory, whatever runs the test."""
    from stackedheads.training import config

    monkeypatch.setattr(config, "machine_memory", lambda device: {"host": 24 * GB, "device": 24 * GB})


def _the_line(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("stackedheads: error"))


def test_steps_0_names_the_flag(tmp_path, cli):
    code, _, err = cli("train", "--preset", "smoke", "--steps", 0, "--out", tmp_path / "t")
    assert code == 2 and one_error(err), err
    assert _the_line(err) == "stackedheads: error: --steps must be >= 1, got 0"
    assert not (tmp_path / "t").exists()


def test_n_val_0_names_its_flag_alone(tmp_path, cli):
    code, _, err = cli("train", "--preset", "smoke", "--n-val", 0, "--out", tmp_path / "t")
    assert code == 2 and one_error(err), err
    assert _the_line(err) == "stackedheads: error: --n-val must be >= 1, got 0"  # not "n_train and n_val"


@pytest.mark.parametrize("name, value", BAD, ids=[n for n, _ in BAD])
def test_every_train_option_refused_is_named_as_its_flag(tmp_path, cli, name, value):
    code, _, err = cli("train", "--preset", "smoke", "--out", tmp_path / "t", flag(name), value)
    assert code == 2 and one_error(err), err
    line = _the_line(err)
    assert flag(name) in line, line
    assert not [f for f in FIELD_NAMES if f in line], line  # no config field's own name
    assert not [f for f, _, _ in config_fields() if f"'{f}'" in line], line  # no field left as the library quotes it
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("args, says", [
    (("--d-model", 7, "--heads", 2), "--d-model 7 is not divisible by --heads 2; pick another size or set --d-head"),
    (("--batch-size", 100, "--n-train", 10), "--batch-size 100 exceeds --n-train 10"),
    (("--warmup-steps", 50), "--warmup-steps must lie in [0, --steps) = [0, 30), got 50"),
    (("--schedule", "constant", "--decay-steps", 40), "--decay-steps sets where a decay ends: give it with --schedule cosine or linear"),
    (("--decay-steps", 10), "--decay-steps (10) must be at least --steps (30): give --decay-steps equal to --steps"),
    (("--seeds", "1,1"), "--seeds must be distinct, got [1, 1]"),
    (("--resid-scale", "sublayers", "--weight-init", "transformer-lens"), "--resid-scale scales GPT-2's init; --weight-init"),
])
def test_a_rule_between_options_names_each_flag(tmp_path, cli, args, says):
    code, _, err = cli("train", "--preset", "smoke", "--out", tmp_path / "t", *args)
    assert code == 2 and one_error(err), err
    assert says in err, err


def test_a_value_too_large_is_shown_as_typed(tmp_path, cli, machine_of_24_gb):
    code, _, err = cli("train", "--out", tmp_path / "t", "--layers", 100000)
    assert code == 2 and one_error(err), err
    assert "--layers 100000: training would need at least" in err, err


def test_the_depth_grid_names_its_own_flag(tmp_path, cli):
    code, _, err = cli("sweep", "depth", "--preset", "smoke", "--out", tmp_path / "d", "--depths", "0,1")
    assert code == 2 and one_error(err), err
    assert _the_line(err) == "stackedheads: error: --depths must be >= 1, got 0"
    assert not (tmp_path / "d").exists()


def test_a_grid_too_large_names_the_flag_typed_and_the_run(tmp_path, cli, machine_of_24_gb):
    """The run that cannot fit is one of the grid's: the sweep's --depths and the run's name,
    not train's --depth and a number with a thousands comma (which reads as a list)."""
    out = tmp_path / "d"
    code, _, err = cli("sweep", "depth", "--preset", "smoke", "--out", out, "--depths", "1-100000")
    assert code == 2 and one_error(err), err
    line = _the_line(err)
    assert line.startswith("stackedheads: error: --depths 1-100000: run ic-D"), line
    assert "training would need at least" in line and not re.search(r"--depth\b", line), line
    assert not re.search(r"\d,\d{3}", line), line
    assert not out.exists() or not any(out.iterdir())


def test_a_grid_job_refused_for_a_setting_it_does_not_vary_is_named_as_the_run(machine_of_24_gb):
    from stackedheads.training.config import check_jobs_fit

    cfg = presets.get("smoke").override(n_layers=100000)
    with pytest.raises(UsageError) as e:
        check_jobs_fit([("ic-D2-L100000", cfg)])
    assert str(e.value).startswith("run ic-D2-L100000: 'n_layers' 100000: training would need at least"), e.value
    assert e.value.fields == ("n_layers",)


def test_another_grid_in_the_folder_shows_the_long_list_whole_not_cut(tmp_path, cli):
    from stackedheads.sweeps import depth

    out = tmp_path / "d"
    out.mkdir()
    depth.atomic_write_json(out / depth.SPEC_FILE, presets.depth("smoke").to_dict())
    code, _, err = cli("sweep", "depth", "--preset", "smoke", "--out", out, "--depths", "1-20")
    assert code == 2 and one_error(err), err
    assert "depths: [1, 2] there, [1, 2, 3" in err and ", 20] (20 values) asked" in err, err
    assert ", asked" not in err and "--out" in err, err


@pytest.mark.parametrize("args, says", [
    (("--chains", 0), "--chains must be a whole number >= 1, got 0"),
    (("--depth", 0), "--depth 0 is out of range for formulation 'equations' with --chains 4: allowed 1..175"),
])
def test_prompts_name_their_flags(cli, args, says):
    code, _, err = cli("prompts", "-f", "equations", *args)
    assert code == 2 and one_error(err), err
    assert _the_line(err) == f"stackedheads: error: {says}"


def test_the_library_names_the_field_it_refuses():
    with pytest.raises(UsageError) as e:
        presets.get("smoke").override(n_val=0)
    assert str(e.value) == "'n_val' must be >= 1, got 0" and e.value.fields == ("n_val",)
    with pytest.raises(UsageError) as e:
        presets.depth("smoke", layers=(0, 1))
    assert str(e.value) == "'layers' must be >= 1, got 0" and e.value.fields == ("layers",)


@pytest.mark.parametrize("value, shown", [
    ([1, 2], "[1, 2]"),
    ((3, 4), "[3, 4]"),
    ("(none)", "(none)"),
    (list(range(1, 21)), "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ..., 20] (20 values)"),
    (list(range(100_000)), "[0, 1, 2, 3, 4, 5, 6, 7, 8, ..., 99999] (100000 values)"),
    ("x" * 50, "x" * 37 + "..."),
])
def test_brief_never_cuts_inside_a_list(value, shown):
    assert brief(value) == shown
