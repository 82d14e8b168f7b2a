"""A result trained in pieces (runs holding other seeds of the same settings) read and published as one."""

from __future__ import annotations

import json

import pytest
from helpers import one_error

from stackedheads import recipe_screen
from stackedheads.errors import UsageError
from stackedheads.state.layout import EMERGENCE_RUN
from stackedheads.training import train


def test_pieces_read_as_one_run(pieces):
    root, cfg = pieces
    (split,) = recipe_screen.collect_seeds([root / "split"])
    (whole,) = recipe_screen.collect_seeds([root / "whole"])
    assert [r.seed for r in split.rows] == ["0", "1"] == [r.seed for r in whole.rows]
    for a, b in zip(split.rows, whole.rows):
        # The same models: an ensemble's member is the model of its seed alone (to rounding).
        assert a.final_val_loss == pytest.approx(b.final_val_loss, rel=1e-3)
        assert a.loss_drops == b.loss_drops and a.loss_drops is not None
        assert a.train_val_gap == pytest.approx(b.train_val_gap, abs=1e-3)
    assert split.recipe == whole.recipe


def test_pieces_of_other_settings_or_one_seed_twice_are_refused(pieces, tmp_path, cli):
    import shutil

    root, cfg = pieces
    folder = tmp_path / "mixed"
    shutil.copytree(root / "split", folder)
    train(cfg.override(seeds=(2,), lr=2e-3), folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-lr")
    with pytest.raises(UsageError, match=r"not pieces of one result: their settings differ \(optim.lr: 0.001 and 0.002\)"):
        recipe_screen.collect_seeds([folder])
    r = cli("claims", folder)
    assert r.code == 2 and one_error(r.err) and "optim.lr" in r.err
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-lr")
    shutil.copytree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1", folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    with pytest.raises(UsageError, match="both hold seed 1"):
        recipe_screen.collect_seeds([folder])
    # A piece still training (no summary.json) holds no seed of the result: named, not counted.
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    train(cfg.override(seeds=(1,)), folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again", stop_after=10)
    (run,) = recipe_screen.collect_seeds([folder])
    assert [r.seed for r in run.rows] == ["0", "1"] and run.unfinished == [f"{EMERGENCE_RUN}-again"]
    assert any("not counted: transformer-D-again" in line for line in recipe_screen.distribution_lines(run))
    split = recipe_screen.collect_seeds([root / "split"])[0]
    assert [r.loss_drops for r in run.rows] == [r.loss_drops for r in split.rows]
    # How a piece ran (threads, compile, device) is not a setting: those combine.
    shutil.rmtree(folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-again")
    summary = folder / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1" / "summary.json"
    s = json.loads(summary.read_text())
    s["config"]["threads"], s["config"]["compile"] = 2, True
    summary.write_text(json.dumps(s))
    assert len(recipe_screen.collect_seeds([folder])[0].rows) == 2


def test_a_result_in_pieces_publishes_into_a_group_the_report_reads(pieces, tmp_path, cli):
    from stackedheads.publishing import references

    root, _ = pieces
    commit = "7e32fd7"  # any commit's spelling: publish records it, it does not check out
    results = tmp_path / "results"
    (results / "sec9").mkdir(parents=True)
    r = cli("publish", root / "split", "--name", "dtype-float32", "--results", results / "sec9", "--title", "t",
            "--command", "c", "--commit", commit, "--include", "emergence/runs/*/*.json", "--include", "emergence/runs/*/*.csv")
    assert r.code == 0, r.err
    published = results / "sec9" / "dtype-float32"
    assert {p.parent.name for p in published.glob("emergence/runs/*/summary.json")} == {EMERGENCE_RUN, f"{EMERGENCE_RUN}-seed1"}
    (before,), (after,) = recipe_screen.collect_seeds([root / "split"]), recipe_screen.collect_seeds([published])
    assert [(r.seed, r.final_val_loss, r.loss_drops) for r in before.rows] == [(r.seed, r.final_val_loss, r.loss_drops) for r in after.rows]
    assert [ref["name"] for ref in references.load_all(results)] == ["dtype-float32"]


def test_a_result_from_pieces_on_two_devices_names_both(pieces, tmp_path):
    """A CPU seed beside GPU seeds (float32 on both) is one result, shown as both."""
    import json
    import shutil

    root, _ = pieces
    shutil.copytree(root / "split", tmp_path / "split")
    piece = tmp_path / "split" / "emergence" / "runs" / f"{EMERGENCE_RUN}-seed1"
    for name in ("config.json", "summary.json"):
        d = json.loads((piece / name).read_text())
        (d["config"] if name == "summary.json" else d)["device"] = "cuda"
        (piece / name).write_text(json.dumps(d))
    (run,) = recipe_screen.collect_seeds([tmp_path / "split"])
    assert run.recipe["device"] == "cpu+cuda" and [r.seed for r in run.rows] == ["0", "1"]
    (alone,) = recipe_screen.collect_seeds([root / "split"])
    assert alone.recipe["device"] == "cpu"
