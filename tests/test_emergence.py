"""Emergence timelines, and the attention / circuit / emergence commands on a tiny trained run."""

import json

import pytest
from conftest import is_figure

from stackedheads import presets
from stackedheads.emergence.timeline import (
    first_crossing,
    first_seen,
    position_emergence,
    position_order,
)
from stackedheads.training import train


def test_first_crossing_interpolates_between_checkpoints():
    assert first_crossing([0, 10, 20], [0.1, 0.3, 0.7]) == pytest.approx(15.0)
    assert first_crossing([0, 10], [0.6, 0.9]) == 0.0
    assert first_crossing([0, 10, 20], [0.1, 0.2, 0.4]) is None
    assert first_crossing([0, 10, 20], [0.1, 0.5, 0.2]) == pytest.approx(10.0)


def test_first_seen_is_the_checkpoint_at_or_above_the_threshold():
    assert first_seen([0, 10, 20], [0.1, 0.3, 0.7]) == 20
    assert first_seen([0, 10, 20], [0.1, 0.3, 0.4]) is None


def _positions(times, serves, groups=(), depth=3):
    return position_emergence(times, times, serves, [list(g) for g in groups], depth)


def test_positions_emerge_with_the_paths_new_to_them():
    serves = {"a": [1, 2, 3], "b": [2, 3], "c": [3]}
    pos = _positions({"a": 100, "b": 250, "c": 300}, serves)
    assert {x: p["step"] for x, p in pos.items()} == {"x1": 100, "x2": 250, "x3": 300}
    assert pos["x2"]["new_paths"] == ["b"] and position_order(pos) == "in order"
    assert position_order(_positions({"a": 100, "b": 350, "c": 300}, serves)) == "out of order"
    # x2 never emerges while x3 does: out of order.
    assert position_order(_positions({"a": 100, "b": None, "c": 300}, serves)) == "out of order"
    # Two positions at one checkpoint: a tie, not an order.
    assert position_order(_positions({"a": 100, "b": 300, "c": 300}, serves)) == "tie"
    # One path serving x1..x3: x2 and x3 have no path of their own.
    pos = _positions({"a": 408}, {"a": [1, 2, 3]})
    assert pos["x2"]["new_paths"] == [] and position_order(pos) == "inconclusive"
    # Redundant paths stand in for each other: the first of them times x1; otherwise the last.
    pos = _positions({"a": 100, "a2": 180, "b": 250, "c": 300}, {**serves, "a2": [1, 2, 3]}, groups=[("a", "a2")])
    assert pos["x1"]["step"] == 100
    pos = _positions({"a": 100, "a2": 180, "b": 250, "c": 300}, {**serves, "a2": [1, 2, 3]})
    assert pos["x1"]["step"] == 180


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("tiny") / "run"
    cfg = presets.SMOKE.override(seeds=(0, 1), steps=40, ckpt_every=10, keep_checkpoints=True, d_model=32, n_heads=2)
    train(cfg, run)
    return run


@pytest.mark.slow
def test_attention_maps(tiny_run, tmp_path, cli):
    r = cli("attention", str(tiny_run), "--out", str(tmp_path), "--seqs", "2", "--checkpoint", "20")
    assert r.code == 0, r.err
    for name in ("layer0.png", "layer1.png", "grid.png", "grid.svg", "mean.png", "mean.svg"):
        assert is_figure(tmp_path / name), name


