"""Reference results (publishing/: references.py, publish.py, index.py; `stackedheads publish`): what results/ keeps is what a fresh
clone has, publish never reaches outside its source or writes what git ignores, and
the tracked references judge as the README says."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stackedheads import claims
from stackedheads.publishing import references
from stackedheads.publishing.index import INDEX_FILE, index_markdown
from stackedheads.publishing.publish import destination
from stackedheads.publishing.publish import publish as publish_reference
from stackedheads.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
PROJECT_GITIGNORE = ROOT / ".gitignore"


def git(*args: object, cwd: Path) -> str:
    r = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=True)
    return r.stdout


def git_repo(path: Path, gitignore: str) -> Path:
    """A git repository holding ``gitignore`` as its one commit."""
    path.mkdir(parents=True)
    git("init", "-q", cwd=path)
    (path / ".gitignore").write_text(gitignore)
    git("add", ".gitignore", cwd=path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start", cwd=path)
    return path


def head(repo: Path) -> str:
    return git("rev-parse", "HEAD", cwd=repo).strip()


def a_run(path: Path) -> Path:
    """A folder laid out like reproduce's circuits stage: a run with its config, summary and metrics."""
    run = path / "circuits" / "runs" / "transformers-A-C"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}\n")
    (run / "summary.json").write_text('{"config": {}, "seeds": {}}\n')
    (run / "metrics.csv").write_text("step,seed\n1,0\n")
    (run / "step_000001.safetensors").write_bytes(b"\0" * 16)  # never published
    (path / "notes.md").write_text("a top-level file\n")
    return path


INCLUDE = ("--include", "circuits/runs/*/*.json", "--include", "circuits/runs/*/metrics.csv")


def publish(cli, src: Path, results: Path, *extra: object, commit: str = "0" * 40):
    return cli("publish", src, "--name", "ref", "--title", "t", "--command", "c", "--commit", commit,
               "--results", results, *extra)


def refused(r, *words: str) -> None:
    assert r.code == 2, r
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    for w in words:
        assert w in r.err, r.err


def test_publish_refuses_a_file_git_would_ignore_and_writes_nothing(cli, tmp_path):
    """The old unanchored `runs/` ignored results/*/circuits/runs/...: a clone lacked them."""
    src = a_run(tmp_path / "src")
    old = git_repo(tmp_path / "old", "runs/\n")
    r = publish(cli, src, old / "results", *INCLUDE, commit=head(old))
    refused(r, "ignored by git", "runs/", "circuits/runs/transformers-A-C")
    assert not (old / "results").exists()
    # The project's own .gitignore keeps them.
    new = git_repo(tmp_path / "new", PROJECT_GITIGNORE.read_text())
    r = publish(cli, src, new / "results", *INCLUDE, commit=head(new))
    assert r.code == 0, r.err
    ref = json.loads((new / "results" / "ref" / "reference.json").read_text())
    assert ref["files"] == ["notes.md", "circuits/runs/transformers-A-C/config.json",
                            "circuits/runs/transformers-A-C/summary.json", "circuits/runs/transformers-A-C/metrics.csv"]
    assert git("status", "--porcelain", "--untracked-files=all", "results", cwd=new).count("?? results/ref/") == 5


@pytest.mark.parametrize("where", ["top level", "inside an included folder", "a linked folder", "a broken link"])
def test_publish_refuses_symbolic_links(cli, tmp_path, where):
    src = a_run(tmp_path / "src")
    secret = tmp_path / "outside" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"password": "x"}')
    run = src / "circuits" / "runs" / "transformers-A-C"
    if where == "top level":
        (src / "passwd.json").symlink_to(secret)
    elif where == "inside an included folder":
        (run / "leak.json").symlink_to(secret)
    elif where == "a linked folder":
        (src / "circuits" / "runs" / "linked").symlink_to(secret.parent, target_is_directory=True)
    else:
        (src / "gone.json").symlink_to(tmp_path / "nothing.json")
    r = publish(cli, src, tmp_path / "results", *INCLUDE)
    refused(r, "symbolic link")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("pattern", ["../../*.json", "../outside/*.json", "circuits/../../*.json", "/etc/*.conf", "", "nothing/*.json"])
