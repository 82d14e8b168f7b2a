"""`stackedheads seeds`: Sections 8-9 seed by seed, and recipes side by side."""

from __future__ import annotations

import json

import pytest
from helpers import K1, K2, K3, K4, PAPER_SEEN, PAPER_SERVES, REDUNDANT, found, one_error, timeline
from helpers import claims_train as train

from stackedheads import claims
from stackedheads import recipe_screen
from stackedheads.claims import FAIL, INCONCLUSIVE, PASS
from stackedheads.errors import UsageError
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN

OUT_OF_ORDER = ({K1: 3600, K2: 4400, K3: 3920, K4: 5600}, {K1: [1, 2, 3, 4], K2: [2, 3, 4], K3: [3, 4], K4: [4]})


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def found_for(tl: dict) -> dict:
    """A discovery summary whose per-path losses match a timeline: removing a path raises the
    partial loss of the first position it serves (E3's hurt-most reading reads them)."""
    f = found()
    depth = len(tl["positions"])
    f["losses"] = [{"ablation": "combined", "loss": 0.01, "partial": [0.01] * depth}]
    for key, js in tl["serves"].items():
        partial = [0.01] * depth
        for j in js[:1]:
            partial[j - 1] = 0.5
        f["losses"].append({"ablation": "-" + key, "loss": 0.2, "partial": partial})
    return f


def emergence_folder(root, finals, timelines, recipe=None):
    """An emergence stage laid out as `reproduce` writes it: one training summary, a circuit and a
    timeline per seed. ``finals``: the final val MSE per seed (partials just below it)."""
    t = train(parts=(0.004, 0.005, 0.006, 0.007))
    t["config"]["optim"] = recipe or {"decay_exempt": ["norm", "bias"]}
    t["seeds"] = {str(s): {"final_val_loss": v, "final_partial": {f"val_x{j}": v * j / 4 for j in range(1, 5)}}
                  for s, v in enumerate(finals)}
    stage = root / "emergence"
    _write(stage / "runs" / EMERGENCE_RUN / "summary.json", t)
    for s, tl in enumerate(timelines):
        _write(stage / "discovered" / f"seed{s}" / "summary.json", found_for(tl))
        _write(stage / "timeline" / f"seed{s}" / "timeline.json", tl)
    return root


def test_each_seed_is_judged_alone_and_agrees_with_claims(tmp_path):
    paper_like = timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT)
    folder = emergence_folder(tmp_path / "run", [0.03, 0.05], [paper_like, timeline(*OUT_OF_ORDER)])
    (run,) = recipe_screen.collect_seeds([folder])
    assert run.section == "sec9" and [r.seed for r in run.rows] == ["0", "1"]
    a, b = run.rows
    assert a.verdicts == {"E1": PASS, "E2": PASS, "E3": PASS, "E4": PASS}
    assert b.verdicts["E3"] == FAIL and b.verdicts["E4"] == PASS
    assert not b.measured["E3"].startswith("seed")  # the per-seed text, without the combined prefix
    # The combined claim is the per-seed verdicts combined (claims and the table never disagree).
    combined = {c.id: c.verdict for c in claims.folder_claims(folder) if c.id.startswith("E")}
    assert combined == {k: claims.combine(r.verdicts[k] for r in run.rows) for k in combined}
    assert a.plateau_epochs == pytest.approx(3560 / 8) and a.loss_drops == {"x1": 100, "x2": 200, "x3": 300, "x4": 400}
    assert a.emerged_at == {"x1": 3560, "x2": 3880, "x3": 4360, "x4": 5560} and a.emergence_order == "in order"
    s = run.summary()
    assert s["final_val_loss"] == {"median": pytest.approx(0.04), "min": 0.03, "max": 0.05}
    assert s["emerged_in_order"] == 1 and s["loss_drops_in_order"] == 2
    assert s["verdicts"]["E3"] == {PASS: 1, FAIL: 1}
    lines = recipe_screen.distribution_lines(run)
    assert "(paper: 0.031)" in lines[0] and "445 epochs" in lines[1] and "(paper: about 450)" in lines[1]


def test_a_position_that_never_emerges_is_not_in_order(tmp_path):
    never = timeline({K1: 3600, K2: 3920, K3: 4400, K4: None}, OUT_OF_ORDER[1])
    (run,) = recipe_screen.collect_seeds([emergence_folder(tmp_path / "run", [0.03], [never])])
    assert run.rows[0].verdicts["E3"] == INCONCLUSIVE and run.summary()["emerged_in_order"] == 0
    head, rows = recipe_screen.seed_table(run)
    assert "never" in rows[0][head.index("x1.. emerged (step)")]


