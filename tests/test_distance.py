"""The distance to Sec. 9's curriculum: per seed, then the median over a run's seeds with their range,
and x1's time to the plateau beside its fall."""

from __future__ import annotations

import math

import pytest
from helpers import screen_folder

from stackedheads import recipe_screen


def test_the_distance_is_the_stated_formula_per_seed_then_its_median(tmp_path):
    # Seed 0 one position at a time from step 3,600 (450 epochs); seed 1 two positions at once.
    folder = screen_folder(tmp_path / "a", {0: [3600, 4000, 4400, 4800], 1: [1600, 2400, 2400, 3200]}, final=0.062)
    (run,) = recipe_screen.collect_seeds([folder])
    a, b = run.rows
    assert (a.plateau_epochs, a.plateau_from) == (450.0, "x1") and a.loss_drop_order == "in order"
    assert a.drop_epochs == {"x1": 450.0, "x2": 500.0, "x3": 550.0, "x4": 600.0}
    assert b.loss_drop_order == "tie" and a.train_val_gap == pytest.approx(0.002)
    # seed 0: x1 at the paper's 450 epochs, final 0.062 = 2 x 0.031, in order; seed 1: x1 at 200, a tie
    own = {"0": math.log(2), "1": abs(math.log(200 / 450)) + math.log(2) + 1.0}
    assert recipe_screen.seed_distance(a)["value"] == pytest.approx(own["0"]) and recipe_screen.seed_distance(b)["value"] == pytest.approx(own["1"])
    d = run.summary()["distance"]
    assert d["value"] == pytest.approx((own["0"] + own["1"]) / 2) and d["per_seed"] == pytest.approx(own)
    assert (d["min"], d["max"]) == (pytest.approx(own["0"]), pytest.approx(own["1"]))
    assert d["plateau"] == pytest.approx(abs(math.log(200 / 450)) / 2) and d["final"] == pytest.approx(math.log(2))
    assert d["order"] == 0.5 and not d["at_least"] and d["seeds"] == 2
    lines = recipe_screen.distribution_lines(run)
    assert any(line.startswith(f"distance to the paper: {d['value']:.2f}, the median over 2 seeds "
                               f"(range {own['0']:.2f}-{own['1']:.2f}") for line in lines), lines
    assert any("until x1's loss falls below C2's threshold: median 325 epochs" in line for line in lines)
    head, rows = recipe_screen.seed_table(run)
    assert rows[0][head.index("gaps (epochs)")] == "50 50 50" and rows[0][head.index("plateau (epochs)")] == "450 (x1)"
    assert [r[head.index("distance")] for r in rows] == [f"{own['0']:.2f}", f"{own['1']:.2f}"]


def test_mixed_outcomes_are_not_rewarded_and_show_their_spread(tmp_path):
    """Two seeds at the paper and two at the presets' (x1 at 50 epochs, final 0.0027): the medians
    of x1's fall (250) and of the final loss (0.017) are near the paper, though no seed is both
    near and far; the median of the seeds' distances is halfway, and the range says why."""
    paper, early = [3600, 4000, 4400, 4800], [400, 800, 880, 1040]
    folder = screen_folder(tmp_path / "mixed", {0: paper, 1: paper, 2: early, 3: early},
                            final={0: 0.031, 1: 0.031, 2: 0.0027, 3: 0.0027})
    (run,) = recipe_screen.collect_seeds([folder])
    far = math.log(450 / 50) + math.log(0.031 / 0.0027)
    d = run.summary()["distance"]
    on_medians = abs(math.log(250 / 450)) + abs(math.log(((0.031 + 0.0027) / 2) / 0.031))
    assert d["value"] == pytest.approx(far / 2) and d["value"] > on_medians + 1
    assert (d["min"], d["max"]) == (pytest.approx(0.0), pytest.approx(far))
    head, rows = recipe_screen.distance_table([run])
    assert rows[0][head.index("distance (range)")] == f"0.00-{far:.2f}"