def test_include_stays_inside_the_source_and_must_match(cli, tmp_path, pattern):
    src = a_run(tmp_path / "deep" / "src")
    (tmp_path / "deep" / "outside").mkdir()
    (tmp_path / "deep" / "outside" / "x.json").write_text("{}")
    (tmp_path / "top.json").write_text("{}")
    before = sorted(tmp_path.rglob("*"))
    r = publish(cli, src, tmp_path / "results", "--include", pattern)
    refused(r, "--include")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, inside results/ or outside it


@pytest.mark.parametrize("wall", ["nan", "inf", "-inf", "-1"])
def test_a_wall_time_that_is_not_a_finite_number_is_refused_before_writing(cli, tmp_path, wall):
    src = a_run(tmp_path / "src")
    r = publish(cli, src, tmp_path / "results", f"--wall-s={wall}")
    refused(r, "--wall-s")
    assert not (tmp_path / "results").exists()
    assert publish(cli, src, tmp_path / "results", "--wall-s=12.5").code == 0
    assert json.loads((tmp_path / "results" / "ref" / "reference.json").read_text())["wall_s"] == 12.5


def test_the_loader_refuses_a_reference_whose_listed_file_is_missing(cli, tmp_path):
    src = a_run(tmp_path / "src")
    assert publish(cli, src, tmp_path / "results", *INCLUDE).code == 0
    folder = tmp_path / "results" / "ref"
    assert references.load(folder)["files"][-1] == "circuits/runs/transformers-A-C/metrics.csv"
    (folder / "circuits" / "runs" / "transformers-A-C" / "summary.json").unlink()
    with pytest.raises(UsageError, match="lists circuits/runs/transformers-A-C/summary.json, which is not a file in it"):
        references.load(folder)
    ref = json.loads((folder / "reference.json").read_text())
    (folder / "reference.json").write_text(json.dumps({**ref, "files": ["notes.md", "../../src/notes.md"]}))
    with pytest.raises(UsageError, match=r"lists \.\./\.\./src/notes\.md"):
        references.load(folder)


# --- the references the repository keeps ------------------------------------------------------