def test_recipes_side_by_side(tmp_path):
    like = timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT)
    early = timeline({k: v - 3000 for k, v in PAPER_SEEN.items()}, PAPER_SERVES, REDUNDANT)
    gpt2 = emergence_folder(tmp_path / "gpt2", [0.05, 0.06], [early, early])
    every = emergence_folder(tmp_path / "all", [0.004, 0.005], [like, timeline(*OUT_OF_ORDER)],
                             recipe={"decay_exempt": []})
    runs = recipe_screen.collect_seeds([gpt2, every], ["GPT-2", "decay all"])
    assert [r.recipe["decay_exempt"] for r in runs] == [["norm", "bias"], []]
    got = {r["measure"]: r for r in recipe_screen.compare(runs)}
    # 0.055 is a factor 1.8 above 0.031, 0.0045 a factor 6.9 below: the first is closer.
    assert got["final_val_loss"]["closer"] == "GPT-2"
    assert got["plateau_epochs"]["closer"] == "decay all"  # 445 epochs against 70
    assert got["E3 seeds passing"]["medians"] == {"GPT-2": "2/2", "decay all": "1/2"} and got["E3 seeds passing"]["closer"] == "GPT-2"
    assert got["E4 seeds passing"]["closer"] is None  # 2 and 2: a tie names nobody
    md = recipe_screen.markdown(runs)
    assert "### GPT-2 (sec9; decay_exempt ['norm', 'bias'])" in md and "### Side by side" in md
    assert "final_val_loss: GPT-2 0.055, decay all 0.0045 (paper: 0.031): GPT-2 is closer" in md
    assert recipe_screen.compare(runs[:1]) == []  # one run: nothing to compare
    with pytest.raises(UsageError, match="both labelled same"):
        recipe_screen.compare(recipe_screen.collect_seeds([gpt2, every], ["same", "same"]))


def test_below_sec8s_bound_is_as_close_as_can_be(tmp_path):
    """Sec. 8.2's 0.01 is an upper bound: 0.001 is no further from it than 0.009, 0.02 is."""
    def sec8_folder(name, final):
        t = train(final=final)
        _write(tmp_path / name / "circuits" / "runs" / CIRCUITS_RUN / "summary.json", t)
        _write(tmp_path / name / "circuits" / "discovered" / "seed0" / "summary.json", found())
        return tmp_path / name

    def closer(a, b):
        runs = recipe_screen.collect_seeds([sec8_folder("a", a), sec8_folder("b", b)])
        return next(r for r in recipe_screen.compare(runs) if r["measure"] == "final_val_loss")["closer"]

    assert closer(0.001, 0.009) is None and closer(0.001, 0.02) == "a" and closer(0.03, 0.02) == "b"


def test_circuits_without_their_training_summary(tmp_path):
    """A reference whose run folder was lost keeps its circuits: the seeds are shown, the
    final losses unknown, every claim INCONCLUSIVE (as `claims` says)."""
    _write(tmp_path / "circuits" / "discovered" / "seed0" / "summary.json", found())
    (run,) = recipe_screen.collect_seeds([tmp_path])
    row = run.rows[0]
    assert run.section == "sec8" and row.final_val_loss is None and row.useful_heads == 4 and row.n_heads is None
    assert set(row.verdicts.values()) == {INCONCLUSIVE}
    assert "unknown" in recipe_screen.distribution_lines(run)[0] and "recipe unknown" in recipe_screen.markdown([run])


def test_sec8_seeds(tmp_path):
    t = train()
    t["seeds"]["1"] = {"final_val_loss": 0.02, "final_partial": {"val_x1": 0.01, "val_x2": 0.02, "val_x3": 0.03}}
    _write(tmp_path / "circuits" / "runs" / CIRCUITS_RUN / "summary.json", t)
    for s in (0, 1):
        _write(tmp_path / "circuits" / "discovered" / f"seed{s}" / "summary.json", found())
    (run,) = recipe_screen.collect_seeds([tmp_path])
    assert [r.verdicts["A1"] for r in run.rows] == [PASS, FAIL]
    assert run.rows[0].useful_heads == 4 and run.rows[0].n_heads == 12
    assert recipe_screen.seed_table(run)[0][:3] == ["seed", "final val MSE", "max partial"]


