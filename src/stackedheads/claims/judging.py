"""What the Sections 8 and 9 claims share: whether a model has learned enough for its circuit to
mean anything, App. E's validation under each reading, the texts that name heads and rows, and
per-seed verdicts. The files are read by :mod:`stackedheads.claims.stage_files`."""

from __future__ import annotations

from pathlib import Path

from stackedheads.state import pieces
from stackedheads.circuits.paths import COMBINED_KEPT_TEXT, CircuitPath, path_kind
from stackedheads.claims._core import FAIL, INCONCLUSIVE, NOT_LEARNED, PASS

# A circuit of a model that has not learned proves nothing: circuit and emergence claims need
# every chain position's final partial loss at most this fraction of the 1 - 1/N plateau (0.15
# for the paper's N = 4; its models reach < 0.01, Sec. 8.2, and 0.031, Sec. 9.2).
LEARNED_FRACTION = 0.2
# Figure 7's line (emergence.THRESHOLD): a path whose mean attention is above it is formed.
FORMED = 0.5
WEAK = 0.6  # a rule covering less of its row's attention is named beside the head it explains (as discovery's)


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
        f"seed {seed}: {NOT_LEARNED} ({shown}; every position must be <= {limit:.3g}, "
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


def ablation_heads(found: dict) -> set[tuple[int, int]]:
    """App. E's useful heads, as the discovery's ablations decide them: a head is useful when
    replacing its attention by uniform or the identity breaks the budget: a path of it whose
    removal does (alone or in a redundant group), a row following its own map (no baseline
    kept the budget), a row no rule nor baseline replaces. Labels do not decide it."""
    if "useful_heads" in found:
        return {tuple(h) for h in found["useful_heads"]}
    return ({(l, h) for l, h, *_ in found["paths"]} | {(l, h) for l, h, *_ in found["unexplained_heads"]}
            | {(l, h) for l, h, *_ in found.get("mapped_rows", [])})


def held_out_heads(found: dict) -> set[tuple[int, int]] | None:
    """The heads whose removal recorded on the held-out sequences (a path, a redundant group, a
    row following a map, made uniform) breaks the budget at some position; None where the
    summary holds no per-path losses."""
    rows = {r["ablation"]: r["partial"] for r in found.get("losses") or []}
    if not rows:
        return None

    def breaks(name: str) -> bool:
        return name in rows and any(p > b for p, b in zip(rows[name], found["budgets"], strict=True))

    out = {(l, h) for l, h, *rest in found["paths"] if breaks("-" + CircuitPath(l, h, *rest).key)}
    for group in found.get("redundant_groups", []):
        keys = [k if isinstance(k, str) else CircuitPath(*k).key for k in group]
        if breaks("-(" + " + ".join(keys) + ")"):
            out |= {CircuitPath.parse(k)[:2] for k in keys}
    return out | {(l, h) for l, h, role, *_ in found.get("mapped_rows", []) if breaks(f"-L{l}.{h} {role}")}


def heads_text(found: dict, heads: set[tuple[int, int]]) -> str:
    """The useful ``heads`` by what they do (labels describe, they do not count), in kinds that
    add up to ``len(heads)``: the retrieval heads (a useful path along the chain), the shortcut
    heads (positional or cross-chain paths, or rows following their own map; none of them a
    retrieval head), the heads useful by rows no rule explains alone, and any other; then, of
    all of them, those with rows no rule explains (a retrieval or a shortcut head may have such
    a row too, so they are counted apart, not added) and the rows of these heads whose rule
    catches under :data:`WEAK` of their attention. No other head is named."""
    paths = [CircuitPath(*p) for p in found["paths"] if (p[0], p[1]) in heads]
    retrieval = sorted({p[:2] for p in paths if path_kind(p.dst) == "retrieval"})
    cuts = [p for p in paths if path_kind(p.dst) != "retrieval"]
    mapped = [row for row in found.get("mapped_rows", []) if tuple(row[:2]) in heads]
    shortcut = sorted(({p[:2] for p in cuts} | {tuple(r[:2]) for r in mapped}) - set(retrieval))
    kept = sorted({(l, h) for l, h, _ in found["unexplained_heads"]} & heads)
    alone = sorted(set(kept) - set(retrieval) - set(shortcut))
    other = sorted(set(heads) - set(retrieval) - set(shortcut) - set(kept))
    named = ", ".join([*(f"{p.key} ({path_kind(p.dst)})" for p in cuts), *(mapped_text(found, *r) for r in mapped)])
    weak = [d for d in found.get("diagnosis", []) if (d["layer"], d["head"]) in heads
            and d.get("rule_covered") is not None and d["rule_covered"] < WEAK]
    said = ", ".join(f"L{d['layer']}.{d['head']} {d['role']}'s {d['rule']} catches {d['rule_covered']:.0%}" for d in weak)
    return (_n(retrieval, "retrieval head") + (f" ({_heads(retrieval)})" if retrieval else "")
            + ", " + _n(shortcut, "shortcut head") + (f" ({named})" if shortcut else "")
            + (f", {_n(alone, 'head')} useful by rows no rule explains alone ({_heads(alone)})" if alone else "")
            + (f", {_n(other, 'other head')} ({_heads(other)})" if other else "")
            + (f"; of these {len(heads)}, {len(kept)} with rows no rule explains" if heads else "")
            + (f" ({_heads(kept)})" if kept else "")
            + (f"; their rules catching under {WEAK:.0%} of the row's attention: {said}" if weak else ""))


