"""Every output folder is of one kind: stage folders of `reproduce`, analysis outputs (theory,
attention maps, prompt exports, emergence, discovered circuits) and runs refuse a writer of
another kind, and one analysis folder never mixes two runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_run
from helpers import refused, reproduce_folder

from stackedheads.state import origins
from stackedheads.state import write
from stackedheads.errors import UsageError


# --- a reproduce folder's stages are its own --------------------------------------------------------


@pytest.mark.parametrize("args, inside", [
    (["theory", "-m", "3", "--out"], "theory"),
    (["attention", "RUN", "--out"], "circuits/maps/seed0"),
    (["train", "--preset", "smoke", "--out"], "emergence/timeline"),
    (["prompts", "-f", "equations", "--export"], "prompts"),
    (["prompts", "-f", "equations", "--out"], "prompts/equations.jsonl"),
    (["sweep", "figure4", "--preset", "smoke", "--out"], "figure4"),
    (["emergence", "RUN", "--out"], "emergence/timeline"),
    (["circuit", "discover", "RUN", "--out"], "circuits/discovered"),
])
def test_no_verb_writes_into_a_reproduce_folders_stage(cli, tmp_path, args, inside):
    rep = reproduce_folder(tmp_path)
    target = rep / inside
    target.parent.mkdir(parents=True, exist_ok=True)
    (rep / "theory").mkdir(exist_ok=True)
    (rep / "theory" / "theory.jsonl").write_text('{"depth": 1}\n')
    before = sorted(str(p.relative_to(rep)) for p in rep.rglob("*"))
    refused(cli(*args, target), "inside the reproduce folder", str(rep))
    assert sorted(str(p.relative_to(rep)) for p in rep.rglob("*")) == before
    assert (rep / "theory" / "theory.jsonl").read_text() == '{"depth": 1}\n'


def test_reproduce_itself_still_writes_its_stages(cli, tmp_path):
    out = tmp_path / "rep"
    r = cli("reproduce", "--preset", "smoke", "--out", out, *[f"--skip={s}" for s in ("llm", "figure4", "circuits", "emergence")])
    assert r.code == 0, r.err
    assert (out / "theory" / "theory.jsonl").is_file() and (out / "prompts" / "done.json").is_file()


# --- analysis outputs are kinds ------------------------------------------------------------------------


def _emergence_output(folder: Path) -> Path:
    (folder / "seed0").mkdir(parents=True)
    (folder / "seed0" / "timeline.json").write_text("{}")
    (folder / "summary.json").write_text("{}")
    return folder


@pytest.mark.parametrize("args", [
    ["train", "--preset", "smoke", "--out"],
    ["theory", "-m", "3", "--out"],
    ["prompts", "-f", "equations", "--export"],
    ["circuit", "discover", "RUN", "--out"],
])
def test_a_standalone_emergence_output_refuses_other_writers(cli, tmp_path, args):
    e = _emergence_output(tmp_path / "e")
    refused(cli(*args, e), "emergence output")
    assert sorted(p.name for p in e.iterdir()) == ["seed0", "summary.json"]


def test_attention_refuses_an_emergence_output(cli, tmp_path, ckpt_run):
    e = _emergence_output(tmp_path / "e")
    refused(cli("attention", ckpt_run, "--out", e), "emergence output")


@pytest.mark.parametrize("marker, kind", [("theory.jsonl", "theory table"), ("mean.png", "attention maps"),
                                          ("seed0/circuit.json", "discovered circuits"), ("lm_eval", "prompts export")])
def test_analysis_outputs_are_kinds(tmp_path, marker, kind):
    path = tmp_path / marker
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir() if "." not in marker else path.write_text("{}")
    assert write.folder_kinds(tmp_path) == {kind}
    with pytest.raises(UsageError, match=kind):
        write.RunFolder(tmp_path, "training run").check()
    write.RunFolder(tmp_path, kind).check()  # its own writer resumes it
    write.RunFolder(tmp_path).check()  # and so does a library writer that names no kind


def test_theory_resumes_its_own_folder(cli, tmp_path):
    assert cli("theory", "-m", "3", "--out", tmp_path / "t").code == 0
    r = cli("theory", "-m", "4", "--out", tmp_path / "t")
    assert r.code == 0, r.err
    assert len((tmp_path / "t" / "theory.jsonl").read_text().splitlines()) == 4


# --- one run per analysis folder ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_lr(tmp_path_factory, ckpt_run):
    """``ckpt_run``'s settings with another learning rate."""
    from stackedheads import presets
    from stackedheads.training import train

    run = tmp_path_factory.mktemp("other") / "run"
    train(presets.SEC9_SMOKE.override(steps=20, ckpt_every=10, lr=3e-3), run)
    return run


