"""The seeds' tables and lines, for the console, the report and Markdown.

On the console no number is ever broken across lines, whatever the terminal's width: a column is
never narrower than its longest word holding a digit, nor than a list of numbers (a step per
position, "3 of 4") up to :data:`LIST_CAP` characters, and cells are wrapped between such units
only (:func:`fit_tables`); a title wraps between its "name value" parts, a line of text between
words. A per-seed table too wide for the terminal turns its seeds into columns (a row per
measure); a table still too wide is cut into several, each repeating its first column; a last
line then says that ``--markdown`` and ``--json`` give every table whole."""

from __future__ import annotations

import math
import re
import textwrap

from stackedheads.claims import PASS
from stackedheads.recipe_screen.compare import compare
from stackedheads.recipe_screen.distance import PAPER, X1_PLATEAU_LOSS, seed_distance
from stackedheads.recipe_screen.rows import RunSeeds, recipe_text
from stackedheads.recipe_screen.rule import closest_line, screen, screen_table, screen_title

def seed_tables(runs: list[RunSeeds]) -> list[dict]:
    """Each run's per-seed table and its distribution as ``{"title", "columns", "rows"}`` (the
    report's tables)."""
    out = []
    for run in runs:
        head, rows = seed_table(run)
        out.append({"title": f"Seed by seed ({run.section}; {recipe_text(run.recipe)}) (stackedheads seeds)",
                    "columns": head, "rows": rows})
        out.append({"title": "Over the seeds, beside the paper", "columns": ["measure"],
                    "rows": [[line] for line in distribution_lines(run)]})
    return out




WORD_CAP = 14  # a word without a digit wider than this may fold (never a number, nor a verdict)
LIST_CAP = 24  # a list of numbers up to this wide stays on one line (a longer one wraps between numbers)
# A word of a list of numbers: a number ("1,040", "-0.0002", ">=57", "3,"), or "-" / "never" in
# a number's place; "of" joins two numbers ("3 of 4").
NUMBER_WORD = re.compile(r"(?:>=)?[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)%?[,;]?|-|never")


def _units(text: str) -> list[str]:
    """``text``'s words with each list of numbers as one unit: what a cell is wrapped between."""
    words = str(text).split()
    units: list[str] = []
    run: list[str] = []
    for i, w in enumerate(words):
        joins = w == "of" and run and i + 1 < len(words) and NUMBER_WORD.fullmatch(words[i + 1])
        if NUMBER_WORD.fullmatch(w) or joins:
            run.append(w)
            continue
        if run:
            units.append(" ".join(run))
            run = []
        units.append(w)
    if run:
        units.append(" ".join(run))
    return units


def _is_list(unit: str) -> bool:
    return " " in unit and all(NUMBER_WORD.fullmatch(w) or w == "of" for w in unit.split())


def _unit_need(unit: str) -> int:
    if _is_list(unit) and len(unit) <= LIST_CAP:
        return len(unit)
    return max(len(w) if any(c.isdigit() for c in w) else min(len(w), WORD_CAP) for w in unit.split())


def _need(text: str) -> int:
    """The narrowest a cell of ``text`` can be: its longest list of numbers (up to
    :data:`LIST_CAP`), word holding a digit (never broken) or other word (up to :data:`WORD_CAP`)."""
    return max((_unit_need(u) for u in _units(text)), default=1)


