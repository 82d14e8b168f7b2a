"""`stackedheads reproduce` end to end (smoke preset), the claims, and the HTML report, checked
in a real headless Chromium."""

import html
import json
import shutil
from pathlib import Path

import pytest
from browser import chromium, full_page_screenshot, missing

from stackedheads import claims, theory
from stackedheads.report.html import write_report
from stackedheads.state.layout import CIRCUITS_RUN, STAGE_NAMES
from stackedheads.claims import sec4, sec5

pytestmark = pytest.mark.slow  # real subprocesses, servers or whole pipelines: `make test-fast` skips them



@pytest.fixture(scope="module")
def smoke(tmp_path_factory, cli_process) -> Path:
    out = tmp_path_factory.mktemp("reproduce") / "smoke"
    r = cli_process("reproduce", "--preset", "smoke", "--out", str(out))
    assert r.code == 0, r.err
    assert f"report: {out / 'report' / 'index.html'}" in r.err.replace("\n", "")
    return out


def test_every_stage_runs_and_writes_its_outputs(smoke):
    summary = json.loads((smoke / "summary.json").read_text())
    assert list(summary["stages"]) == list(STAGE_NAMES)
    for name in STAGE_NAMES:
        done = json.loads((smoke / name / "done.json").read_text())
        assert done["wall_s"] == summary["stages"][name]["wall_s"]  # the summary repeats each stage's record
        # Stages that train or ask a model take measurable time; the others may round to 0.
        assert done["wall_s"] > 0.01 if name in ("llm", "figure4", "circuits", "emergence") else done["wall_s"] >= 0
    for rel in (
        "theory/theory.png", "prompts/equations.jsonl", "llm/results.json", "llm/figure2.png",
        "figure4/claims.json", "figure4/figure4.png",
        "circuits/discovered/seed0/circuit.json", "circuits/maps/seed0/grid.png",
        "emergence/timeline/seed0/timeline.json", "emergence/timeline/seed0/losses.png",
        "report/index.html", "report/claims.json",
    ):
        assert (smoke / rel).stat().st_size > 0, rel
    # The LLM stage asked every formulation, through the real local model.
    results = json.loads((smoke / "llm" / "results.json").read_text())
    assert set(results["per_formulation"]) == {"equations", "lives-with", "kingdoms", "functions", "relatives"}
    assert results["identity"]["model"] == "smollm2"


def test_rerun_skips_finished_stages_and_resumes_an_unfinished_one(smoke, tmp_path, cli_process):
    out = tmp_path / "copy"
    shutil.copytree(smoke, out)
    samples = out / "llm" / "samples.jsonl"
    before = {p: p.stat().st_mtime_ns for p in (samples, out / "figure4" / "summary.csv", out / "circuits" / "done.json")}
    # An emergence stage cut short after training: its marker and timeline are gone.
    (out / "emergence" / "done.json").unlink()
    shutil.rmtree(out / "emergence" / "timeline")
    r = cli_process("reproduce", "--preset", "smoke", "--out", str(out))
    assert r.code == 0, r.err
    summary = json.loads((out / "summary.json").read_text())
    assert all(summary["stages"][s].get("already_done") for s in STAGE_NAMES if s != "emergence")
    assert not summary["stages"]["emergence"].get("already_done")
    assert (out / "emergence" / "timeline" / "seed0" / "timeline.json").exists()
    assert {p: p.stat().st_mtime_ns for p in before} == before
    # Its training run was complete: the second attempt starts at the last step and trains nothing.
    attempts = (out / "emergence" / "runs" / "transformer-D" / "attempts.jsonl").read_text().splitlines()
    assert len(attempts) == 2 and json.loads(attempts[1])["resumed_from"] == 40


