"""Several models in one Figure 2: per-model run folders, the comparison table and
figures, `llm-bench --model A --model B`, `llm-compare`, claims L1/L2 per model, and the
quick preset's LLM stage plan. Models are deterministic solvers (tests/prompt_solver.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import is_figure

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import DepthModel, SolverModel, bench_depth_model, one_error  # noqa: E402

from stackedheads import claims, reproduce  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.llm import backends, bench, compare, runlog, scoring  # noqa: E402
from stackedheads.tasks.formulations import FORMULATIONS  # noqa: E402
from stackedheads.claims import sec4
from stackedheads import presets


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    bench_depth_model(DepthModel(2, "shallow"), root / "shallow")
    bench_depth_model(DepthModel(9, "deep"), root / "deep")
    return root


def test_compare_writes_table_and_both_figures(two_runs, tmp_path):
    out = tmp_path / "cmp"
    result = compare.compare([two_runs / "shallow", two_runs / "deep"], out)
    assert [m["model"] for m in result["models"]] == ["shallow", "deep"]
    for name in ("figure2", "figure2_depth"):
        for ext in ("png", "svg"):
            assert is_figure(out / f"{name}.{ext}")
    saved = json.loads((out / "comparison.json").read_text())
    shallow, deep = saved["models"]
    eq_s = shallow["per_depth"]["equations"]
    assert [eq_s[str(d)]["accuracy"] for d in (1, 2, 3, 4, 5)] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert all(deep["per_depth"]["equations"][str(d)]["accuracy"] == 1.0 for d in (1, 2, 3, 4, 5))
    # functions (D=2) is within the shallow model's reach; relatives (D=4) is not.
    assert shallow["per_formulation"]["functions"]["accuracy"] == 1.0
    assert shallow["per_formulation"]["relatives"]["accuracy"] == 0.0
    table = (out / "comparison.md").read_text()
    assert "| shallow | equations | 5 | 6 | 0.000 | [0.000, 0.390] | 0.250 | 0 | 1.00 |" in table
    assert "| deep | 1.00 (6) | 1.00 (6) | 1.00 (6) | 1.00 (6) | 1.00 (6) |" in table
    # Folders are stored relative: a moved comparison still finds its runs.
    moved = tmp_path / "moved"
    shutil.copytree(two_runs, moved / "runs")
    compare.compare([moved / "runs" / "shallow"], moved / "cmp")
    shutil.move(str(moved), str(tmp_path / "moved2"))
    loaded = compare.load_comparison(tmp_path / "moved2" / "cmp")
    assert Path(loaded["models"][0]["folder"]).resolve() == (tmp_path / "moved2" / "runs" / "shallow").resolve()


def test_compare_refuses_empty_and_duplicate(two_runs, tmp_path):
    with pytest.raises(UsageError, match="no answered questions"):
        compare.compare([tmp_path], tmp_path / "o")
    with pytest.raises(UsageError, match="same model"):
        compare.compare([two_runs / "deep", two_runs / "deep"], tmp_path / "o")


def test_claims_are_judged_per_model(two_runs, tmp_path):
    compare.compare([two_runs / "shallow", two_runs / "deep"], tmp_path)
    found = {c.id: c for c in sec4.llm_claims(compare.load_comparison(tmp_path))}
    assert set(found) == {"L1 (shallow)", "L2 (shallow)", "L1 (deep)", "L2 (deep)"}
    assert found["L2 (deep)"].verdict == claims.PASS and found["L2 (deep)"].measured.startswith("deep:")
    # Shallow: 0/6 at D = 3: the upper bound (0.39) is below 90%.
    assert found["L2 (shallow)"].verdict == claims.FAIL
    # 6 questions per formulation: shallow is below chance on relatives but n < LLM_MIN_N.
    assert found["L1 (shallow)"].verdict == claims.INCONCLUSIVE
    assert found["L1 (deep)"].verdict == claims.PASS
    # `stackedheads claims DIR` (and results/ in the report) judge an llm-compare folder the same way,
    # and a folder that holds one in comparison/.
    assert [c.to_dict() for c in claims.folder_claims(tmp_path)] == [c.to_dict() for c in found.values()]
    nested = tmp_path / "ref"
    shutil.copytree(tmp_path, nested / "comparison", ignore=shutil.ignore_patterns("ref"))
    assert [c.id for c in claims.folder_claims(nested)] == list(found)


def _cells(acc: float, n: int, chance: float = 0.25) -> dict:
    k = round(acc * n)
    lo, hi = scoring.wilson(k, n)
    return {"accuracy": k / n, "ci95": [lo, hi], "chance": chance, "n": n, "depth": 5}


def test_l1_l2_verdict_rules():
    per_f = {"equations": _cells(0.3, 100)}
    assert sec4._l1("m", per_f)[1] == claims.FAIL  # 30/100 vs 0.25: not above chance, enough questions
    assert sec4._l1("m", {"equations": _cells(0.3, 10)})[1] == claims.INCONCLUSIVE
    assert sec4._l1("m", {"equations": _cells(0.6, 100)})[1] == claims.PASS
    assert sec4._l2("m", {"3": _cells(0.85, 20)})[1] == claims.INCONCLUSIVE  # CI reaches 0.9
    assert sec4._l2("m", {"3": _cells(0.5, 100)})[1] == claims.FAIL
    assert sec4._l2("m", {"3": _cells(0.95, 100), "8": _cells(0.0, 100)})[1] == claims.PASS  # D > 5 not judged
    assert sec4._l2("m", {"7": _cells(1.0, 10)})[1] == claims.NOT_RUN


def test_cli_benchmarks_several_models_into_one_figure(tmp_path, monkeypatch, cli):
    

    made = []

    def fake_backend(backend, model, **kw):
        m = SolverModel(model=model)
        made.append(model)
        return m

    monkeypatch.setattr(backends, "make_backend", fake_backend)
    out = tmp_path / "bench"
    args = ["llm-bench", "-b", "llamacpp", "-m", "alpha", "-m", "beta.gguf", "-o", str(out), "-f", "equations", "-d", "1-3", "--n", "2"]
    r = cli(*args)
    assert r.code == 0, r.err
    assert made == ["alpha", "beta.gguf"]
    for sub in ("alpha", "beta.gguf"):
        assert len((out / sub / "samples.jsonl").read_text().splitlines()) == 6
    saved = json.loads((out / "comparison.json").read_text())
    assert [m["model"] for m in saved["models"]] == ["alpha", "beta.gguf"]
    assert (out / "figure2.png").exists() and (out / "figure2_depth.png").exists()
    # llm-compare over the finished folders gives the same table.
    r = cli("llm-compare", out / "alpha", out / "beta.gguf", "-o", tmp_path / "c")
    assert r.code == 0 and "| alpha | 1.00 (2) | 1.00 (2) | 1.00 (2) |" in r.out
    r = cli("llm-compare", tmp_path / "nope", "-o", tmp_path / "c")
    assert r.code == 2 and "not a folder" in r.err and len(r.err.splitlines()) == 1


def test_quick_preset_llm_stage_plan():
    quick = presets.REPRODUCE.get("quick")
    names = reproduce.llm_models(quick.llm.model)
    assert "smollm2" in names and any(n.startswith("qwen") for n in names)
    cells = [c for cfg in reproduce.llm_configs(quick.llm, 0) for c in bench.cells(cfg)]
    assert {("equations", d) for d in range(1, 6)} <= set(cells)
    assert {f for f, _ in cells} == set(FORMULATIONS)
    assert reproduce.llm_models(reproduce.LLMChoice(model=" a, b ,a")) == ["a", "b"]
    with pytest.raises(UsageError):
        reproduce.llm_models(reproduce.LLMChoice(model=" , "))


def test_compare_refuses_answers_copied_from_another_models_folder(two_runs, tmp_path, cli):
    """samples.jsonl copied from model A's folder into model B's does not make B score A's
    answers: compare checks every record's identity, as llm-bench does before it resumes."""
    mine = tmp_path / "shallow"
    shutil.copytree(two_runs / "shallow", mine)
    shutil.copy(two_runs / "deep" / runlog.SAMPLES, mine / runlog.SAMPLES)
    with pytest.raises(UsageError, match="holds answers of another run.*model 'deep' there, 'shallow' expected"):
        compare.load_run(mine)
    code, _, stderr = cli("llm-compare", str(mine), str(two_runs / "deep"), "--out", str(tmp_path / "cmp"))
    assert code == 2 and "answers of another run" in stderr and "Traceback" not in stderr, stderr
    # Without its config.json the first record names the run: a mixed log is still refused.
    (mine / runlog.CONFIG).unlink()
    with (mine / runlog.SAMPLES).open("a") as f:
        f.write((two_runs / "shallow" / runlog.SAMPLES).read_text().splitlines()[0] + "\n")
    with pytest.raises(UsageError, match="answers of another run"):
        compare.load_run(mine)


