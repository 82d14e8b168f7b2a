import csv
import json

import pytest
from conftest import is_figure

from stackedheads import presets
from stackedheads.sweeps import figure4
from stackedheads.claims import sec7
from stackedheads.errors import UsageError


def row(form, layers, seed, final, parts=(), cross=(), depth=2, chains=4):
    r = {"formulation": form, "depth": depth, "chains": chains, "layers": layers, "seed": seed,
         "final_val_loss": final, "run": f"{form}-L{layers}"}
    for j, v in enumerate(parts, start=1):
        r[f"final_val_x{j}"] = v
    for j, v in enumerate(cross, start=1):
        r[f"cross_val_x{j}"] = v
    return r


def paper_like_rows():
    return [
        row("non-ic", 1, 0, 0.76), row("non-ic", 2, 0, 0.75),
        row("ic", 1, 0, 0.76, parts=(0.77, 0.75), cross=(None, None)),
        row("ic", 2, 0, 0.40, parts=(0.05, 0.75), cross=(300, None)),
        row("ic", 3, 0, 0.05, parts=(0.04, 0.06), cross=(250, 600)),
    ]


def test_claims_pass_on_paper_like_results():
    c = sec7.rows_claims(paper_like_rows() + [row("ic", 3, 1, 0.05, parts=(0.04, 0.06), cross=(300, 700))])
    assert {k: v["verdict"] for k, v in c.items()} == {"C0": "PASS", "C1": "PASS", "C2": "PASS", "C3": "PASS"}
    assert c["C1"]["failing"] == []
    assert c["C2"]["in_order"] == ["ic-L3/seed0", "ic-L3/seed1"] and c["C2"]["undecided"] == ["ic-L1/seed0", "ic-L2/seed0"]
    assert c["C3"]["layers_needed"] == {"x1": 2, "x2": 3}
    assert c["C3"]["theory_causal_min_layers"] == {"x1": 2, "x2": 3}


def test_c1_fails_when_a_non_ic_run_learns():
    rows = paper_like_rows() + [row("non-ic", 3, 1, 0.2)]
    c1 = sec7.rows_claims(rows)["C1"]
    assert c1["verdict"] == "FAIL" and c1["failing"] == ["non-ic-L3/seed1"]


def test_c1_threshold_scales_with_the_plateau():
    assert figure4.non_ic_floor(4) == pytest.approx(0.7)
    assert figure4.non_ic_floor(2) == pytest.approx(0.7 / 0.75 * 0.5)
    # 0.49 is on the N=2 plateau (0.5) but below the N=4 threshold: it must pass for N=2 only.
    assert sec7.rows_claims([row("non-ic", 1, 0, 0.49, chains=2)])["C1"]["verdict"] == "PASS"
    assert sec7.rows_claims([row("non-ic", 1, 0, 0.49, chains=4)])["C1"]["verdict"] == "FAIL"


def test_crossing_steps():
    rows = [{"seed": 0, "step": s, "val_x1": v1, "val_x2": v2} for s, v1, v2 in [(10, 0.9, 0.9), (20, 0.4, 0.8), (30, 0.3, 0.45)]]
    assert figure4.crossing_steps(rows, 0, ["val_x1", "val_x2"]) == {"val_x1": 20, "val_x2": 30}


def test_figure4_smoke_end_to_end_and_resume(tmp_path):
    spec = presets.figure4("smoke")
    rows = figure4.run_figure4(spec, tmp_path)
    assert len(rows) == len(spec.layers) * len(spec.seeds) * 2
    assert not (tmp_path / "claims.json").exists()  # the sweep measures; claims.sec7 judges
    result = sec7.write_claims(tmp_path)
    assert set(result) == {"C0", "C1", "C2", "C3"}
    assert all(c["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE", "NOT RUN") for c in result.values())
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(spec.layers) * len(spec.seeds) * 2
    assert {"formulation", "depth", "layers", "seed", "final_val_loss", "final_val_x1"} <= set(rows[0])
    assert {r["formulation"] for r in rows} == {"ic", "non-ic"}
    for ext in ("png", "svg"):
        assert is_figure(tmp_path / f"figure4.{ext}")
    assert json.loads((tmp_path / "claims.json").read_text()) == json.loads(json.dumps(result))
    # A second run trains nothing: every run folder is complete.
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/summary.json")}
    figure4.run_figure4(spec, tmp_path)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/summary.json")} == stamps


