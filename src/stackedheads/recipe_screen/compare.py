"""Runs of one section side by side: on each measure the paper gives a number for, which run is closer."""

from __future__ import annotations

import math

from stackedheads.claims import PASS
from stackedheads.errors import UsageError
from stackedheads.recipe_screen.distance import PAPER
from stackedheads.recipe_screen.rows import RunSeeds

def compare(runs: list[RunSeeds]) -> list[dict]:
    """Runs of one section side by side: on each measure with a number in the paper, which run's
    median is closer to it (final MSE on a log scale: a factor of 2 above or below is as far;
    Sec. 8's useful heads and Sec. 9's plateau in heads and epochs), and which passes each claim
    on a larger share of its seeds. Says nothing where only one run of a section is given; two
    runs of one section under one label are refused (``--label`` tells them apart)."""
    out = []
    for section in ("sec8", "sec9"):
        same = [r for r in runs if r.section == section]
        if len(same) < 2:
            continue
        labels = [r.label for r in same]
        if len(set(labels)) < len(labels):
            twice = sorted({lab for lab in labels if labels.count(lab) > 1})
            raise UsageError(f"two {section} runs are both labelled {', '.join(twice)}: give one --label per folder")
        sums = {r.label: r.summary() for r in same}
        if section == "sec8":  # Sec. 8.2's 0.01 is a bound: below it is as close as can be
            measures = {"final_val_loss": lambda v, p: max(0.0, math.log(v / p)) if v > 0 else 0.0,
                        "useful_heads": lambda v, p: abs(v - p)}
        else:
            measures = {"final_val_loss": lambda v, p: abs(math.log(v / p)) if v > 0 else math.inf}
        if section == "sec9":
            # on a log scale, as the distance takes it: 225 and 900 epochs are as far from 450
            measures["plateau_epochs"] = lambda v, p: abs(math.log(v / p)) if v > 0 else math.inf
            for s in sums.values():  # the distance as one more measure whose median is the run's value
                s["distance_to_paper"] = {"median": s["distance"]["value"]} if s["distance"]["value"] is not None else None
            measures["distance_to_paper"] = lambda v, p: v
        for name, distance in measures.items():
            paper = PAPER[section][name]
            medians = {lab: s[name]["median"] for lab, s in sums.items() if s.get(name)}
            if len(medians) < 2:
                continue
            ranked = sorted(medians, key=lambda lab: distance(medians[lab], paper))
            tie = distance(medians[ranked[0]], paper) == distance(medians[ranked[1]], paper)
            out.append({"section": section, "measure": name, "paper": paper, "medians": medians,
                        "closer": None if tie else ranked[0]})
        ids = sorted({k for s in sums.values() for k in s["verdicts"]})
        for cid in ids:
            # The paper's target is every seed: the share passing, not the count (3 of 8 is not
            # closer than 2 of 2).
            # among the runs that judged it (a run without circuits has no E1-E3 to count as failed)
            passing = {lab: (s["verdicts"][cid].get(PASS, 0), s["seeds"]) for lab, s in sums.items() if cid in s["verdicts"]}
            if len(passing) < 2:
                continue
            best = max(n / m for n, m in passing.values())
            leaders = [lab for lab, (n, m) in passing.items() if n / m == best]
            out.append({"section": section, "measure": f"{cid} seeds passing", "paper": "every seed",
                        "medians": {lab: f"{n}/{m}" for lab, (n, m) in passing.items()},
                        "closer": leaders[0] if len(leaders) == 1 else None})
    return out
