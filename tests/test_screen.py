"""The recipe screen: how many seeds each recipe wants, what it says of a finished one,
and the recipe it names (``--recipe paper-curriculum`` follows it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import screen_folder

from stackedheads import presets, recipes
from stackedheads import recipe_screen


def test_the_screen_wants_four_seeds_where_a_choice_moved_and_of_every_combination(tmp_path, cli):
    early = [400, 800, 880, 1040]  # x1 falls at 50 epochs
    base = screen_folder(tmp_path / "base", {0: early, 1: early}, final=0.0027)
    # (a): seed 0 as the presets, seed 1 ends within 2x of the paper's 0.031
    a = screen_folder(tmp_path / "a", {0: early, 1: early}, final={0: 0.003, 1: 0.02})
    # (f): two seeds, neither moved (x1 at 60 epochs, the final loss 10x below the paper's)
    f = screen_folder(tmp_path / "f", {0: [480, 800, 880, 1040], 1: early}, final=0.0031)
    # (d): x1 falls at 110 epochs on its only seed: |ln(110/450)| <= |ln(50/450)| - ln 2
    d = screen_folder(tmp_path / "d", {0: [880, 1200, 1600, 2000]}, final=0.0027)
    # (d) + (a): one seed that moved nothing
    da = screen_folder(tmp_path / "da", {0: early}, final=0.0027)
    # (c): x1 never falls, so its 800 epochs are a lower bound, shown as one
    c = screen_folder(tmp_path / "c", {0: [None] * 4}, final=0.75)
    labels = ["sec9", "lr-constant", "pos-pair", "init-input-torch", "init-input-torch+lr-constant", "n-train-2048"]
    runs = recipe_screen.collect_seeds([base, a, f, d, da, c], labels)
    state = recipe_screen.screen(runs)
    assert state["baseline"] == "sec9" and state["baseline_medians"] == {"x1's fall": "50 epochs", "final val MSE": "0.0027"}
    rows = {r["recipe"]: r for r in state["rows"]}
    assert set(rows) == set(recipes.SCREEN)
    assert rows["lr-constant"]["moved"] == ["final val MSE: median 0.0115, seed 1 0.0200"]
    assert (rows["lr-constant"]["wanted"], rows["lr-constant"]["to_run"]) == (4, 2)
    assert rows["pos-pair"]["moved"] == [] and (rows["pos-pair"]["wanted"], rows["pos-pair"]["to_run"]) == (2, 0)
    assert rows["init-input-torch"]["moved"] == ["x1's fall: median 110 epochs, seed 0 110 epochs"]
    assert (rows["init-input-torch"]["wanted"], rows["init-input-torch"]["to_run"]) == (4, 3)
    assert (rows["init-input-torch+lr-constant"]["why"], rows["init-input-torch+lr-constant"]["to_run"]) == ("a combination", 3)
    assert rows["n-train-2048"]["moved"] == ["x1's fall: median >=800 epochs, seed 0 >=800 epochs"]
    assert (rows["pos-learned"]["seeds"], rows["pos-learned"]["to_run"]) == (0, 2)
    # the second round: four seeds each, a single choice (the presets at lr 3e-4) too
    assert (rows["lr-3e-4"]["why"], rows["lr-3e-4"]["wanted"], rows["lr-3e-4"]["round"]) == ("round two", 4, 2)
    assert (rows["tl-stack+lr-3e-4"]["why"], rows["tl-stack+lr-3e-4"]["to_run"]) == ("a combination", 4)
    assert state["to_run"] == sum(r["to_run"] for r in state["rows"])
    head, table = recipe_screen.screen_table(state)
    assert table[[r[0] for r in table].index("pos-pair")][head.index("to run")] == "done"
    # No baseline, or no run named as a screen recipe: no screen to state.
    assert recipe_screen.screen(runs[1:]) is None and recipe_screen.screen(recipe_screen.collect_seeds([base, f], ["sec9", "other"])) is None
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant", "--markdown")
    assert r.code == 0 and "### The recipe screen:" in r.out and "| lr-constant | 2 |" in r.out
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant", "--json")
    assert json.loads(r.out)["screen"]["rows"][0]["recipe"] == "lr-constant"
    r = cli("seeds", base, a, "--label", "sec9", "--label", "lr-constant")
    assert r.code == 0 and "The recipe screen" in r.out


def test_a_finished_choice_is_ruled_out_nearer_or_a_reproduction_and_the_closest_is_named(tmp_path, cli):
    early, paper = [400, 800, 880, 1040], [3600, 4000, 4400, 4800]  # x1 at 50 and at 450 epochs
    two = lambda falls: {0: falls, 1: falls}  # noqa: E731
    base = screen_folder(tmp_path / "base", two(early), final=0.0027)  # distance ln 9 + ln(0.031/0.0027)
    folders = {
        "pos-learned": screen_folder(tmp_path / "lp", two([320, 640, 720, 800]), final=0.001),  # farther
        "pos-pair": screen_folder(tmp_path / "pp", two([480, 800, 880, 1040]), final=0.0031),  # 0.24 nearer
        "init-tl": screen_folder(tmp_path / "tl", dict.fromkeys(range(4), paper), final=0.031),  # the paper: it moved, four
        # a combination, four seeds: x1 at 160 epochs, 0.02 at the end, one seed's x3 and x4 tie
        "tl-stack": screen_folder(tmp_path / "tf", {0: [1280] + paper[1:], 1: [1280] + paper[1:],
                                                             2: [1280] + paper[1:], 3: [1280, 4000, 4400, 4400]}, final=0.02),
        # x1 never falls on seed 1: the distance is a lower bound, far below the baseline's
        "n-train-65536": screen_folder(tmp_path / "t65", {0: paper, 1: [None] * 4, 2: paper, 3: paper}, final=0.031),
        "lr-warmup-constant": screen_folder(tmp_path / "wc", {0: paper}, final=0.031),  # one seed of two
    }
    runs = recipe_screen.collect_seeds([base, *folders.values()], ["sec9", *folders])
    state = recipe_screen.screen(runs)
    b = state["baseline_distance"]
    assert b == pytest.approx(math.log(9) + math.log(0.031 / 0.0027))
    verdict = {r["recipe"]: r["verdict"] for r in state["rows"]}
    d = {r.label: r.summary()["distance"]["value"] for r in runs}
    assert verdict["pos-learned"] == f"ruled out: distance {d['pos-learned']:.2f}, {d['pos-learned'] - b:.2f} farther than sec9's {b:.2f}"
    assert verdict["pos-pair"].startswith(f"ruled out: distance {d['pos-pair']:.2f}, {b - d['pos-pair']:.2f} nearer")
    assert verdict["pos-pair"].endswith("less than the 0.69 of a 2x move")
    assert verdict["init-tl"] == "reproduces: distance 0.00 (x1's fall and final val MSE within 2x, every seed in order)"
    tf = d["tl-stack"]
    # three seeds in order at x1 160 and 0.02, one more out of order: the median is the three's
    assert tf == pytest.approx(math.log(450 / 160) + math.log(0.031 / 0.02))
    assert verdict["tl-stack"] == (f"nearer: distance {tf:.2f}, {b - tf:.2f} less than sec9's {b:.2f}; not the paper: "
                                           "x1's fall 2.8x off the paper's, 25% of seeds' losses out of chain order")
    assert verdict["n-train-65536"].startswith("undecided: distance at least")
    assert verdict["lr-warmup-constant"] == "open: 3 more seeds"  # it moved 2x: four wanted
    assert verdict["dtype-float32"] == "open: 2 more seeds"
    # The nearest finished recipe is named; so far, while seeds are still wanted.
    assert state["closest"] == "init-tl"
    # n-train-65536's distance (0.25 at least) is a bound: it names nothing
    assert recipe_screen.screen([r for r in runs if r.label != "init-tl"])["closest"] == "tl-stack"
    assert recipe_screen.closest_line(state).startswith(f"Closest recipe: init-tl (the closest so far: the screen still wants {state['to_run']} seeds)")
    assert "still wants 1 seed)" in recipe_screen.closest_line({**state, "to_run": 1})
    # Finished: the line says so, and whether `--recipe paper-curriculum` selects the recipe named.
    done = {**state, "to_run": 0}
    for named, says in ((presets.PAPER_CURRICULUM, "`--recipe paper-curriculum` selects it)"),
                        ("init-tl", f"`--recipe paper-curriculum` selects {presets.PAPER_CURRICULUM}, not it)")):
        line = recipe_screen.closest_line({**done, "closest": named})
        assert line.startswith(f"Closest recipe: {named} (the screen is finished; {says}"), line
    r = cli("seeds", base, folders["init-tl"], "--label", "sec9", "--label", "init-tl", "--markdown")
    assert r.code == 0 and "| verdict |" in r.out and "Closest recipe: init-tl" in r.out
    r = cli("seeds", base, folders["pos-learned"], "--label", "sec9", "--label", "pos-learned")
    assert r.code == 0 and "Closest recipe: pos-learned" in r.out


def test_paper_curriculum_is_the_recipe_the_published_screen_names():
    """The alias follows the evidence: every first-round recipe's seeds are in results/sec9, and
    of the finished recipes the one nearest the paper is what ``--recipe paper-curriculum`` selects."""
    root = Path(__file__).resolve().parents[1] / "results"
    folders = sorted(p for p in (root / "sec9").iterdir() if p.is_dir())
    state = recipe_screen.screen(recipe_screen.collect_seeds(folders))
    first = [(r["recipe"], r["to_run"]) for r in state["rows"] if r["round"] == 1]
    assert [name for name, _ in first] == list(recipes.SCREEN_ROUNDS[0]) and not any(n for _, n in first), first
    assert state["closest"] == presets.PAPER_CURRICULUM
    assert presets.get("sec9", "paper-curriculum") == presets.get("sec9", presets.PAPER_CURRICULUM) != presets.get("sec9")
    assert "paper-curriculum" not in presets.RECIPES  # a name for a screened recipe, not one more to screen