def test_other_spec_in_same_folder_is_refused(tmp_path):
    figure4.run_figure4(presets.figure4("smoke"), tmp_path)
    with pytest.raises(UsageError):
        figure4.run_figure4(presets.figure4("quick"), tmp_path)


def test_unknown_preset():
    with pytest.raises(UsageError):
        presets.figure4("huge")


def test_paper_spec_is_section_7_1():
    spec = presets.figure4("paper")
    jobs = spec.jobs()
    assert len(jobs) == 16 and sum(len(j.config.seeds) for j in jobs) == 128
    ic = [j for j in jobs if j.target == "ic"]
    assert {j.config.task.depth for j in ic} == {5}
    assert {j.config.task.depth for j in jobs if j.target == "non-ic"} == {3}
    c = ic[0].config
    assert (c.model.n_heads, c.model.d_model, c.batch_size, c.steps, c.optim.lr, c.optim.weight_decay) == (8, 128, 512, 10_000, 1e-3, 0.1)
    assert c.task.n_train == 2**20 and c.task.chains == 4 and c.task.dims == 4


def _folder_of(kind: str, folder):
    """A folder as `sweep figure4`, `train` or `llm-bench` leaves it (the files that name it)."""
    folder.mkdir()
    if kind == "figure4":
        (folder / figure4.SPEC_FILE).write_text(json.dumps(presets.figure4("smoke").to_dict()))
    elif kind == "train":
        (folder / "config.json").write_text(json.dumps(presets.get("smoke").to_dict()))
        (folder / "metrics.csv").write_text("step,seed\n")
    else:
        (folder / "config.json").write_text(json.dumps({"identity": {"model": "m"}, "invocations": []}))
        (folder / "samples.jsonl").write_text("")
    (folder / "summary.csv").write_text("theirs\n")
    (folder / "claims.json").write_text('{"theirs": 1}')
    return {p: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("kind", ["train", "llm-bench"])
def test_figure4_refuses_a_folder_of_another_kind(tmp_path, kind):
    """`sweep figure4` into a train or llm-bench folder is refused."""
    before = _folder_of(kind, tmp_path / "out")
    with pytest.raises(UsageError, match=f"another kind of output \\({'training run' if kind == 'train' else 'llm-bench run'}\\)"):
        figure4.run_figure4(presets.figure4("smoke"), tmp_path / "out")
    assert {p: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before  # nothing written, not even a lock


def test_depth_sweep_refuses_a_figure4_folder(tmp_path):
    """`sweep depth --out <a figure4 folder>` is refused: its summary.csv and claims.json stay."""
    from stackedheads.sweeps import depth

    before = _folder_of("figure4", tmp_path / "out")
    for call in (depth.check_folder, depth.run_depth):
        with pytest.raises(UsageError, match="another kind of output \\(figure4 sweep\\)"):
            call(presets.depth("smoke"), tmp_path / "out")
    assert {p: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


@pytest.mark.parametrize("content", ['{"preset": "smoke"}', '{"preset": "smoke", "base": 3, "layers": [1]}'])
def test_a_bad_sweep_spec_is_named(tmp_path, content, cli):
    (tmp_path / figure4.SPEC_FILE).write_text(content)
    code, _, stderr = cli("claims", str(tmp_path))
    assert code == 2 and "Traceback" not in stderr and str(tmp_path / figure4.SPEC_FILE) in stderr, stderr


# --- The sweep's folder lock, and a damaged run summary rebuilt

from conftest import copy_run  # noqa: E402


def test_sweep_folder_locked(tmp_path, held):
    from stackedheads.sweeps import figure4

    held(tmp_path / "sw")
    with pytest.raises(UsageError, match="in use by pid"):
        figure4.run_figure4(presets.figure4("smoke"), tmp_path / "sw")
    assert not (tmp_path / "sw" / "sweep.json").exists()


def test_sweep_rebuilds_a_damaged_run_summary(ckpt_run, tmp_path):
    from stackedheads.sweeps import figure4
    from stackedheads.execution.executors import Job, run_dir
    from stackedheads.training import TrainConfig

    cfg = TrainConfig.from_dict(json.loads((ckpt_run / "config.json").read_text()))
    job = Job("ic-D2-L3", "ic", cfg)
    folder = copy_run(ckpt_run, run_dir(tmp_path, job))
    (folder / "summary.json").write_text("")  # what a full disk can leave of a file written in place
    rows = figure4.job_rows([job], tmp_path)
    assert rows and rows[0]["layers"] == 3
    assert json.loads((folder / "summary.json").read_text())["seeds"]
