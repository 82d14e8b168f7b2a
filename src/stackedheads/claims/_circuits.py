"""What Sections 8 and 9 share: whether a model has learned enough for its circuit to mean
anything, App. E's validation under the loss budget, per-seed verdicts, and reading a stage."""

from __future__ import annotations

from pathlib import Path

from stackedheads import layout, pieces
from stackedheads.circuits.paths import CircuitPath, path_kind
from stackedheads.claims._core import FAIL, INCONCLUSIVE, NUM, PASS, Each, combine, read_json

# A circuit of a model that has not learned proves nothing: circuit and emergence claims need
# every chain position's final partial loss at most this fraction of the 1 - 1/N plateau (0.15
# for the paper's N = 4; its models reach < 0.01, Sec. 8.2, and 0.031, Sec. 9.2).
LEARNED_FRACTION = 0.2
# Figure 7's line (emergence.THRESHOLD): a path whose mean attention is above it is formed.
FORMED = 0.5
WEAK = 0.6  # a rule covering less of its row's attention is named beside the head it explains (as discovery's)

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


def heads_in(config: dict) -> int:
    """Attention heads of the model a training config (as a run's summary.json holds it) describes.

    Its model settings are nested under "model", or at the top level in a run written before the
    config was nested: the format :meth:`stackedheads.training.TrainConfig.from_dict` reads,
    not called here because it would load torch to judge claims from files."""
    model = config.get("model", config)
    return model["n_layers"] * model["n_heads"]


def learned(train: dict, seed: str, paper_steps: int | None = None) -> tuple[bool, str]:
    """Whether a seed's final partial losses are all off the plateau, and why not. A run that
    trained the paper's ``paper_steps`` or more is not told to train longer: its seed did not
    learn where the paper's did, which is itself the measurement."""
    chains = train["config"]["task"]["chains"]
    limit = LEARNED_FRACTION * (1 - 1 / chains)
    parts = train["seeds"][seed]["final_partial"]
    bad = [k.removeprefix("val_") for k, v in parts.items() if not v <= limit]
    if not bad:
        return True, ""
    shown = ", ".join(f"{k.removeprefix('val_')} {v:.3f}" for k, v in parts.items())
    steps = train["config"].get("steps")
    advice = (f"not learned in the paper's {paper_steps:,} steps, so no circuit to judge"
              if paper_steps and steps is not None and steps >= paper_steps else "train longer")
    return False, (
        f"seed {seed}: the model has not learned the task ({shown}; every position must be <= {limit:.3g}, "
        f"{LEARNED_FRACTION:.0%} of the 1 - 1/N = {1 - 1 / chains:.3g} plateau): {advice}"
    )


def budget_text(found: dict) -> str:
    if found.get("threshold_kind") == "absolute":
        over = found.get("model_over_budget") or []
        return f"budget: absolute {found['threshold']:.3g} per position (App. E: below 0.05)" + (
            f"; {', '.join(over)} above it unablated get their own loss + {found.get('tolerance', 0):.3g}" if over else "")
    return (f"budget: each position's unablated loss + {found.get('tolerance', 0):.3g} (a CPU twin's relative "
            f"budget; App. E uses an absolute 0.05)")


def shortcut_text(found: dict) -> str:
    """The useful paths that are not retrieval, named: what the model does instead of (or beside)
    the paper's content-based retrieval; "" when there are none."""
    paths = [p for p in found.get("paths", []) if path_kind(p[3]) != "retrieval"]
    return "shortcuts: " + ", ".join(f"{CircuitPath(*p).key} ({path_kind(p[3])})" for p in paths) if paths else ""