def tracked(folder: str) -> list[str]:
    """The files of ``folder`` that git tracks, relative to the repository (what a clone has)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return git("ls-files", "-z", folder, cwd=ROOT).split("\0")[:-1]


def fresh_copy(tmp_path: Path, name: str) -> Path:
    """results/NAME as a fresh clone of this working tree has it: the tracked files only."""
    for rel in tracked(f"results/{name}"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, tmp_path / rel)
    return tmp_path / "results" / name


def test_every_tracked_reference_lists_only_tracked_files():
    refs = [p for p in tracked("results") if p.endswith("/" + references.REFERENCE_FILE)]
    assert {"results/sec8/gpt2/reference.json", "results/sec9/gpt2/reference.json", "results/sec9/decay-all/reference.json",
            "results/depth/quick/reference.json", "results/sec9/lr-warmup-constant/reference.json"} <= set(refs)
    files = set(tracked("results"))
    for path in refs:
        folder = path.rsplit("/", 1)[0]
        listed = json.loads((ROOT / path).read_text())["files"]
        assert listed and {f"{folder}/{f}" for f in listed} <= files, (path, sorted({f"{folder}/{f}" for f in listed} - files))
        references.load(ROOT / folder)


def test_every_reference_is_named_by_its_place_and_titled_without_the_screens_letters():
    """results/<section>/<recipe>: a reference's name is its path under results/ (the report and
    results/README.md list it so), and its title says what the recipe changes, not a letter."""
    refs = [p for p in tracked("results") if p.endswith("/" + references.REFERENCE_FILE)]
    assert len(refs) >= 20
    for path in refs:
        ref = json.loads((ROOT / path).read_text())
        assert ref["name"] == path.removeprefix("results/").rsplit("/", 1)[0], path
        assert not re.search(r"\([a-k]\)", ref["title"]) and "Recipe screen" not in ref["title"], (path, ref["title"])
        assert "results/sec9-screen" not in ref["command"] + ref["notes"], path
    top = {p.split("/")[1] for p in tracked("results") if p.count("/") > 1}
    assert top == {"depth", "llm-circuit", "sec4", "sec8", "sec9"}


def test_every_published_timeline_summary_covers_the_seeds_beside_it():
    """A result combined from pieces holds one timeline folder per seed; its summary.json (the
    ordering over runs) must count them all, not only the first piece's."""
    summaries = [p for p in tracked("results") if p.endswith("/timeline/summary.json")]
    assert "results/sec9/lr-constant/emergence/timeline/summary.json" in summaries
    for path in summaries:
        folder = (ROOT / path).parent
        seeds = sorted(p.name[4:] for p in folder.glob("seed*") if (p / "timeline.json").exists())
        summary = json.loads((ROOT / path).read_text())
        assert sorted(summary["seeds"]) == seeds, path
        orders = [json.loads((folder / f"seed{s}" / "timeline.json").read_text())["order"] for s in seeds]
        assert summary["ordering"]["runs"] == len(seeds), path
        assert summary["ordering"]["counts"] == {o: orders.count(o) for o in summary["ordering"]["counts"]}, path


def _title_seeds(title: str) -> set[int]:
    """Every seed a title names after "seed" or "seeds": "seed 0", "seeds 0 and 1", "seeds 0-3"."""
    out: set[int] = set()
    for phrase in re.findall(r"\bseeds? (\d+(?:(?:, | and |-)\d+)*)", title):
        for part in re.split(r", | and ", phrase):
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def test_every_screen_result_title_names_the_seeds_it_holds():
    """A piece published later keeps the first piece's title unless given one: the title must still
    say which seeds the result holds (the README and report list results by their titles)."""
    from stackedheads import recipe_screen

    folders = [ROOT / p.rsplit("/", 1)[0] for p in tracked("results/sec9") if p.endswith("/reference.json")]
    assert len(folders) >= 15
    for folder in folders:
        held = {int(r.seed) for run in recipe_screen.collect_seeds([folder]) for r in run.rows}
        title = json.loads((folder / "reference.json").read_text())["title"]
        assert _title_seeds(title) == held, (folder.name, title, sorted(held))


def test_results_sec9_judges_as_the_readme_says_from_a_fresh_clone(tmp_path):
    folder = fresh_copy(tmp_path, "sec9/gpt2")
    found = {c.id: c for c in claims.folder_claims(folder) if c.id.startswith("E")}
    assert {k: c.verdict for k, c in found.items()} == {
        "E1": claims.INCONCLUSIVE, "E2": claims.INCONCLUSIVE, "E3": claims.FAIL, "E4": claims.PASS}
    # Four seeds: E1 is undecided by seed 3's unexplained row, E3 fails on seed 3 under every
    # reading (seed 1 is in order by its first new paths, out of order by its last).
    assert "combined ablation 0.0589 over every position, below 0.05 needed" in found["E1"].measured.split("seed 3:")[1]
    assert "partial circuit: 1 unexplained rows made uniform" in found["E1"].measured.split("seed 3:")[1]
    assert "seed 1: in order" in found["E3"].measured and "seed 3: out of order" in found["E3"].measured
    assert found["E3"].robust_verdict == claims.FAIL
    assert {r.reading: r.seeds["1"] for r in found["E3"].readings}["last-path-checkpoint"] == claims.FAIL
    assert "seed 3: in order: first evaluated step below the C2 threshold: x1 400, x2 480, x3 560, x4 640" in found["E4"].measured
    assert [c.id for c in references.load(folder)["claims"]] == ["E1", "E2", "E3", "E4"]
    # Without its run's summary the gated claims name the missing file; E4 needs only the timeline.
    (folder / "emergence" / "runs" / "transformer-D" / "summary.json").unlink()
    found = {c.id: c for c in claims.folder_claims(folder) if c.id.startswith("E")}
    assert {k: c.verdict for k, c in found.items()} == {
        "E1": claims.INCONCLUSIVE, "E2": claims.INCONCLUSIVE, "E3": claims.INCONCLUSIVE, "E4": claims.PASS}
    assert all("emergence/runs/transformer-D/summary.json is missing" in found[k].measured for k in ("E1", "E2", "E3"))
    with pytest.raises(UsageError, match="summary.json, which is not a file in it"):
        references.load(folder)


