"""The recipe screen's rule: how many seeds each recipe wants, what it says of a
finished one, and the recipe it names."""

from __future__ import annotations

import math

from stackedheads.errors import UsageError
from stackedheads.recipes import PAPER_CURRICULUM
from stackedheads.recipe_screen.distance import PAPER, toward, x1_fall
from stackedheads.recipe_screen.rows import RunSeeds

# The recipe screen's rule: two seeds of every choice, four of one that moved the plateau or
# the final loss 2x or more toward the paper, four of every combination of choices and of every
# recipe of the second round.
SCREEN_SEEDS, MOVED_SEEDS = 2, 4


def screened_name(label: str) -> str | None:
    """The recipe a run's label names (today's name for an old one; several joined by "+"), or
    None: the presets' own (gpt2) or a label that is no recipe."""
    from stackedheads.recipes import canonical

    try:
        name = canonical(label, note=None)
    except UsageError:
        return None
    return None if name == "gpt2" else name


def screen(runs: list[RunSeeds]) -> dict | None:
    """The recipe screen's state by its rule, or None when no sec9 run is labelled with a
    recipe's name or no other sec9 run is there to be the baseline.

    The baseline is the run labelled gpt2 (``results/sec9/gpt2``, the presets' recipe), else the
    first sec9 run given whose label is no recipe. A choice "moved" when its median, or any one of
    its seeds, puts x1's fall or the final val MSE 2x or more closer to the paper's (450 epochs,
    0.031) than the baseline's median (:func:`toward`): one seed of two that moved may be the
    choice's effect, and more seeds decide it. The second round's recipes want four seeds each.
    Every recipe of :data:`stackedheads.recipes.SCREEN`
    is listed, with 0 seeds where no run of it was given; a run of another recipe (decay-all) is
    in the distance table, not the screen.
    """
    from stackedheads.recipes import SCREEN, SCREEN_ROUNDS, recipe

    sec9 = [r for r in runs if r.section == "sec9"]
    screened = {name: r for r in sec9 if (name := screened_name(r.label)) in SCREEN}
    base = next((r for r in sec9 if r.label == "gpt2"), None) or next(
        (r for r in sec9 if screened_name(r.label) is None), None)
    if not screened or base is None:
        return None
    b, paper = base.summary(), PAPER["sec9"]
    if not b["final_val_loss"] or not b["x1_fall_epochs"]:
        return None
    ref = {"x1's fall": (b["x1_fall_epochs"]["median"], paper["plateau_epochs"], "{:.0f} epochs"),
           "final val MSE": (b["final_val_loss"]["median"], paper["final_val_loss"], "{:.4f}")}
    rows = []
    for name in SCREEN:
        choices = recipe(name, note=None).choices
        run, moved = screened.get(name), []
        s = run.summary() if run is not None else {"distance": {"value": None, "missing": ["seeds"]}}
        if run is not None:
            x1 = s["x1_fall_epochs"]
            values = {"x1's fall": [("median", x1 and x1["median"], bool(x1 and x1["censored"]))]
                      + [(f"seed {r.seed}", *x1_fall(r)) for r in run.rows],
                      "final val MSE": [("median", s["final_val_loss"] and s["final_val_loss"]["median"], False)]
                      + [(f"seed {r.seed}", r.final_val_loss, False) for r in run.rows]}
            for measure, (bv, pv, fmt) in ref.items():
                hits = [f"{who} {'>=' if ge else ''}{fmt.format(v)}" for who, v, ge in values[measure]
                        if v is not None and toward(v, bv, pv)]
                if hits:
                    moved.append(f"{measure}: {', '.join(hits)}")
        n = len(run.rows) if run is not None else 0
        second = name in SCREEN_ROUNDS[1]
        wanted = MOVED_SEEDS if choices > 1 or moved or second else SCREEN_SEEDS
        row = {"recipe": name, "seeds": n, "moved": moved, "round": 2 if second else 1,
               "why": ("a combination" if choices > 1 else "moved 2x toward the paper" if moved
                       else "round two" if second else "did not move"),
               "wanted": wanted, "to_run": max(0, wanted - n), "distance": s["distance"]}
        row["verdict"] = _verdict(row, base.label, b["distance"])
        rows.append(row)
    base_text = {m: fmt.format(bv) for m, (bv, _, fmt) in ref.items()}
    state = {"baseline": base.label, "baseline_medians": base_text, "baseline_distance": b["distance"]["value"],
             "rows": rows, "to_run": sum(r["to_run"] for r in rows)}
    # a lower bound (a seed that never left the plateau) names nothing
    measured = [r for r in rows if not r["to_run"] and r["distance"]["value"] is not None and not r["distance"]["at_least"]]
    state["closest"] = min(measured, key=lambda r: r["distance"]["value"])["recipe"] if measured else None
    return state


