"""The demo's verdicts in float32 and bfloat16, on 1 and 2 threads (issue 42): four `reproduce`
runs and one table of the Sec. 7-9 claims, so a reader sees which verdict holds on any machine.

    python3 scripts/demo_matrix.py OUT [--preset quick] [--skip llm] [--skip ...]

Each cell is `stackedheads reproduce --preset PRESET --out OUT/<dtype>-t<threads> --dtype DTYPE
--threads T --workers CORES/T` under OMP_NUM_THREADS=T, then `stackedheads claims --json` of that
folder. A folder that exists is resumed (reproduce resumes its stages), so a matrix cut short
goes on where it stopped. Written: OUT/verdicts.md (the table for docs/reproduce.md) and
OUT/verdicts.json. Exit 1 where a Sec. 7-9 claim differs between cells (the table says which);
exit 2 with one line where a cell's run fails (its folder is kept, and a rerun resumes it).

Run it alone on the machine: four demos at about 15 min each where bfloat16 is native; where it is
emulated (a CPU without AVX512-BF16 or AMX) a bfloat16 demo takes hours.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stackedheads.perf import available_cores
from stackedheads.provenance import git_commit, machine

CELLS = [("float32", 1), ("float32", 2), ("bfloat16", 1), ("bfloat16", 2)]
SECTIONS = ("7", "8", "9")  # the trained claims; Sec. 4-5 do not depend on the dtype or threads


def cell_name(dtype: str, threads: int) -> str:
    return f"{dtype}-t{threads}"


def verdict_rows(claims_by_cell: dict[str, list[dict]]) -> list[dict]:
    """One row per Sec. 7-9 claim: its verdict in each cell and whether all cells agree. A claim
    missing from a cell (its stage skipped or not run) is "-" there and never agrees."""
    order, verdicts = [], {}
    for cell, claims in claims_by_cell.items():
        for c in claims:
            if c["section"].split()[0] not in SECTIONS:
                continue
            if c["id"] not in verdicts:
                order.append(c["id"])
                verdicts[c["id"]] = {"section": c["section"]}
            verdicts[c["id"]][cell] = c["verdict"]
    rows = []
    for cid in order:
        cells = {cell: verdicts[cid].get(cell, "-") for cell in claims_by_cell}
        agree = "-" not in cells.values() and len(set(cells.values())) == 1
        rows.append({"id": cid, "section": verdicts[cid]["section"], "cells": cells, "agree": agree})
    return rows


def markdown(rows: list[dict], walls: dict[str, float | None]) -> str:
    cells = list(walls)
    lines = ["| claim | " + " | ".join(cells) + " | same verdict |",
             "|---|" + "---|" * len(cells) + "---|"]
    for r in rows:
        lines.append(f"| {r['id']} | " + " | ".join(r["cells"][c] for c in cells) + f" | {'yes' if r['agree'] else '**no**'} |")
    lines.append("| wall time of the run | " + " | ".join(
        "resumed" if walls[c] is None else f"{walls[c] / 60:.1f} min" for c in cells) + " | |")
    return "\n".join(lines) + "\n"


class CellFailed(Exception):
    """A cell's `reproduce` or `claims` exited non-zero: its folder stays for a rerun to resume."""


def run_cell(out: Path, preset: str, skips: list[str], dtype: str, threads: int) -> tuple[list[dict], float | None]:
    folder = out / cell_name(dtype, threads)
    resumed = folder.exists()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "stackedheads", "reproduce", "--preset", preset, "--out", str(folder),
           "--dtype", dtype, "--threads", str(threads), "--workers", str(max(1, available_cores() // threads))]
    for s in skips:
        cmd += ["--skip", s]
    t0 = time.perf_counter()
    if (rc := subprocess.run(cmd, env=env).returncode) != 0:
        raise CellFailed(f"{folder.name}: reproduce exited {rc}; rerun the same line to resume it")
    wall = None if resumed else time.perf_counter() - t0
    got = subprocess.run([sys.executable, "-m", "stackedheads", "claims", str(folder), "--json"],
                         env=env, capture_output=True, text=True)
    if got.returncode != 0:
        raise CellFailed(f"{folder.name}: claims exited {got.returncode}: {(got.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(got.stdout), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--skip", action="append", default=None, help="a stage to leave out (default: llm)")
    args = ap.parse_args()
    skips = ["llm"] if args.skip is None else args.skip
    args.out.mkdir(parents=True, exist_ok=True)
    claims, walls = {}, {}
    for dtype, threads in CELLS:
        name = cell_name(dtype, threads)
        try:
            claims[name], walls[name] = run_cell(args.out, args.preset, skips, dtype, threads)
        except CellFailed as e:
            print(f"demo_matrix: {e}", file=sys.stderr)
            return 2
    rows = verdict_rows(claims)
    table = markdown(rows, walls)
    (args.out / "verdicts.md").write_text(
        f"`scripts/demo_matrix.py` at {git_commit()[:7]}, preset {args.preset}, skipped: "
        f"{', '.join(skips) or 'none'}; {machine()}\n\n" + table)
    (args.out / "verdicts.json").write_text(json.dumps(
        {"preset": args.preset, "skip": skips, "machine": machine(), "commit": git_commit(),
         "rows": rows, "wall_s": walls}, indent=2))
    print(table, end="")
    flips = [r["id"] for r in rows if not r["agree"]]
    if flips:
        print(f"verdicts differ between the cells: {', '.join(flips)}", file=sys.stderr)
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