def test_results_sec9_decay_all_judges_as_the_readme_says_from_a_fresh_clone(tmp_path):
    """The other recipe, as docs/results.md says: E1 passes by App. E's combined validation loss
    and is undecided per position (seed 1's x4 0.076), E3 depends on the reading."""
    folder = fresh_copy(tmp_path, "sec9/decay-all")
    found = {c.id: c for c in claims.folder_claims(folder) if c.id.startswith("E")}
    # E3 leads with its robust verdict: the paper's words do not choose between its readings.
    assert {k: c.verdict for k, c in found.items()} == {
        "E1": claims.PASS, "E2": claims.INCONCLUSIVE, "E3": claims.DEPENDS, "E4": claims.PASS}
    assert {k: c.robust_verdict for k, c in found.items()} == {
        "E1": claims.DEPENDS, "E2": claims.INCONCLUSIVE, "E3": claims.DEPENDS, "E4": claims.PASS}
    per_position = next(r for r in found["E1"].readings if r.reading == "per-position").measured
    assert "x4 0.076/0.050" in per_position.split("seed 1:")[1]
    assert "seed 1: in order: first evaluated step below the C2 threshold: x1 320, x2 1200, x3 1360, x4 1760" in found["E4"].measured


@pytest.mark.parametrize("name, trained, exempt", [("sec9/gpt2", [0, 1, 2, 3], ["norm", "bias"]), ("sec9/decay-all", [0, 1], [])])
def test_results_sec9_is_the_whole_ensemble_and_re_judges_to_its_published_table(tmp_path, cli, name, trained, exempt):
    """Every seed the run trained has its circuit and timeline in the clone, and the per-seed
    table computed from the tracked files alone is the one the run published (seeds.md); the two
    runs differ in the recipe only (which parameters escape weight decay)."""
    folder = fresh_copy(tmp_path, name)
    config = json.loads((folder / "emergence" / "runs" / "transformer-D" / "config.json").read_text())
    seeds = config["seeds"]
    assert seeds == trained and config["optim"]["decay_exempt"] == exempt, (seeds, config["optim"])
    for s in seeds:
        assert (folder / "emergence" / "discovered" / f"seed{s}" / "circuit.json").is_file()
        assert (folder / "emergence" / "timeline" / f"seed{s}" / "timeline.json").is_file()
    r = cli("seeds", folder, "--markdown")
    assert r.code == 0, r.err
    assert r.out.strip() == (folder / "seeds.md").read_text().strip()