def heads_text(found: dict) -> str:
    """The useful heads by what they do: the paper's retrieval heads, the shortcut heads (every
    useful path positional or cross-chain, named), and heads with rows no rule explains. Older
    summaries, written before shortcuts had rules, give only heads with paths."""
    kept = sorted({(l, h) for l, h, _ in found["unexplained_heads"]})
    if "retrieval_heads" not in found:
        return f"{len(found['heads_with_paths'])} with paths, {len(kept)} with unexplained rows, counted useful"
    shortcut = found["shortcut_heads"]
    named = ", ".join(filter(None, [shortcut_text(found)[11:], ", ".join(
        mapped_text(found, *row) for row in found.get("mapped_rows", []))]))
    # Rows a retrieval rule replaces while covering little of their attention: said, not hidden.
    weak = [d for d in found.get("diagnosis", []) if d.get("rule_covered") is not None
            and d.get("rule_kind") == "retrieval" and LABEL_COVER <= d["rule_covered"] < WEAK]
    return (f"{len(found['retrieval_heads'])} retrieval heads with paths along the chain"
            + (" (" + ", ".join(f"L{d['layer']}.{d['head']} {d['role']}'s {d['rule']} covers only "
                                f"{d['rule_covered']:.0%} of its attention" for d in weak) + ")" if weak else "")
            + f", {len(shortcut)} shortcut heads" + (f" ({named})" if shortcut else "")
            + f", {len(kept)} with unexplained rows, counted useful")


def mapped_text(found: dict, layer: int, head: int, role: str, rule: str) -> str:
    """A row that follows its own measured map (by position alone, or by position and the chain
    role each position holds), with the share of its attention the map reproduces and the
    nearest named rule, from its diagnosis."""
    d = next((d for d in found.get("diagnosis", []) if (d["layer"], d["head"], d["role"]) == (layer, head, role)), None)
    said = f"; map reproduces {d['rule_covered']:.0%}, nearest rule {d['best']} {d['covered']:.0%}" if d and d.get("rule_covered") else ""
    how = "by position alone" if rule == "position-map" else "by position and chain role"
    return f"L{layer}.{head} {role} (attends {how}{said})"


def row_text(found: dict, rows) -> str:
    """Rows ``(layer, head, role)`` with what their diagnosis (held-out sequences) says they read."""
    said = {(d["layer"], d["head"], d["role"]): d for d in found.get("diagnosis", [])}

    def one(l, h, r):
        d = said.get((l, h, r))
        return f"L{l}.{h} {r}" + (f" reads {d['best']} ({d['kind']}, {d['covered']:.0%} of its attention)" if d else "")

    return ", ".join(one(*row) for row in rows)


def validation(found: dict) -> tuple[str, str]:
    """App. E step 5 on the held-out sequences: the combined ablation, every row replaced
    (unexplained rows uniform), must keep every position within its budget."""
    un, comb, budgets = found["unablated"], found["combined"], found["budgets"]
    parts = ", ".join(f"x{j} {p:.3f}/{b:.3f}" for j, (p, b) in enumerate(zip(comb["partial"], budgets, strict=True), start=1))
    text = f"unablated {un['loss']:.4f}, combined ablation {comb['loss']:.4f} (per position loss/budget: {parts}; {budget_text(found)})"
    over, unexplained = found["over_budget"], found["unexplained_heads"]
    shortcuts = shortcut_text(found)
    if shortcuts:
        text += f"; {shortcuts}"
    if found.get("model_over_budget"):
        return INCONCLUSIVE, text + f"; the model's own loss is above the threshold for {', '.join(found['model_over_budget'])}"
    if not over:
        return PASS, text + (f"; {len(unexplained)} unexplained rows made uniform ({row_text(found, unexplained)})" if unexplained else "")
    if unexplained:
        return INCONCLUSIVE, text + (
            f"; partial circuit: {', '.join(over)} over budget with {len(unexplained)} unexplained rows made uniform "
            f"({row_text(found, unexplained)})"
        )
    return FAIL, text + f"; {', '.join(over)} over budget"


