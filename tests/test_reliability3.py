"""Issues 43 and 44, output folders and state files: an empty or root --out, publish through a
link or over an older reference, publish of every kind keeping its verdicts, writes through a
FIFO or a link, damaged figures and tables, bounded reads, refusals that leave nothing behind,
and a truncated metrics.csv rebuilt from the checkpoints."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import copy_run
from helpers import one_error, reproduce_folder, train_config

from stackedheads import presets, storage
from stackedheads.errors import UsageError

PUBLISH = ("--title", "t", "--command", "c", "--commit", "0123abc")


def refused(r, *words: str) -> None:
    assert r.code == 2, r
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    for w in words:
        assert w in r.err, r.err


def claims_json(cli, folder: Path):
    """``claims --json`` as (exit code, verdicts and measurements by id)."""
    r = cli("claims", folder, "--json")
    return r.code, ({c["id"]: (c["verdict"], c["measured"]) for c in json.loads(r.out)} if r.code == 0 else None)


# --- runs of each kind, trained once -----------------------------------------------------------


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """A finished folder of each kind `publish` takes: figure4 sweep, depth sweep, training run,
    llm-bench run, llm comparison."""
    from test_llm_compare import DepthModel, _run

    from stackedheads import depth, sweep
    from stackedheads.claims import beyond, sec7
    from stackedheads.llm import compare
    from stackedheads.training import train

    root = tmp_path_factory.mktemp("kinds")
    sweep.run_figure4(presets.figure4("smoke"), root / "figure4")
    sec7.write_claims(root / "figure4")
    result = depth.run_depth(presets.depth("smoke"), root / "depth")
    beyond.write_claims(root / "depth", result.rows)
    train(presets.get("smoke"), root / "train")
    _run(DepthModel(2, "shallow"), root / "shallow", n=3)
    _run(DepthModel(9, "deep"), root / "deep", n=3)
    compare.compare([root / "shallow", root / "deep"], root / "comparison")
    return root


# --- 43.1: an empty output path ----------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["train", "--preset", "smoke", "--out", ""],
    ["sweep", "figure4", "--preset", "smoke", "--out", ""],
    ["sweep", "depth", "--preset", "smoke", "--out", ""],
    ["reproduce", "--preset", "smoke", "--out", ""],
    ["llm-bench", "--backend", "openai", "--model", "m", "--out", ""],
    ["llm-compare", "A", "B", "-o", ""],
    ["circuit", "discover", "RUN", "--out", ""],
    ["attention", "RUN", "--out", ""],
    ["emergence", "RUN", "--out", ""],
    ["theory", "--out", ""],
    ["theory", "--out", "/"],
    ["prompts", "-f", "equations", "--out", ""],
    ["prompts", "-f", "equations", "--export", ""],
    ["publish", "RUN", "--name", "x", *PUBLISH, "--results", ""],
])
def test_an_empty_output_path_is_refused_by_every_verb(cli, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    refused(r, "--" if "--export" not in args else "--export")
    assert "empty" in r.err or "root" in r.err
    assert list(tmp_path.iterdir()) == []  # nothing written where the user stands


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
    assert sorted(p.name for p in res.iterdir()) == ["mix"]  # no staging folder left beside it
    # A refused publish leaves the reference it would have replaced as it was.
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text(json.dumps(train_config()))
    refused(cli("publish", unfinished, "--name", "mix", *PUBLISH, "--results", res), "unfinished")
    assert json.loads((res / "mix" / "reference.json").read_text()) == ref


def test_a_reference_names_the_machines_its_run_trained_on(cli, kinds, tmp_path):
    """A run resumed on a lent GPU and published from a CPU: reference.json's machine is where the
    steps ran (segments.jsonl), each machine once, not the machine that copied the files."""
    from stackedheads.provenance import SEGMENTS_FILE, machine, read_segments

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
    if kind == "figure4":  # the case: C0 FAIL, C1-C3 INCONCLUSIVE, never NOT RUN
        assert before[1] and all(v != "NOT RUN" for v, _ in before[1].values())
        from stackedheads import references

        loaded = references.load(tmp_path / "res" / "t1")
        assert {c.id: c.verdict for c in loaded["claims"]} == {k: v for k, (v, _) in before[1].items()}


def test_publish_refuses_a_copy_that_would_judge_otherwise(cli, kinds, tmp_path, monkeypatch):
    from stackedheads import references

    monkeypatch.setitem(references._NEEDS, "figure4 sweep", ())  # as publish kept it before the fix
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


# --- 44.1: atomic writes and special files --------------------------------------------------------


def test_an_atomic_write_goes_through_a_fifo(cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    # A daemon: were the FIFO replaced, nothing would ever open it for writing.
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    r = cli("prompts", "-f", "equations", "--out", fifo)
    assert r.code == 0, r.err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still a FIFO, not a regular file renamed over it
    reader.join()  # the write closed the FIFO: the reader has its end of file
    assert json.loads(got[0].splitlines()[0])["formulation"] == "equations"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left


def test_an_atomic_write_refuses_a_symbolic_link(cli, tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("mine\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    refused(cli("prompts", "-f", "equations", "--out", link), "symbolic link")
    assert link.is_symlink() and target.read_text() == "mine\n"
    with pytest.raises(UsageError, match="symbolic link"):
        storage.atomic_write_json(link, {})


# --- 43.5, 44.9, 44.12: damaged figures and tables, the report's images ----------------------------


def _figure_folder(folder: Path) -> Path:
    """A folder with a real PNG and SVG (matplotlib) and a CSV, marked done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stackedheads.plots import save_figure

    folder.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, folder, "figure4")
    (folder / "summary.csv").write_text("a,b\n1,2\n3,4\n")
    return folder


