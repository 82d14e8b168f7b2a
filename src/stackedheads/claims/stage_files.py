"""One reader of a Sections 8-9 stage's files: the training run (its pieces combined), the
discovered circuits and the emergence timelines, each checked for what is read of it, and the
measurements they give under each reading of the paper (docs/verdicts.md, "Readings"): which
rows discovery's labels name (a rule names a row only where it catches half its attention), and
when each chain position emerges. ``claims`` judges these, ``seeds`` tabulates them and the
report draws them. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackedheads.state import layout
from stackedheads.state import pieces
from stackedheads.circuits.paths import COMBINED_KEPT_TEXT, CircuitPath, path_kind
from stackedheads.errors import UsageError
from stackedheads.state.schemas import DiscoverySummary, Timeline, TrainSummary, check
from stackedheads.state.write import read_state_json

NUM = (int, float)  # a number in a shape (below)


@dataclass(frozen=True)
class Each:
    """In a shape: an object whose every value has ``shape`` (keys are seeds, positions...)."""

    shape: Any


def expect(data: Any, shape: Any, path: Path, stage_dir: Path | None = None) -> Any:
    """``data``, read from ``path``, if it has ``shape``; else one line saying the file is
    damaged and how to rebuild it. Claims check what they read where they read it, so that an
    error in a claim's own code stays a bug (a traceback), never advice to re-run.

    A shape is a type or a tuple of types (``type(None)`` for null), ``{key: shape}`` (keys
    ending in ``?`` may be absent), ``[shape]`` (a list of such items) or :class:`Each`."""

    def why(x: Any, sh: Any, where: str) -> str | None:
        if isinstance(sh, Each):
            if not isinstance(x, dict):
                return f"{where or 'the file'} is not an object"
            return next((w for k, v in x.items() if (w := why(v, sh.shape, f"{where}.{k}".lstrip(".")))), None)
        if isinstance(sh, dict):
            if not isinstance(x, dict):
                return f"{where or 'the file'} is not an object"
            for key, sub in sh.items():
                name = key.rstrip("?")
                if name not in x:
                    if key.endswith("?"):
                        continue
                    return f"{f'{where}.{name}'.lstrip('.')} is missing"
                if w := why(x[name], sub, f"{where}.{name}".lstrip(".")):
                    return w
            return None
        if isinstance(sh, list):
            if not isinstance(x, list):
                return f"{where or 'the file'} is not a list"
            return next((w for i, v in enumerate(x) if (w := why(v, sh[0], f"{where}[{i}]"))), None)
        types = sh if isinstance(sh, tuple) else (sh,)
        if isinstance(x, bool) and bool not in types and object not in types:  # JSON true is no number
            return f"{where} is not a number"
        return None if isinstance(x, sh) else f"{where or 'the file'} has the wrong type"

    problem = why(data, shape, "")
    if problem:
        stage = stage_dir if stage_dir is not None else path.parent
        raise UsageError(f"{path} has the wrong shape ({problem}): delete {stage / 'done.json'} and re-run to rebuild the stage")
    return data


def _values(schema, data: Any, path: Path, stage_dir: Path) -> Any:
    """``data`` if its values are those its file's schema allows (:mod:`stackedheads.state.schemas`)."""
    return data if data is None else check(schema, data, path, f"delete {stage_dir / 'done.json'} and re-run to rebuild the stage")


def read_json(path: Path, shape: Any = object, stage_dir: Path | None = None) -> Any:
    """A stage's JSON file, or None when the stage has not written it; a damaged one (not
    JSON, or not of ``shape``: :func:`expect`) is a one-line error saying so."""
    if not path.exists():
        return None
    return expect(read_state_json(path, "a stage's results", object), shape, path, stage_dir)


def read_jsonl(path: Path, shape: Any = dict) -> list[dict]:
    """A stage's JSON-lines file ([] when absent), each line of ``shape``."""
    from stackedheads.state.write import read_state_jsonl

    if not path.exists():
        return []
    return expect(read_state_jsonl(path, "a stage's results"), [shape], path)


# What the claims and the report read of the training run's summary.json and of a discovery's
# summary.json (:meth:`stackedheads.circuits.discover.Discovery.summary`); a file without it
# is damaged, said where it is read.
TRAIN_SUMMARY = {"config": {"task": {"chains": NUM, "depth": int}},
                 "seeds": Each({"final_val_loss": NUM, "final_partial": Each(NUM)})}


_LOSSES = {"loss": NUM, "partial": [NUM]}