def _wrapped(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken between :func:`_units` only (a
    list of numbers wider than ``width`` between its numbers; a word without a digit wider than
    ``width`` is left to fold)."""
    pieces: list[str] = []
    for unit in _units(text):
        pieces += unit.split() if len(unit) > width and _is_list(unit) else [unit]
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return "\n".join(lines)


def _title_parts(title: str) -> list[str]:
    """``title`` cut after each ", " outside brackets: "name value" parts that stay whole."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(title):
        depth += (c in "([{") - (c in ")]}")
        if c == "," and depth == 0 and title[i + 1:i + 2] == " ":
            parts.append(title[start:i + 1])
            start = i + 2
    return parts + [title[start:]]


def _wrapped_title(title: str, width: int) -> str:
    """``title`` in lines of at most ``width`` characters, broken between its parts
    (:func:`_title_parts`); a part wider than ``width`` is left to rich, which breaks it between words."""
    lines: list[str] = []
    for part in _title_parts(title):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def text_lines(line: str, width: int) -> list[str]:
    """A line of text for a terminal of ``width`` columns: indented by two, continued by four,
    broken between words only (never inside a number or a range such as 0.0020-0.0059)."""
    return textwrap.wrap(line, width=max(width, 20), initial_indent="  ", subsequent_indent="    ",
                         break_long_words=False, break_on_hyphens=False) or ["  "]


def _column_widths(columns: list[list[str]], room: int) -> list[int] | None:
    """Widths for ``columns`` (each its header and cells) within ``room`` characters of text, or
    None when even their narrowest do not fit: each at least its :func:`_need`; then the first
    column (the rows' names) all it lacks where the room allows, so that a name reads on one
    line; then the room left shared out by water-filling: a column that lacks less than an equal
    share gets all it lacks (its cells unwrapped), the others share the rest equally."""
    need = [max(map(_need, col)) for col in columns]
    natural = [max(n, *(len(str(c)) for c in col)) for n, col in zip(need, columns)]
    if sum(need) > room:
        return None
    widths, spare = list(need), room - sum(need)
    first = min(natural[0] - widths[0], spare)
    widths[0] += first
    spare -= first
    order = sorted(range(1, len(widths)), key=lambda k: natural[k] - need[k])
    for n, i in enumerate(order):  # water-filling: each its lack, at most an equal share of what is left
        grow = min(natural[i] - widths[i], spare // (len(order) - n))
        widths[i] += grow
        spare -= grow
    return widths


def _overhead(n_columns: int) -> int:
    """What a rich table's box takes beside its text: a border between columns and at each edge,
    one space of padding either side of each column."""
    return 3 * n_columns + 1


def fit_tables(title: str, head: list[str], rows: list[list[str]], width: int):
    """``head`` and ``rows`` as rich tables that fit ``width`` columns with no number broken: one
    table if it fits, else the columns after the first cut into as many tables as needed, each
    repeating the first (its title says which part it is). Returns the tables."""
    from rich.markup import escape  # cells as typed: a label such as "[/]" is text, not markup
    from rich.table import Table

    columns = [[h, *(r[i] for r in rows)] for i, h in enumerate(head)]
    parts: list[list[int]] = []
    current: list[int] = [0]
    for i in range(1, len(head)):
        trial = current + [i]
        if len(current) > 1 and _column_widths([columns[k] for k in trial], width - _overhead(len(trial))) is None:
            parts.append(current)
            current = [0, i]
        else:
            current = trial
    parts.append(current)
    tables = []
    for n, part in enumerate(parts, 1):
        widths = _column_widths([columns[k] for k in part], width - _overhead(len(part)))
        if widths is None:  # one column beside the first is wider than the terminal: its need, overflowing
            widths = [max(map(_need, columns[k])) for k in part]
        whole = title + (f" ({n} of {len(parts)})" if len(parts) > 1 else "")
        t = Table(title=escape(_wrapped_title(whole, min(width, sum(widths) + _overhead(len(part))))))
        for k, w in zip(part, widths):
            t.add_column(escape(_wrapped(head[k], w)), width=w, overflow="fold")
        for r in rows:
            t.add_row(*(escape(_wrapped(r[k], w)) for k, w in zip(part, widths)))
        tables.append(t)
    return tables


def seed_console_tables(run: RunSeeds, width: int):
    """A run's per-seed table for a terminal of ``width`` columns: a row per seed where that fits
    whole, else a row per measure and a column per seed (cut into parts when the seeds are still
    too wide)."""
    head, rows = seed_table(run)
    title = f"{run.label}: {run.section}, {recipe_text(run.recipe)}"
    tables = fit_tables(title, head, rows, width)
    if len(tables) == 1:
        return tables
    turned_head = ["measure", *(f"seed {r[0]}" for r in rows)]
    turned_rows = [[h, *(r[i] for r in rows)] for i, h in enumerate(head) if i > 0]
    return fit_tables(title, turned_head, turned_rows, width)


def print_console(runs: list[RunSeeds], comparison: list[dict], console) -> None:
    """``stackedheads seeds``' console output, laid out for ``console``'s width: each run's seeds
    (:func:`seed_console_tables`) and distribution, the distance table, the screen's state and the
    comparison; a line at the end says where a table was turned or cut to fit."""
    width, reshaped = console.width, False

    def show(tables, whole: int) -> None:
        nonlocal reshaped
        reshaped |= len(tables) > 1 or len(tables[0].columns) != whole
        for t in tables:
            console.print(t)

    for run in runs:
        show(seed_console_tables(run, width), len(seed_table(run)[0]))
        for line in distribution_lines(run):
            for shown in text_lines(line, width):
                console.print(shown, highlight=False, markup=False)
    head, rows = distance_table(runs)
    if rows:
        show(fit_tables("Distance to Sec. 9's curriculum (|ln plateau/450| + |ln final/0.031| + share out of order)",
                        head, rows, width), len(head))
    if state := screen(runs):
        head, rows = screen_table(state)
        show(fit_tables(screen_title(state), head, rows, width), len(head))
        if line := closest_line(state):
            console.print(line, highlight=False, markup=False)
    for line in comparison_lines(comparison):
        console.print(line, highlight=False, markup=False)
    if reshaped:
        console.print(f"(tables turned or cut to fit {width} columns: --markdown or --json prints each whole)",
                      highlight=False)


def _num(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _steps(d: dict | None, untimed: list[str] = ()) -> str:
    """Steps per position; ``untimed`` positions (no path of their own) are "-", not "never"."""
    return "-" if not d else " ".join("-" if k in untimed else "never" if v is None else f"{v:,}" for k, v in d.items())


def _gaps(epochs: dict | None) -> str:
    """Epochs between consecutive positions' falls (x1->x2, x2->x3, ...); "-" where one never
    fell; a negative gap is a position that fell before the one before it."""
    if not epochs or len(epochs) < 2:
        return "-"
    v = list(epochs.values())
    return " ".join("-" if a is None or b is None else f"{b - a:.0f}" for a, b in zip(v, v[1:]))


def seed_table(run: RunSeeds) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a run's per-seed table (shared by the console and Markdown)."""
    ids = sorted({k for r in run.rows for k in r.verdicts})
    head = ["seed", "final val MSE", "max partial"]
    if run.section == "sec9":
        head += ["x1 below 0.8 (epoch)", "x1.. below C2 (steps)", "gaps (epochs)", "plateau (epochs)", "train-val gap",
                 "first paths", "x1.. emerged (step)", "distance"]
    head += ["useful heads", "unexplained rows", "shortcut heads", *ids]
    rows = []
    for r in run.rows:
        cells = [r.seed, _num(r.final_val_loss), _num(max(r.final_partial.values(), default=None))]
        if run.section == "sec9":
            d = seed_distance(r)
            cells += [_num(r.x1_below_08_epochs, 0), _steps(r.loss_drops), _gaps(r.drop_epochs),
                      _num(r.plateau_epochs, 0) + (" (x1)" if r.plateau_from == "x1" else ""),
                      "-" if r.train_val_gap is None else f"{r.train_val_gap:+.4f}", ", ".join(r.first_paths) or "-",
                      _steps(r.emerged_at, r.no_path_of_its_own) + (f" ({r.emergence_order})" if r.emergence_order else ""),
                      "-" if d is None else f"{'>=' * d['at_least']}{d['value']:.2f}"]
        cells += ["-" if r.useful_heads is None else f"{r.useful_heads}" + (f" of {r.n_heads}" if r.n_heads else ""),
                  "-" if r.unexplained_rows is None else str(r.unexplained_rows),
                  "-" if r.shortcut_heads is None else str(r.shortcut_heads),
                  *[r.verdicts.get(k, "-") for k in ids]]
        rows.append(cells)
    return head, rows


def distribution_lines(run: RunSeeds) -> list[str]:
    """The run's seeds in one paragraph, each measure beside the paper's number."""
    s, paper = run.summary(), PAPER[run.section]
    f = s["final_val_loss"]
    n = f"{s['seeds']} seed" + ("s" if s["seeds"] != 1 else "")
    lines = [(f"final val MSE: median {f['median']:.4f} (range {f['min']:.4f}-{f['max']:.4f}) over {n}"
              if f else f"final val MSE: unknown (the training summary is lost) for {n}")
             + (f" (paper: {paper['final_val_loss']})" if run.section == "sec9" else f" (paper: below {paper['final_val_loss']})")]
    if run.section == "sec9" and not s["loss_drop_seeds"]:
        lines.append("plateau and orders: no partial losses (neither an emergence timeline nor the run's metrics.csv)")
    elif run.section == "sec9":
        p, x1 = s["plateau_epochs"], s["x1_fall_epochs"]
        until = {("path",): "the first path serving a position", ("x1",): "x1's loss falls below C2's threshold"}.get(
            tuple(s["plateau_from"]), "the first path serving a position, or x1's fall where no timeline is")
        lines.append((f"plateau until {until}: median {p['median']:.0f} epochs (range {p['min']:.0f}-{p['max']:.0f})"
                      if p else "plateau: no seed left it")
                     + f" (paper: about {paper['plateau_epochs']:.0f})")
        if x1 and s["timelines"]:
            lines.append(f"x1's fall below C2's threshold: median {x1['median']:.0f} epochs (the distance's plateau term)")
        if s["x1_below_08_epochs"]:
            e = s["x1_below_08_epochs"]
            lines.append(f"x1's loss below {X1_PLATEAU_LOSS} (onto the plateau): median {e['median']:.0f} epochs "
                         f"(range {e['min']:.0f}-{e['max']:.0f})"
                         + (f"; below C2's threshold: median {'>=' * bool(x1['censored'])}{x1['median']:.0f}" if x1 else ""))
        of = f"{s['loss_drop_seeds']} seed" + ("s" if s["loss_drop_seeds"] != 1 else "")
        lines.append(f"partial losses in chain order: {s['loss_drops_in_order']} of {of}"
                     + (f"; paths emerged in chain order: {s['emerged_in_order']} of {s['timelines']} with a timeline"
                        if s["timelines"] else "; no emergence timeline") + " (paper: in order)")
        if s["train_val_gap"]:
            g = s["train_val_gap"]
            lines.append(f"val minus the training batches' loss over the final window: median {g['median']:+.4f} "
                         f"(range {g['min']:+.4f} to {g['max']:+.4f}; memorising shows far above the 0.001 of results/sec9/gpt2)")
        lines.append(distance_text(s["distance"]))
        if run.unfinished:
            lines.append(f"not counted: {', '.join(run.unfinished)} (still training: no summary.json)")
    if s["useful_heads"]:
        u = s["useful_heads"]
        lines.append(f"useful heads: median {u['median']:g} (range {u['min']}-{u['max']})"
                     + (f" (paper: {paper['useful_heads']} of 12)" if run.section == "sec8" else ""))
    lines.append("verdicts per claim: " + ("; ".join(
        f"{cid} " + ", ".join(f"{n} {v}" for v, n in counts.items()) for cid, counts in s["verdicts"].items())
        or "none (no circuits discovered)"))
    return lines


def distance_text(d: dict) -> str:
    if d["value"] is None:
        return f"distance to the paper: not measured ({', '.join(d['missing'])} missing)"
    at_least = "at least " if d["at_least"] else ""
    n = f"{d['seeds']} seed" + "s" * (d["seeds"] != 1)
    return (f"distance to the paper: {at_least}{d['value']:.2f}, the median over {n} (range {d['min']:.2f}-{d['max']:.2f}; "
            f"terms: plateau {d['plateau']:.2f} and final {d['final']:.2f} as medians, {d['order']:.0%} of seeds out of "
            "order; 0 is the paper)")


def distance_table(runs: list[RunSeeds]) -> tuple[list[str], list[list[str]]]:
    """Every sec9 run on one line, closest to the paper first: its medians (x1's time to 0.8 beside
    its fall below C2's threshold), how many of its seeds pass each of E1-E4 ("-" where none was
    judged: no circuits, so no E1-E3) and its distance, the median of its seeds', with their range."""
    head = ["run", "seeds", "final val MSE", "x1 below 0.8 (epoch)", "x1 falls (epoch)", "in chain order",
            "E1, E2, E3, E4 passing", "distance (median)", "distance (range)"]
    rows, paper = [], PAPER["sec9"]
    for run in runs:
        if run.section != "sec9":
            continue
        s = run.summary()
        f, p, d, e = s["final_val_loss"], s["x1_fall_epochs"], s["distance"], s["x1_below_08_epochs"]
        ge = ">=" if p and p["censored"] else ""
        rows.append((d["value"] if d["value"] is not None else math.inf, [
            run.label, str(s["seeds"]), "-" if not f else f"{f['median']:.4f}", "-" if not e else f"{e['median']:.0f}",
            "-" if not p else f"{ge}{p['median']:.0f}", f"{s['loss_drops_in_order']} of {s['loss_drop_seeds']}",
            ", ".join(str(s["verdicts"][c].get(PASS, 0)) if c in s["verdicts"] else "-" for c in ("E1", "E2", "E3", "E4"))
            + f" of {s['seeds']}", "-" if d["value"] is None else f"{'>=' * d['at_least']}{d['value']:.2f}",
            "-" if d["value"] is None else f"{d['min']:.2f}-{d['max']:.2f}"]))
    rows.sort(key=lambda r: r[0])
    return head, [r for _, r in rows] + ([["paper (Sec. 9.2)", "", f"{paper['final_val_loss']}", "",
                                           f"{paper['plateau_epochs']:.0f}", "every seed", "every seed", "0", ""]] if rows else [])


def comparison_lines(rows: list[dict]) -> list[str]:
    def show(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return [f"{r['section']} {r['measure']}: " + ", ".join(f"{k} {show(v)}" for k, v in r["medians"].items())
            + f" (paper: {r['paper']}): " + (f"{r['closer']} is closer" if r["closer"] else "a tie") for r in rows]


def _md(text: object) -> str:
    """``text`` as Markdown shows it literally, on one line: '&' and '<' escaped (a label or folder
    name may hold a tag; a lone '>' starts none), '|' escaped (it would split a table cell)."""
    return " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(map(_md, head)) + " |\n|" + "---|" * len(head),
            *("| " + " | ".join(map(_md, r)) + " |" for r in rows), ""]


def markdown(runs: list[RunSeeds]) -> str:
    """Every run's per-seed table and distribution, then the comparison, as Markdown (every text
    from the runs escaped: :func:`_md`)."""
    parts = []
    for run in runs:
        parts.append(f"### {_md(run.label)} ({run.section}; {_md(recipe_text(run.recipe))})\n")
        parts.extend(_md_table(*seed_table(run)))
        parts.extend(f"- {_md(line)}" for line in distribution_lines(run))
        parts.append("")
    head, rows = distance_table(runs)
    if rows:
        parts.append("### Distance to Sec. 9's curriculum\n")
        parts.extend(_md_table(head, rows))
    state = screen(runs)
    if state:
        parts.append(f"### {_md(screen_title(state))}\n")
        parts.extend(_md_table(*screen_table(state)))
        if line := closest_line(state):
            parts.extend([_md(line), ""])
    cmp = comparison_lines(compare(runs))
    if cmp:
        parts.append("### Side by side\n")
        parts.extend(f"- {_md(line)}" for line in cmp)
        parts.append("")
    return "\n".join(parts)