def test_x1s_time_to_the_plateau_is_shown_beside_its_fall(tmp_path):
    """x1's loss below 0.8 (onto the 1 - 1/N plateau) at the first evaluation it is, per seed and
    as a median, beside its fall below 0.5: a recipe that only slows everything shows as that."""
    slow = screen_folder(tmp_path / "slow", {0: [1280, 2000, 2400, 2800], 1: [1600, 2000, 2400, 2800]}, final=0.02,
                          onto={0: 560, 1: 620})
    fast = screen_folder(tmp_path / "fast", {0: [400, 800, 880, 1040]}, final=0.0027, onto=240)
    runs = recipe_screen.collect_seeds([slow, fast])
    # 560 and 620 are evaluated at steps 560 and 640 (every 80): epochs 70 and 80
    assert [r.x1_below_08_epochs for r in runs[0].rows] == [70.0, 80.0] and runs[1].rows[0].x1_below_08_epochs == 30.0
    head, rows = recipe_screen.seed_table(runs[0])
    assert [r[head.index("x1 below 0.8 (epoch)")] for r in rows] == ["70", "80"]
    head, rows = recipe_screen.distance_table(runs)
    at = head.index("x1 below 0.8 (epoch)")
    assert head[at + 1] == "x1 falls (epoch)"
    assert [(r[0], r[at], r[at + 1]) for r in rows[:2]] == [("slow", "75", "180"), ("fast", "30", "50")]
    assert any(line.startswith("x1's loss below 0.8 (onto the plateau): median 75 epochs (range 70-80); below C2's "
                               "threshold: median 180") for line in recipe_screen.distribution_lines(runs[0]))
    # a run whose x1 starts below 0.8 is on the plateau at its first evaluation
    assert recipe_screen.collect_seeds([screen_folder(tmp_path / "at-once", {0: [400] * 4}, final=0.01)])[0].rows[0].x1_below_08_epochs == 10.0


def test_runs_are_ranked_by_distance_and_a_run_on_the_plateau_is_not_measured(tmp_path, cli):
    near = screen_folder(tmp_path / "near", {0: [3600, 4000, 4400, 4800]}, final=0.031)
    far = screen_folder(tmp_path / "far", {0: [400, 800, 880, 1040]}, final=0.0024)
    stuck = screen_folder(tmp_path / "stuck", {0: [None, None, None, None]}, final=0.75)
    runs = recipe_screen.collect_seeds([far, stuck, near])
    head, rows = recipe_screen.distance_table(runs)
    assert [r[0] for r in rows] == ["near", "far", "stuck", "paper (Sec. 9.2)"]
    # The stuck run's x1 never fell: it counts at the run's 800 epochs, a lower bound.
    dist, x1 = head.index("distance (median)"), head.index("x1 falls (epoch)")
    assert rows[0][dist] == "0.00" and rows[2][x1] == ">=800" and rows[2][dist].startswith(">=")
    # without circuits only E4 is judged: in chain order passes it, the plateau does not
    passing = head.index("E1, E2, E3, E4 passing")
    assert [r[passing] for r in rows] == ["-, -, -, 1 of 1", "-, -, -, 1 of 1", "-, -, -, 0 of 1", "every seed"]
    d = runs[1].summary()["distance"]
    assert d["at_least"] and d["plateau"] == pytest.approx(math.log(800 / 450)) and d["order"] == 1.0
    cmp = [c for c in recipe_screen.compare(runs) if c["measure"] == "distance_to_paper"]
    assert cmp[0]["closer"] == "near"
    r = cli("seeds", far, stuck, near)
    assert r.code == 0 and "Distance to Sec. 9" in r.out and "distance to the paper: at least" in r.out


def test_toward_is_2x_closer_on_the_log_scale():
    paper = 0.031
    assert recipe_screen.toward(2 * paper, 8 * paper, paper) and recipe_screen.toward(paper / 2, 8 * paper, paper)
    assert not recipe_screen.toward(5 * paper, 8 * paper, paper)  # closer, but not 2x
    assert not recipe_screen.toward(0.39, 0.0027, paper)  # from 11x below to 13x above: farther, not toward
    assert not recipe_screen.toward(0.0, 0.0027, paper)