@pytest.mark.slow
def test_discover_validate_and_emergence(tiny_run, tmp_path, cli):
    r = cli("circuit", "discover", str(tiny_run), "--out", str(tmp_path / "c"), "--tolerance", "0.05")
    assert r.code == 0, r.err
    for seed in (0, 1):
        folder = tmp_path / "c" / f"seed{seed}"
        circuit = json.loads((folder / "circuit.json").read_text())
        assert len(circuit["heads"]) == 4 and circuit["info"]["seed"] == seed
        assert (folder / "circuit.png").exists() and (folder / "losses.json").exists()
    r = cli("circuit", "validate", str(tiny_run), "--circuit", str(tmp_path / "c" / "seed1" / "circuit.json"))
    assert r.code == 0, r.err
    assert "combined" in r.out
    r = cli("emergence", str(tiny_run), "--out", str(tmp_path / "e"), "--circuits", str(tmp_path / "c"), "--seqs", "8")
    assert r.code == 0, r.err
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["ordering"]["runs"] == 2
    for seed in (0, 1):
        timeline = json.loads((tmp_path / "e" / f"seed{seed}" / "timeline.json").read_text())
        # The step-0 checkpoint: attention at initialisation starts every curve.
        assert timeline["steps"] == [0, 10, 20, 30, 40]
        assert timeline["epochs"] == [s / (4096 // 32) for s in timeline["steps"]]
        assert len(timeline["attention"]) == 5 and set(timeline["positions"]) == {"x1", "x2"}
        assert (tmp_path / "e" / f"seed{seed}" / "losses.png").exists()
        assert (tmp_path / "e" / f"seed{seed}" / "emergence_summary.svg").exists()


@pytest.mark.slow
def test_bad_inputs_are_one_line(tiny_run, tmp_path, cli):
    single = tmp_path / "single"
    train(presets.SMOKE.override(steps=10, ckpt_every=10), single)
    for args in (
        ["emergence", str(single), "--out", str(tmp_path / "x")],
        ["attention", str(tmp_path / "nowhere"), "--out", str(tmp_path / "y")],
        ["attention", str(tiny_run), "--out", str(tmp_path / "y"), "--checkpoint", "7"],
        ["circuit", "validate", str(tiny_run), "--circuit", str(tmp_path / "missing.json")],
    ):
        r = cli(*args)
        assert r.code == 2, (args, r.err)
        assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


@pytest.mark.parametrize("n_paths", [0, 1, 2])
def test_timeline_figures_lay_out_without_a_warning(tmp_path, n_paths):
    """Timeline figures lay out without a "Tight layout not applied" warning, a circuit of one
    path included (its summary is tall enough for its labels)."""
    import warnings

    from stackedheads.emergence.timeline import Timeline, plot_timeline

    cfg = presets.SEC9_SMOKE
    paths = [(2, 0, 3, 1), (1, 0, 2, 1)][:n_paths]
    keys = [f"L{p[0]}.{p[1]} s{p[2]}->s{p[3]}" for p in paths]
    t = Timeline(0, [0, 20, 40], [0.0, 2.5, 5.0], paths, [[0.1] * n_paths, [0.6] * n_paths, [0.9] * n_paths],
                 {k: 15.0 for k in keys}, {k: 20 for k in keys}, {}, [], {}, "undecided", keys, 15.0, {}, "undecided")
    metrics = [{"seed": 0, "step": s, "train_loss": 0.5, "val_loss": 0.5, "val_x1": 0.4, "val_x2": 0.6} for s in (10, 20, 40)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        files = plot_timeline(t, cfg, metrics, tmp_path)
    assert all(is_figure(p) for p in files) and len(files) == 2 * (n_paths + 2)


def test_a_run_config_whose_model_is_no_object_is_one_line(tmp_path, cli):
    """`emergence` on a run whose config.json says "model": "x" is one line, not a traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**presets.SEC9_SMOKE.to_dict(), "model": "x"}))
    code, _, stderr = cli("emergence", str(run), "--out", str(tmp_path / "e"))
    assert code == 2 and "Traceback" not in stderr and "'model' must be a JSON object" in stderr, stderr
    assert not (tmp_path / "e").exists()


# --- Values read from files never become paths; the folder is locked; a circuit of another model is refused

from helpers import one_error, train_config  # noqa: E402

from stackedheads.state import write  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402


def test_emergence_folder_locked(tmp_path, held):
    from stackedheads.emergence.timeline import emergence_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(train_config()))
    held(tmp_path / "e")
    with pytest.raises(UsageError, match="in use by pid"):
        emergence_run(run, tmp_path / "e", n_seqs=4)


def test_emergence_seeds_from_config_never_become_paths(tmp_path):
    from stackedheads.emergence.timeline import emergence_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(train_config(seeds=["../../escape"])))
    with pytest.raises(UsageError, match="seeds must be a non-empty list of integers"):
        emergence_run(run, tmp_path / "out", n_seqs=4)
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escape").exists()
    with pytest.raises(UsageError):
        write.safe_component("../x", "a name")
    assert write.safe_component("seed3", "a name") == "seed3"


@pytest.mark.parametrize("seqs", ["0", "-120"])
def test_emergence_seqs_validated_before_writing(tmp_path, seqs, cli):
    out = tmp_path / "out"
    code, _, stderr = cli("emergence", str(tmp_path), "--out", str(out), "--seqs", seqs)
    assert code == 2 and "--seqs" in stderr and not out.exists()


@pytest.mark.parametrize("change", ["depth", "layer"])
def test_emergence_refuses_a_circuit_of_another_model(ckpt_run, tmp_path, change, cli):
    heads = [{"layer": layer, "head": 0, "rules": "uniform", "paths": []} for layer in range(3)]
    heads[2] = {"layer": 2, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}
    circuit = {"depth": 2, "heads": heads, "info": {}}
    if change == "depth":  # a circuit of a D=5 run: its indices lie outside this run's sequences
        circuit["depth"], heads[2]["paths"] = 5, [[9, 0]]
    else:  # a layer this model does not have
        heads[2]["layer"] = 7
    (tmp_path / "c" / "seed0").mkdir(parents=True)
    (tmp_path / "c" / "seed0" / "circuit.json").write_text(json.dumps(circuit))
    code, _, stderr = cli("emergence", str(ckpt_run), "--out", str(tmp_path / "e"), "--circuits", str(tmp_path / "c"),
                               "--seqs", "4")
    assert code == 2 and one_error(stderr) and "circuit.json" in stderr


def _timeline_file(folder, seed, order, cfg, steps=(0, 80, 160)):
    t = {"seed": seed, "steps": list(steps), "epochs": [cfg.epoch(s) for s in steps], "order": order,
         "emerged": {"L1.0 s2->s1": 80.0}, "positions": {"x1": {"step": 80.0}}, "serves": {"L1.0 s2->s1": [1]},
         "first_paths": ["L1.0 s2->s1"], "plateau_steps": 80.0}
    (folder / f"seed{seed}").mkdir(parents=True, exist_ok=True)
    (folder / f"seed{seed}" / "timeline.json").write_text(json.dumps(t))


def test_the_timeline_summary_covers_every_piece_timed_into_the_folder(tmp_path):
    """A result trained in pieces times each piece into one folder: the summary
    counts the seeds already there as well as the new ones, and refuses another epoch axis."""
    from stackedheads.emergence.timeline import timeline_summary
    from stackedheads.errors import UsageError

    cfg = presets.SEC9_SMOKE
    for seed, order in ((0, "in order"), (1, "out of order"), (10, "in order"), (2, "tie")):
        _timeline_file(tmp_path, seed, order, cfg)
    (tmp_path / "seedx").mkdir()  # not a seed's folder
    summary = timeline_summary(tmp_path, cfg, tmp_path)
    assert list(summary["seeds"]) == [0, 1, 2, 10]
    assert summary["ordering"] == {"runs": 4, "decided": 3, "in_order": 2, "fraction_in_order": 2 / 3, "counts": {
        "in order": 2, "out of order": 1, "tie": 1, "undecided": 0, "inconclusive": 0}}
    assert summary["seeds"][1]["plateau_steps"] == 80.0 and summary["steps_per_epoch"] == 8
    _timeline_file(tmp_path, 3, "in order", cfg.override(steps_per_epoch=16))
    with pytest.raises(UsageError, match="seed3/timeline.json counts epochs otherwise"):
        timeline_summary(tmp_path, cfg, tmp_path)
    (tmp_path / "seed3" / "timeline.json").write_text("{")
    with pytest.raises(UsageError, match="seed3/timeline.json is not an emergence timeline"):
        timeline_summary(tmp_path, cfg, tmp_path)
