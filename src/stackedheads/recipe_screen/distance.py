"""The distance to Sec. 9's curriculum: one seed's, then a run's as the median over its seeds
(the formula: :mod:`stackedheads.recipe_screen`). A row is a :class:`stackedheads.recipe_screen.rows.SeedRow`."""

from __future__ import annotations

import math
import statistics

# The paper's numbers the distributions are set beside (the claims modules hold the thresholds).
PAPER = {
    "sec8": {"final_val_loss": 0.01, "useful_heads": 4, "source": "Sec. 8.2: below 0.01 after 24k steps; 4 of 12 heads useful"},
    "sec9": {"final_val_loss": 0.031, "plateau_epochs": 450.0, "distance_to_paper": 0.0,
             "source": "Sec. 9.2: 0.031; about 450 epochs before the first head; heads and losses in chain order"},
}


X1_PLATEAU_LOSS = 0.8  # x1's partial loss below this: on the 1 - 1/N plateau (0.75 at N = 4), the first fall done


def in_order(row) -> bool:
    """Whether every position's loss fell, at strictly increasing evaluations (E4's shape)."""
    return bool(row.loss_drops) and row.loss_drop_order == "in order" and None not in row.loss_drops.values()


def seed_distance(row) -> dict | None:
    """One seed's distance to the paper's curriculum (the module's formula) and its three terms;
    None when it has no final loss or no partial losses (or one is 0: a log of 0 has no distance).
    ``at_least``: x1 never fell, so the plateau term is a lower bound."""
    paper = PAPER["sec9"]
    x1, censored = x1_fall(row)
    if x1 is None or not row.final_val_loss or x1 <= 0 or row.final_val_loss <= 0:
        return None
    terms = {"plateau": abs(math.log(x1 / paper["plateau_epochs"])),
             "final": abs(math.log(row.final_val_loss / paper["final_val_loss"])),
             "order": 0.0 if in_order(row) else 1.0}
    return {"value": sum(terms.values()), **terms, "at_least": censored}


def distance(rows: list) -> dict:
    """A sec9 run's distance to the paper's curriculum: the median of its seeds' distances
    (:func:`seed_distance`) as ``value``, their ``min`` and ``max``, each seed's in ``per_seed``,
    and the terms over the seeds (``plateau``, ``final``: medians; ``order``: the share of seeds
    out of order). ``value`` None when no seed can be measured, what is missing named in
    ``missing``. ``at_least``: a seed never left the plateau, so the median is a lower bound."""
    per = {r.seed: d for r in rows if (d := seed_distance(r)) is not None}
    if not per:
        missing = [name for name, ok in (("final val MSE", any(r.final_val_loss for r in rows)),
                                         ("partial losses", any(r.drop_epochs for r in rows))) if not ok]
        return {"value": None, "missing": missing or ["a positive x1 fall and final val MSE"]}
    values = [d["value"] for d in per.values()]
    return {"value": statistics.median(values), "min": min(values), "max": max(values),
            "plateau": statistics.median(d["plateau"] for d in per.values()),
            "final": statistics.median(d["final"] for d in per.values()),
            "order": sum(d["order"] for d in per.values()) / len(per),
            "at_least": any(d["at_least"] for d in per.values()), "seeds": len(per),
            "per_seed": {s: d["value"] for s, d in per.items()}}


def toward(value: float, base: float, paper: float) -> bool:
    """Whether ``value`` is 2x or more closer to ``paper`` than ``base`` is, on the log scale the
    distance takes (from 0.0027 to within 2x of 0.031 is; to 0.39, farther above it, is not)."""
    return value > 0 and base > 0 and abs(math.log(value / paper)) <= abs(math.log(base / paper)) - math.log(2)


def x1_fall(row) -> tuple[float | None, bool]:
    """A seed's x1 fall in epochs, the run's length where it never fell (the distance's plateau
    term), and whether it never fell (the value is then a lower bound)."""
    if not row.drop_epochs:
        return None, False
    x1 = row.drop_epochs.get("x1")
    return (x1, False) if x1 is not None else (row.run_epochs, True)