def test_a_published_emergence_stage_is_judged_in_the_reference_section(smoke, tmp_path):
    """results/sec9 is a reproduce folder's emergence stage: published, its Section 9 claims are
    re-judged from the kept files alone (as the run judged them), and the stages it did not run
    are left out of the reference section instead of listed as NOT RUN."""
    from stackedheads.publishing import references
    from stackedheads.publishing.publish import publish

    ref = publish(
        smoke, tmp_path / "results" / "sec9", title="Transformer D (smoke)", command="c", commit="0" * 40, wall_s=1.0,
        include=("emergence/done.json", "emergence/runs/transformer-D/*.json", "emergence/runs/transformer-D/metrics.csv",
                 "emergence/discovered/seed*/*", "emergence/timeline/seed*/*"),
    )
    assert not any(f.endswith(".safetensors") for f in ref.files)
    loaded = references.load(tmp_path / "results" / "sec9")
    own = {c.id: c.verdict for c in claims.collect(smoke) if c.id.startswith("E")}
    assert {c.id: c.verdict for c in loaded["claims"]} == own and len(own) == 4
    page = tmp_path / "page"
    page.mkdir()
    (page / "config.json").write_text(json.dumps({"preset": {"name": "custom"}}))
    text = write_report(page, tmp_path / "results").read_text()
    section = text[text.index('id="references"'):text.index('id="run"')]
    assert "Transformer D (smoke)" in section and ">E3</td>" in section and "NOT RUN" not in section
    # Its nested figures are shown, captioned by where they lie.
    assert "emergence / timeline / seed0 / losses" in section
    assert (page / "report" / "img" / "sec9__emergence__timeline__seed0__losses.png").exists()


def test_twin_seeds_runs_a_seed_as_the_demo_does(smoke, tmp_path):
    """studies/twin_seeds.py (the seed study of the twins) runs one seed's stage as
    `reproduce` does: the demo's own circuits stage is the oracle for its loss and A1-A5."""
    import importlib.util
    import os
    import subprocess
    import sys

    from stackedheads import presets
    from stackedheads.claims import SECTIONS
    from stackedheads.state.layout import CIRCUITS_RUN

    root = Path(__file__).parents[1]
    script = root / "studies" / "twin_seeds.py"
    ran = json.loads((smoke / "circuits" / "runs" / CIRCUITS_RUN / "config.json").read_text())
    seed, cell = presets.REPRODUCE.get("smoke").circuits_seeds[0], f"{ran['dtype']}-t{ran['threads']}"
    r = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--demo", "smoke", "--seeds", str(seed),
                        "--cells", cell], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    spec = importlib.util.spec_from_file_location("twin_seeds", script)
    twin_seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin_seeds)
    got = twin_seeds.verdicts(tmp_path, "circuits", cell, seed)
    demo = json.loads((smoke / "circuits" / "done.json").read_text())
    assert got["final"] == demo["train"]["seeds"][str(seed)]["final_val_loss"]
    assert got["useful"] == demo["circuits"][str(seed)]["n_useful_heads"]
    # A seed judged alone gives the verdict the demo, judged over its seeds, records for it.
    assert got["claims"] == {c.id: c.seeds.get(str(seed), c.verdict) for c in SECTIONS.get("sec8").evaluate(smoke)}
    assert f"| {seed} (the demo's) | " in r.stdout and (tmp_path / "circuits.md").read_text() == r.stdout
    assert twin_seeds.verdicts(tmp_path, "emergence", cell, seed) is None  # not run: no row values
    bad = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--cells", "float16-t2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a cell" in bad.stderr


def test_another_preset_in_the_same_folder_is_refused(smoke, tmp_path, cli):
    out = tmp_path / "copy"
    shutil.copytree(smoke, out)
    r = cli("reproduce", "--preset", "quick", "--out", str(out))
    assert r.code == 2 and "another preset" in r.err and "Traceback" not in r.err