def test_results_sec8_decides_a1_over_three_seeds_of_24000_steps_from_a_fresh_clone(tmp_path, cli):
    """Three seeds trained the paper's 24,000 steps; A1 decided from the tracked files."""
    folder = fresh_copy(tmp_path, "sec8/gpt2")
    config = json.loads((folder / "circuits" / "runs" / "transformers-A-C" / "config.json").read_text())
    assert config["steps"] == 24_000 and config["seeds"] == [0, 1, 2]
    r = cli("claims", folder, "--json")
    assert r.code == 0, r.err
    found = {c["id"]: c for c in json.loads(r.out) if c["id"].startswith("A")}
    assert {k: c["verdict"] for k, c in found.items()} == {
        "A1": claims.FAIL, "A2": claims.INCONCLUSIVE, "A3": claims.INCONCLUSIVE, "A4": claims.INCONCLUSIVE, "A5": claims.INCONCLUSIVE}
    # A combined ablation over budget (1.07 and 0.82) cannot say which heads are useful: A2 undecided.
    assert "cannot say which heads are useful" in found["A2"]["measured"]
    assert "seed 1: 0.0043" in found["A1"]["measured"] and "seed 2: 0.7505" in found["A1"]["measured"]
    # seed 2 stayed on the plateau for the paper's whole training: no circuit to judge, and no advice to train longer
    assert "seed 2: the model has not learned the task" in found["A3"]["measured"]
    assert "not learned in the paper's 24,000 steps" in found["A3"]["measured"] and "train longer" not in found["A3"]["measured"]
    assert [c["verdict"] for c in json.loads((folder / "claims.json").read_text()) if c["id"].startswith("A")] == [
        c["verdict"] for c in found.values()]
    r = cli("seeds", folder, "--markdown")
    assert r.code == 0, r.err
    assert r.out.strip() == (folder / "seeds.md").read_text().strip()
    assert [c.id for c in references.load(folder)["claims"]] == ["A1", "A2", "A3", "A4", "A5"]


@pytest.mark.slow
def test_a_published_run_is_judged_the_same_from_a_clone(cli, tmp_path):
    """Train (sec8-smoke), discover its circuit, publish into a git repository with the project's
    .gitignore, commit, clone, and re-judge from the clone: the same claims as the run's own."""
    run = tmp_path / "R"
    stage = run / "circuits"
    model = stage / "runs" / "transformers-A-C"
    for args in (["train", "--preset", "sec8-smoke", "--steps", "20", "--threads", "1", "--out", model],
                 ["circuit", "discover", model, "--out", stage / "discovered"]):
        r = cli(*args)
        assert r.code == 0, r.err
    repo = git_repo(tmp_path / "repo", PROJECT_GITIGNORE.read_text())
    r = cli("publish", run, "--name", "smoke", "--title", "sec8-smoke", "--command", "c", "--wall-s", "1", "--commit", head(repo),
            "--results", repo / "results", "--include", "circuits/runs/*/*.json", "--include", "circuits/runs/*/metrics.csv",
            "--include", "circuits/discovered/seed*/*")
    assert r.code == 0, r.err
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "publish", cwd=repo)
    git("clone", "-q", repo, tmp_path / "clone", cwd=tmp_path)
    listed = json.loads((tmp_path / "clone" / "results" / "smoke" / "reference.json").read_text())["files"]
    assert "circuits/runs/transformers-A-C/metrics.csv" in listed
    assert all((tmp_path / "clone" / "results" / "smoke" / f).is_file() for f in listed)

    def judged(folder: Path) -> dict:
        r = cli("claims", folder, "--json")
        assert r.code == 0, r.err
        return {c["id"]: (c["verdict"], c["measured"]) for c in json.loads(r.out) if c["id"].startswith("A")}

    own = judged(run)
    assert len(own) == 5 and all(v != claims.NOT_RUN for v, _ in own.values())
    assert judged(tmp_path / "clone" / "results" / "smoke") == own



# --- results/README.md ----------------------------------------------------------------------------


def test_results_readme_is_what_the_tracked_references_write(tmp_path):
    """results/README.md lists every tracked reference as its reference.json says."""
    for rel in tracked("results"):
        if rel.endswith("/" + references.REFERENCE_FILE):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, tmp_path / rel)
    expected = index_markdown(tmp_path / "results")
    assert (ROOT / "results" / INDEX_FILE).read_text(encoding="utf-8") == expected, (
        "results/README.md is stale: run `stackedheads results-index`")
    for rel in tracked("results"):
        if rel.endswith("/" + references.REFERENCE_FILE):
            name = rel.removeprefix("results/").rsplit("/", 1)[0]
            assert f"[{name}]({name}/)" in expected