def first_head_pairs(found: dict, depth: int) -> tuple[bool | None, str]:
    """Sec. 8.2 (i) as the paper read it, from the attention maps ("the first useful layers ...
    always attend to the previous position", App. E, whose ablation test they pass only loosely:
    0.05-0.1): whether the lowest head with useful paths or rows attends from every pair's
    second token ``s_2k`` to its first ``s_2k-1`` above :data:`FORMED` (None where its map was
    not recorded: a discovery before A4 read the maps). The text says which of these links its kept paths carry,
    what the head reads when it is not the links, and which head links every pair instead."""
    mapped = found.get("mapped_rows", [])
    heads = (found.get("heads_with_paths") or []) + [[l, h] for l, h, *_ in mapped]
    if not heads:
        return None, "no head carries a useful path"
    low = min(tuple(h) for h in heads)  # the first useful head (rows by position alone are useful)
    carried = {(src, dst) for l, h, src, dst in found["paths"] if (l, h) == low}
    linked = [k for k in range(1, depth + 1) if (2 * k, 2 * k - 1) in carried]
    kept = f"its kept paths link {len(linked)} of {depth} pairs"
    att = {(l, h): a for l, h, a in found.get("pair_attention", [])}
    if low not in att:
        return None, f"L{low[0]}.{low[1]}: {kept}; its attention on the pairs was not recorded (run circuit discover again)"
    mine = att[low]
    formed = sum(a > FORMED for a in mine)
    text = (f"L{low[0]}.{low[1]} attends from each pair's second token to its first "
            f"{', '.join(f'{a:.2f}' for a in mine)} ({formed} of {depth} pairs above {FORMED}, "
            f"the attention at which Figure 7 counts a path formed); {kept}")
    if formed < depth:
        kinds = sorted({path_kind(dst) for _, dst in carried} - {"retrieval"})
        if kinds:
            reads = ", ".join(CircuitPath(*low, *p).key for p in sorted(carried, key=str) if path_kind(p[1]) != "retrieval")
            text += f"; it is a {'/'.join(kinds)} shortcut ({reads})"
        by_position = [mapped_text(found, *row) for row in mapped if tuple(row[:2]) == low]
        if by_position:
            text += f"; {', '.join(by_position)}"
        linkers = [f"L{l}.{h} (at least {min(a):.2f})" for (l, h), a in sorted(att.items()) if min(a) > FORMED]
        if linkers:
            text += "; every pair linked by " + ", ".join(linkers)
    return formed == depth, text


def kept_below(found: dict) -> list[tuple[int, int]]:
    """Heads with rows no rule explains below the lowest head with useful paths: they count as
    useful (A2), so the first useful head is one whose job is unknown."""
    heads = found.get("heads_with_paths") or []
    kept = sorted({(l, h) for l, h, _ in found.get("unexplained_heads", [])})
    if not heads:
        return kept
    low = min(tuple(h) for h in heads)
    return [k for k in kept if k < low]


def per_seed(seeds, each) -> tuple[str, str]:
    """``each(seed) -> (verdict, text)`` over seeds, combined."""
    results = [(s, *each(s)) for s in seeds]
    return combine(v for _, v, _ in results), "; ".join(f"seed {s}: {t}" for s, _, t in results)


def gated(stage: dict, each, paper_steps: int | None = None):
    """``each`` only where the seed's model has learned the task, else INCONCLUSIVE (also when
    the training summary that says so is missing); ``paper_steps`` as :func:`learned` takes it."""
    train = stage["train"]

    def run(s):
        if train is None:
            return INCONCLUSIVE, no_summary(stage)
        ok, why = learned(train, s, paper_steps)
        return each(s) if ok else (INCONCLUSIVE, why.split(": ", 1)[1])

    return run



def stage_from_files(stage_dir: Path, run_name: str) -> dict | None:
    """A circuits/emergence stage's training summary and discovered circuits, from its files.

    A stage trained in pieces (``runs/<run_name>`` and ``runs/<run_name>-*``, each holding other
    seeds of the same settings) is read as one run (:func:`stackedheads.pieces.combine`).
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
    """The stage's training summary, its pieces combined (None when no piece has finished)."""
    dirs = pieces.piece_dirs(stage_dir, run_name)
    found = [(d, s) for d in dirs if (s := read_json(d / "summary.json", TRAIN_SUMMARY, stage_dir))]
    return pieces.combine(found)


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
    from stackedheads.sweep import cross_threshold, crossing_steps

    mine = [r for r in rows if str(r["seed"]) == str(seed)]
    parts = [f"val_x{j}" for j in range(1, task["depth"] + 1)] if task.get("ic", True) else []
    if not mine or not parts or not all(p in mine[0] for p in parts):
        return None
    return {k[4:]: v for k, v in crossing_steps(mine, int(seed), parts, cross_threshold(task["chains"])).items()}