def test_cli(tmp_path, cli):
    folder = emergence_folder(tmp_path / "run", [0.03], [timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT)])
    code, out, err = cli("seeds", folder, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["runs"][0]["seeds"][0]["verdicts"]["E2"] == PASS and data["paper"]["sec9"]["final_val_loss"] == 0.031
    code, out, _ = cli("seeds", folder, "--markdown")
    assert code == 0 and "| seed | final val MSE |" in out
    code, out, _ = cli("seeds", folder)
    assert code == 0 and "E4" in out
    (tmp_path / "empty").mkdir()
    for args, said in (((tmp_path / "missing",), "is not a folder"), ((folder, "--label", "a", "--label", "b"), "2 labels for 1 folders"),
                       ((tmp_path / "empty",), "neither discovered circuits nor a finished training run")):
        code, _, err = cli("seeds", *args)
        assert code == 2 and one_error(err) and said in err, err


def reference_record(files: list[str]) -> dict:
    """A whole reference.json (as publish writes it) for the files of a test folder."""
    return {"name": "sec9", "title": "Transformer D (test)", "command": "stackedheads reproduce", "commit": "0" * 40,
            "machine": "test", "wall_s": 1.0, "date": "today", "files": files}


def test_a_reference_shows_its_seeds(tmp_path):
    """The report's reference runs carry the per-seed table and the distribution (the claims
    above them combine the seeds)."""
    from stackedheads.publishing import references

    folder = emergence_folder(tmp_path / "sec9", [0.03, 0.05], [timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT), timeline(*OUT_OF_ORDER)])
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    (folder / references.REFERENCE_FILE).write_text(json.dumps(reference_record(files)))
    tables = references.load(folder)["tables"]
    by_seed, spread_ = tables
    assert by_seed["columns"][0] == "seed" and [r[0] for r in by_seed["rows"]] == ["0", "1"]
    assert by_seed["rows"][1][by_seed["columns"].index("E3")] == FAIL
    assert any("(paper: 0.031)" in r[0] for r in spread_["rows"])


def test_passing_seeds_are_compared_as_a_share(tmp_path):
    """The paper's target is every seed: 1 of 1 passing is closer than 2 of 3."""
    like, bad = timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT), timeline(*OUT_OF_ORDER)
    one = emergence_folder(tmp_path / "one", [0.03], [like])
    three = emergence_folder(tmp_path / "three", [0.03, 0.03, 0.03], [like, like, bad])
    got = {r["measure"]: r for r in recipe_screen.compare(recipe_screen.collect_seeds([one, three]))}
    assert got["E3 seeds passing"]["medians"] == {"one": "1/1", "three": "2/3"} and got["E3 seeds passing"]["closer"] == "one"


def test_a_path_with_no_measured_role_does_not_end_the_plateau(tmp_path):
    """Sec. 9.2's plateau ends with the first head that does part of the task: a positional
    shortcut whose ablation harms no position, crossing 0.5 earlier, is named but does not end
    it, nor count as the first head (E2). The timeline's stored plateau (every path) is not read."""
    from stackedheads.emergence.ordering import end_of_plateau

    silent = "L2.0 s3->p12"
    tl = timeline({**PAPER_SEEN, silent: 800}, {**PAPER_SERVES, silent: []}, REDUNDANT)
    assert tl["plateau_steps"] == 760.0 and tl["first_paths"] == [silent]  # as written before the rule
    assert end_of_plateau(tl) == (3560.0, [K1], [silent])
    (run,) = recipe_screen.collect_seeds([emergence_folder(tmp_path / "run", [0.03], [tl])])
    row = run.rows[0]
    assert row.plateau_epochs == pytest.approx(3560 / 8) and row.first_paths == [K1]
    assert row.verdicts["E2"] == PASS
    assert "445 epochs (paper: 450 epochs) (earlier, with no measured role: L2.0 s3->p12 (positional shortcut))" in row.measured["E2"]
    # A timeline written before emerged_seen was kept: its stored first paths, less the silent one.
    old = {k: v for k, v in tl.items() if k != "emerged_seen"}
    old["first_paths"] = [silent, K1]
    assert end_of_plateau(old) == (3560.0, [K1], [silent])
    old["first_paths"] = [silent]  # every stored first path silent: the serving path crossing first
    assert end_of_plateau(old) == (3560.0, [K1], [silent])