DISCOVERY_SUMMARY = {
    "unablated": _LOSSES, "combined": _LOSSES, "budgets": [NUM], "over_budget": [str], "unexplained_heads": [list],
    "paths": [list], "n_useful_heads": int, "theory_min_heads": int, "threshold?": NUM, "heads_with_paths?": [list],
    "losses?": [{"ablation": str, **_LOSSES}], "serves?": Each([int]), "diagnosis?": [dict], "mapped_rows?": [list],
    "pair_attention?": [list],
}


_WHEN = (int, float, type(None))  # a step, or null: never


# What the claims and the report read of an emergence timeline.json (emergence.Timeline).
TIMELINE = {
    "steps": [int], "epochs": [NUM], "plateau_steps": _WHEN, "first_paths": [str], "serves": Each([int]),
    "emerged": Each(_WHEN), "emerged_seen?": Each(_WHEN), "order": str, "loss_drops": Each(_WHEN), "loss_drop_order": str,
    "positions": Each({"new_paths": [str], "step": _WHEN, "seen?": _WHEN, "epoch?": _WHEN, "status": str}),
    "paths?": [list], "attention?": [[NUM]],
}


def heads_in(config: dict) -> int:
    """Attention heads of the model a training config (as a run's summary.json holds it) describes.

    Its model settings are nested under "model", or at the top level in a run written before the
    config was nested: the format :meth:`stackedheads.training.TrainConfig.from_dict` reads,
    not called here because it would load torch to judge claims from files."""
    model = config.get("model", config)
    return model["n_layers"] * model["n_heads"]


def stage_from_files(stage_dir: Path, run_name: str) -> dict | None:
    """A circuits/emergence stage's training summary and discovered circuits, from its files.

    A stage trained in pieces (``runs/<run_name>`` and ``runs/<run_name>-*``, each holding other
    seeds of the same settings) is read as one run (:func:`stackedheads.state.pieces.combine`).
    Circuits whose run summary is gone (a reference whose run folder was lost) keep ``train``
    None and name the file in ``missing``: the claims that need it say so instead of NOT RUN."""
    train = training_summary(stage_dir, run_name)
    found = {p.parent.name[4:]: read_discovery(p, stage_dir) for p in sorted(layout.discovered(stage_dir).glob("seed*/summary.json"))}
    if not found:
        return None
    if not train:
        missing = layout.training_run(Path(stage_dir.name), run_name) / "summary.json"
        return {"train": None, "missing": missing.as_posix(), "circuits": found}
    return {"train": train, "circuits": {s: f for s, f in found.items() if s in train["seeds"]}}


def training_summary(stage_dir: Path, run_name: str) -> dict | None:
    """The stage's training summary, its pieces combined by the rule ``publish`` applies
    (:func:`stackedheads.state.pieces.read_result`; None when no piece has finished), each piece's
    summary checked for what is read of it (each file read once)."""
    return pieces.read_result(stage_dir, run_name, check=lambda path, s: _values(TrainSummary, expect(s, TRAIN_SUMMARY, path, stage_dir), path, stage_dir)).summary


def finished_metrics(stage_dir: Path, run_name: str) -> list[dict]:
    """The metrics.csv rows of the stage's finished pieces (those :func:`training_summary`
    combines; [] where none kept one), each piece's rows of the seeds its own summary holds: a
    piece still training holds no seed of the result, and no piece speaks for another's seeds."""
    from stackedheads.training.metrics import read_metrics

    rows = []
    for d in pieces.piece_dirs(stage_dir, run_name):
        summary = read_json(d / "summary.json", TRAIN_SUMMARY, stage_dir) if (d / "summary.json").exists() else None
        if summary and (d / "metrics.csv").exists():
            rows += [r for r in read_metrics(d) if str(r["seed"]) in summary["seeds"]]
    return rows


def loss_drops(rows: list[dict], seed: str, task: dict) -> dict[str, int | None] | None:
    """Per position, the first evaluated step a seed's partial loss is below C2's threshold
    (what an emergence timeline's ``loss_drops`` holds), from metrics.csv rows; None where the
    rows do not hold the seed's partial losses (a non-IC run, or no rows)."""
    from stackedheads.sweeps.figure4 import cross_threshold, crossing_steps

    mine = [r for r in rows if str(r["seed"]) == str(seed)]
    parts = [f"val_x{j}" for j in range(1, task["depth"] + 1)] if task.get("ic", True) else []
    if not mine or not parts or not all(p in mine[0] for p in parts):
        return None
    return {k[4:]: v for k, v in crossing_steps(mine, int(seed), parts, cross_threshold(task["chains"])).items()}


