"""Thread counts and executors: one rule for every verb, refused in one line."""

from __future__ import annotations

import pytest
from helpers import one_error

from stackedheads.errors import UsageError
from stackedheads.perf import MAX_THREADS_PER_CORE, available_cores

MOST = MAX_THREADS_PER_CORE * available_cores()


def test_train_threads_message_states_the_rule_it_applies(tmp_path, cli):
    """The threads message states the rule it applies (a count per core), not a fixed range."""
    for threads in (0, MOST + 1):
        code, _, err = cli("train", "--preset", "smoke", "--out", tmp_path / "t", "--threads", threads)
        assert code == 2 and one_error(err), err
        assert "1024" not in err and f"{MAX_THREADS_PER_CORE} per core" in err, err
    assert not (tmp_path / "t" / "config.json").exists()


def test_api_thread_count_is_bounded_by_the_machine_that_trains(tmp_path):
    import stackedheads as sh

    cfg = sh.presets.get("smoke").override(threads=MOST + 1)  # a config is machine-independent
    with pytest.raises(UsageError, match=f"between 1 and {MOST}"):
        sh.train(cfg, tmp_path / "t")
    assert not (tmp_path / "t" / "config.json").exists()


def test_unknown_executor_is_named_before_its_options(tmp_path, cli):
    """`reproduce --executor bogus --threads 1` names the unknown executor, not Ray."""
    code, _, err = cli("reproduce", "--preset", "smoke", "--out", tmp_path / "r", "--executor", "bogus", "--threads", 1)
    assert code == 2 and one_error(err), err
    assert "unknown executor 'bogus'" in err and "Ray" not in err


def test_a_ray_address_that_is_no_address_is_one_line(tmp_path, cli):
    code, _, err = cli("sweep", "figure4", "--preset", "smoke", "--executor", "ray", "--ray-address", "not an address",
                       "--out", tmp_path / "s")
    assert code == 2 and one_error(err), err
    assert "--ray-address 'not an address' is not host:port" in err
    assert not (tmp_path / "s").exists()