def test_circuits_without_timelines_say_so(tmp_path):
    """After `circuit discover`, before `emergence`: no plateau or order is claimed."""
    folder = emergence_folder(tmp_path / "run", [0.03, 0.04], [])
    for s in (0, 1):
        _write(folder / "emergence" / "discovered" / f"seed{s}" / "summary.json", found())
    (run,) = recipe_screen.collect_seeds([folder])
    lines = recipe_screen.distribution_lines(run)
    assert any("no partial losses (neither an emergence timeline nor the run's metrics.csv)" in line for line in lines)
    assert not any("chain order" in line or "no path" in line for line in lines)


def test_circuits_of_seeds_the_run_did_not_train_are_refused(tmp_path):
    folder = emergence_folder(tmp_path / "run", [0.03], [])
    _write(folder / "emergence" / "discovered" / "seed7" / "summary.json", found())
    with pytest.raises(UsageError, match="seeds its training run did not train"):
        recipe_screen.collect_seeds([folder])


def test_the_recipe_names_what_tells_recipes_apart():
    nested = {"steps": 6400, "batch_size": 256, "dtype": "bfloat16",
              "optim": {"lr": 1e-3, "warmup_steps": 200, "grad_clip": 1.0, "weight_decay": 0.1, "decay_exempt": []}}
    assert recipe_screen.recipe_of(nested) == {"steps": 6400, "batch_size": 256, "lr": 1e-3, "warmup_steps": 200,
                                       "grad_clip": 1.0, "weight_decay": 0.1, "decay_exempt": [], "dtype": "bfloat16"}
    flat = {"steps": 100, "lr": 3e-3, "weight_decay": 0.0}  # configs written before `optim`
    assert recipe_screen.recipe_of(flat) == {"steps": 100, "lr": 3e-3, "weight_decay": 0.0}


def test_a_reference_whose_seed_table_cannot_be_made_keeps_its_claims(tmp_path):
    """The report's reference section: a table the files cannot give is said in its place, and
    the claims are still re-judged from the files (not replaced by the published claims.json)."""
    from stackedheads.publishing import references

    folder = emergence_folder(tmp_path / "sec9", [0.03], [])
    _write(folder / "emergence" / "discovered" / "seed7" / "summary.json", found())
    _write(folder / "claims.json", [{"id": "E1", "section": "s", "paper": "p", "measured": "published", "verdict": PASS}])
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    (folder / references.REFERENCE_FILE).write_text(json.dumps(reference_record(files)))
    loaded = references.load(folder)
    assert "published" not in {c.measured for c in loaded["claims"]}
    # Re-judged: circuits of no trained seed leave E1-E3 NOT RUN, which the section omits; E4
    # needs no circuit, and the trained seed 0 kept no metrics.csv to judge it by.
    judged = {c.id: c for c in claims.folder_claims(folder) if c.id.startswith("E")}
    assert {judged[k].verdict for k in ("E1", "E2", "E3")} == {claims.NOT_RUN}
    assert judged["E4"].verdict == claims.INCONCLUSIVE and "seed 0: no timeline, and no partial losses" in judged["E4"].measured
    assert [c.id for c in loaded["claims"]] == ["E4"]
    (table,) = loaded["tables"]
    assert table["columns"] == ["unavailable"] and "did not train" in table["rows"][0][0]


def test_markdown_shows_labels_and_folder_names_literally(tmp_path, cli):
    """A label or folder name holding a tag or '|' is text in seeds --markdown: no raw HTML, no
    extra table cell."""
    hostile = "a|b<img src=x onerror=alert(1)>"
    folder = emergence_folder(tmp_path / hostile, [0.03], [timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT)])
    other = emergence_folder(tmp_path / "other", [0.01], [timeline(PAPER_SEEN, PAPER_SERVES, REDUNDANT)])
    code, out, err = cli("seeds", folder, other, "--markdown")
    assert code == 0, err
    assert "<img" not in out and "a\\|b&lt;img src=x onerror=alert(1)>" in out
    # the name's row has as many cells as its table's header: its '|' splits none
    rows = [line for line in out.splitlines() if line.startswith("| a\\|b")]
    header = next(line for line in out.splitlines() if line.startswith("| run |"))
    assert rows and all(r.replace("\\|", "").count("|") == header.count("|") for r in rows)
    code, out, _ = cli("seeds", folder, "--markdown", "--label", "x<script>alert(1)</script>")
    assert code == 0 and "<script>" not in out and "x&lt;script>alert(1)&lt;/script>" in out
