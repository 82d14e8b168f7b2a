"""``stackedheads publish-piece``: a piece of a result trained a few seeds at a time, published
beside the pieces before it; bad input is one line and nothing written."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from helpers import one_error, publisher

from stackedheads import presets
from stackedheads import recipe_screen
from stackedheads.errors import UsageError
from stackedheads.state.layout import EMERGENCE_RUN
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
    r = cli("publish-piece", "sec9/gpt2", run, *FIRST, "--results", results)
    assert r.code == 0, r.err
    ref = json.loads((results / "sec9" / "gpt2" / "reference.json").read_text())
    assert ref["name"] == "sec9/gpt2" and ref["commit"] == "7e32fd7"
    assert "stackedheads seeds R --markdown --label gpt2 > R/seeds.md" in ref["command"]
    assert (results / "sec9" / "gpt2" / "emergence" / "runs" / "transformer-D" / "metrics.csv").is_file()
    assert "[sec9/gpt2](sec9/gpt2/)" in (results / "README.md").read_text()
    assert (results / "sec9" / "gpt2" / "seeds.md").read_text().startswith("### gpt2 (sec9;")


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


def test_publish_piece_publishes_pieces_and_recomputes_what_they_share(pieces, tmp_path, cli):
    """publish-piece: a first piece, then a further one beside it; publishing a piece
    again writes the same reference (command, wall time and notes recomputed, never added to)."""
    root, _ = pieces
    runs = root / "split" / "emergence" / "runs"
    results = tmp_path / "results"
    from stackedheads.publishing import piece as sp

    publish = publisher(results, name="pieces-a")

    with pytest.raises(UsageError, match="needs --title, --train-command and --notes"):
        publish(runs / f"{EMERGENCE_RUN}-seed1")
    first = publish(runs / EMERGENCE_RUN, title="t", train_command="stackedheads train --preset sec9-smoke", notes="Seed 0 alone; seed 1 to come as a further piece.")
    assert first["command"].startswith("stackedheads train --preset sec9-smoke --seeds 0 --out RUN; stackedheads circuit discover")
    with pytest.raises(UsageError, match="--note says how the piece ran"):
        publish(runs / f"{EMERGENCE_RUN}-seed1", note="Seed 1: the same command, final val MSE 0.017")
    with pytest.raises(UsageError, match="--commit's"):
        publish(runs / f"{EMERGENCE_RUN}-seed1", commit="abcdef1", note="on another CPU, from a clone of abcdef1")
    second = publish(runs / f"{EMERGENCE_RUN}-seed1", commit="abcdef1", note="on another CPU")
    again = publish(runs / f"{EMERGENCE_RUN}-seed1", commit="abcdef1", note="on another CPU")
    assert again == second and second["commit"] == first["commit"] == "7e32fd7"
    walls = [json.loads((runs / n / "summary.json").read_text())["wall_s"] for n in (EMERGENCE_RUN, f"{EMERGENCE_RUN}-seed1")]
    assert second["wall_s"] == pytest.approx(sum(walls), abs=1e-3)
    assert second["command"].count("; seed 1: the same with --seeds 1") == 1
    assert second["notes"].startswith("Seed 0 alone. Seed 1: the same command with --seeds 1, from a clone of abcdef1")
    assert second["notes"].count("Seed 1:") == 1 and "on another CPU" in second["notes"]
    assert "to come" not in second["notes"] and second["notes"].count("clone of") == 1
    assert second["notes"].endswith("no circuits yet (E4 from metrics.csv).")
    # a piece's sentence names the seeds that have circuits or a timeline where some have none
    em = tmp_path / "em"
    for kind, file, held in (("discovered", "circuit.json", (2, 3)), ("timeline", "timeline.json", (0,))):
        for s in held:
            (em / kind / f"seed{s}").mkdir(parents=True)
            (em / kind / f"seed{s}" / file).write_text(json.dumps({"info": {"config": {"threshold": 0.05, "tolerance": 0.04}}}))
    assert sp.analysed(em, [1, 2, 3]) == "circuits (App. E's 0.05 on its last checkpoint) for seeds 2,3; no timeline"
    assert sp.analysed(em, [2, 3]) == "circuits (App. E's 0.05 on its last checkpoint); no timeline"
    assert sp.analysed(em, [1]) == "no circuits yet (E4 from metrics.csv)"
    (em / "timeline" / "seed2").mkdir()
    (em / "timeline" / "seed2" / "timeline.json").write_text("{}")
    assert sp.analysed(em, [2, 3]).endswith("and a timeline for seed 2")
    # what the sentence and the command say of discovery is what the circuits record
    for s in (2, 3):
        (em / "discovered" / f"seed{s}" / "circuit.json").write_text(json.dumps({"info": {"config": {"threshold": None, "tolerance": 0.04}}}))
    assert sp.discovery(em) == ("--tolerance 0.04", "a tolerance of 0.04 over the unablated loss")
    assert sp.analysed(em, [2, 3]).startswith("circuits (a tolerance of 0.04 over the unablated loss on its last checkpoint)")
    (em / "discovered" / "seed2" / "circuit.json").write_text(json.dumps({"info": {"config": {"threshold": 0.05}}}))
    with pytest.raises(UsageError, match="found under different settings"):
        sp.discovery(em)
    assert {p.parent.name for p in (results / "pieces-a").glob("emergence/runs/*/summary.json")} == {
        EMERGENCE_RUN, f"{EMERGENCE_RUN}-s1"}
    (run,) = recipe_screen.collect_seeds([results / "pieces-a"])
    assert [r.seed for r in run.rows] == ["0", "1"]
    with pytest.raises(UsageError, match="holds some of seeds"):
        publish(root / "whole" / "emergence" / "runs" / EMERGENCE_RUN)
    # circuits from one folder a seed, as gpu_runs.py writes them: each seed's from the folder holding it
    whole = root / "whole" / "emergence" / "runs" / EMERGENCE_RUN
    for s in (0, 1):
        r = cli("circuit", "discover", whole, "--seeds", s, "--threshold", "0.05", "--out", tmp_path / f"discovered-{s}")
        assert r.code == 0, r.err
    ref = publish(whole, name="two-folders", circuits=[tmp_path / "discovered-1", tmp_path / "discovered-0"],
                  title="t", train_command="stackedheads train --preset sec9-smoke", notes="Both seeds.")
    for s in (0, 1):
        assert (results / "two-folders" / "emergence" / "discovered" / f"seed{s}" / "circuit.json").read_bytes() == (
            tmp_path / f"discovered-{s}" / f"seed{s}" / "circuit.json").read_bytes()
    assert ref["name"] == "two-folders"


@pytest.mark.parametrize(("notes", "published", "left"), [
    ("One seed a run; seeds 1 and 2 to come as further pieces.", {0, 1, 2}, "One seed a run."),
    ("One seed a run; seeds 1 and 2 to come as further pieces.", {0, 1}, "One seed a run; seeds 1 and 2 to come as further pieces."),
    ("Seed 0 alone. Seeds 1-3 to come as further pieces. Float32.", {0, 1, 2, 3}, "Seed 0 alone. Float32."),
    ("Seed 0 alone. Seeds 1-3 to come as further pieces. Float32.", {0, 1, 3}, "Seed 0 alone. Seeds 1-3 to come as further pieces. Float32."),
    ("Bf16; seed 3 is to come; nice 5.", {3}, "Bf16; nice 5."),
    ("No seed to come here.", {0}, "No seed to come here."),
    ("Seed 0 alone. Seeds 1-3 to come; float32.", {0, 1, 2, 3}, "Seed 0 alone. Float32."),
    ("Bf16; seeds 1-2 to come at 0.5 warm-up. Next.", {0, 1, 2}, "Bf16. Next."),
    ("A; seed 1 to come; other.", {1}, "A; other."),
    ("Bf16; seeds 3-1 to come. Next.", {1, 2, 3}, "Bf16. Next."),
    ("Bf16; seeds 3-1 to come. Next.", {1}, "Bf16; seeds 3-1 to come. Next."),
    # A range far wider than the published seeds is judged without counting through it (it built
    # a set of 10**11 seeds: a MemoryError, or all the memory).
    ("Seeds 2-99999999999 to come.", {0, 1, 2, 3}, "Seeds 2-99999999999 to come."),
    ("Seeds 99999999999-2 to come.", set(range(10)), "Seeds 99999999999-2 to come."),
])
def test_a_clause_saying_seeds_are_to_come_goes_once_they_are_published(notes, published, left):
    from stackedheads.publishing.piece import without_seeds_to_come

    assert without_seeds_to_come(notes, published) == left


def test_publish_piece_lays_sec8_pieces_out_as_results_sec8_with_maps(tmp_path, cli):
    """--stage circuits: transformers A-C a seed a run (Sec. 8 at 24,000 steps on a CPU), published
    as results/sec8/gpt2 is laid out (circuits/runs/transformers-A-C[-s1], discovered/, maps/) and judged
    on A1-A5 as one result; a timeline (Sec. 9's) is refused there, and a Sec. 8 piece beside a
    Sec. 9 result."""
    from stackedheads.state.layout import CIRCUITS_RUN

    cfg = presets.get("sec8-smoke", "paper-curriculum").override(steps=20, ckpt_every=10, eval_every=5, final_window=4, threads=1)
    runs = {s: tmp_path / f"run{s}" for s in (0, 1)}
    for s, run in runs.items():
        train(cfg.override(seeds=(s,)), run)
    r = cli("circuit", "discover", runs[0], "--threshold", "0.05", "--out", tmp_path / "disc0")
    assert r.code == 0, r.err
    r = cli("attention", runs[0], "--seed", 0, "--out", tmp_path / "maps0" / "seed0")
    assert r.code == 0, r.err
    results = tmp_path / "results"
    publish = publisher(results, name="pieces-b", stage="circuits")

    with pytest.raises(UsageError, match="--timeline belongs to the emergence stage, not circuits"):
        publish(runs[0], timeline=[tmp_path / "disc0"])
    first = publish(runs[0], circuits=[tmp_path / "disc0"], maps=[tmp_path / "maps0"], title="t",
                    train_command="stackedheads train --preset sec8-smoke --recipe paper-curriculum", notes="Seed 0.")
    assert "stackedheads attention RUN --seed S --out R/circuits/maps/seedS" in first["command"]
    second = publish(runs[1], note="on another CPU")
    dest = results / "pieces-b"
    assert {p.parent.name for p in dest.glob("circuits/runs/*/summary.json")} == {CIRCUITS_RUN, f"{CIRCUITS_RUN}-s1"}
    assert (dest / "circuits" / "discovered" / "seed0" / "circuit.json").is_file()
    assert {p.name for p in (dest / "circuits" / "maps" / "seed0").iterdir()} >= {"mean.png", "mean.svg"}
    # the further piece's sentence counts steps (Sec. 8 does) and says it has no circuits yet
    assert re.search(r" Seed 1: the same command with --seeds 1, \d+ s of training, on another CPU; partial losses "
                     r"below 0\.5 at steps: x1 [\d,never]+, x2 .*; no circuits yet \(its final loss only: A1-A5 judge a seed with circuits\)\.$", second["notes"])
    claims = {c["id"]: c for c in json.loads((dest / "claims.json").read_text()) if c["id"].startswith("A")}
    assert set(claims) == {"A1", "A2", "A3", "A4", "A5"}
    assert claims["A1"]["measured"].startswith("seed 0: ") and "seed 1" not in claims["A1"]["measured"]
    (run,) = recipe_screen.collect_seeds([dest])
    assert [r.seed for r in run.rows] == ["0", "1"]
    # a Sec. 9 result takes no Sec. 8 piece
    (results / "sec9-like" / "emergence").mkdir(parents=True)
    (results / "sec9-like" / "reference.json").write_text(json.dumps(
        {"name": "sec9-like", "title": "t", "command": "c", "commit": "abcdef0", "machine": "m", "wall_s": 1.0,
         "date": "2026-01-01", "notes": "", "files": []}))
    with pytest.raises(UsageError, match="holds no circuits stage"):
        publish(runs[1], name="sec9-like")


@pytest.mark.parametrize("name, command, says", [
    ("sec9/lr-3e-4", "stackedheads train --preset sec9-smoke", "NAME's last folder 'lr-3e-4' names recipe lr-3e-4"),
    ("sec9/tl-stack+lr-3e-4", "stackedheads train --preset sec9-smoke", "optim.lr: 0.001 in the run, 0.0003"),
    ("sec9/mine", "stackedheads train --preset sec9-smoke --recipe lr-3e-4", "--train-command's --recipe 'lr-3e-4'"),
])
def test_a_piece_named_for_a_recipe_its_run_was_not_trained_with_is_refused(cli, run, tmp_path, name, command, says):
    """A run at lr 1e-3 published as sec9/lr-3e-4 with --train-command "... --recipe lr-3e-4",
    and `seeds` then ranked it as lr 3e-4."""
    first = ["--title", "t", "--train-command", command, "--notes", "n", "--commit", "7e32fd7"]
    r = cli("publish-piece", name, run, *first, "--results", tmp_path / "results")
    refused(r, says)
    assert not (tmp_path / "results").exists()
    ok = cli("publish-piece", "sec9/gpt2", run, *first[:3], "stackedheads train --preset sec9-smoke", *first[4:],
             "--results", tmp_path / "results")
    assert ok.code == 0, ok.err