def test_publish_keeps_the_index_current_and_escapes_titles(cli, tmp_path):
    src = a_run(tmp_path / "src")
    results = tmp_path / "results"
    r = cli("publish", src, "--name", "ref", "--title", "a | b <img src=x onerror=alert(1)>", "--command", "c",
            "--commit", "0" * 40, "--results", results, "--wall-s", "7200", *INCLUDE)
    assert r.code == 0, r.err
    index = (results / INDEX_FILE).read_text()
    assert "| [ref](ref/) | a \\| b &lt;img src=x onerror=alert(1)> |" in index and "| 2.0 h |" in index
    assert index == index_markdown(results)
    # a reference that went away leaves the index when it is written again
    shutil.rmtree(results / "ref")
    r = cli("results-index", "--results", results)
    assert r.code == 0, r.err
    assert "[ref]" not in (results / INDEX_FILE).read_text()
    r = cli("results-index", "--results", tmp_path / "nowhere")
    refused(r, "is not a folder")


@pytest.mark.parametrize("name", ["../x", "sec9/../x", "/abs", "a//b", "", "sec9/", ".hidden", "a b"])
def test_a_reference_name_stays_under_the_results_folder(tmp_path, name):
    with pytest.raises(UsageError, match="folder names under the results folder"):
        destination(tmp_path / "results", name)


def test_a_nested_reference_is_named_by_its_path_and_indexed_at_the_results_folder(tmp_path):
    src = a_run(tmp_path / "src")
    root = tmp_path / "results"
    dest = destination(root, "sec9/tl-stack+lr-3e-4")
    ref = publish_reference(src, dest, name="sec9/tl-stack+lr-3e-4", title="t", command="c", commit="0" * 40,
                            wall_s=1.0, include=("circuits/runs/*/*.json",))
    assert ref.name == "sec9/tl-stack+lr-3e-4" == json.loads((dest / "reference.json").read_text())["name"]
    assert "[sec9/tl-stack+lr-3e-4](sec9/tl-stack+lr-3e-4/)" in (root / INDEX_FILE).read_text()
    assert not (root / "sec9" / INDEX_FILE).exists()
    with pytest.raises(UsageError, match="is not where reference"):
        publish_reference(src, root / "elsewhere", name="sec9/x", title="t", command="c", commit="0" * 40, wall_s=1.0)


# --- publish: staging, sources, what git ignores ---------------------------------------------------


def test_a_later_publish_removes_the_staging_folders_of_killed_publishes(cli, tmp_path):
    """A publish killed mid-copy leaves results/.NAME.<pid>.publish; the next publish of NAME
    removes those whose process is gone and leaves a running one's alone."""
    src = a_run(tmp_path / "src")
    results = tmp_path / "results"
    dead = results / ".ref.999999999.publish"
    (dead / "circuits").mkdir(parents=True)
    (dead / "circuits" / "big.json").write_text("{}")
    alive = subprocess.Popen(["sleep", "60"])
    try:
        running = results / f".ref.{alive.pid}.publish"
        running.mkdir()
        other = results / ".other.999999998.publish"  # another name's: its own publish cleans it
        other.mkdir()
        assert publish(cli, src, results, *INCLUDE).code == 0
        assert not dead.exists() and running.is_dir() and other.is_dir()
    finally:
        alive.kill()
        alive.wait()


def _piece(run: Path, seeds: list[int], steps: int = 20, finished: bool = True) -> None:
    """A stage's training run as its summary says (config, seeds, wall time); no summary while training."""
    from stackedheads import presets

    config = presets.get("sec9-smoke").override(seeds=tuple(seeds), steps=steps).to_dict()
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    if finished:
        (run / "summary.json").write_text(json.dumps({"config": config, "wall_s": 1.0, "seeds": {
            str(s): {"final_val_loss": 0.1, "final_partial": {}} for s in seeds}}))