def test_paper_preset_asks_for_a_model_before_doing_anything(tmp_path, cli):
    r = cli("reproduce", "--preset", "paper", "--out", str(tmp_path / "p"))
    assert r.code == 2 and "--llm-backend" in r.err
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("args", [("--dtype", "float16"), ("--device", "tpu"), ("--skip", "everything")])
def test_bad_training_options_fail_before_any_stage(tmp_path, args, cli):
    r = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "r"), *args)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# --- claims ---------------------------------------------------------------------------------------


def _cell(acc, lo, chance, n=100, formulation="equations", depth=5):
    return {"formulation": formulation, "depth": depth, "accuracy": acc, "ci95": [lo, acc + 0.05], "chance": chance, "n": n}


def test_llm_claims_compare_the_interval_with_chance():
    good = {"identity": {"model": "m"}, "per_formulation": {"equations": _cell(0.9, 0.85, 0.25)},
            "per_depth": {"equations": {"5": _cell(0.9, 0.85, 0.25)}}}
    l1, l2 = sec4.llm_claims(good)
    assert l1.verdict == claims.PASS and l2.verdict == claims.PASS
    at_chance = {**good, "per_formulation": {"equations": _cell(0.3, 0.2, 0.25)}}
    assert sec4.llm_claims(at_chance)[0].verdict == claims.FAIL
    low = {**good, "per_depth": {"equations": {"3": _cell(0.6, 0.5, 0.25, depth=3), "9": _cell(0.1, 0.0, 0.25, depth=9)}}}
    assert sec4.llm_claims(low)[1].verdict == claims.FAIL
    assert [c.verdict for c in sec4.llm_claims(None)] == [claims.NOT_RUN] * 2


def test_theory_claims_pass_on_the_simulation_and_fail_on_a_broken_row():
    rows = [r.to_dict() for r in theory.theory_table(30)]
    assert [c.verdict for c in sec5.theory_claims(rows)] == [claims.PASS] * 3
    rows[9] = {**rows[9], "min_layers": rows[9]["paper_bound"] - 1}
    t1, t2, t3 = sec5.theory_claims(rows)
    assert t1.verdict == claims.FAIL and "D = [10]" in t1.measured and t2.verdict == claims.FAIL


def test_smoke_models_prove_nothing_about_circuits(smoke, cli):
    """The smoke models learn nothing: no circuit or emergence claim may pass (A3 and E1
    included), and the command re-evaluates the same verdicts from the files."""
    verdicts = {c["id"]: c["verdict"] for c in json.loads((smoke / "report" / "claims.json").read_text())}
    for cid in ("A2", "A3", "A4", "A5", "E1", "E2", "E3"):
        assert verdicts[cid] == claims.INCONCLUSIVE, cid
    assert verdicts["C2"] != claims.PASS and verdicts["C3"] != claims.PASS
    r = cli("claims", str(smoke), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == json.loads((smoke / "report" / "claims.json").read_text())
    page = (smoke / "report" / "index.html").read_text()
    assert "INCONCLUSIVE" in page and "held-out sequences" in page
    assert "N = 2 chains, not the paper's 4." in page  # the smoke sweep is N = 2: the report says why


# --- the report -----------------------------------------------------------------------------------


def test_report_escapes_prompt_and_model_text(smoke, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(smoke, out)
    evil = "<script>alert('x')</script>"
    q = json.loads((out / "prompts" / "equations.jsonl").read_text().splitlines()[0])
    q["prompt"] = f"a = 1. {evil} a = ?"
    (out / "prompts" / "equations.jsonl").write_text(json.dumps(q) + "\n")
    records = [json.loads(line) for line in (out / "llm" / "samples.jsonl").read_text().splitlines()]
    records[0]["draws"][0]["text"] = '<img src=x onerror="alert(1)">'
    (out / "llm" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page = write_report(out).read_text()
    assert evil not in page and "onerror=\"alert" not in page
    assert html.escape(evil, quote=False).replace("'", "&#39;") in page
    assert "<script" not in page  # the report has no script of its own either


def test_report_needs_a_reproduce_folder(tmp_path, cli):
    r = cli("report", str(tmp_path))
    assert r.code == 2 and "not a reproduce folder" in r.err


def _inspect(driver, page: Path) -> dict:
    driver.get(page.as_uri())
    return {
        "errors": [e for e in driver.get_log("browser") if e["level"] == "SEVERE"],
        "images": driver.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])"
        ),
        "claims": driver.execute_script(
            "const t = document.getElementById('claims-table');"
            "return t ? Array.from(t.tBodies[0].rows).map(r => r.cells[r.cells.length - 1].textContent) : null"
        ),
        "sections": driver.execute_script("return Array.from(document.querySelectorAll('h2[id]')).map(h => h.id)"),
    }


