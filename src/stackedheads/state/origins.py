"""Which training run an analysis output (an emergence folder, discovered circuits) was made
from, so that one output folder never mixes two runs: a seed of another run, or a run of other
settings, is refused naming the run the folder belongs to. Pieces of one result (runs holding
different seeds of the same settings, :mod:`stackedheads.state.pieces`) share a folder."""

from __future__ import annotations

from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.schemas import CircuitFile, RunConfig, check
from stackedheads.state.read import read_bytes, read_state_json
from stackedheads.state.write import atomic_write_json

SOURCES = "sources.json"  # an emergence output's record: {"runs": {seed: {"run": path, "config": {...}}}}


def same_run(a: str | Path, b: str | Path) -> bool:
    """``a`` and ``b`` are one training run: the same folder, or a copy of it (``cp -a``): the
    same config.json and metrics.csv, byte for byte."""
    a, b = Path(a), Path(b)
    try:
        if a.resolve() == b.resolve() or a.samefile(b):
            return True
        return all(read_bytes(a / name, "a run's file") == read_bytes(b / name, "a run's file")
                   for name in ("config.json", "metrics.csv"))
    except (OSError, UsageError):
        return False


def same_recorded_run(recorded: str | Path, run: str | Path) -> bool:
    """``run`` is the run a file recorded as ``recorded``: an absolute path that still exists is
    compared as :func:`same_run` does; a relative one was recorded as typed, from a folder no
    file names, and one that no longer exists (a moved or published folder) tells the run's name
    only, so those are compared by name. Never resolved against the current folder."""
    recorded = Path(recorded)
    if recorded.is_absolute() and recorded.exists():
        return same_run(recorded, run)
    return recorded.name == Path(run).resolve().name


def _config(run: Path) -> dict:
    path = Path(run) / "config.json"
    return check(RunConfig, read_state_json(path, "the run's training configuration"), path, "give a training run's folder")


def _settings_differ(old: dict, new: dict, old_where: Path, new_where: Path) -> list[str]:
    from stackedheads.state.pieces import differences

    try:
        return differences(old, new, old_where, new_where)
    except UsageError:
        return ["its configuration"]  # a config that no longer reads as a TrainConfig is not this run's


def check_emergence_out(run: Path, out: Path) -> None:
    """Refuse ``out`` when it holds the emergence of another run: one of other settings, or the
    same seed of another run."""
    path = Path(out) / SOURCES
    if not path.exists():
        return
    recorded = read_state_json(path, "the runs this emergence output was made from").get("runs")
    if not isinstance(recorded, dict):
        raise UsageError(f"{path} has the wrong shape (no 'runs'): delete it, or give another --out")
    config = _config(run)
    for seed, entry in recorded.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            raise UsageError(f"{path} has the wrong shape (seed {seed}): delete it, or give another --out")
        other = Path(str(entry.get("run")))
        diff = _settings_differ(entry["config"], config, path, Path(run) / "config.json")
        if diff:
            raise UsageError(f"{out} holds the emergence of {other}, a run of other settings ({'; '.join(diff[:3])}); "
                             "give another --out")
        if int(seed) in config.get("seeds", []) and not same_run(other, run):
            raise UsageError(f"{out} holds seed {seed} of {other}, not of {run}; give another --out")


def record_emergence_out(run: Path, out: Path) -> None:
    """Add ``run``'s seeds to ``out``'s record (:func:`check_emergence_out` reads it)."""
    path = Path(out) / SOURCES
    old = read_state_json(path, "the runs this emergence output was made from").get("runs", {}) if path.exists() else {}
    config = _config(run)
    runs = {**old, **{str(s): {"run": str(Path(run).resolve()), "config": config} for s in config.get("seeds", [])}}
    atomic_write_json(path, {"runs": dict(sorted(runs.items(), key=lambda kv: int(kv[0])))})


def check_discovery_out(run: Path, out: Path, seeds: tuple[int, ...] | None = None) -> None:
    """Refuse ``out`` when a circuit in it comes from another run: the same seed of another run
    (``seeds``: those discovered now; None: every seed of ``run``), or a run of other settings."""
    config = _config(run)
    now = set(config.get("seeds", []) if seeds is None else seeds)
    for path in sorted(Path(out).glob("seed*/circuit.json")):
        info = check(CircuitFile, read_state_json(path, "a discovered circuit"), path, "discover into another --out").get("info")
        other = info.get("run") if isinstance(info, dict) else None
        if not isinstance(other, str) or not other:
            continue  # a hand-written circuit names no run
        other = Path(other)
        if same_recorded_run(other, run):
            continue
        seed = info.get("seed")
        if seed in now:
            raise UsageError(f"{path} is the circuit of seed {seed} of {other}, not of {run}: discover into another --out")
        if (other / "config.json").exists():
            diff = _settings_differ(_config(other), config, other / "config.json", Path(run) / "config.json")
            if diff:
                raise UsageError(f"{out} holds the circuits of {other}, a run of other settings ({'; '.join(diff[:3])}): "
                                 "discover into another --out")


def _member(run: Path, seed: int | None) -> tuple[dict, int]:
    from stackedheads.state.write import require_kind

    require_kind(run, "training run")  # a reproduce or sweep folder has a config.json of its own
    config = _config(run)
    seeds = config.get("seeds") or [0]
    if seed is not None and seed not in seeds:
        raise UsageError(f"{run} has seeds {seeds}, not {seed}")
    return config, seeds[0] if seed is None else seed


def check_maps_out(run: Path, out: Path, seed: int | None) -> None:
    """Refuse ``out`` when it holds the attention maps of another run or another member: the
    figures of one (a layer3.png of a 5-layer run) would stay beside another's, and nothing
    would say which is which. One folder holds one member's maps (``seed``; None: the first)."""
    path = Path(out) / SOURCES
    if not path.exists():
        return
    recorded = read_state_json(path, "the run these attention maps were made from").get("runs")
    if not isinstance(recorded, dict) or not all(isinstance(e, dict) for e in recorded.values()):
        raise UsageError(f"{path} has the wrong shape (no 'runs'): delete it, or give another --out")
    _, seed = _member(run, seed)
    for other_seed, entry in recorded.items():
        other = str(entry.get("run"))
        if other_seed != str(seed) or not same_recorded_run(other, run):
            raise UsageError(f"{out} holds the attention maps of seed {other_seed} of {other}, not of seed {seed} of "
                             f"{run}: give another --out (one folder per run and seed)")


def record_maps_out(run: Path, out: Path, seed: int | None) -> None:
    """Record in ``out`` the run and member its attention maps are made from (:func:`check_maps_out`)."""
    config, seed = _member(run, seed)
    atomic_write_json(Path(out) / SOURCES, {"runs": {str(seed): {"run": str(Path(run).resolve()), "config": config}}})