_WHEN = (int, float, type(None))  # a step, or null: never
# What the claims and the report read of an emergence timeline.json (emergence.Timeline).
TIMELINE = {
    "steps": [int], "epochs": [NUM], "plateau_steps": _WHEN, "first_paths": [str], "serves": Each([int]),
    "emerged": Each(_WHEN), "emerged_seen?": Each(_WHEN), "order": str, "loss_drops": Each(_WHEN), "loss_drop_order": str,
    "positions": Each({"new_paths": [str], "step": _WHEN, "seen?": _WHEN, "epoch?": _WHEN, "status": str}),
}


def read_timeline(path: Path, stage_dir: Path) -> dict | None:
    """An emergence timeline.json (None when absent), checked for what is read of it."""
    return read_json(path, TIMELINE, stage_dir)


def read_discovery(path: Path, stage_dir: Path) -> dict:
    """A discovery's summary.json, checked for what the claims and the report read."""
    return read_json(path, DISCOVERY_SUMMARY, stage_dir)


def with_unfinished(found: list, stage_dir: Path, run_name: str) -> list:
    """``found`` with the stage's pieces still training named in each judged claim: they hold
    no seed of the result (no summary.json), so what the claims say leaves them out."""
    from dataclasses import replace

    from stackedheads.claims._core import NOT_RUN

    still = [d.name for d in pieces.unfinished(stage_dir, run_name)]
    if not still:
        return found
    note = f"; not counted: {', '.join(still)} (still training: no summary.json)"
    return [c if c.verdict == NOT_RUN else replace(c, measured=c.measured + note) for c in found]


def no_summary(stage: dict) -> str:
    return f"{stage['missing']} is missing (the training run's final losses this claim needs)"


# --- what discovery's labels and App. E's validation read, under each reading ----------------

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


def relabel_text(found: dict) -> str:
    rows = found.get("relabelled") or []
    return (f"; {len(rows)} rows unexplained, their rule catching under {LABEL_COVER:.0%} of their attention "
            f"({', '.join(rows)})") if rows else ""


def validation_total(found: dict) -> tuple[str, str]:
    """App. E step 5 as the paper states it: the combined ablation's validation loss, every
    position together, below the budget (App. E's 0.05; a twin's relative budget: the unablated
    loss + the tolerance)."""
    un, comb = found["unablated"]["loss"], found["combined"]["loss"]
    absolute = found.get("threshold_kind") == "absolute"
    budget = found["threshold"] if absolute and found.get("threshold") is not None else un + found.get("tolerance", 0)
    how = "App. E's absolute budget" if absolute else "a CPU twin's relative budget: the unablated loss + the tolerance"
    text = f"unablated {un:.4f}, combined ablation {comb:.4f} over every position, below {budget:.3g} needed ({how}; paper: below 0.05)"
    unexplained = found["unexplained_heads"]
    if absolute and un >= budget:
        return INCONCLUSIVE, text + "; the model's own loss is not below it"
    if comb < budget:
        return PASS, text + (f"; {len(unexplained)} unexplained rows made uniform ({row_text(found, unexplained)})" if unexplained else "")
    if unexplained:
        return INCONCLUSIVE, text + f"; partial circuit: {len(unexplained)} unexplained rows made uniform ({row_text(found, unexplained)})"
    return FAIL, text


def validation_readings(found: dict) -> dict:
    """App. E step 5 under each reading (:data:`~stackedheads.claims.readings.READINGS`' A3)."""
    return {"combined-loss": validation_total(found), "per-position": validation(found)}


