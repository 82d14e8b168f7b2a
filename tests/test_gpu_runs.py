"""tools/gpu/gpu_runs.py, the driver of a lent GPU's call: which runs it keeps under its deadline,
the analysis jobs it queues and the per-seed exports it returns (CI has no GPU; both parts are plain Python and torch)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from stackedheads import presets
from stackedheads.training import train
from stackedheads.training.checkpoints import checkpoint_for, list_checkpoints, load_model

spec = importlib.util.spec_from_file_location("gpu_runs", Path(__file__).parents[1] / "tools" / "gpu" / "gpu_runs.py")
gpu_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_runs)  # its main() runs only as a script


def no_margin(name):
    return 0


def test_keeps_every_run_that_ends_in_time_together():
    # Two runs sharing the GPU at 10 steps/s each: 100 and 200 steps left are 5 and 10 s alone.
    live = {"a": (900, 1000, 10.0), "b": (800, 1000, 10.0)}
    assert gpu_runs.runs_to_keep(live, now=0, deadline=100, margin=no_margin) == ["a", "b"]


def test_keeps_the_longest_prefix_by_priority_and_stops_the_rest_at_once():
    # Three runs at 5 steps/s each (15 alone): 1,500 steps left are 100 s alone, +15 s each.
    live = {"a": (0, 1500, 5.0), "b": (0, 1500, 5.0), "c": (1400, 1500, 5.0)}
    # c alone would end by 32 s, but only after b, which cannot: the prefix stops at b.
    assert gpu_runs.runs_to_keep(live, now=10, deadline=130, margin=no_margin) == ["a"]
    assert gpu_runs.runs_to_keep(live, now=10, deadline=262, margin=no_margin) == ["a", "b", "c"]
    assert gpu_runs.runs_to_keep(live, now=10, deadline=124, margin=no_margin) == []


def test_a_runs_margin_is_its_analysis_reserve():
    live = {"a": (0, 1000, 10.0)}  # 100 s alone, ends at 115 with the 15 s allowance
    assert gpu_runs.runs_to_keep(live, now=0, deadline=130, margin=lambda n: 10) == ["a"]
    assert gpu_runs.runs_to_keep(live, now=0, deadline=130, margin=lambda n: 20) == []


def test_a_run_in_pieces_trains_to_the_deadline_and_the_runs_after_it_stop():
    live = {"sec8": (0, 24000, 40.0), "sec9": (6000, 6400, 20.0)}
    kept = gpu_runs.runs_to_keep(live, now=0, deadline=300, margin=no_margin, pieces=("sec8",))
    assert kept == ["sec8"]
    live = {"sec9": (6000, 6400, 10.0), "sec8": (0, 24000, 20.0)}
    kept = gpu_runs.runs_to_keep(live, now=0, deadline=300, margin=no_margin, pieces=("sec8",))
    assert kept == ["sec9", "sec8"]


@pytest.fixture(scope="module")
def two_seed_checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("export") / "run"
    train(presets.SEC9_SMOKE.override(steps=8, ckpt_every=8, warmup_steps=2, seeds=(3, 5), final_window=2, eval_every=4), run)
    return list_checkpoints(run)[-1][1]


def test_each_seeds_export_is_its_member_alone(two_seed_checkpoint, tmp_path):
    step, seeds = gpu_runs.export_seeds(two_seed_checkpoint, tmp_path / "run")
    assert (step, seeds) == (8, [3, 5])
    ensemble, cfg, _ = load_model(two_seed_checkpoint)
    x = torch.randn(2, 7, cfg.model_config().d_in, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        both = ensemble(x)
    for i, seed in enumerate(seeds):
        path = tmp_path / f"run-seed{seed}.safetensors"
        with safe_open(str(path), "pt") as f:
            assert all(k.startswith("model.") for k in f.keys())  # no optimizer state
        single, single_cfg, single_step = load_model(path)
        assert (single_cfg.seeds, single_step) == ((seed,), 8)
        assert single_cfg.override(seeds=cfg.seeds) == cfg  # nothing else changed
        with torch.no_grad():
            assert torch.equal(single(x)[0], both[i])


def test_an_unpacked_export_is_a_run_folder_the_analyses_read(two_seed_checkpoint, tmp_path):
    gpu_runs.export_seeds(two_seed_checkpoint, tmp_path / "run")
    script = Path(gpu_runs.__file__)
    r = subprocess.run([sys.executable, script, "unpack", tmp_path / "run-seed5.safetensors", tmp_path / "seed5"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert checkpoint_for(tmp_path / "seed5") == tmp_path / "seed5" / "checkpoints" / "step_000008.safetensors"
    _, cfg, step = load_model(checkpoint_for(tmp_path / "seed5"))
    assert (cfg.seeds, step) == ((5,), 8)
    assert json.loads((tmp_path / "seed5" / "config.json").read_text()) == cfg.to_dict()
    for bad in ([tmp_path / "none.safetensors", tmp_path / "x"], [tmp_path / "run-seed5.safetensors"]):
        r = subprocess.run([sys.executable, script, "unpack", *bad], capture_output=True, text=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_each_seeds_timeline_waits_for_its_own_circuits_alone(tmp_path):
    """A seed whose discovery outlasts the deadline holds back no other seed's timeline."""
    jobs = gpu_runs.analysis_jobs("sec9-x", "sec9", [1, 2], tmp_path, timelines=True)
    assert set(jobs) == {"sec9-x/discover-1", "sec9-x/discover-2", "sec9-x/emergence-1", "sec9-x/emergence-2"}
    argv, deps = jobs["sec9-x/emergence-2"]
    assert deps == ["sec9-x/discover-2"]
    an = tmp_path / "sec9-x-analysis"
    assert argv[-4:] == ["--circuits", str(an / "discovered-2"), "--out", str(an / "timeline-2")]
    assert jobs["sec9-x/discover-2"][0][-2:] == ["--out", str(an / "discovered-2")]
    # without kept checkpoints there is nothing to time; sec8 draws Figure 5's maps, waiting for nothing
    jobs = gpu_runs.analysis_jobs("sec8-x", "sec8", [0], tmp_path, timelines=False)
    assert set(jobs) == {"sec8-x/discover-0", "sec8-x/maps-0"} and jobs["sec8-x/maps-0"][1] == []


