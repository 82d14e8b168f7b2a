"""Figure 2 of one benchmark run (Sec. 4): accuracy per formulation and equations accuracy vs D.

Drawn from ``results.json`` as :func:`stackedheads.llm.scoring.summarize` writes it; the
figure of several models side by side is :mod:`stackedheads.llm.compare`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackedheads.report.plots import pyplot, save_figure
from stackedheads.tasks.formulations import FORMULATIONS

__all__ = ["plot_figure2"]


def plot_figure2(results: dict[str, Any], out: Path) -> list[str]:
    """Fig. 2: left, accuracy per formulation (Wilson 95% bars) with dashed chance lines;
    right, equations accuracy vs D. PNG and SVG."""
    plt = pyplot()

    ident = results.get("identity", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.2, 1]})
    per_f = results["per_formulation"]
    names = [f for f in FORMULATIONS if f in per_f]
    for i, f in enumerate(names):
        s = per_f[f]
        lo, hi = s["ci95"]
        left.bar(i, s["accuracy"], width=0.7, color="C0")
        err = [[max(0.0, s["accuracy"] - lo)], [max(0.0, hi - s["accuracy"])]]  # float round-off
        left.errorbar(i, s["accuracy"], yerr=err, color="k", capsize=4)
        left.hlines(s["chance"], i - 0.4, i + 0.4, colors="C3", linestyles="--", label="chance" if i == 0 else None)
    left.set_xticks(range(len(names)), [f"{f}\nD={per_f[f]['depth']}" for f in names])
    left.set_ylim(0, 1.02)
    left.set_ylabel("accuracy")
    left.set_title("accuracy per formulation")
    if names:
        left.legend(loc="upper right", frameon=False)
    eq = results["per_depth"].get("equations", {})
    if eq:
        ds = sorted(int(d) for d in eq)
        acc = [eq[str(d)]["accuracy"] for d in ds]
        lo = [eq[str(d)]["ci95"][0] for d in ds]
        hi = [eq[str(d)]["ci95"][1] for d in ds]
        err = [[max(0.0, a - l) for a, l in zip(acc, lo)], [max(0.0, h - a) for a, h in zip(acc, hi)]]
        right.errorbar(ds, acc, yerr=err, fmt="o-", color="C0", capsize=3, label="accuracy (Wilson 95%)")
        right.plot(ds, [eq[str(d)]["chance"] for d in ds], "--", color="C3", label="chance")
        right.set_xticks(ds)
        right.legend(loc="upper right", frameon=False)
    else:
        right.text(0.5, 0.5, "no equations questions", ha="center", va="center", transform=right.transAxes)
    right.set_ylim(0, 1.02)
    right.set_xlabel("D (equations)")
    right.set_title("equations: accuracy vs D")
    shots = ident.get("few_shot")
    fig.suptitle(
        f"{ident.get('model', '?')} ({ident.get('backend', '?')}, {ident.get('mode', '?')}"
        + (f", {shots}-shot" if shots else "") + ")"
    )
    return save_figure(fig, out, "figure2")