def first_head_paths(found: dict, depth: int) -> tuple[bool | None, str]:
    """A4's paths reading: whether the first useful head's useful paths link every pair's
    second token to its first (``s_2k -> s_2k-1``)."""
    heads = (found.get("heads_with_paths") or []) + [[l, h] for l, h, *_ in found.get("mapped_rows", [])]
    if not heads:
        return None, "no head carries a useful path"
    low = min(tuple(h) for h in heads)
    carried = {(src, dst) for l, h, src, dst in found["paths"] if (l, h) == low}
    linked = [k for k in range(1, depth + 1) if (2 * k, 2 * k - 1) in carried]
    return len(linked) == depth, f"L{low[0]}.{low[1]}'s useful paths link {len(linked)} of {depth} pairs (s_2k -> s_2k-1)"


# --- when each chain position emerges, under each of E3's readings -----------------------------


def new_paths(serves: dict[str, list[int]], j: int) -> list[str]:
    """The paths that serve x_j but not x_(j-1)."""
    return sorted(k for k, js in serves.items() if j in js and (j - 1) not in js)


def hurt_most(found: dict | None, keys: list[str]) -> dict[str, int] | None:
    """Each path's position whose partial loss its removal (its redundant group's) raises most,
    over the tolerance, from the discovery's held-out losses; None when they are not recorded."""
    if not found or not found.get("losses"):
        return None
    rows = {r["ablation"]: r["partial"] for r in found["losses"]}
    base = rows.get("combined, unexplained rows kept", rows.get("combined"))
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


def position_times(t: dict, reading: str, found: dict | None = None) -> dict[str, tuple[float | None, list[str], str]]:
    """Per chain position x_j of a timeline (its serves already relabelled), under an E3
    reading: (when it emerges or None, the paths that time it, status). Status ``no path``: no
    path times it, so it cannot be ordered."""
    serves, emerged, seen = t["serves"], t["emerged"], t.get("emerged_seen") or {}
    depth = len(t["positions"])
    groups = [g for g in t.get("groups", []) if all(k in serves for k in g)]
    group_of = {k: tuple(g) for g in groups for k in g}
    owner = hurt_most(found, [k for k, v in serves.items() if v]) if reading == "hurt-most" else None
    out = {}
    for j in range(1, depth + 1):
        if reading == "query-path":
            mine = sorted(k for k in serves if (p := CircuitPath.parse(k)).src == 0 and p.dst == 2 * j)
        elif reading == "hurt-most":
            mine = sorted(k for k, pos in (owner or {}).items() if pos == j)
        else:
            mine = new_paths(serves, j)
        if not mine:
            out[f"x{j}"] = (None, [], "no path")
            continue
        times = seen if reading == "last-path-checkpoint" else emerged
        if reading in ("last-path", "last-path-checkpoint"):
            units = sorted({group_of.get(k, (k,)) for k in mine})
            per = [min((times[k] for k in u if times.get(k) is not None), default=None) for u in units]
            when = None if None in per else max(per)
        else:
            when = min((times[k] for k in mine if times.get(k) is not None), default=None)
        out[f"x{j}"] = (when, mine, "emerged" if when is not None else "never emerged")
    return out


def times_order(times: dict[str, tuple]) -> str:
    """:func:`~stackedheads.ordering.order_of` of the timed positions; ``inconclusive`` where a
    position has no path to time it and the rest show no disorder."""
    from stackedheads.ordering import order_of

    order = order_of([w for w, paths, _ in times.values() if paths])
    if order != "out of order" and any(not paths for _, paths, _ in times.values()):
        return "inconclusive"
    return order


def relabelled_timeline(t: dict, found: dict | None) -> dict:
    """A timeline whose paths serve nothing where discovery's rule for their row catches less
    than :data:`LABEL_COVER` of its attention (:func:`relabelled`)."""
    if not found:
        return t
    bad = {(d["layer"], d["head"], d["role"]) for d in mislabelled(found)}
    if not bad:
        return t
    serves = {k: ([] if _row_of(k) in bad else v) for k, v in t["serves"].items()}
    return {**t, "serves": serves}