@pytest.mark.parametrize("name, damage", [("figure4.png", b""), ("figure4.png", b"\x89PNG\r\n\x1a\nhalf"),
                                          ("figure4.svg", b""), ("figure4.svg", b"<svg><path"),
                                          ("summary.csv", b"\xff\xfe\x00garbage"), ("summary.csv", b"a,b\n1\n2,3,4\n"),
                                          ("summary.csv", b"")])
def test_a_done_marker_does_not_vouch_for_a_damaged_figure_or_table(tmp_path, name, damage):
    stage = storage.RunFolder(_figure_folder(tmp_path / "stage"))
    stage.mark_done({"wall_s": 1.0})
    assert stage.done("a stage") == {"wall_s": 1.0}
    (stage.path / name).write_bytes(damage)
    assert stage.done("a stage") is None and stage.missing == stage.path / name


def test_the_report_copies_images_atomically(tmp_path):
    """A full disk (here a file size limit) mid-copy leaves no cut-off image in report/img."""
    run = reproduce_folder(tmp_path)
    _figure_folder(run / "theory")
    os.replace(run / "theory" / "figure4.png", run / "theory" / "theory.png")
    os.replace(run / "theory" / "figure4.svg", run / "theory" / "theory.svg")
    limit = (run / "theory" / "theory.png").stat().st_size // 2
    code = f"""
import resource, signal
from stackedheads.report import write_report
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    write_report({str(run)!r})
except OSError as e:
    print("failed:", e.strerror)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert "failed:" in r.stdout, (r.stdout, r.stderr)
    images = list((run / "report" / "img").iterdir())
    assert all(_whole(p) for p in images), [(p.name, p.stat().st_size) for p in images]


def _whole(path: Path) -> bool:
    """A PNG with its signature and end chunk, or an SVG that closes."""
    data = path.read_bytes()
    return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82") if path.suffix == ".png" else data.rstrip().endswith(b"</svg>")


def test_report_image_names_of_references_never_collide(tmp_path):
    from stackedheads.report import write_report

    src = _figure_folder(tmp_path / "fig")
    root = tmp_path / "results"
    for name, rel in (("m", "maps/seed0/mean"), ("m__maps", "seed0/mean")):
        folder = root / name / Path(rel).parent
        folder.mkdir(parents=True)
        shutil.copyfile(src / "figure4.png", folder / "mean.png")
        (root / name / "reference.json").write_text(json.dumps({
            "name": name, "title": name, "command": "c", "commit": "0" * 40, "machine": "m", "wall_s": 1,
            "date": "2025-01-01", "notes": "", "files": [f"{rel}.png"]}))
    run = reproduce_folder(tmp_path)
    html = write_report(run, root).read_text()
    images = sorted(p.name for p in (run / "report" / "img").glob("*.png"))
    assert len(images) == 2 and all(f"img/{name}" in html for name in images)


def test_the_report_leaves_out_a_damaged_figure(tmp_path):
    from stackedheads.report import write_report

    run = reproduce_folder(tmp_path)
    (run / "figure4").mkdir()
    (run / "figure4" / "figure4.png").write_bytes(b"")
    write_report(run)
    assert not list((run / "report" / "img").glob("figure4*"))


# --- 44.15: bounded reads ------------------------------------------------------------------------


def test_every_state_read_is_bounded(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "MAX_STATE_BYTES", 1000, raising=False)
    big = tmp_path / "circuit.json"
    big.write_text(json.dumps({"paths": []}) + " " * 2000)
    refused(cli("circuit", "validate", tmp_path, "--circuit", big), "over")
    refused(cli("circuit", "validate", tmp_path, "--circuit", "/dev/zero"), "/dev/zero")  # would never end
    with pytest.raises(UsageError, match="over"):
        storage.read_state_json(big, "a state file")


# --- 43.9, 43.18, 44.16: another kind's folder ---------------------------------------------------


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


# --- 43.11: a refused input leaves no lock and no folder ------------------------------------------


def test_discover_and_emergence_leave_nothing_when_they_refuse_their_input(cli, tmp_path):
    run = tmp_path / "run"  # a run's config, but no checkpoint
    run.mkdir()
    (run / "config.json").write_text(json.dumps(presets.SEC9_SMOKE.to_dict()))
    refused(cli("circuit", "discover", run, "--out", tmp_path / "c"), "no checkpoint")
    refused(cli("emergence", run, "--out", tmp_path / "e" / "deep"), "no checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    kept = tmp_path / "kept"  # a folder that was there stays, without a .lock
    kept.mkdir()
    refused(cli("emergence", run, "--out", kept), "no checkpoint")
    assert list(kept.iterdir()) == []


# --- 43.16: a truncated metrics.csv -----------------------------------------------------------------


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(io.StringIO(path.read_text()))]


@pytest.mark.parametrize("damage", ["truncated", "malformed row"])
def test_a_truncated_metrics_csv_is_rebuilt_from_the_checkpoints(ckpt_run, tmp_path, damage, capsys):
    from stackedheads.training import train

    run = copy_run(ckpt_run, tmp_path / "run")
    full = _rows(run / "metrics.csv")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    if damage == "truncated":
        kept = lines[: len(lines) // 2]
    else:
        kept = lines[:3] + ["12,zero,x,y\n"] + lines[4:]  # a row lost to damage
    (run / "metrics.csv").write_text("".join(kept))
    assert len(list((run / "checkpoints").iterdir())) == 3  # every checkpoint is there
    again = train(presets.SEC9_SMOKE.override(steps=20, ckpt_every=10), run)
    assert _rows(run / "metrics.csv") == full
    assert again["seeds"] == summary["seeds"]
    assert "training again from step" in capsys.readouterr().err


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch, cli):
    """44.17: a full disk's "[Errno 28]" named no path: the write happens on a descriptor."""
    import errno
    import os as os_mod

    from stackedheads import storage

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os_mod, "fsync", full)
    with pytest.raises(OSError) as e:
        storage.atomic_write_bytes(tmp_path / "state.json", b"{}")
    assert e.value.filename == str(tmp_path / "state.json") and e.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())  # no temp file left behind
    r = cli("prompts", "-f", "equations", "--n", "1", "--out", tmp_path / "q.jsonl")
    assert r.code == 1 and str(tmp_path / "q.jsonl") in r.err and "free some space" in r.err


def test_an_output_that_is_a_dangling_link_or_a_folder_is_named_plainly(tmp_path, cli):
    """44.17: a dangling-symlink --out said "File exists"; `prompts --out DIR` named its temp file."""
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    r = cli("train", "--preset", "smoke", "--out", tmp_path / "link")
    assert r.code == 2 and one_error(r.err) and "symbolic link to a path that does not exist" in r.err
    (tmp_path / "d").mkdir()
    r = cli("prompts", "-f", "equations", "--n", "1", "--out", tmp_path / "d")
    assert r.code == 2 and one_error(r.err) and f"{tmp_path / 'd'} is a folder" in r.err and ".tmp" not in r.err