def test_report_in_headless_chromium(smoke, tmp_path):
    why = missing()
    assert why is None, why
    page = smoke / "report" / "index.html"
    with chromium() as driver:
        seen = _inspect(driver, page)
        assert seen["errors"] == []
        # The theory plot, Figs. 2, 4, 5, App. C (grid, mean), Figs. 6, 7 (circuit, summary). The
        # smoke models are untrained, so their circuits have no path for App. D to follow.
        expected_figures = {
            f"img/{name}.png" for name in (
                "theory__theory", "llm__figure2", "figure4__figure4", "circuits__discovered__seed0__circuit",
                "circuits__maps__seed0__grid", "circuits__maps__seed0__mean", "emergence__timeline__seed0__losses",
                "emergence__discovered__seed0__circuit", "emergence__timeline__seed0__emergence_summary",
            )
        }
        assert expected_figures <= {src for src, _, _ in seen["images"]}
        broken = [src for src, complete, width in seen["images"] if not (complete and width > 0)]
        assert broken == [] and all(src.startswith("img/") for src, _, _ in seen["images"])
        expected = json.loads((smoke / "report" / "claims.json").read_text())
        assert seen["claims"] == [c["verdict"] for c in expected]
        assert {"claims", "sec3", "sec4", "sec5", "sec7", "sec8", "sec9", "run"} <= set(seen["sections"])
        shot = tmp_path / "report.png"
        full_page_screenshot(driver, shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000

        # The same checks catch a missing figure: they are not vacuous.
        copy = tmp_path / "copy"
        shutil.copytree(smoke / "report", copy)
        victim = next((copy / "img").glob("figure4__figure4.png"))
        victim.unlink()
        broken = [src for src, complete, width in _inspect(driver, copy / "index.html")["images"] if not width]
        assert broken == ["img/figure4__figure4.png"]


# --- damaged folders and bad options ---------------------------------------------------------------

THEORY_ONLY = ("--skip", "prompts", "--skip", "llm", "--skip", "figure4", "--skip", "circuits", "--skip", "emergence")


def _verdicts(cli, out: Path) -> dict[str, str]:
    r = cli("claims", str(out), "--json")
    assert r.code == 0, r.err
    return {c["id"]: c["verdict"] for c in json.loads(r.out)}


def test_following_the_advice_for_a_damaged_file_rebuilds_it(smoke, tmp_path, cli):
    """A damaged circuits/discovered/seed0/summary.json or figure4/sweep.json is rebuilt by the
    re-run, not shown "done earlier" with A1-A5 / C0-C3 NOT RUN: a stage's done marker vouches
    for its files."""
    out = tmp_path / "copy"
    shutil.copytree(smoke, out)
    before = _verdicts(cli, out)
    damaged = [out / "circuits" / "discovered" / "seed0" / "summary.json", out / "figure4" / "sweep.json"]
    for path in damaged:
        path.write_text('{"cut sho')
    r = cli("claims", str(out))
    assert r.code == 2 and "delete it" in r.err, r.err
    for path in damaged:  # the advice
        path.unlink()
    r = cli("reproduce", "--preset", "smoke", "--out", str(out))
    assert r.code == 0, r.err
    assert "running the circuits stage again" in r.err and "running the figure4 stage again" in r.err
    summary = json.loads((out / "summary.json").read_text())
    assert [s for s in STAGE_NAMES if not summary["stages"][s].get("already_done")] == ["figure4", "circuits"]
    assert all(p.exists() for p in damaged)
    after = _verdicts(cli, out)
    assert after == before and all(after[c] != claims.NOT_RUN for c in ("A1", "A5", "C0", "C3"))


@pytest.mark.slow
def test_a_deleted_or_damaged_run_file_is_rebuilt_as_said(tmp_path, cli, smoke):
    """A run's deleted config.json or metrics.csv, or a metrics.csv that is not UTF-8: when
    `reproduce` says "running the stage again to rebuild it", it rebuilds it."""
    out = tmp_path / "copy"
    shutil.copytree(smoke, out)
    before = _verdicts(cli, out)
    fig4_run = sorted((out / "figure4" / "runs").iterdir())[0]
    circuits_run = out / "circuits" / "runs" / CIRCUITS_RUN
    (fig4_run / "config.json").unlink()
    (circuits_run / "metrics.csv").unlink()
    last = sorted((out / "figure4" / "runs").iterdir())[-1]
    (last / "metrics.csv").write_bytes(b"\xff\xfe" + (last / "metrics.csv").read_bytes())
    r = cli("reproduce", "--preset", "smoke", "--out", str(out))
    assert r.code == 0, r.err
    assert "running the figure4 stage again" in r.err and "running the circuits stage again" in r.err
    assert (fig4_run / "config.json").is_file() and (circuits_run / "metrics.csv").is_file()
    (last / "metrics.csv").read_text(encoding="utf-8")
    for stage, path in (("figure4", fig4_run / "config.json"), ("circuits", circuits_run / "metrics.csv"),
                        ("figure4", last / "metrics.csv")):
        assert str(path.relative_to(out / stage)) in json.loads((out / stage / "done.json").read_text())["vouches"]
    assert _verdicts(cli, out) == before
    r = cli("reproduce", "--preset", "smoke", "--out", str(out))
    assert r.code == 0 and "running" not in r.err, r.err


def test_a_missing_stage_file_reruns_its_stage(tmp_path, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0, stderr
    good = {p.name: p.read_bytes() for p in (out / "theory").glob("theory.*")}
    (out / "theory" / "theory.png").unlink()
    code, _, stderr = cli("report", str(out))
    assert code == 0, stderr
    assert "to run again (theory/theory.png is missing or damaged)" in (out / "report" / "index.html").read_text()
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0 and "theory.png is missing or damaged: running the theory stage again" in stderr, stderr
    assert not json.loads((out / "summary.json").read_text())["stages"]["theory"].get("already_done")
    assert {p.name: p.read_bytes() for p in (out / "theory").glob("theory.*")}.keys() == good.keys()
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0 and json.loads((out / "summary.json").read_text())["stages"]["theory"]["already_done"]


@pytest.mark.parametrize("args, message", [
    (("--llm-concurrency", "0"), "--llm-concurrency must be >= 1, got 0"),
    (("--llm-concurrency", "-3"), "--llm-concurrency must be >= 1, got -3"),
    (("--llm-concurrency", "3"), "--llm-concurrency does not apply to backend llamacpp"),
    (("--llm-api-key-env", "MY_KEY"), "--llm-api-key-env does not apply to backend llamacpp"),
    (("--llm-threads", "2", "--skip", "llm"), "--llm-* options do not apply with --skip llm"),
])
def test_llm_options_for_the_presets_model_are_validated(tmp_path, args, message, cli):
    """`--llm-concurrency 0` with the preset's backend is refused, not recorded as 1."""
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), *args)
    assert code == 2 and message in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "rep").exists()


