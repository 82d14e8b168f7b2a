"""What a task needs: sizes that cannot fit in memory are refused before anything is allocated or
written; a long task says its projected time."""

from __future__ import annotations

import pytest
from helpers import one_error


GB = 2**30


@pytest.fixture
def machine_of_24_gb(monkeypatch):
    """A machine of 24 GB of memory, whatever runs the test."""
    from stackedheads.training import config

    monkeypatch.setattr(config, "machine_memory", lambda device: {"host": 24 * GB, "device": 24 * GB})


@pytest.mark.parametrize("option, value", [
    ("--d-model", 1_000_000_000), ("--n-train", 1_000_000_000_000), ("--layers", 100_000), ("--n-val", 1_000_000_000),
])
def test_train_refuses_what_cannot_fit_naming_the_option(tmp_path, cli, machine_of_24_gb, option, value):
    out = tmp_path / "t"
    code, _, err = cli("train", "--out", out, option, value)  # the default preset, quick
    assert code == 2 and one_error(err), err
    assert f"{option} {value}: training would need at least" in err and "more than this machine's 24 GB" in err
    assert not (out / "config.json").exists()  # the corrected run is not blocked (44.11)


def test_sweep_depth_refuses_a_grid_that_cannot_fit_before_recording_it(tmp_path, cli, machine_of_24_gb):
    out = tmp_path / "d"
    code, _, err = cli("sweep", "depth", "--layers", "1,100000", "--out", out)  # as 1-100000, without 10^5 jobs
    assert code == 2 and one_error(err), err
    assert "--layers" in err and "training would need at least" in err
    assert not out.exists() or not any(out.iterdir())


def test_what_fits_is_not_refused():
    from stackedheads import presets
    from stackedheads.training.config import check_fits

    for name in ("smoke", "quick", "paper", "sec8", "sec9"):
        check_fits(presets.get(name), {"host": 24 * GB, "device": 24 * GB})


def test_a_long_task_says_its_projected_time_once_and_a_short_one_nothing():
    from stackedheads.cli._app import PROJECT_AFTER_S, _Projection

    said, now = [], [0.0]
    p = _Projection("train t", clock=lambda: now[0], say=said.append)
    p(1, 100_000_000)
    now[0] = PROJECT_AFTER_S + 1  # 8 ms a step over the first seconds
    p(1 + int((PROJECT_AFTER_S + 1) / 0.008), 100_000_000)
    now[0] += 100
    p(100_000, 100_000_000)
    assert len(said) == 1 and "100,000,000 steps" in said[0] and "222h" in said[0] and "days" in said[0], said
    said.clear()
    q = _Projection("train s", clock=lambda: now[0], say=said.append)
    q(1, 1000)
    now[0] += PROJECT_AFTER_S + 1
    q(500, 1000)
    assert said == []