def _n(items, noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def _heads(heads) -> str:
    return ", ".join(f"L{l}.{h}" for l, h in sorted(heads))


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
            f"({row_text(found, unexplained)}){kept_text(found, per_position=True)}"
        )
    return FAIL, text + f"; {', '.join(over)} over budget"


def kept_text(found: dict, per_position: bool = False) -> str:
    """What a partial circuit's combined ablation gives with its unexplained rows left to the
    head (losses.json's :data:`~stackedheads.circuits.paths.COMBINED_KEPT_TEXT` row): whether explaining those rows alone
    could bring it within budget. "" where the row was not measured."""
    kept = next((r for r in found.get("losses") or [] if r["ablation"] == COMBINED_KEPT_TEXT), None)
    if kept is None:
        return ""
    if per_position:
        over = [f"x{j} {p:.3f}/{b:.3f}" for j, (p, b) in enumerate(zip(kept["partial"], found["budgets"], strict=True), start=1)
                if p > b]
        return f"; with them left to the head: {', '.join(over) + ' over budget' if over else 'every position within budget'}"
    return f"; with them left to the head: combined ablation {kept['loss']:.4f}"


def first_head_pairs(found: dict, depth: int) -> tuple[bool | None, str]:
    """Sec. 8.2 (i) as the paper read it, from the attention maps ("the first useful layers ...
    always attend to the previous position", App. E, whose ablation test they pass only loosely:
    0.05-0.1): whether the lowest head with useful paths or rows attends from every pair's
    second token ``s_2k`` to its first ``s_2k-1`` above :data:`FORMED` (None where its map was
    not recorded: a discovery before A4 read the maps). The text says which of these links its kept paths carry,
    what the head reads when it is not the links, and which head links every pair instead."""
    mapped = found.get("mapped_rows", [])
    low = first_useful(found)  # rows by position alone are useful
    if low is None:
        return None, "no head carries a useful path"
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


def path_heads(found: dict) -> set[tuple[int, int]]:
    """The heads with useful paths or rows following a map (App. E's heads "responsible for the
    information flow")."""
    return {tuple(h) for h in found.get("heads_with_paths") or []} | {(l, h) for l, h, *_ in found.get("mapped_rows", [])}


def first_useful(found: dict) -> tuple[int, int] | None:
    """A4's first useful head: the lowest of :func:`path_heads`."""
    return min(path_heads(found), default=None)


def kept_below(found: dict) -> list[tuple[int, int]]:
    """Heads with rows no rule explains in layers below the first useful head's
    (:func:`first_useful`): they may be useful, so the first useful head may be one whose job is
    unknown."""
    kept = sorted({(l, h) for l, h, _ in found.get("unexplained_heads", [])})
    low = first_useful(found)
    return kept if low is None else [k for k in kept if k[0] < low[0]]


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


def with_unfinished(found: list, stage_dir: Path, run_name: str) -> list:
    """``found`` with the stage's pieces still training named in each judged claim: they hold
    no seed of the result (no summary.json), so what the claims say leaves them out."""
    from dataclasses import replace

    from stackedheads.claims._core import NOT_RUN

    still = [d.name for d in pieces.read_result(stage_dir, run_name).unfinished]
    if not still:
        return found
    note = f"; not counted: {', '.join(still)} (still training: no summary.json)"
    return [c if c.verdict == NOT_RUN else replace(c, measured=c.measured + note) for c in found]


def no_summary(stage: dict) -> str:
    return f"{stage['missing']} is missing (the training run's final losses this claim needs)"


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
    if shortcuts := shortcut_text(found):
        text += f"; {shortcuts}"
    if absolute and un >= budget:
        return INCONCLUSIVE, text + "; the model's own loss is not below it"
    if comb < budget:
        return PASS, text + (f"; {len(unexplained)} unexplained rows made uniform ({row_text(found, unexplained)})" if unexplained else "")
    if unexplained:
        return INCONCLUSIVE, text + (f"; partial circuit: {len(unexplained)} unexplained rows made uniform "
                                     f"({row_text(found, unexplained)}){kept_text(found)}")
    return FAIL, text


def validation_readings(found: dict) -> dict:
    """App. E step 5 under each reading (:data:`~stackedheads.claims.readings.READINGS`' A3)."""
    return {"combined-loss": validation_total(found), "per-position": validation(found)}


def first_head_paths(found: dict, depth: int) -> tuple[bool | None, str]:
    """A4's paths reading: whether the first useful head's useful paths link every pair's
    second token to its first (``s_2k -> s_2k-1``)."""
    low = first_useful(found)
    if low is None:
        return None, "no head carries a useful path"
    carried = {(src, dst) for l, h, src, dst in found["paths"] if (l, h) == low}
    linked = [k for k in range(1, depth + 1) if (2 * k, 2 * k - 1) in carried]
    return len(linked) == depth, f"L{low[0]}.{low[1]}'s useful paths link {len(linked)} of {depth} pairs (s_2k -> s_2k-1)"