def test_report_refusing_a_folder_leaves_nothing_behind(tmp_path, cli):
    """`report /` refuses the folder before writing anything there (no /.lock)."""
    code, _, stderr = cli("report", str(tmp_path))
    assert code == 2 and "not a reproduce folder" in stderr
    assert list(tmp_path.iterdir()) == []


def test_a_busy_folder_is_one_line_without_out(tmp_path, cli):
    """`report` on a held folder does not advise "another --out" (it has none)."""
    from stackedheads.state.write import FolderLock

    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0, stderr
    with FolderLock(out, "reproduce"):
        code, _, stderr = cli("report", str(out))
    assert code == 2 and "is in use by" in stderr and "--out" not in stderr, stderr


@pytest.mark.parametrize("change", [{"preset": "smoke"}, {"device": 3}, {"llm": "smollm2"}])
def test_a_reproduce_config_of_the_wrong_shape_says_so(tmp_path, change, cli):
    """A config.json with fields of the wrong type is named as damaged, not "another preset"."""
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0, stderr
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **change}))
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 2 and "config.json has the wrong shape" in stderr and "another preset" not in stderr, stderr
    assert next(iter(change)) in stderr


# --- Secrets, damaged state, locks, interrupts and options validated before writing

from helpers import SECRET, URL_PASSWORD, Server, assert_nowhere, echo_headers, one_error, refused_port  # noqa: E402


