"""Every verb that writes a folder holds its lock while it writes, keeps one run's figures in a
folder, and prints every name a user typed as typed."""

from __future__ import annotations

import json

import pytest
from conftest import copy_run
from helpers import DepthModel, bench_depth_model, one_error


def _busy(r, folder) -> None:
    assert r.code == 2 and one_error(r.err) and f"{folder} is in use by pid" in r.err, r.err


def test_attention_theory_and_llm_compare_take_the_folder_lock(ckpt_run, tmp_path, cli, held):
    """`attention`, `theory` and `llm-compare` wrote into a folder that `train` was writing: the
    folder then held two kinds and `train` refused it."""
    for folder, args in ((tmp_path / "maps", ("attention", ckpt_run)), (tmp_path / "theory", ("theory", "-m", "3"))):
        held(folder)
        _busy(cli(*args, "--out", folder), folder)
        assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # nothing written beside the holder
    for d, name in ((2, "a"), (9, "b")):
        bench_depth_model(DepthModel(d, name), tmp_path / name, n=2)
    held(tmp_path / "cmp")
    _busy(cli("llm-compare", *[tmp_path / "a", tmp_path / "b"], "--out", tmp_path / "cmp"), tmp_path / "cmp")
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == [".lock"]


def test_attention_keeps_one_run_and_member_per_folder(ckpt_run, tmp_path, cli):
    """Maps of a 5-layer run stayed beside a 3-layer run's in one --out, and nothing said which
    run a figure came from."""
    out = tmp_path / "maps"
    r = cli("attention", ckpt_run, "--out", out, "--seqs", 1)
    assert r.code == 0, r.err
    recorded = json.loads((out / "sources.json").read_text())["runs"]
    assert list(recorded) == ["0"] and recorded["0"]["run"] == str(ckpt_run.resolve())
    assert cli("attention", ckpt_run, "--out", out, "--seqs", 1).code == 0  # the same run and member again: rewritten
    other = copy_run(ckpt_run, tmp_path / "other")
    metrics = other / "metrics.csv"  # another run of the same settings, trained otherwise
    metrics.write_text("\n".join(metrics.read_text().splitlines()[:-1]) + "\n")
    before = sorted(p.name for p in out.iterdir())
    r = cli("attention", other, "--out", out, "--seqs", 1)
    assert r.code == 2 and one_error(r.err) and f"holds the attention maps of seed 0 of {ckpt_run.resolve()}" in r.err, r.err
    assert sorted(p.name for p in out.iterdir()) == before
    seeds = json.loads((ckpt_run / "config.json").read_text())["seeds"]
    if len(seeds) > 1:
        r = cli("attention", ckpt_run, "--out", out, "--seed", seeds[1], "--seqs", 1)
        assert r.code == 2 and "give another --out" in r.err, r.err


@pytest.mark.parametrize("name", ["x[/]y", "[exp1]", "a[bold]b"])
def test_names_a_user_typed_are_printed_as_typed(tmp_path, cli, name):
    """`train --out 'x[/]y'` trained, then failed printing with a MarkupError traceback;
    `--out '[exp1]/r'` printed "run folder: /r"."""
    out = tmp_path / name / "r"
    r = cli("train", "--preset", "smoke", "--steps", 20, "--out", out)
    assert r.code == 0, r.err
    assert f"run folder: {out}" in r.err.replace("\n", "")
    r = cli("theory", "-m", "2", "--out", tmp_path / name / "t")
    assert r.code == 0 and f"wrote {tmp_path / name / 't'}" in r.err.replace("\n", ""), r.err


def test_a_resumed_reproduce_keeps_the_dtype_its_stages_began_with(tmp_path):
    """`--dtype bfloat16` on resuming a folder begun without one rewrote its config.json and
    report as bfloat16 for float32 stages (rc 0), and an interrupted folder would have trained its
    remaining stages in the new dtype."""
    from stackedheads import presets, reproduce
    from stackedheads.errors import UsageError

    preset = presets.reproduce("smoke")
    out = tmp_path / "R"
    every = tuple(reproduce.STAGES)
    reproduce.reproduce(preset, out, skip=every)  # records the settings, runs nothing
    before = (out / "config.json").read_text()
    reproduce.reproduce(preset, out, dtype="float32", skip=every)  # no stage begun: the setting may be filled
    (out / "config.json").write_text(before)
    (out / "theory").mkdir()  # a stage that trains nothing: no dtype to keep
    reproduce.reproduce(preset, out, dtype="float32", skip=every)
    (out / "config.json").write_text(before)
    (out / "figure4").mkdir()  # a training stage begun with the preset's dtype
    with pytest.raises(UsageError, match="begun with the preset's dtype"):
        reproduce.reproduce(preset, out, dtype="bfloat16", skip=every)
    assert (out / "config.json").read_text() == before


def test_a_path_that_is_not_utf8_prints_readably_and_markup_is_shown_as_typed():
    import os

    from stackedheads.cli._app import shown

    assert shown(os.fsdecode(b"/tmp/r\xff\xfe")) == "/tmp/r\ufffd\ufffd"
    assert shown("x[/]y") == "x\\[/]y" and shown("[exp1]/r") == "\\[exp1]/r"


@pytest.mark.parametrize("recipe, says", [
    ("lr-3e-4+lr-1e-4", "lr-3e-4 sets lr to 0.0003 and lr-1e-4 to 0.0001"),
    ("tl-stack+tl-stack", "names tl-stack twice"),
    ("tl-stack+init-input-torch+init-input-torch", "names init-input-torch twice"),
])
def test_recipes_that_set_one_field_to_two_values_are_refused(recipe, says):
    """`lr-3e-4+lr-1e-4` trained at 1e-4 without a word."""
    from stackedheads import recipes
    from stackedheads.errors import UsageError

    with pytest.raises(UsageError, match=says):
        recipes.recipe(recipe)
    assert recipes.recipe("tl-stack+lr-3e-4").changes["lr"] == 3e-4  # recipes that agree compose


def test_an_empty_table_is_not_intact(tmp_path):
    """A 0-byte prompts/kingdoms.jsonl passed its stage's done marker and was never rebuilt."""
    from stackedheads.state.write import RunFolder, intact

    for name in ("kingdoms.jsonl", "summary.json", "rows.csv"):
        (tmp_path / name).write_text("")
        assert not intact(tmp_path / name)
    (tmp_path / "kingdoms.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    assert all(intact(tmp_path / n) for n in ("kingdoms.jsonl", "summary.json", "rows.csv"))
    stage = RunFolder(tmp_path)
    stage.mark_done({"ok": True})
    assert stage.done("a stage") is not None
    (tmp_path / "kingdoms.jsonl").write_text("")
    assert stage.done("a stage") is None and stage.missing == tmp_path / "kingdoms.jsonl"