# A recipe reproduces Sec. 9's curriculum, on the distance's own terms, when the medians of its
# x1 fall and final val MSE are within 2x of the paper's and every seed's losses fall in order.
WITHIN = math.log(2)


def _shortfalls(d: dict) -> list[str]:
    """The distance's terms that keep a run from the paper, each with its factor or share."""
    out = [f"{name} {math.exp(d[term]):.1f}x off the paper's" for term, name in (("plateau", "x1's fall"), ("final", "final val MSE"))
           if d[term] > WITHIN]
    if d["order"] > 0:
        out.append(f"{d['order']:.0%} of seeds' losses out of chain order")
    return out


def _verdict(row: dict, baseline: str, base: dict) -> str:
    """What the screen says of one recipe once its seeds are in: ruled out (farther from the
    paper than the baseline, or nearer by less than ln 2, what one term moving 2x gives: by how
    much), nearer but not the paper (what is still off), or a reproduction (:data:`WITHIN`);
    before that, what is missing."""
    d = row["distance"]
    if row["to_run"]:
        return f"open: {row['to_run']} more seed{'s' * (row['to_run'] > 1)}"
    if d["value"] is None:
        return f"not measured ({', '.join(d['missing'])} missing)"
    if base["value"] is None:
        return f"distance {d['value']:.2f}; {baseline}'s not measured"
    # A seed that never left the plateau makes the distance a lower bound: farther is decided, nearer
    # only up to what the bound allows.
    ge, gain = ">=" if d["at_least"] else "", base["value"] - d["value"]
    if gain <= 0:
        return (f"ruled out: distance {ge}{d['value']:.2f}, {'at least ' * d['at_least']}{-gain:.2f} farther than "
                f"{baseline}'s {base['value']:.2f}")
    if gain < WITHIN:
        return (f"ruled out: distance {ge}{d['value']:.2f}, {'at most ' * d['at_least']}{gain:.2f} nearer than "
                f"{baseline}'s {base['value']:.2f}, less than the {WITHIN:.2f} of a 2x move")
    if d["at_least"]:
        return (f"undecided: distance at least {d['value']:.2f} against {baseline}'s {base['value']:.2f}; "
                "a seed never left the plateau, so its x1 fall is a lower bound")
    off = _shortfalls(d)
    if not off:
        return f"reproduces: distance {d['value']:.2f} (x1's fall and final val MSE within 2x, every seed in order)"
    return (f"nearer: distance {d['value']:.2f}, {gain:.2f} less than {baseline}'s "
            f"{base['value']:.2f}; not the paper: {', '.join(off)}")


def closest_line(state: dict) -> str | None:
    """The recipe the screen names (the finished one nearest the paper), or the nearest so far."""
    name = state["closest"]
    if name is None:
        return None
    row = next(r for r in state["rows"] if r["recipe"] == name)
    when = (f"the closest so far: the screen still wants {state['to_run']} seed{'s' * (state['to_run'] != 1)}" if state["to_run"]
            else "the screen is finished; `--recipe paper-curriculum` selects it" if name == PAPER_CURRICULUM
            else f"the screen is finished; `--recipe paper-curriculum` selects {PAPER_CURRICULUM}, not it")
    return f"Closest recipe: {name} ({when}); {row['verdict']}"


def screen_table(state: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of :func:`screen`'s state (the console's and Markdown's)."""
    head = ["recipe", "seeds", f"2x toward the paper (beside {state['baseline']})", "seeds wanted", "to run",
            "verdict"]
    return head, [[r["recipe"], str(r["seeds"]), "; ".join(r["moved"]) or "-",
                   f"{r['wanted']} ({r['why']})", str(r["to_run"]) if r["to_run"] else "done", r["verdict"]]
                  for r in state["rows"]]


def screen_title(state: dict) -> str:
    m = state["baseline_medians"]
    x1 = m["x1's fall"]
    return (f"The recipe screen: {SCREEN_SEEDS} seeds a choice, {MOVED_SEEDS} where x1's fall or the final "
            f"val MSE moved 2x or more toward the paper's 450 epochs and 0.031 from {state['baseline']}'s "
            f"{x1} and {m['final val MSE']}, {MOVED_SEEDS} a combination or a recipe of the second round: "
            f"{state['to_run']} seeds to run")