@pytest.mark.slow
def test_reproduce_server_error_is_one_line_and_secret_free(tmp_path, monkeypatch, cli, no_backoff):
    """A server that is down (or echoes headers) during `reproduce`: one line, no traceback."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    args = ["reproduce", "--preset", "smoke", "--llm-backend", "openai", "--llm-model", "m",
            "--skip", "figure4", "--skip", "circuits", "--skip", "emergence"]
    with Server(echo_headers(401)) as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli(*args, "--out", tmp_path / "rep", "--llm-base-url", url)
    assert code == 1 and "Traceback" not in stderr
    assert one_error(stderr) and "HTTP 401" in stderr
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)
    with refused_port() as port:  # another folder: the recorded server is part of a run's settings
        code, stdout, stderr = cli(*args, "--out", tmp_path / "down", "--llm-base-url", f"http://127.0.0.1:{port}/v1")
    assert code == 1 and "Traceback" not in stderr and one_error(stderr)
    assert "giving up" in stderr


@pytest.mark.slow
def test_reproduce_never_writes_url_credentials(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "rep"
    with Server(text_of=lambda sol: f"{sol.answer}\n{{'authorization': 'Bearer {SECRET}'}}") as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--llm-backend", "openai", "--llm-model", "m",
             "--llm-base-url", url, "--skip", "figure4", "--skip", "circuits", "--skip", "emergence")
    assert code == 0, stderr
    written = [p.name for p in out.rglob("*") if p.is_file()]
    assert {"samples.jsonl", "config.json", "done.json", "summary.json", "index.html"} <= set(written)
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)


def test_damaged_reproduce_state_is_one_line(tmp_path, cli):
    out = tmp_path / "rep"
    args = ["reproduce", "--preset", "smoke", "--out", str(out), "--skip", "llm", "--skip", "figure4",
            "--skip", "circuits", "--skip", "emergence", "--skip", "prompts"]
    code, _, stderr = cli(*args)
    assert code == 0, stderr
    (out / "theory" / "done.json").write_text('{"rows": 6, "fi')  # cut off by a full disk
    code, _, stderr = cli(*args)
    assert code == 2 and "done.json is damaged" in stderr and "delete it" in stderr
    assert one_error(stderr)
    (out / "theory" / "done.json").write_text("{}")  # valid JSON, wrong shape
    code, _, stderr = cli(*args)
    assert code == 2 and "done.json is damaged" in stderr and one_error(stderr)
    (out / "theory" / "done.json").unlink()
    (out / "config.json").write_text("[]")
    code, _, stderr = cli(*args)
    assert code == 2 and "config.json has the wrong shape" in stderr


def test_reproduce_folder_locked(tmp_path, held, cli):
    held(tmp_path / "rep")
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--skip", "llm")
    assert code == 2 and "in use by pid" in stderr
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [".lock"]


def test_interrupt_during_reproduce_is_one_line(tmp_path, monkeypatch, cli):
    from stackedheads import reproduce

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setitem(reproduce.STAGES, "prompts", interrupted)
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--skip", "llm",
                               "--skip", "figure4", "--skip", "circuits", "--skip", "emergence")
    assert code == 130 and "Traceback" not in stderr and "stackedheads: interrupted" in stderr


def test_reproduce_llm_concurrency_validated_before_writing(tmp_path, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--llm-backend", "openai",
                               "--llm-model", "m", "--llm-concurrency", "0")
    assert code == 2 and "--llm-concurrency" in stderr and not out.exists()


@pytest.mark.parametrize(
    "llm, message",
    [
        (["--llm-backend", "bogus", "--llm-model", "m"], "unknown --llm-backend"),
        (["--llm-backend", "openai", "--llm-model", "m", "--llm-mode", "bogus", "--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-mode"),
        (["--llm-backend", "llamacpp", "--llm-model", "nosuchmodel"], "unknown model"),
        (["--llm-backend", "llamacpp", "--llm-model", "smollm2", "--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-base-url"),
        (["--llm-backend", "openai", "--llm-model", "m", "--llm-api-key-env", "STACKEDHEADS_NO_SUCH_VAR"], "no API key"),
    ],
)
def test_reproduce_llm_choice_validated_before_writing(tmp_path, llm, message, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *llm)
    assert code == 2 and message in stderr and one_error(stderr)
    assert not out.exists()


def test_another_preset_or_dtype_is_refused_naming_what_differs(tmp_path, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *THEORY_ONLY)
    assert code == 0, stderr
    code, _, stderr = cli("reproduce", "--preset", "quick", "--out", str(out), *THEORY_ONLY)
    assert code == 2 and "holds a reproduce run of another preset (" in stderr and "name: smoke there, quick asked" in stderr, stderr
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--dtype", "float32", *THEORY_ONLY)
    assert code == 0, stderr  # an unset dtype is filled in...
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--dtype", "bfloat16", *THEORY_ONLY)
    assert code == 2 and "of other settings (dtype: float32 there, bfloat16 asked)" in stderr, stderr  # ...never changed


def test_sections_8_and_9_are_judged_over_the_twins_seeds_in_claims_and_report(smoke, cli):
    """The twins train seeds 0..n-1 (no seed chosen): A2-A5 and E1-E4 say "k of n", and
    `claims` and the report show each seed's verdicts beside the verdict over the seeds."""
    from stackedheads.claims import seed_rows
    from stackedheads import presets

    seeds = presets.reproduce("smoke").circuits_seeds
    found = claims.collect(smoke)
    judged = [c for c in found if c.id[0] in "AE" and c.id[1:].isdigit() and c.verdict != "NOT RUN"]
    assert {c.id for c in judged} >= {"A2", "A3", "A4", "A5", "E1", "E2", "E3", "E4"}
    for c in judged:
        assert set(c.seeds) == {str(s) for s in seeds}, c.id
        assert f" of {len(seeds)}" in c.measured.split(":")[0], c.id  # "PASS on 1 of 2 seeds; ..."
    tables = {t["title"]: t for t in seed_rows(found)}
    assert len(tables) == 2  # Sections 8 and 9
    for t in tables.values():
        assert [r[0] for r in t["rows"]] == [*map(str, seeds), f"over {len(seeds)} seeds"]
    page = (smoke / "report" / "index.html").read_text()
    for title in tables:
        assert html.escape(title) in page
    r = cli("claims", str(smoke))
    assert r.code == 0 and "seed by seed" in r.out