def test_compare_output_may_not_be_a_run_folder(two_runs, tmp_path, cli):
    """`llm-compare -o` one of its inputs is refused: that run's figure2.png stays."""
    runs = tmp_path / "runs"
    shutil.copytree(two_runs, runs)
    before = {p: p.read_bytes() for p in (runs / "shallow").iterdir()}
    for out in (runs / "shallow", runs / "deep"):
        code, _, stderr = cli("llm-compare", str(runs / "shallow"), str(runs / "deep"), "--out", str(out))
        assert code == 2 and "another kind of output (llm-bench run)" in stderr and "Traceback" not in stderr, stderr
    assert {p: p.read_bytes() for p in (runs / "shallow").iterdir()} == before
    code, _, stderr = cli("llm-compare", str(runs / "shallow"), str(runs / "deep"), "--out", str(tmp_path / "cmp"))
    assert code == 0, stderr


# --- what llm-compare and a resumed llm-bench read of a damaged samples.jsonl -----------------------


def _bench_run(folder: Path, model: str = "solver") -> Path:
    from stackedheads.llm import bench

    bench.run_bench(SolverModel(model=model), bench.BenchConfig(formulations=("equations",), depths=(2,), n=4, max_draws=2), folder)
    return folder


def _edit_record(folder: Path, index: int, change) -> None:
    path = folder / "samples.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[index])
    change(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage", ["garbage", "n_draws", "correct"])
def test_llm_compare_refuses_what_no_run_writes(tmp_path, cli, damage):
    run = _bench_run(tmp_path / "run")
    if damage == "garbage":  # a line in the middle, not a last line cut short
        path = run / "samples.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    elif damage == "n_draws":  # printed draws/q -1.50
        _edit_record(run, 1, lambda r: r.update(n_draws=-5))
    else:  # a stored "correct" that the stored answers contradict was counted
        _edit_record(run, 1, lambda r: r.update(correct=True, final="wrong", answered=True))
    code, _, err = cli("llm-compare", run, "--out", tmp_path / "cmp")
    assert code == 2 and one_error(err), err
    assert "samples.jsonl: line" in err and "is not an answer record" in err


def test_llm_bench_asks_again_a_question_whose_record_is_impossible(tmp_path):
    from stackedheads.llm import bench

    run = _bench_run(tmp_path / "run")
    _edit_record(run, 1, lambda r: r.update(n_draws=-5))
    model = SolverModel()
    bench.run_bench(model, bench.BenchConfig(formulations=("equations",), depths=(2,), n=4, max_draws=2), run)
    assert len(model.requests) == 1
    from stackedheads.llm.compare import load_run

    assert load_run(run)["per_formulation"]["equations"]["mean_draws"] >= 1  # the later record answers it


def test_comparison_md_escapes_a_model_name(tmp_path, cli):
    name = '<img src=x onerror="alert(1)">|x'
    a = _bench_run(tmp_path / "a", model=name)
    b = _bench_run(tmp_path / "b", model="plain")
    code, stdout, err = cli("llm-compare", a, b, "--out", tmp_path / "cmp")
    assert code == 0, err
    text = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "<img" not in text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;\\|x" in text
    assert "<img" not in stdout

