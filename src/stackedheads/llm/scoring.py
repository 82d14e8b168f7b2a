"""Scoring of the LLM benchmark (Sec. 4, App. A): answers parsed, questions counted, intervals.

Pure functions of text and records: no backend, no file. :func:`normalise` and
:func:`parse_answer` are also the scorer of the exported inspect_ai task (``export`` copies
their source), so the benchmark and the export judge an answer alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from stackedheads.tasks import prompts
from stackedheads.tasks.formulations import FORMULATIONS

__all__ = ["normalise", "parse_answer", "summarize", "wilson"]

_Z95 = 1.959963984540054  # two-sided 95% normal quantile

# --- parsing -------------------------------------------------------------------------------------

_LABEL = re.compile(r"^answer\s*:\s*", re.IGNORECASE)
_WRAP = "\"'`*_“”‘’"
_FINAL_PUNCT = ".,;:!?。"


def normalise(text: str) -> str:
    """First non-empty line, an ``Answer:`` label removed, surrounding whitespace, quotes and
    markdown emphasis removed, final punctuation removed, case folded."""
    line = next((x for x in text.strip().splitlines() if x.strip()), "")
    line = _LABEL.sub("", line.strip())
    previous = None
    while previous != line:  # e.g. '"3."' -> '3.' -> '3'
        previous = line
        line = line.strip().strip(_WRAP).rstrip(_FINAL_PUNCT)
    return line.casefold()


def parse_answer(text: str, acceptable: Iterable[str]) -> str | None:
    """The acceptable answer (in its canonical spelling) that ``text`` gives, or None."""
    table = {a.casefold(): a for a in acceptable}
    return table.get(normalise(text))


# --- counting ------------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Exact ends at k = 0 and k = n (the formula gives them up to round-off).
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def _cell_stats(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    correct = sum(r["correct"] for r in records)
    answered = sum(r["answered"] for r in records)
    lo, hi = wilson(correct, n)
    return {
        "formulation": records[0]["formulation"],
        "depth": records[0]["depth"],
        "chains": records[0]["chains"],
        "n": n,
        "correct": correct,
        "accuracy": correct / n,
        "ci95": [lo, hi],
        "answered": answered,
        "unanswered": n - answered,
        "accuracy_answered": correct / answered if answered else None,
        "chance": sum(1 / len(r["acceptable"]) for r in records) / n,
        "mean_draws": sum(r["n_draws"] for r in records) / n,
        "mean_latency_s": sum(r["latency_s"] for r in records) / n,
    }


def summarize(records: Iterable[dict[str, Any]], identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """results.json: every (formulation, D) cell; ``per_formulation`` picks each
    formulation's default depth (Fig. 2 left, Sec. 4: D = 5), or its only depth;
    ``per_depth`` lists each formulation's cells by D (Fig. 2 right for equations)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["formulation"], r["depth"]), []).append(r)
    order = {f: i for i, f in enumerate(FORMULATIONS)}
    keys = sorted(groups, key=lambda k: (order[k[0]], k[1]))
    stats = [_cell_stats(groups[k]) for k in keys]
    per_formulation: dict[str, Any] = {}
    per_depth: dict[str, dict[str, Any]] = {}
    for s in stats:
        per_depth.setdefault(s["formulation"], {})[str(s["depth"])] = s
    for f, by_d in per_depth.items():
        default = str(prompts.default_depth(f))
        if default in by_d:
            per_formulation[f] = by_d[default]
        elif len(by_d) == 1:
            per_formulation[f] = next(iter(by_d.values()))
    return {
        "identity": identity or {},
        "definitions": {
            "accuracy": "first acceptable answer correct, over all questions (unanswered count as wrong)",
            "accuracy_answered": "the same over answered questions only",
            "unanswered": "no acceptable answer within max_draws draws",
            "chance": "mean of 1/len(acceptable)",
            "ci95": "Wilson score interval, 95%",
        },
        "per_formulation": per_formulation,
        "per_depth": per_depth,
        "cells": stats,
    }
