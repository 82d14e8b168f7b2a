"""Several language models side by side: the paper's Figure 2, and accuracy vs depth.

Each model keeps its own resumable run folder (``samples.jsonl`` of :mod:`.runlog`); this
module only reads them. :func:`compare` writes, into one folder:

- ``comparison.json``: per model, its identity and every (formulation, D) cell;
- ``comparison.md``: the table model x formulation (accuracy, Wilson 95%, chance,
  unanswered, draws per question) and the equations accuracy per D;
- ``figure2.png``/``.svg``: left, accuracy per formulation, one bar per model, dashed chance
  lines; right, equations accuracy vs D, one line per model, Wilson 95% bars (Fig. 2);
- ``figure2_depth.png``/``.svg``: accuracy vs D for every formulation with a variable depth
  (equations, lives-with, kingdoms): where each model's ability ends.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError
from stackedheads.llm.runlog import CONFIG, SAMPLES, check_records, load_records
from stackedheads.llm.scoring import summarize
from stackedheads.report.plots import save_figure
from stackedheads.state.write import atomic_write_json, atomic_write_text, read_state_json
from stackedheads.tasks.formulations import FORMULATIONS

__all__ = ["compare", "depth_formulations", "load_run", "model_dir_name", "table_markdown"]

COMPARISON = "comparison.json"
KIND = "llm comparison"  # what storage.folder_kinds calls a folder holding COMPARISON


def depth_formulations() -> tuple[str, ...]:
    """The registered formulations with a variable depth D, in registry order."""
    return tuple(name for name, f in FORMULATIONS.items() if f.variable_depth)


def model_dir_name(model: str) -> str:
    """A folder name for a model argument (a name, a file, a URL's model name)."""
    name = Path(model).name if model.endswith(".gguf") else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def load_run(folder: Path) -> dict[str, Any]:
    """A run folder's results, recomputed from ``samples.jsonl`` (so a run still in progress,
    or killed, can be compared too)."""
    folder = Path(folder)
    records = load_records(folder / SAMPLES, strict=True)  # a garbage line was dropped without a word
    if not records:
        raise UsageError(f"{folder} holds no answered questions ({SAMPLES} missing or empty)")
    identity: dict[str, Any] = {}
    if (folder / CONFIG).exists():
        try:
            identity = read_state_json(folder / CONFIG, "the run's identity").get("identity", {})
        except UsageError:  # the records carry the identity too
            identity = {}
        identity = identity if isinstance(identity, dict) else {}
    vouched = bool(identity)
    if not identity:
        first = next(iter(records.values()))
        identity = {k: first.get(k) for k in ("backend", "model", "mode")}
    # As llm-bench does before resuming: answers copied from another run's folder must not be
    # credited to this one's model.
    check_records(records, identity, folder / SAMPLES, vouched, advice="compare that run's own folder")
    results = summarize(records.values(), identity)
    results["folder"] = str(folder)
    return results


def _label(results: dict[str, Any]) -> str:
    return str(results.get("identity", {}).get("model", Path(results.get("folder", "?")).name))


def _md(text: str) -> str:
    """A model's name as Markdown table text: HTML escaped (a renderer kept a name's
    ``<img onerror=...>`` as markup) and a ``|`` that would split the cell escaped."""
    import html

    return html.escape(" ".join(text.split())).replace("|", "\\|")


def table_markdown(runs: Sequence[dict[str, Any]]) -> str:
    """The comparison as Markdown: model x formulation at the paper's depths, then D curves."""
    lines = [
        "| model | formulation | D | n | accuracy | Wilson 95% | chance | unanswered | draws/q |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for f in FORMULATIONS:
            s = r["per_formulation"].get(f)
            if s:
                lines.append(
                    f"| {_md(_label(r))} | {f} | {s['depth']} | {s['n']} | {s['accuracy']:.3f} | "
                    f"[{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] | {s['chance']:.3f} | {s['unanswered']} | {s['mean_draws']:.2f} |"
                )
    for f in depth_formulations():
        depths = sorted({int(d) for r in runs for d in r["per_depth"].get(f, {})})
        if len(depths) < 2:
            continue
        lines += ["", f"{f}: accuracy by D (n per cell)", "",
                  "| model | " + " | ".join(f"D={d}" for d in depths) + " |",
                  "|---|" + "---|" * len(depths)]
        for r in runs:
            cells = r["per_depth"].get(f, {})
            row = [f"{cells[str(d)]['accuracy']:.2f} ({cells[str(d)]['n']})" if str(d) in cells else "" for d in depths]
            lines.append(f"| {_md(_label(r))} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _curve(ax, cells: dict[str, Any], color: str, label: str, offset: float = 0.0) -> None:
    ds = sorted(int(d) for d in cells)
    acc = [cells[str(d)]["accuracy"] for d in ds]
    lo = [max(0.0, a - cells[str(d)]["ci95"][0]) for a, d in zip(acc, ds)]
    hi = [max(0.0, cells[str(d)]["ci95"][1] - a) for a, d in zip(acc, ds)]
    ax.errorbar([d + offset for d in ds], acc, yerr=[lo, hi], fmt="o-", color=color, capsize=3, ms=4, label=label)


def _chance_curve(ax, runs: Sequence[dict[str, Any]], formulation: str) -> None:
    # Chance depends on the questions only: the same for every model asked the same stream.
    cells: dict[int, float] = {}
    for r in runs:
        for d, s in r["per_depth"].get(formulation, {}).items():
            cells.setdefault(int(d), s["chance"])
    if cells:
        ds = sorted(cells)
        ax.plot(ds, [cells[d] for d in ds], "--", color="0.4", label="chance")


def plot_comparison(runs: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """Figure 2 for several models (see the module docstring), PNG and SVG."""
    from stackedheads.report.plots import pyplot

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1.3, 1]})
    names = [f for f in FORMULATIONS if any(f in r["per_formulation"] for r in runs)]
    width = 0.8 / max(1, len(runs))
    for j, r in enumerate(runs):
        xs, acc, lo, hi = [], [], [], []
        for i, f in enumerate(names):
            s = r["per_formulation"].get(f)
            if s is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            acc.append(s["accuracy"])
            lo.append(max(0.0, s["accuracy"] - s["ci95"][0]))
            hi.append(max(0.0, s["ci95"][1] - s["accuracy"]))
        left.bar(xs, acc, width=width * 0.92, color=f"C{j}", label=_label(r))
        left.errorbar(xs, acc, yerr=[lo, hi], fmt="none", ecolor="k", capsize=2, lw=0.8)
    for i, f in enumerate(names):
        chance = next(r["per_formulation"][f]["chance"] for r in runs if f in r["per_formulation"])
        left.hlines(chance, i - 0.45, i + 0.45, colors="0.2", linestyles="--", label="chance" if i == 0 else None)
    depth_of = {f: next(r["per_formulation"][f]["depth"] for r in runs if f in r["per_formulation"]) for f in names}
    left.set_xticks(range(len(names)), [f"{f}\nD={depth_of[f]}" for f in names])
    left.set_ylim(0, 1.02)
    left.set_ylabel("accuracy (Wilson 95%)")
    left.set_title("accuracy per formulation")
    left.legend(loc="upper right", frameon=False, fontsize=8)
    if any(r["per_depth"].get("equations") for r in runs):
        for j, r in enumerate(runs):
            cells = r["per_depth"].get("equations")
            if cells:
                _curve(right, cells, f"C{j}", _label(r), offset=(j - (len(runs) - 1) / 2) * 0.06)
        _chance_curve(right, runs, "equations")
        ds = sorted({int(d) for r in runs for d in r["per_depth"].get("equations", {})})
        right.set_xticks(ds)
        right.set_xlim(ds[0] - 0.5, ds[-1] + 0.5)  # one D alone would otherwise spread wide
        right.legend(loc="upper right", frameon=False, fontsize=8)
    else:
        right.text(0.5, 0.5, "no equations questions", ha="center", va="center", transform=right.transAxes)
    right.set_ylim(0, 1.02)
    right.set_xlabel("D (equations)")
    right.set_title("equations: accuracy vs D")
    fig.suptitle("Figure 2: " + ", ".join(_label(r) for r in runs))
    return save_figure(fig, out, "figure2")


def plot_depth(runs: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """Accuracy vs D for each formulation with a variable depth, one line per model."""
    from stackedheads.report.plots import pyplot

    plt = pyplot()
    names = depth_formulations()
    fig, axes = plt.subplots(1, len(names), figsize=(13, 4), sharey=True, squeeze=False)
    for ax, f in zip(axes[0], names):
        shown = False
        for j, r in enumerate(runs):
            cells = r["per_depth"].get(f)
            if cells:
                _curve(ax, cells, f"C{j}", _label(r), offset=(j - (len(runs) - 1) / 2) * 0.06)
                shown = True
        if shown:
            _chance_curve(ax, runs, f)
            ds = sorted({int(d) for r in runs for d in r["per_depth"].get(f, {})})
            ax.set_xticks(ds)
            ax.set_xlim(ds[0] - 0.5, ds[-1] + 0.5)
            ax.legend(loc="upper right", frameon=False, fontsize=8)
        else:
            ax.text(0.5, 0.5, f"no {f} questions", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(f"D ({f})")
        ax.set_title(f"{f}: accuracy vs D")
    axes[0][0].set_ylabel("accuracy (Wilson 95%)")
    fig.suptitle("Where each model's ability ends: accuracy vs depth")
    return save_figure(fig, out, "figure2_depth")


def _relative(folder: Path, out: Path) -> str:
    """``folder`` relative to ``out`` (so a copied or moved folder keeps working)."""
    import os

    return os.path.relpath(folder.resolve(), out.resolve())


def compare(folders: Sequence[Path], out: Path) -> dict[str, Any]:
    """Read every run folder, write the comparison files into ``out``, return the comparison."""
    if not folders:
        raise UsageError("give at least one run folder to compare")
    runs = [load_run(Path(f)) for f in folders]
    labels = [_label(r) for r in runs]
    if len(set(labels)) != len(labels):
        raise UsageError(f"two run folders hold the same model ({', '.join(labels)}); compare different models")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    comparison = {
        "models": [
            {"model": _label(r), "folder": _relative(Path(r["folder"]), out), "identity": r["identity"],
             "per_formulation": r["per_formulation"], "per_depth": r["per_depth"], "cells": r["cells"]}
            for r in runs
        ],
        "definitions": runs[0]["definitions"],
    }
    atomic_write_json(out / COMPARISON, comparison)
    atomic_write_text(out / "comparison.md", table_markdown(runs))
    comparison["figures"] = plot_comparison(runs, out) + plot_depth(runs, out)
    return comparison


def load_comparison(folder: Path) -> dict[str, Any] | None:
    """``comparison.json`` of a folder, else a single run's results in the same shape, else None."""
    folder = Path(folder)
    path = folder / COMPARISON
    if path.exists():
        comparison = read_state_json(path, "the comparison of LLM runs")
        models = comparison.get("models", [])
        if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("folder"), str) for m in models):
            raise UsageError(f"{path} has the wrong shape (models): delete it and compare the runs again")
        for m in models:
            m["folder"] = str(folder / m["folder"])  # stored relative: the folder may move
        return comparison
    if (folder / SAMPLES).exists():
        r = load_run(folder)
        return {"models": [{"model": _label(r), "folder": str(folder), **{k: r[k] for k in ("identity", "per_formulation", "per_depth", "cells")}}],
                "definitions": r["definitions"]}
    return None
