"""``stackedheads publish-piece``: a piece of a result trained a few seeds at a time, published
beside the pieces before it; bad input is one line and nothing written (issue 76 items 3, 13)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import one_error

from stackedheads import presets
from stackedheads.training import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Transformer D's smoke twin, seed 0, finished."""
    root = tmp_path_factory.mktemp("piece")
    cfg = presets.get("sec9-smoke").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1, seeds=(0,))
    train(cfg, root / "run")
    return root / "run"


FIRST = ("--title", "Transformer D (smoke), seed 0", "--train-command", "stackedheads train --preset sec9-smoke",
         "--notes", "Seed 0.", "--commit", "7e32fd7")


def refused(r, *words: str) -> None:
    assert r.code == 2 and one_error(r.err) and "Traceback" not in r.err, r
    for w in words:
        assert w in r.err, r.err


def test_a_nested_name_publishes_under_its_section_with_the_stage_it_holds(cli, run, tmp_path):
    results = tmp_path / "results"
    r = cli("publish-piece", "sec9/tl-stack", run, *FIRST, "--results", results)
    assert r.code == 0, r.err
    ref = json.loads((results / "sec9" / "tl-stack" / "reference.json").read_text())
    assert ref["name"] == "sec9/tl-stack" and ref["commit"] == "7e32fd7"
    assert "stackedheads seeds R --markdown --label tl-stack > R/seeds.md" in ref["command"]
    assert (results / "sec9" / "tl-stack" / "emergence" / "runs" / "transformer-D" / "metrics.csv").is_file()
    assert "[sec9/tl-stack](sec9/tl-stack/)" in (results / "README.md").read_text()
    assert (results / "sec9" / "tl-stack" / "seeds.md").read_text().startswith("### tl-stack (sec9;")


@pytest.mark.parametrize("name", ["../x", "sec9/../x", "/etc/x", "sec9//x", ".x"])
def test_a_name_that_leaves_the_results_folder_is_refused(cli, run, tmp_path, name):
    r = cli("publish-piece", name, run, *FIRST, "--stage", "emergence", "--results", tmp_path / "results")
    refused(r, "--name")
    assert not (tmp_path / "results").exists() and not (tmp_path / "x").exists()


def test_a_name_outside_a_section_needs_its_stage(cli, run, tmp_path):
    refused(cli("publish-piece", "mine", run, *FIRST, "--results", tmp_path / "results"), "give --stage")


@pytest.mark.parametrize("where", ["a circuits folder", "RUN"])
def test_links_to_files_outside_are_refused_not_followed(cli, run, tmp_path, where):
    secret = tmp_path / "outside.json"
    secret.write_text('{"password": "x"}')
    piece = tmp_path / "run"
    shutil.copytree(run, piece)
    circuits = tmp_path / "disc"
    (circuits / "seed0").mkdir(parents=True)
    (circuits / "seed0" / "circuit.json").write_text("{}")
    if where == "RUN":
        (piece / "segments.jsonl").unlink()
        (piece / "segments.jsonl").symlink_to(secret)
    else:
        (circuits / "seed0" / "leak.json").symlink_to(secret)
    r = cli("publish-piece", "sec9/x", piece, *FIRST, "--circuits", circuits, "--results", tmp_path / "results")
    refused(r, "symbolic link")
    assert not (tmp_path / "results").exists()


def _broken(run, tmp_path, what: str):
    piece = tmp_path / "run"
    shutil.copytree(run, piece)
    if what == "a reproduce folder":
        shutil.rmtree(piece)
        piece.mkdir()
        (piece / "config.json").write_text(json.dumps({"preset": {"name": "smoke"}}))
        (piece / "summary.json").write_text("{}")
    elif what in ("config.json", "metrics.csv", "summary.json"):
        (piece / what).unlink()
    elif what == "wall_s":
        s = json.loads((piece / "summary.json").read_text())
        del s["wall_s"]
        (piece / "summary.json").write_text(json.dumps(s))
    elif what == "seeds":
        c = json.loads((piece / "config.json").read_text())
        c["seeds"] = "abc"
        (piece / "config.json").write_text(json.dumps(c))
    return piece


@pytest.mark.parametrize("what, says", [("a reproduce folder", "not a training run"), ("config.json", "has no config.json"),
                                        ("metrics.csv", "has no metrics.csv"), ("summary.json", "has no summary.json"),
                                        ("wall_s", "has no wall time"), ("seeds", "'seeds' must be a non-empty list")])
def test_a_run_that_is_no_finished_training_run_is_one_line(cli, run, tmp_path, what, says):
    piece = _broken(run, tmp_path, what)
    refused(cli("publish-piece", "sec9/x", piece, *FIRST, "--results", tmp_path / "results"), says)
    assert not (tmp_path / "results").exists()


def test_a_published_piece_without_a_wall_time_is_named(cli, run, tmp_path):
    """A piece published before (its summary edited by hand) is read by the same rule as RUN."""
    results = tmp_path / "results"
    assert cli("publish-piece", "sec9/x", run, *FIRST, "--results", results).code == 0
    summary = results / "sec9" / "x" / "emergence" / "runs" / "transformer-D" / "summary.json"
    s = json.loads(summary.read_text())
    s["wall_s"] = "soon"
    summary.write_text(json.dumps(s))
    other = tmp_path / "seed1"
    cfg = presets.get("sec9-smoke").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1, seeds=(1,))
    train(cfg, other)
    refused(cli("publish-piece", "sec9/x", other, "--commit", "7e32fd7", "--results", results), "'wall_s' is no wall time")


def test_help_names_the_verb_and_its_options(cli):
    r = cli("publish-piece", "--help")
    assert r.code == 0 and "--circuits" in r.out and "--timeline" in r.out and "--train-command" in r.out
