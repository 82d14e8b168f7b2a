"""`publish`: the destination under results/ (links, a name published again, a folder that is
no reference), the machines a reference names, every kind's verdicts kept, and what is refused
(empty, unfinished or locked folders, an empty title or command, a commit that is none)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import copy_run
from helpers import claims_json, refused, train_config

PUBLISH = ("--title", "t", "--command", "c", "--commit", "0123abc")


# --- 43.2, 43.3: publish's destination --------------------------------------------------------


def test_publish_refuses_a_results_name_that_is_a_symbolic_link(cli, kinds, tmp_path):
    res, elsewhere = tmp_path / "res", tmp_path / "elsewhere"
    res.mkdir()
    elsewhere.mkdir()
    (res / "b11").symlink_to("../elsewhere", target_is_directory=True)
    refused(cli("publish", kinds / "train", "--name", "b11", *PUBLISH, "--results", res), "symbolic link")
    assert list(elsewhere.iterdir()) == [] and (res / "b11").is_symlink()


def test_publishing_a_name_again_replaces_it_as_a_whole(cli, kinds, tmp_path):
    res = tmp_path / "res"
    assert cli("publish", kinds / "figure4", "--name", "mix", *PUBLISH, "--results", res).code == 0
    assert claims_json(cli, res / "mix")[0] == 0  # judged as a sweep
    r = cli("publish", kinds / "train", "--name", "mix", *PUBLISH, "--results", res)
    assert r.code == 0, r.err
    ref = json.loads((res / "mix" / "reference.json").read_text())
    on_disk = sorted(p.relative_to(res / "mix").as_posix() for p in (res / "mix").rglob("*") if p.is_file())
    assert on_disk == sorted([*ref["files"], "reference.json"])  # none of the sweep's files stay
    assert "sweep.json" not in on_disk and claims_json(cli, res / "mix") == claims_json(cli, kinds / "train")
    assert sorted(p.name for p in res.iterdir()) == ["README.md", "mix"]  # the index, and no staging folder left beside it
    # A refused publish leaves the reference it would have replaced as it was.
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text(json.dumps(train_config()))
    refused(cli("publish", unfinished, "--name", "mix", *PUBLISH, "--results", res), "unfinished")
    assert json.loads((res / "mix" / "reference.json").read_text()) == ref


def test_a_reference_names_the_machines_its_run_trained_on(cli, kinds, tmp_path):
    """A run resumed on a lent GPU and published from a CPU: reference.json's machine is where the
    steps ran (segments.jsonl), each machine once, not the machine that copied the files."""
    from stackedheads.state.provenance import SEGMENTS_FILE, machine, read_segments

    run = tmp_path / "train"
    shutil.copytree(kinds / "train", run)
    here = read_segments(run)[0]["machine"]
    gpu = {"from_step": 4, "machine": "Xeon, 16 cores, Linux", "gpu": "NVIDIA H100 80GB HBM3", "device": "cuda"}
    with open(run / SEGMENTS_FILE, "a") as f:
        f.write(json.dumps(gpu) + "\n" + json.dumps({**gpu, "from_step": 8}) + "\n")
    assert cli("publish", run, "--name", "gpu", *PUBLISH, "--results", tmp_path / "res").code == 0
    ref = json.loads((tmp_path / "res" / "gpu" / "reference.json").read_text())
    assert ref["machine"] == f"{here}; NVIDIA H100 80GB HBM3 (Xeon, 16 cores, Linux)"
    (run / SEGMENTS_FILE).unlink()  # a run from before segments.jsonl: the publishing machine
    assert cli("publish", run, "--name", "old", *PUBLISH, "--results", tmp_path / "res").code == 0
    assert json.loads((tmp_path / "res" / "old" / "reference.json").read_text())["machine"] == machine()


def test_publish_refuses_to_replace_a_folder_that_is_no_reference(cli, kinds, tmp_path):
    mine = tmp_path / "res" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.md").write_text("kept\n")
    refused(cli("publish", kinds / "train", "--name", "mine", *PUBLISH, "--results", tmp_path / "res"), "not a reference")
    assert [p.name for p in mine.iterdir()] == ["notes.md"]


# --- 44.3: publish keeps every kind's verdicts, and refuses what is not a finished run -----------


@pytest.mark.parametrize("kind", ["figure4", "depth", "comparison", "train", "shallow"])
def test_publish_keeps_what_claims_judges_for_every_kind(cli, kinds, tmp_path, kind):
    before = claims_json(cli, kinds / kind)
    r = cli("publish", kinds / kind, "--name", "t1", *PUBLISH, "--results", tmp_path / "res")
    assert r.code == 0, r.err
    assert claims_json(cli, tmp_path / "res" / "t1") == before
    if kind == "figure4":  # the figure4 kind: C0 FAIL, C1-C3 INCONCLUSIVE, never NOT RUN
        assert before[1] and all(v != "NOT RUN" for v, _ in before[1].values())
        from stackedheads.publishing import references

        loaded = references.load(tmp_path / "res" / "t1")
        assert {c.id: c.verdict for c in loaded["claims"]} == {k: v for k, (v, _) in before[1].items()}


def test_publish_refuses_a_copy_that_would_judge_otherwise(cli, kinds, tmp_path, monkeypatch):
    from stackedheads.publishing import publish

    monkeypatch.setitem(publish._NEEDS, "figure4 sweep", ())  # a publish that keeps none of the files its claims read
    refused(cli("publish", kinds / "figure4", "--name", "t1", *PUBLISH, "--results", tmp_path / "res"), "--include")
    assert not (tmp_path / "res").exists()


def test_publish_refuses_empty_unfinished_and_locked_folders(cli, kinds, tmp_path, held):
    res = tmp_path / "res"
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(cli("publish", empty, "--name", "a", *PUBLISH, "--results", res), "no file to publish")
    sweep = copy_run(kinds / "figure4", tmp_path / "sweep")
    shutil.rmtree(next((sweep / "runs").iterdir()))
    refused(cli("publish", sweep, "--name", "a", *PUBLISH, "--results", res), "unfinished")
    run = copy_run(kinds / "train", tmp_path / "run")
    (run / "summary.json").unlink()
    refused(cli("publish", run, "--name", "a", *PUBLISH, "--results", res), "unfinished")
    locked = copy_run(kinds / "train", tmp_path / "locked")
    held(locked)
    refused(cli("publish", locked, "--name", "a", *PUBLISH, "--results", res), "in use")
    assert not res.exists()


@pytest.mark.parametrize("option, value", [("--title", ""), ("--title", "  "), ("--command", ""), ("--commit", "HEAD~1"),
                                           ("--commit", "xyz"), ("--commit", "")])
def test_publish_refuses_an_empty_title_or_command_and_a_commit_that_is_no_commit(cli, kinds, tmp_path, option, value):
    args = dict(zip(PUBLISH[::2], PUBLISH[1::2])) | {option: value}
    r = cli("publish", kinds / "train", "--name", "a", *[x for kv in args.items() for x in kv], "--results", tmp_path / "res")
    refused(r, option)
    assert not (tmp_path / "res").exists()