@pytest.mark.parametrize("case, says", [("seed twice", "both hold seed 0"), ("other steps", "settings differ"),
                                        ("still training", "still training")])
def test_publish_refuses_pieces_that_claims_refuses(cli, tmp_path, case, says):
    """One rule for a result trained in pieces (pieces.read_result), in publish as in claims."""
    from stackedheads.state import pieces

    stage = tmp_path / "R" / "emergence"
    _piece(stage / "runs" / "transformer-D", [0])
    extra = stage / "runs" / "transformer-D-more"
    _piece(extra, {"seed twice": [0], "other steps": [1], "still training": [1]}[case],
           steps=30 if case == "other steps" else 20, finished=case != "still training")
    r = cli("publish", tmp_path / "R", "--name", "ref", "--title", "t", "--command", "c", "--commit", "0" * 40,
            "--results", tmp_path / "results", "--include", "emergence/runs/*/*.json")
    refused(r, says)
    assert not (tmp_path / "results").exists()
    if case != "still training":
        with pytest.raises(UsageError, match=says):
            pieces.read_result(stage, "transformer-D")
        with pytest.raises(UsageError, match=says):
            claims.folder_claims(tmp_path / "R")
    else:
        assert pieces.read_result(stage, "transformer-D").unfinished == [extra]


def test_publish_never_writes_inside_its_own_input_and_names_a_results_file(cli, tmp_path):
    src = a_run(tmp_path / "tr1")
    before = sorted(src.rglob("*"))
    r = cli("publish", src, "--name", "ref", "--title", "t", "--command", "c", "--commit", "0" * 40, "--results", src)
    refused(r, "--results", "inside the input")
    assert sorted(src.rglob("*")) == before
    # the results folder holding the run: replacing the reference would take the run with it
    r = cli("publish", src, "--name", "tr1", "--title", "t", "--command", "c", "--commit", "0" * 40,
            "--results", tmp_path)
    refused(r)
    assert sorted(src.rglob("*")) == before
    afile = tmp_path / "results.txt"
    afile.write_text("x")
    r = cli("publish", src, "--name", "ref", "--title", "t", "--command", "c", "--commit", "0" * 40, "--results", afile)
    refused(r, f"{afile} is not a folder")
    assert ".publish" not in r.err


def test_a_commit_must_be_one_of_the_repository_holding_the_results(cli, tmp_path):
    """Where a repository holds results/, --commit must name one of its commits (recorded in
    full); outside one there is nothing to check it against but its spelling."""
    src = a_run(tmp_path / "src")
    repo = git_repo(tmp_path / "repo", PROJECT_GITIGNORE.read_text())
    r = publish(cli, src, repo / "results", *INCLUDE, commit="deadbeef")
    refused(r, "--commit", "deadbeef", "is not a commit of the repository")
    assert not (repo / "results").exists()
    r = publish(cli, src, repo / "results", *INCLUDE, commit=head(repo)[:7])
    assert r.code == 0, r.err
    assert json.loads((repo / "results" / "ref" / "reference.json").read_text())["commit"] == head(repo)
    r = publish(cli, src, tmp_path / "elsewhere", *INCLUDE, commit="deadbeef")
    assert r.code == 0, r.err


