"""Thread counts and executors: one rule for every verb, refused in one line."""

from __future__ import annotations

import pytest
from helpers import one_error

from stackedheads.errors import UsageError
from stackedheads.execution.process import MAX_THREADS_PER_CORE, available_cores

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



@pytest.mark.parametrize("seeds", ["1", "0", "-3"])
def test_reproduce_refuses_fewer_than_two_seeds_in_one_line(tmp_path, cli, seeds):
    code, _, err = cli("reproduce", "--preset", "smoke", "--skip", "llm", "--out", tmp_path / "r", "--seeds", seeds)
    assert code == 2 and err.count("\n") == 1 and "--seeds" in err and ">= 2" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_a_preset_with_one_seed_for_a_judged_stage_is_refused_unless_the_stage_is_skipped():
    from dataclasses import replace

    from stackedheads import presets
    from stackedheads.reproduce import check_twin_seeds, with_seeds

    smoke = presets.reproduce("smoke")
    for field in ("circuits_seeds", "emergence_seeds"):
        for bad in ((0,), (1, 1)):  # one seed, or one seed twice
            one = replace(smoke, **{field: bad})
            with pytest.raises(UsageError, match="at least 2 distinct seeds"):
                check_twin_seeds(one)
            check_twin_seeds(one, skip=(field.split("_")[0],))  # a skipped stage judges nothing
    for name in presets.REPRODUCE:
        check_twin_seeds(presets.reproduce(name))  # every registered preset trains seeds to judge over
    assert with_seeds(smoke, 5).circuits_seeds == with_seeds(smoke, 5).emergence_seeds == (0, 1, 2, 3, 4)
    assert with_seeds(smoke, None) is smoke