def read_timeline(path: Path, stage_dir: Path) -> dict | None:
    """An emergence timeline.json (None when absent), checked for what is read of it."""
    return _values(Timeline, read_json(path, TIMELINE, stage_dir), path, stage_dir)


def read_discovery(path: Path, stage_dir: Path) -> dict:
    """A discovery's summary.json, checked for what the claims and the report read."""
    return _values(DiscoverySummary, read_json(path, DISCOVERY_SUMMARY, stage_dir), path, stage_dir)


# A rule names a row's role only where it catches at least half of the row's attention on the
# held-out sequences (App. E builds the map from "the position that I expect the head to attend
# to", read off the attention map): a row below is unexplained, not a path.
LABEL_COVER = 0.5


def _row_of(key: str) -> tuple[int, int, str]:
    """The ``(layer, head, role)`` row a path key such as ``L7.0 s0->s2`` leaves from."""
    p = CircuitPath.parse(key)
    role = "query" if p.src == 0 else ("second" if p.src % 2 == 0 else "first")
    return p.layer, p.head, role


def mislabelled(found: dict) -> list[dict]:
    """The diagnosed rows whose rule covers less than :data:`LABEL_COVER` of their held-out
    attention (discovery diagnoses every row under 60%, so the files hold each such row)."""
    return [d for d in found.get("diagnosis", []) if d.get("rule_covered") is not None and d["rule_covered"] < LABEL_COVER]


def relabelled(found: dict) -> dict:
    """A discovery summary read by :data:`LABEL_COVER`: rows whose rule catches less than half
    their attention become unexplained, and the paths they carried are dropped (the combined
    ablation as measured stands: it replaced them by their rule). ``relabelled`` lists them."""
    bad = {(d["layer"], d["head"], d["role"]): d for d in mislabelled(found)}
    if not bad:
        return {**found, "relabelled": []}
    gone = {CircuitPath(*p).key for p in found["paths"] if _row_of(CircuitPath(*p).key) in bad}
    paths = [p for p in found["paths"] if CircuitPath(*p).key not in gone]
    with_paths = sorted({(l, h) for l, h, *_ in paths})
    mapped = {(l, h) for l, h, *_ in found.get("mapped_rows", [])}
    retrieval = sorted({(l, h) for l, h, _, dst in paths if path_kind(dst) == "retrieval"})
    shortcut = sorted(({(l, h) for l, h, _, dst in paths if path_kind(dst) != "retrieval"} | mapped) - set(retrieval))
    out = {**found, "paths": paths, "heads_with_paths": [list(h) for h in with_paths],
           "unexplained_heads": sorted([*map(list, found["unexplained_heads"]), *[list(r) for r in bad]]),
           "serves": {k: v for k, v in found.get("serves", {}).items() if k not in gone},
           "relabelled": [f"L{l}.{h} {r}'s {d['rule']} covers {d['rule_covered']:.0%}" for (l, h, r), d in sorted(bad.items())]}
    if "retrieval_heads" in found:
        out["retrieval_heads"], out["shortcut_heads"] = [list(h) for h in retrieval], [list(h) for h in shortcut]
    return out


def final_attention(t: dict) -> dict[str, float]:
    """Each path's own mean attention at a timeline's last checkpoint ({} when the timeline
    holds no attention: one written before it was kept)."""
    if not t.get("attention") or not t.get("paths"):
        return {}
    return {CircuitPath(*p).key: a for p, a in zip(t["paths"], t["attention"][-1], strict=True)}


def relabelled_timeline(t: dict, found: dict | None) -> dict:
    """A timeline whose paths serve nothing where their label does not hold, path by path: a
    path serves its positions only where its own attention at the last checkpoint is at least
    :data:`LABEL_COVER` (a mixture row may cover half its attention while one of its paths gets
    a quarter). A timeline without attention falls back to its rows' shares (:func:`relabelled`).
    ``unlabelled`` maps each such path to its final attention (None: the row's share decided)."""
    final = final_attention(t)
    if final:
        gone = {k: a for k, a in final.items() if k in t["serves"] and a < LABEL_COVER}
    else:
        bad = {(d["layer"], d["head"], d["role"]) for d in mislabelled(found or {})}
        gone = {k: None for k in t["serves"] if _row_of(k) in bad}
    serves = {k: ([] if k in gone else v) for k, v in t["serves"].items()}
    return {**t, "serves": serves, "unlabelled": gone}