def test_a_reference_never_lies_inside_another(cli, tmp_path):
    """`publish --name a/b`, then `--name a/b/c` was accepted, and publishing a/b again deleted
    a/b/c with the rest of the old a/b."""
    src, res = a_run(tmp_path / "src"), tmp_path / "RES"
    ok = cli("publish", src, "--name", "a/b", "--title", "t", "--command", "c", "--commit", "0" * 40,
             "--results", res, *INCLUDE)
    assert ok.code == 0, ok.err
    inner = cli("publish", src, "--name", "a/b/c", "--title", "t", "--command", "c", "--commit", "0" * 40,
                "--results", res, *INCLUDE)
    refused(inner, "inside the reference 'a/b'")
    assert not (res / "a" / "b" / "c").exists()
    # A reference already below a name (laid there by hand) keeps it from being published over.
    shutil.copytree(res / "a" / "b", res / "x" / "y")
    (res / "x" / "reference.json").unlink(missing_ok=True)
    shutil.copytree(res / "a" / "b", tmp_path / "outer")
    shutil.move(tmp_path / "outer", res / "x" / "outer")
    over = cli("publish", src, "--name", "x", "--title", "t2", "--command", "c", "--commit", "0" * 40,
               "--results", res, *INCLUDE)
    refused(over)
    assert (res / "x" / "y" / "reference.json").is_file()


def test_a_title_or_command_that_is_not_utf8_is_one_line_and_writes_nothing(cli, tmp_path):
    """A non-UTF-8 --title put reference.json in place, then failed writing README.md with a
    traceback, and every later publish into the folder failed the same way."""
    src, res = a_run(tmp_path / "src"), tmp_path / "RES"
    bad = b"t\xff\xfe".decode("utf-8", "surrogateescape")
    for option in ("--title", "--command", "--notes"):
        args = {"--title": "t", "--command": "c", "--notes": "n", option: bad}
        r = cli("publish", src, "--name", "ref", *[x for kv in args.items() for x in kv], "--commit", "0" * 40,
                "--results", res, *INCLUDE)
        refused(r, option, "UTF-8")
        assert not (res / "ref").exists()
    ok = cli("publish", src, "--name", "ref", "--title", "t", "--command", "c", "--commit", "0" * 40, "--results", res, *INCLUDE)
    assert ok.code == 0, ok.err


def test_a_damaged_reference_is_named_in_its_place_and_the_others_load(tmp_path):
    """With results/sec9/lr-3e-4/seeds.md moved away, `reproduce` finished every stage and exited
    2 with no index.html, and so did `report`."""
    root = tmp_path / "results"
    for name in ("sec9/lr-3e-4", "sec8/tl-stack"):
        shutil.copytree(ROOT / "results" / name, root / name)
    (root / "sec9" / "lr-3e-4" / "seeds.md").unlink()
    loaded = {r["name"]: r for r in references.load_all(root)}
    assert set(loaded) == {"sec9/lr-3e-4", "sec8/tl-stack"}
    damaged = loaded["sec9/lr-3e-4"]
    assert "damaged" in damaged["title"] and "seeds.md" in damaged["notes"] and damaged["claims"] == []
    assert "damaged" not in loaded["sec8/tl-stack"] and loaded["sec8/tl-stack"]["claims"]


@pytest.mark.parametrize("wall", ["-5", "Infinity", "true"])
def test_results_index_refuses_an_impossible_recorded_value(cli, tmp_path, wall):
    """A hand-edited reference.json with "wall_s": -5 or Infinity was listed as "-5 s" or "inf h"."""
    src, res = a_run(tmp_path / "src"), tmp_path / "RES"
    assert cli("publish", src, "--name", "ref", "--title", "t", "--command", "c", "--commit", "0" * 40,
               "--results", res, *INCLUDE).code == 0
    path = res / "ref" / "reference.json"
    path.write_text(re.sub(r'"wall_s": [^,]*,', f'"wall_s": {wall},', path.read_text()))
    before = (res / "README.md").read_text()
    r = cli("results-index", "--results", res)
    refused(r, str(path), "wall_s")
    assert (res / "README.md").read_text() == before


def test_the_repository_results_folder_is_the_checkouts_results() -> None:
    """``publish`` without --results writes into the checkout's results/, beside src/."""
    from stackedheads.publishing.references import REPOSITORY_RESULTS

    assert REPOSITORY_RESULTS == Path(__file__).resolve().parents[1] / "results"
    assert (REPOSITORY_RESULTS / "README.md").is_file()
