"""The depth phase diagram: grid, resumption, claims D1/D2 and the figure."""

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from stackedheads import theory
from stackedheads.sweeps import depth
from stackedheads.claims import FAIL, INCONCLUSIVE, NOT_RUN, PASS, Claim
from stackedheads.errors import UsageError
from stackedheads.sweeps.figure4 import cross_threshold, crossing_steps
from stackedheads.claims import beyond
from stackedheads import presets

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_valid_figures(folder, name="depth_phase"):
    png = (folder / f"{name}.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    root = ET.parse(folder / f"{name}.svg").getroot()
    assert root.tag.endswith("svg")


# --- the smoke grid, end to end through the CLI, then resumed ---------------------------------


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("depth") / "smoke"
    r = subprocess.run(
        [sys.executable, "-m", "stackedheads", "sweep", "depth", "--preset", "smoke", "--out", str(out)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    return out, r


@pytest.mark.slow
def test_smoke_grid_writes_every_file(smoke):
    out, r = smoke
    spec = presets.DEPTH.get("smoke")
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(j.name for j in spec.jobs())
    assert len(spec.jobs()) == len(spec.depths) * len(spec.layers)
    rows = depth.read_results(out)
    # One row per (D, layers, position j): D = 1 has one position, D = 2 two, over 2 layer counts.
    assert [(x["depth"], x["layers"], x["position"]) for x in rows] == [
        (1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 1, 2), (2, 2, 1), (2, 2, 2)
    ]
    thr = cross_threshold(2)
    for x in rows:
        assert x["threshold"] == pytest.approx(thr)
        assert x["causal_min"] == theory.min_layers_per_position(x["depth"], causal=True)[x["position"] - 1]
        assert x["seeds"] == ["0", "1"]
        for s in x["seeds"]:
            assert x["learned"][s] == (x["final_partial"][s] < thr)
            # The first step below the threshold must be an evaluated step with a loss below it.
            metrics = [m for m in _metrics(out / "runs" / x["run"]) if m["seed"] == s]
            below = [m["step"] for m in metrics if m[f"val_x{x['position']}"] < thr]
            assert x["first_step"][s] == (min(below) if below else None)
        assert x["fraction_learned"] == sum(x["learned"].values()) / 2
    with open(out / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    table = json.loads((out / "phase.json").read_text())
    assert [t["depth"] for t in table] == [1, 2]
    assert [t["causal_min"] for t in table] == [2, 3] and [t["paper_bound"] for t in table] == [1, 2]
    assert all(p["verdict"] in (PASS, FAIL, INCONCLUSIVE) for p in beyond.d2_per_depth(rows))
    assert [c["id"] for c in json.loads((out / "claims.json").read_text())] == ["D1", "D2"]
    assert_valid_figures(out)
    # The CLI prints the per-D table and both claims.
    assert "vs theory" in r.stdout and "D1" in r.stdout and "D2" in r.stdout


def _metrics(folder):
    from stackedheads.training import read_metrics

    return [{**m, "seed": str(m["seed"])} for m in read_metrics(folder)]


@pytest.mark.slow
def test_collect_reads_learned_and_first_step_from_the_run_folders(smoke, monkeypatch):
    # The smoke runs learn nothing in 30 steps; with a threshold above every loss, every
    # position is learned and first crosses at the first evaluation (eval_every = 10).
    out, _ = smoke
    monkeypatch.setattr(depth, "cross_threshold", lambda chains: 10.0)
    rows = depth.job_rows(presets.DEPTH.get("smoke").jobs(), out)
    assert all(r["learned_all"] and r["fraction_learned"] == 1.0 for r in rows)
    assert all(r["first_step"] == {"0": 10, "1": 10} for r in rows)
    assert [t["trained_min"] for t in depth.phase_table(rows)] == [1, 1]


def test_first_step_is_the_first_evaluation_below_the_threshold():
    metrics = [{"seed": s, "step": t, "val_x1": v} for s, t, v in [(0, 20, 0.2), (0, 10, 0.6), (1, 10, 0.1), (0, 30, 0.1)]]
    assert crossing_steps(metrics, 0, ["val_x1"], 0.3)["val_x1"] == 20
    assert crossing_steps(metrics, 1, ["val_x1"], 0.3)["val_x1"] == 10
    assert crossing_steps(metrics, 0, ["val_x1"], 0.05)["val_x1"] is None


def test_second_run_retrains_nothing(smoke, monkeypatch):
    out, _ = smoke
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*") if p.is_file()}
    before = depth.read_results(out)

    def no_training(*a, **k):
        raise AssertionError("a finished job was trained again")

    monkeypatch.setattr("stackedheads.execution.executors.train", no_training)
    result = depth.run_depth(presets.depth("smoke"), out)
    assert result.trained == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*") if p.is_file()} == stamps
    assert depth.read_results(out) == before


def test_other_grid_in_the_same_folder_is_refused(tmp_path):
    depth.atomic_write_json(tmp_path / depth.SPEC_FILE, presets.depth("smoke").to_dict())
    with pytest.raises(UsageError, match="another grid") as e:
        depth.run_depth(presets.depth("smoke", layers=(1, 2, 3)), tmp_path)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "runs").exists()  # refused before any training


def test_a_grid_written_before_an_unset_setting_existed_still_resumes(tmp_path):
    """decay_steps (None: the run's own steps) came after depth.json files were written: such a
    folder resumes; asking for a value of that setting is another grid."""
    old = presets.depth("smoke").to_dict()
    del old["base"]["optim"]["decay_steps"]
    depth.atomic_write_json(tmp_path / depth.SPEC_FILE, old)
    depth.check_folder(presets.depth("smoke"), tmp_path)  # resumes
    spec = presets.depth("smoke")
    with pytest.raises(UsageError, match="decay_steps: \\(none\\) there, 40 asked") as e:
        depth.check_folder(type(spec)(spec.preset, spec.base.override(decay_steps=40), spec.depths, spec.layers, spec.seeds), tmp_path)
    assert str(e.value).count(";") == 1  # the one real difference, not the unset one beside it


@pytest.mark.parametrize("old,new,same", [
    ({"a": 1}, {"a": 1, "b": None}, True),  # a setting added since, unset
    ({"x": {"a": 1}}, {"x": {"a": 1, "b": None}}, True),  # nested
    ({"a": 1}, {"a": 1, "b": 2}, False),  # added since, but set
    ({"a": 1, "b": None}, {"a": 1}, False),  # dropped since
    ({"a": [1]}, {"a": [1], "b": None}, True),
    ({"a": [1]}, {"a": [2], "b": None}, False),
    ({"x": 1}, {"x": {"b": None}}, False),  # a value became a section
])
def test_settings_compare_an_unset_new_setting_as_absent(tmp_path, old, new, same):
    from stackedheads.state.write import RunFolder

    folder = RunFolder(tmp_path, "depth sweep")
    if same:
        folder.require_same(old, new, "another grid")
    else:
        with pytest.raises(UsageError, match="another grid"):
            folder.require_same(old, new, "another grid")


def test_cli_refuses_other_grid_and_bad_ranges_in_one_line(tmp_path, cli):
    depth.atomic_write_json(tmp_path / depth.SPEC_FILE, presets.depth("smoke").to_dict())
    for args in (["--depths", "1-3"], ["--layers", "three"], ["--preset", "huge"], ["--seeds", "0,0"]):
        preset = [] if "--preset" in args else ["--preset", "smoke"]
        r = cli("sweep", "depth", "--out", tmp_path, *preset, *args)
        assert r.code == 2, (args, r.err)
        assert r.err.startswith("stackedheads: error:") and len(r.err.strip().splitlines()) == 1, r.err


def test_folder_locked_by_another_process_is_refused(tmp_path, held):
    # FolderLock is re-entrant within one process, so the holder must be another process.
    held(tmp_path)
    with pytest.raises(UsageError, match="in use"):
        depth.run_depth(presets.depth("smoke"), tmp_path)
    assert not (tmp_path / "runs").exists()


def test_damaged_results_file_is_one_line(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"depth": 1\n')
    with pytest.raises(UsageError, match="damaged"):
        beyond.claims_from_folder(tmp_path)


def test_spec_round_trips_through_json():
    spec = presets.depth("quick", depths=(1, 3), seeds=(4,))
    assert depth.DepthSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_presets():
    paper = presets.DEPTH.get("paper")
    # Sec. 7.1: N = 4, 8 runs per shape, 1..8 layers, 10k steps, batch 512, GPT-2 recipe.
    assert paper.base.task.chains == 4 and paper.seeds == tuple(range(8))
    assert paper.depths == tuple(range(1, 9)) and paper.layers == tuple(range(1, 9))
    assert paper.base.steps == 10_000 and paper.base.batch_size == 512 and paper.base.optim.schedule == "cosine"
    quick = presets.DEPTH.get("quick")
    assert quick.base.task.chains == 2 and quick.depths == (1, 2, 3, 4)
    assert quick.base.optim.warmup_steps > 0 and quick.base.optim.grad_clip == 1.0 and quick.base.optim.schedule == "cosine"
    # The quick layers start below every causal minimum and reach x4's minimum plus the D2 gap.
    assert min(quick.layers) < theory.min_layers(1, causal=True)
    assert max(quick.layers) >= theory.min_layers(4, causal=True) + beyond.GAP_MAX
    # Every job is IC at its own depth and layer count, one ensemble over the seeds.
    for job in paper.jobs():
        assert job.config.task.ic and job.config.seeds == paper.seeds
    assert {(j.config.task.depth, j.config.model.n_layers) for j in paper.jobs()} == {(d, n) for d in range(1, 9) for n in range(1, 9)}
    with pytest.raises(UsageError, match="unknown depth preset"):
        presets.depth("huge")


@pytest.mark.parametrize(
    "text, want",
    [("1-6", (1, 2, 3, 4, 5, 6)), ("1,3,5", (1, 3, 5)), ("2-4,6", (2, 3, 4, 6)), (" 3 , 1 ", (1, 3))],
)
def test_parse_ints(text, want):
    assert depth.parse_ints(text, "--layers") == want


@pytest.mark.parametrize("text", ["", "a", "5-3", "1-", "1.5"])
def test_parse_ints_rejects(text):
    with pytest.raises(UsageError, match="--layers"):
        depth.parse_ints(text, "--layers")


def test_grid_values_must_be_positive_and_distinct():
    with pytest.raises(UsageError):
        presets.depth("smoke", depths=(0, 1))
    with pytest.raises(UsageError):
        presets.depth("smoke", layers=())


@pytest.mark.parametrize("seeds", ["99999999999999999999", "-1"])
def test_seeds_beyond_the_rule_are_one_line_and_write_nothing(tmp_path, seeds, cli):
    """A seed beyond int64 is refused before a depth.json is written (that would block the
    corrected run); the rule (0 to 2**63-1) is train's too."""
    out = tmp_path / "depth"
    code, _, stderr = cli("sweep", "depth", "--preset", "smoke", "--out", str(out), "--seeds", seeds)
    assert code == 2 and "Traceback" not in stderr and "integers from 0 to 2**63-1" in stderr, stderr
    assert not out.exists()
    with pytest.raises(UsageError, match="integers from 0 to 2"):
        presets.depth("smoke", seeds=(-1,))


# --- the claims on synthetic rows --------------------------------------------------------------

THR = cross_threshold(2)


def row(D, L, j, learned, steps=None, chains=2):
    """A results row: ``learned`` per seed (seeds 0, 1, ...); ``steps`` the first step per seed."""
    seeds = [str(s) for s in range(len(learned))]
    steps = steps or [100 * L if ok else None for ok in learned]
    return {
        "depth": D, "layers": L, "position": j, "chains": chains, "threshold": cross_threshold(chains), "steps": 2000,
        "seeds": seeds,
        "final_partial": {s: (0.05 if ok else 0.49) for s, ok in zip(seeds, learned)},
        "learned": dict(zip(seeds, learned)),
        "first_step": dict(zip(seeds, steps)),
        "fraction_learned": sum(learned) / len(learned), "learned_all": all(learned),
        "causal_min": theory.min_layers_per_position(D, causal=True)[j - 1],
        "no_mask_min": theory.min_layers_per_position(D, causal=False)[j - 1],
        "run": f"ic-D{D}-L{L}",
    }


def grid(D, layers, learned_from):
    """Rows for one D: position j is learned (every seed) from ``learned_from[j]`` layers on (None: never)."""
    return [
        row(D, L, j, [learned_from[j] is not None and L >= learned_from[j]] * 2)
        for L in layers for j in range(1, D + 1)
    ]


def theory_like():
    """Trained minima equal to the causal minima (D=1: x1 at 2; D=2: x1 at 2, x2 at 3)."""
    return grid(1, (1, 2, 3), {1: 2}) + grid(2, (1, 2, 3), {1: 2, 2: 3})


def verdicts(rows):
    return {c.id: c.verdict for c in beyond.depth_claims(rows)}


def test_claims_pass_when_training_matches_the_causal_minimum():
    cs = beyond.depth_claims(theory_like())
    assert all(isinstance(c, Claim) and c.section == beyond.SECTION for c in cs)
    assert [(c.id, c.verdict) for c in cs] == [("D1", PASS), ("D2", PASS)]
    d1, d2 = cs
    assert "0 of" in d1.measured and str(round(THR, 4)) in d1.measured  # the threshold is stated
    assert f"gap <= {beyond.GAP_MAX}" in d2.measured and "D=2 PASS" in d2.measured
    table = depth.phase_table(theory_like())
    assert [(t["trained_min"], t["causal_min"], t["gap"]) for t in table] == [(2, 2, 0), (3, 3, 0)]
    assert table[1]["trained_min_per_position"] == {"x1": 2, "x2": 3}


def test_d1_fails_loudly_on_a_run_learning_below_the_causal_minimum():
    # Impossible under Assumptions 1-2: x2 of D=2 needs 3 layers with a causal mask; one seed
    # learns it with 1.
    rows = theory_like()
    rows = [r for r in rows if (r["depth"], r["layers"], r["position"]) != (2, 1, 2)] + [row(2, 1, 2, [False, True])]
    d1 = beyond.claim_d1(rows)
    assert d1.verdict == FAIL
    assert "VIOLATION" in d1.measured and "D=2 L=1 x2 seed 1" in d1.measured
    assert "seed 0" not in d1.measured  # only the violating run is named


def test_d1_violation_in_every_seed_also_fails_d2():
    rows = [r for r in theory_like() if r["depth"] == 1 and r["layers"] != 1] + [row(1, 1, 1, [True, True])]
    assert verdicts(rows) == {"D1": FAIL, "D2": FAIL}


def test_never_learned_is_inconclusive_and_says_what_is_missing():
    rows = grid(1, (1, 2, 3), {1: 2}) + grid(2, (1, 2, 3), {1: 2, 2: None})
    d2 = beyond.claim_d2(rows)
    assert d2.verdict == INCONCLUSIVE
    assert "x2 never learned" in d2.measured and "train longer or try more layers" in d2.measured
    assert depth.phase_table(rows)[1]["trained_min"] is None
    # D1 still has evidence from the positions that are learned (D=1 x1, D=2 x1).
    assert beyond.claim_d1(rows).verdict == PASS


def test_d2_fails_when_layers_within_the_gap_were_tried_and_did_not_learn():
    rows = grid(1, (1, 2, 3, 4), {1: 4})  # causal minimum 2: gap 2 > GAP_MAX, 2 and 3 tried
    d2 = beyond.claim_d2(rows)
    assert d2.verdict == FAIL and "gap 2" in d2.measured


def test_d2_gap_above_threshold_without_trying_the_window_is_inconclusive():
    rows = grid(1, (1, 4), {1: 4})  # only an upper bound on the gap: 2 and 3 not tried
    d2 = beyond.claim_d2(rows)
    assert d2.verdict == INCONCLUSIVE and "no layer count in 2..3 was tried" in d2.measured


def test_d2_needs_every_seed():
    # Seed 1 learns x1 with 2 layers, seed 0 only with 3: the trained minimum is 3 (gap 1).
    rows = [row(1, 1, 1, [False, False]), row(1, 2, 1, [False, True]), row(1, 3, 1, [True, True])]
    t = depth.phase_table(rows)[0]
    assert (t["trained_min"], t["trained_min_any_seed"], t["gap"]) == (3, 2, 1)
    assert beyond.claim_d2(rows).verdict == PASS
    rows[-1] = row(1, 3, 1, [True, False])
    assert beyond.claim_d2(rows).verdict == INCONCLUSIVE


def test_d1_needs_positive_evidence():
    # Nothing tried below a causal minimum.
    d1 = beyond.claim_d1(grid(1, (2, 3), {1: 2}))
    assert d1.verdict == INCONCLUSIVE and "include smaller --layers" in d1.measured
    # Tried below, but the position is never learned at all: not learning says nothing.
    d1 = beyond.claim_d1(grid(1, (1, 2, 3), {1: None}))
    assert d1.verdict == INCONCLUSIVE and "never learned at or above" in d1.measured


def test_no_rows_is_not_run(tmp_path):
    assert verdicts([]) == {"D1": NOT_RUN, "D2": NOT_RUN}
    assert [c.verdict for c in beyond.claims_from_folder(tmp_path)] == [NOT_RUN, NOT_RUN]


def test_figure_on_synthetic_rows(tmp_path):
    rows = theory_like() + grid(3, (1, 2, 3), {1: 2, 2: 3, 3: None})
    paths = depth.plot_phase(rows, tmp_path)
    assert sorted(paths) == sorted(str(tmp_path / f"depth_phase.{e}") for e in ("png", "svg"))
    assert_valid_figures(tmp_path)


@pytest.mark.slow
def test_publish_keeps_small_files_and_the_report_shows_them(smoke, tmp_path, cli):
    from stackedheads.report.html import write_report

    out, _ = smoke
    results = tmp_path / "results"
    r = cli("publish", out, "--name", "depth", "--title", "Depth map (smoke)", "--command",
            "stackedheads sweep depth --preset smoke", "--wall-s", "5", "--results", results)
    assert r.code == 0, r.err
    ref = json.loads((results / "depth" / "reference.json").read_text())
    assert {"depth.json", "results.jsonl", "phase.json", "claims.json", "summary.csv", "depth_phase.png",
            "depth_phase.svg"} <= set(ref["files"])
    assert not any(f.startswith("runs") for f in ref["files"]) and not list((results / "depth").rglob("*.safetensors"))
    assert ref["command"] == "stackedheads sweep depth --preset smoke" and ref["wall_s"] == 5 and len(ref["commit"]) == 40
    r = cli("publish", out, "--name", "../escape", "--title", "t", "--command", "c", "--results", results)
    assert r.code == 2 and "--name" in r.err and not (tmp_path / "escape").exists()

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"preset": {"name": "custom"}}))
    html = write_report(run, results).read_text()
    assert "Reference runs" in html and "Depth map (smoke)" in html and "trained x_D" in html
    expected = {c["id"]: c["verdict"] for c in json.loads((out / "claims.json").read_text())}
    assert set(expected) == {"D1", "D2"} and all(f">{v}</td>" in html for v in expected.values())
    assert (run / "report" / "img" / "depth__depth_phase.png").exists()
    assert "Reference runs" not in write_report(run).read_text()