def unlabelled_text(t: dict) -> str:
    """The paths :func:`relabelled_timeline` took out, with their own final attention."""
    gone = t.get("unlabelled") or {}
    if not gone:
        return ""
    shown = ", ".join(k + ("" if a is None else f" {a:.2f}") for k, a in sorted(gone.items()))
    return (f"; {len(gone)} paths serve nothing, their own attention at the last checkpoint under "
            f"{LABEL_COVER} (or their row's rule catching under {LABEL_COVER:.0%} of it): {shown}")


def new_paths(serves: dict[str, list[int]], j: int) -> list[str]:
    """The paths that serve x_j but not x_(j-1)."""
    return sorted(k for k, js in serves.items() if j in js and (j - 1) not in js)


def hurt_most(found: dict | None, keys: list[str]) -> dict[str, int] | None:
    """Each path's position whose partial loss its removal (its redundant group's) raises most,
    over the tolerance, from the discovery's held-out losses; None when they are not recorded."""
    if not found or not found.get("losses"):
        return None
    rows = {r["ablation"]: r["partial"] for r in found["losses"]}
    base = rows.get(COMBINED_KEPT_TEXT, rows.get("combined"))
    if base is None:
        return None
    tol = found.get("tolerance", 0)
    group_row = {k: "-(" + " + ".join(g) + ")" for g in found.get("redundant_groups", []) for k in g}
    out = {}
    for k in keys:
        partial = rows.get(group_row.get(k, "-" + k))
        if partial is None:
            continue
        raised = [p - b for p, b in zip(partial, base)]
        j = max(range(len(raised)), key=lambda i: raised[i])
        if raised[j] > tol:
            out[k] = j + 1
    return out


def position_paths(t: dict, reading: str, j: int, owner: dict[str, int] | None = None) -> list[str]:
    """The paths that time x_j under an E3 reading, from a timeline whose serves are relabelled
    (:func:`relabelled_timeline`): the paths new for x_j (serving it and not x_(j-1));
    ``retrieval-paths``: those among the retrieval paths alone (a shortcut is no induction
    head, as E2 says); ``query-path``: the query's path s0->s_2j; ``hurt-most``: the paths whose
    removal raises x_j's loss most (``owner``, :func:`hurt_most`)."""
    serves, gone = t["serves"], t.get("unlabelled") or {}
    if reading == "query-path":
        return sorted(k for k in serves if k not in gone and (p := CircuitPath.parse(k)).src == 0 and p.dst == 2 * j)
    if reading == "hurt-most":
        return sorted(k for k, pos in (owner or {}).items() if pos == j)
    if reading == "retrieval-paths":
        return new_paths({k: v for k, v in serves.items() if path_kind(CircuitPath.parse(k).dst) == "retrieval"}, j)
    return new_paths(serves, j)


def position_times(t: dict, reading: str, found: dict | None = None) -> dict[str, tuple[float | None, list[str], str]]:
    """Per chain position x_j of a timeline (its serves already relabelled), under an E3
    reading: (when it emerges or None, the paths that time it, status). Status ``no path``: no
    path times it, so it cannot be ordered. The last-path readings time x_j by its last new
    path (a redundant group by its first member); the others by its first."""
    serves, emerged, seen = t["serves"], t["emerged"], t.get("emerged_seen") or {}
    groups = [g for g in t.get("groups", []) if all(k in serves for k in g)]
    group_of = {k: tuple(g) for g in groups for k in g}
    owner = hurt_most(found, [k for k, v in serves.items() if v]) if reading == "hurt-most" else None
    times = seen if reading == "last-path-checkpoint" else emerged
    out = {}
    for j in range(1, len(t["positions"]) + 1):
        mine = position_paths(t, reading, j, owner)
        if not mine:
            out[f"x{j}"] = (None, [], "no path")
            continue
        if reading in ("last-path", "last-path-checkpoint"):
            units = sorted({group_of.get(k, (k,)) for k in mine})
            per = [min((times[k] for k in u if times.get(k) is not None), default=None) for u in units]
            when = None if None in per else max(per)
        else:
            when = min((times[k] for k in mine if times.get(k) is not None), default=None)
        out[f"x{j}"] = (when, mine, "emerged" if when is not None else "never emerged")
    return out


def times_order(times: dict[str, tuple]) -> str:
    """:func:`~stackedheads.emergence.ordering.order_of` of the timed positions; ``inconclusive`` where a
    position has no path to time it and the rest show no disorder."""
    from stackedheads.emergence.ordering import order_of

    order = order_of([w for w, paths, _ in times.values() if paths])
    if order != "out of order" and any(not paths for _, paths, _ in times.values()):
        return "inconclusive"
    return order