@pytest.fixture(scope="module")
def export5(two_seed_checkpoint, tmp_path_factory):
    """Seed 5's export of the two-seed run."""
    prefix = tmp_path_factory.mktemp("exports") / "run"
    gpu_runs.export_seeds(two_seed_checkpoint, prefix)
    return Path(f"{prefix}-seed5.safetensors")


@pytest.fixture
def script(monkeypatch, capsys):
    """``script(*args)``: the script's main() with these arguments, in this process: (exit code, stdout, stderr)."""

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["gpu_runs.py", *map(str, args)])
        capsys.readouterr()
        try:
            gpu_runs.main()
            code = 0
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run


def refused(r, says):
    return r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr and "Traceback" not in r.stderr


def test_unpack_refuses_an_empty_out_and_the_root(export5, tmp_path, monkeypatch, script):
    """`unpack EXPORT ""` wrote config.json and checkpoints/ into the current folder, `unpack EXPORT /` into /."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    r = script("unpack", export5, "")
    assert refused(r, "the output path is empty"), r.stderr
    assert list(here.iterdir()) == []
    r = script("unpack", export5, "/")
    assert refused(r, "is the filesystem root"), r.stderr


def test_unpack_refuses_a_folder_of_another_kind(export5, tmp_path, script):
    """It replaced the config.json of a training run (its steps 999 became 8), a reproduce folder
    and an llm-bench folder."""
    from stackedheads.training.checkpoints import read_checkpoint

    cfg = json.loads(read_checkpoint(export5)[1]["config"])
    folders = {
        "training run of another configuration": ("train", {**cfg, "steps": 999}, "another configuration"),
        "reproduce folder": ("rep", {"preset": {"name": "smoke"}, "llm": None}, "another kind of output (reproduce run)"),
        "llm-bench folder": ("llm", {"identity": {"model": "m"}, "invocations": []}, "another kind of output (llm-bench run)"),
    }
    for what, (name, config, says) in folders.items():
        folder = tmp_path / name
        folder.mkdir()
        text = json.dumps(config)
        (folder / "config.json").write_text(text)
        r = script("unpack", export5, folder)
        assert refused(r, says), (what, r.stderr)
        assert (folder / "config.json").read_text() == text, what
        assert sorted(p.name for p in folder.iterdir()) == ["config.json"], what


def test_unpack_again_into_its_own_run_folder_is_accepted(export5, tmp_path, script):
    for _ in range(2):
        r = script("unpack", export5, tmp_path / "seed5")
        assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "seed5" / "checkpoints").iterdir()] == ["step_000008.safetensors"]


@pytest.mark.parametrize("damage", ["step", "config"])
def test_unpack_of_an_export_with_a_bad_header_is_one_line_and_writes_nothing(export5, tmp_path, damage, script):
    """A step "1e3" was a ValueError traceback, a config that is not JSON one too, after
    OUT/checkpoints/ was written."""
    from stackedheads.training import checkpoints

    tensors, meta = checkpoints.read_checkpoint(export5)
    header = {"step": "1e3", "config": meta["config"]} if damage == "step" else {"step": "8", "config": "{not json"}
    bad = tmp_path / "bad.safetensors"
    checkpoints._write(bad, tensors, header)  # checksums that match: only the values are wrong
    r = script("unpack", bad, tmp_path / "out")
    assert refused(r, "not an export of this script"), r.stderr
    assert not (tmp_path / "out").exists()


def test_help_and_wrong_arguments_are_no_traceback(tmp_path, script):
    """`gpu_runs.py --help` was an IndexError."""
    r = script("--help")
    assert r.returncode == 0 and "unpack" in r.stdout and "SCREEN_ROOT" in r.stdout, r.stderr
    for args, says in ([(), "usage: gpu_runs.py"], [(tmp_path / "o",), "usage: gpu_runs.py"],
                       [(tmp_path / "o", "soon", "sec9:gpt2:0"), "DEADLINE_S must be a number"],
                       [(tmp_path / "o", "10", "sec9:gpt2"), "is not PRESET:RECIPE:SEEDS"],
                       [(tmp_path / "o", "10", "sec9:gpt2:a,b"), "are not comma-separated whole numbers"],
                       [("unpack", tmp_path / "x"), "usage: gpu_runs.py unpack"]):
        r = script(*args)
        assert refused(r, says), (args, r.stderr)
    assert not (tmp_path / "o").exists()