@pytest.mark.slow
def test_emergence_of_two_runs_never_mixes_in_one_folder(cli, tmp_path, ckpt_run, other_lr):
    e = tmp_path / "e"
    assert cli("emergence", ckpt_run, "--out", e, "--seqs", "2").code == 0
    summary = (e / "summary.json").read_bytes()
    refused(cli("emergence", other_lr, "--out", e, "--seqs", "2"), str(ckpt_run.resolve()), "other settings")
    assert (e / "summary.json").read_bytes() == summary
    assert cli("emergence", ckpt_run, "--out", e, "--seqs", "2").code == 0  # the same run resumes


def _another_run_of_the_same_settings(run: Path, dst: Path) -> Path:
    """A copy of ``run`` whose metrics differ (another wall time): not the same run."""
    twin = copy_run(run, dst)
    rows = (twin / "metrics.csv").read_text().splitlines()
    rows[-1] = rows[-1].rsplit(",", 1)[0] + ",123.0"
    (twin / "metrics.csv").write_text("\n".join(rows) + "\n")
    return twin


@pytest.mark.slow
def test_emergence_refuses_the_same_seed_of_another_run(cli, tmp_path, ckpt_run):
    e = tmp_path / "e"
    assert cli("emergence", ckpt_run, "--out", e, "--seqs", "2").code == 0
    twin = _another_run_of_the_same_settings(ckpt_run, tmp_path / "twin")
    refused(cli("emergence", twin, "--out", e, "--seqs", "2"), "seed 0", str(ckpt_run.resolve()))


@pytest.mark.slow
def test_discovery_refuses_a_folder_of_another_runs_circuits(cli, tmp_path, ckpt_run, other_lr):
    d = tmp_path / "d"
    assert cli("circuit", "discover", ckpt_run, "--out", d).code == 0
    circuit = (d / "seed0" / "circuit.json").read_bytes()
    refused(cli("circuit", "discover", other_lr, "--out", d), "seed 0", str(ckpt_run))
    assert (d / "seed0" / "circuit.json").read_bytes() == circuit


def test_a_copy_of_a_run_is_the_same_run(tmp_path, ckpt_run):
    copy = tmp_path / "copy"
    shutil.copytree(ckpt_run, copy, symlinks=True)  # cp -a
    assert origins.same_run(ckpt_run, copy)
    assert not origins.same_run(ckpt_run, _another_run_of_the_same_settings(ckpt_run, tmp_path / "twin"))


@pytest.mark.slow
def test_emergence_takes_the_circuits_of_a_copy_of_its_own_folder(cli, tmp_path, ckpt_run):
    """`cp -a` of a folder holding a run and its circuits: the copy's circuits name the original
    run, which the copy is."""
    original = tmp_path / "orig"
    copy_run(ckpt_run, original / "run")
    assert cli("circuit", "discover", original / "run", "--out", original / "circuits").code == 0
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)
    r = cli("emergence", copy / "run", "--circuits", copy / "circuits", "--out", tmp_path / "e", "--seqs", "2")
    assert r.code == 0, r.err


# --- emergence on what is not a run ------------------------------------------------------------------


def test_emergence_says_a_reproduce_folder_is_not_a_run(cli, tmp_path):
    rep = reproduce_folder(tmp_path)
    refused(cli("emergence", rep, "--out", tmp_path / "e"), "not a run folder", "reproduce run")
    assert not (tmp_path / "e").exists()


def test_emergence_says_a_benchmark_folder_is_not_a_run(cli, tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "config.json").write_text(json.dumps({"identity": {}, "seeds": [0]}))
    refused(cli("emergence", bench, "--out", tmp_path / "e"), "not a run folder", "llm-bench run")


# --- another kind's folder ---------------------------------------------------


@pytest.mark.parametrize("other", ["train", "figure4", "shallow"])
def test_attention_theory_and_prompts_refuse_another_kinds_folder(cli, ckpt_run, kinds, tmp_path, other):
    out = copy_run(kinds / other, tmp_path / "other")
    before = sorted(out.rglob("*"))
    refused(cli("attention", ckpt_run, "--out", out), "another kind")
    refused(cli("attention", ckpt_run, "--over-training", "--out", out), "another kind")
    refused(cli("theory", "-m", "3", "--out", out), "another kind")
    refused(cli("prompts", "-f", "equations", "--export", out), "another kind")
    assert sorted(out.rglob("*")) == before


def test_attention_on_a_reproduce_folder_says_it_is_not_a_run(cli, tmp_path):
    run = reproduce_folder(tmp_path)
    refused(cli("attention", run, "--out", tmp_path / "maps"), "not a run folder")


def test_llm_compare_refuses_an_output_inside_an_input(cli, kinds, tmp_path):
    runs = copy_run(kinds / "shallow", tmp_path / "shallow"), copy_run(kinds / "deep", tmp_path / "deep")
    for out in (runs[0] / "cmp", runs[1] / "a" / "b"):
        refused(cli("llm-compare", *runs, "-o", out), "inside the input")
        assert not out.exists()
