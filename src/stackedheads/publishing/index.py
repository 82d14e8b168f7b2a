"""``results/README.md``: the index of every reference under the results folder, grouped by
section, written from each ``reference.json`` alone (``publish`` keeps it current,
``results-index`` writes it again)."""

from __future__ import annotations

from pathlib import Path

from stackedheads.publishing.references import read_reference, reference_folders
from stackedheads.state.write import atomic_write_text

INDEX_FILE = "README.md"
# What each group of results/ reproduces; a group not named here is listed under its folder's name.
GROUPS = {"sec4": "Section 4: language models on the task (Figure 2)",
          "sec8": "Section 8: transformers A-C, circuits at the paper's settings",
          "sec9": "Section 9: transformer D, emergence at the paper's settings, one folder a recipe",
          "depth": "Beyond the paper: layers needed against depth"}


def _cell(text: object) -> str:
    """``text`` in one Markdown table cell: on one line, '&' and '<' escaped (no tag starts), '|' escaped."""
    return " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def _wall(wall_s: object) -> str:
    if not isinstance(wall_s, (int, float)) or isinstance(wall_s, bool):
        return "-"
    return f"{wall_s / 3600:.1f} h" if wall_s >= 3600 else f"{wall_s / 60:.0f} min" if wall_s >= 60 else f"{wall_s:.0f} s"


def index_markdown(root: Path) -> str:
    """``results/README.md``: every reference under ``root``, one table row each (its folder
    linked, title, machine, wall time, date), grouped by section, from each reference.json alone."""
    groups: dict[str, list[list[str]]] = {}
    for folder in reference_folders(root):
        ref = read_reference(folder)
        rel = folder.relative_to(root).as_posix()
        group = rel.split("/")[0] if "/" in rel else ""
        groups.setdefault(group, []).append(
            [f"[{_cell(rel)}]({rel}/)", _cell(ref.get("title", "")), _cell(ref.get("machine", "")),
             _wall(ref.get("wall_s")), _cell(ref.get("date", ""))])
    lines = ["# Reference results", "",
             "The small files of finished runs (configs, metrics, summaries, circuits, figures; never checkpoints),",
             "each folder with a `reference.json` that says how it was made (command, commit, machine, wall time).",
             "`stackedheads claims results/<folder>` re-judges a folder from its files; `stackedheads seeds results/sec9/*`",
             "sets the Section 9 recipes side by side.", "",
             "Written by `stackedheads publish` from every reference.json; `stackedheads results-index` writes it again.",
             "Do not edit it by hand: a test compares it with what the references say.", ""]
    order = [g for g in GROUPS if g in groups] + sorted(g for g in groups if g not in GROUPS)
    for group in order:
        lines += [f"## {GROUPS.get(group, group or 'Other')}", "",
                  "| folder | what | machine | wall time | date |", "|---|---|---|---|---|",
                  *("| " + " | ".join(row) + " |" for row in groups[group]), ""]
    return "\n".join(lines)


def write_index(root: Path) -> Path:
    """Write ``root/README.md`` (:func:`index_markdown`) and return its path; the tables of
    verdicts in the repository's README.md and docs/results.md beside ``root`` are written from
    the claims again (:func:`stackedheads.claims.published.write_blocks`)."""
    from stackedheads.claims.published import write_blocks

    path = Path(root) / INDEX_FILE
    atomic_write_text(path, index_markdown(Path(root)))
    write_blocks(Path(root))
    return path
