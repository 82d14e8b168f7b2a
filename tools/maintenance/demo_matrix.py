"""The demo's verdicts in float32 and bfloat16, on 1 and 2 threads: four `reproduce`
runs and one table of the Sec. 7-9 claims, so a reader sees which verdict holds on any machine.

    python3 tools/maintenance/demo_matrix.py OUT [--preset quick] [--skip llm] [--skip ...]
        [--cells float32-t1,bfloat16-t2] [--parallel] [--device cpu]

Each cell is `stackedheads reproduce --preset PRESET --out OUT/<dtype>-t<threads> --dtype DTYPE
--threads T --device DEVICE --workers W` under OMP_NUM_THREADS=T, then `stackedheads claims
--json` of that folder, kept as OUT/<cell>.json (its claims, machine, commit and wall time). A
cell with a record is not run again (remove the record to run it anew); a folder without one is
resumed (reproduce resumes its stages), so a matrix cut short goes on where it stopped. `--cells`
runs some of the four; the table is built from every OUT/<cell>.json present, so cells run at
different times (or on other machines, their records copied into OUT) fill one table, and its last
row names each cell's machine (CPU model, cores, and the flags avx2, avx512f, avx512_bf16, amx). `--parallel` runs the chosen cells at
once, the cores split between them, each cell's output in OUT/<cell>.log: for a many-core host
(a lent GPU's 16 cores), not for two cores. `--judge-again` judges the finished cells' claims
anew from their folders (after a change to the claims, no training). Written: OUT/verdicts.md (the table for
docs/reproduce.md) and OUT/verdicts.json. Exit 1 where a Sec. 7-9 claim differs between cells
(the table says which); exit 2 with one line where a cell's run fails (its folder is kept, and a
rerun resumes it) or the arguments are wrong.

The verdicts do not depend on the machine's load (each cell's threads are fixed), its wall times do:
run it alone to quote them. Where bfloat16 is emulated (a CPU without AVX512-BF16 or AMX) a
bfloat16 cell takes hours.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from stackedheads import presets
from stackedheads.execution.process import available_cores
from stackedheads.state.provenance import git_commit, machine
from stackedheads.state.write import atomic_write_json

CELLS = [("float32", 1), ("float32", 2), ("bfloat16", 1), ("bfloat16", 2)]
SECTIONS = ("7", "8", "9")  # the trained claims; Sec. 4-5 do not depend on the dtype or threads


def cell_name(dtype: str, threads: int) -> str:
    return f"{dtype}-t{threads}"


VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")


def seed_counts(claim: dict) -> str:
    """The per-seed verdicts a claim leads with (its ``seeds``; else its primary reading's) as
    counts ("3 PASS, 1 INCONCLUSIVE of 4"), "" for a claim judged on no seeds (a grid)."""
    primary = next((r for r in claim.get("readings") or [] if r.get("primary")), None)
    seeds = claim.get("seeds") or (primary or {}).get("seeds") or {}
    if not seeds:
        return ""
    values = list(seeds.values())
    kinds = [v for v in VERDICTS if v in values] + sorted({v for v in values} - set(VERDICTS))
    return ", ".join(f"{values.count(v)} {v}" for v in kinds) + f" of {len(values)}"


def verdict_rows(claims_by_cell: dict[str, list[dict]]) -> list[dict]:
    """One row per Sec. 7-9 claim: its verdict in each cell, its per-seed counts in each cell
    (``seeds``) and whether all cells agree on the verdict. A claim missing from a cell (its stage
    skipped or not run) is "-" there and never agrees."""
    order, verdicts, counts = [], {}, {}
    for cell, claims in claims_by_cell.items():
        for c in claims:
            if c["section"].split()[0] not in SECTIONS:
                continue
            if c["id"] not in verdicts:
                order.append(c["id"])
                verdicts[c["id"]], counts[c["id"]] = {"section": c["section"]}, {}
            verdicts[c["id"]][cell] = c["verdict"]
            counts[c["id"]][cell] = seed_counts(c)
    rows = []
    for cid in order:
        cells = {cell: verdicts[cid].get(cell, "-") for cell in claims_by_cell}
        agree = "-" not in cells.values() and len(set(cells.values())) == 1
        seeds = {cell: counts[cid].get(cell, "") for cell in claims_by_cell}
        rows.append({"id": cid, "section": verdicts[cid]["section"], "cells": cells, "seeds": seeds, "agree": agree})
    return rows


def markdown(rows: list[dict], walls: dict[str, float | None], machines: dict[str, str]) -> str:
    """The table, a row per claim: each cell's verdict, and its per-seed counts where they differ
    between cells (the last column gives them where every cell has the same); then each cell's
    wall time and machine (CPU model and flags)."""
    cells = list(walls)
    lines = ["| claim | " + " | ".join(cells) + " | same verdict | seeds, where the cells count alike |",
             "|---|" + "---|" * len(cells) + "---|---|"]
    for r in rows:
        seeds = r.get("seeds") or {}
        alike = len(set(seeds.values())) <= 1
        shown = [r["cells"][c] + ("" if alike or not seeds.get(c) else f" ({seeds[c]})") for c in cells]
        common = next(iter(seeds.values()), "") if alike else ""
        lines.append(f"| {r['id']} | " + " | ".join(shown) + f" | {'yes' if r['agree'] else '**no**'} | {common} |")
    lines.append("| wall time of the run | " + " | ".join(
        "resumed" if walls[c] is None else f"{walls[c] / 60:.1f} min" for c in cells) + " | | |")
    lines.append("| machine | " + " | ".join(machines.get(c, "-") for c in cells) + " | | |")
    return "\n".join(lines) + "\n"


class CellFailed(Exception):
    """A cell's `reproduce` or `claims` exited non-zero: its folder stays for a rerun to resume."""


def parse_cells(text: str | None) -> list[tuple[str, int]]:
    """``--cells``: comma-separated cell names (all four where not given), in the table's order."""
    if text is None:
        return list(CELLS)
    known = {cell_name(*c): c for c in CELLS}
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or (bad := [n for n in names if n not in known]):
        raise ValueError(f"--cells: {', '.join(bad) if names else 'none given'}: not a cell (cells: {', '.join(known)})")
    return [c for c in CELLS if cell_name(*c) in names]


def fingerprint(preset: dict) -> str:
    """A reproduce preset's settings (its config.json "preset") in 16 hex digits: a preset
    changed under the same name gives another. A setting at None is left out: a setting added
    later with its None default is the same setting as its absence (the rule a run folder resumes
    by, ``storage.RunFolder.require_same``), so records made before it was added still join."""
    def set_only(v):
        if isinstance(v, dict):
            return {k: set_only(x) for k, x in v.items() if x is not None}
        return [set_only(x) for x in v] if isinstance(v, list) else v
    return hashlib.sha256(json.dumps(set_only(preset), sort_keys=True).encode()).hexdigest()[:16]


def current_fingerprint(preset: str) -> str:
    return fingerprint(json.loads(json.dumps(asdict(presets.REPRODUCE.get(preset)))))


def read_records(out: Path, preset: str, skips: list[str]) -> dict[str, dict]:
    """Every finished cell's record in OUT, in the table's order; a record of another preset,
    of this preset's name at other settings (made before a change to it), or of other skipped
    stages is refused: its verdicts are not the same demo's."""
    records, now = {}, None
    for cell in (cell_name(*c) for c in CELLS):
        if (path := out / f"{cell}.json").exists():
            rec = json.loads(path.read_text())
            if (rec["preset"], rec["skip"]) != (preset, skips):
                raise ValueError(f"{path}: preset {rec['preset']}, skipped {rec['skip']}; this table is "
                                 f"preset {preset}, skipped {skips}: give the same or another OUT")
            now = now or current_fingerprint(preset)
            if rec.get("preset_sha") != now:
                raise ValueError(f"{path}: made with preset {preset} at other settings "
                                 f"({rec.get('preset_sha') or 'not recorded'}; now {now}): remove it and its "
                                 "folder to run the cell again, or give another OUT")
            records[cell] = rec
    return records


def run_cell(out: Path, preset: str, skips: list[str], dtype: str, threads: int, *, workers: int,
             device: str, log: Path | None = None) -> None:
    """Run (or resume) one cell and keep its record, OUT/<cell>.json. ``log``: where its output
    goes (None: this terminal). A resumed cell's wall time is unknown (None)."""
    name = cell_name(dtype, threads)
    folder = out / name
    resumed = folder.exists()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "stackedheads", "reproduce", "--preset", preset, "--out", str(folder),
           "--dtype", dtype, "--threads", str(threads), "--workers", str(workers), "--device", device]
    for s in skips:
        cmd += ["--skip", s]
    t0 = time.perf_counter()
    with open(log, "a") if log else nullcontext() as sink:  # None: this terminal
        rc = subprocess.run(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT if sink else None).returncode
    if rc != 0:
        where = f" (its output: {log})" if log else ""
        raise CellFailed(f"{name}: reproduce exited {rc}{where}; rerun the same line to resume it")
    wall = None if resumed else time.perf_counter() - t0
    got = subprocess.run([sys.executable, "-m", "stackedheads", "claims", str(folder), "--json"],
                         env=env, capture_output=True, text=True)
    if got.returncode != 0:
        raise CellFailed(f"{name}: claims exited {got.returncode}: {(got.stderr.strip().splitlines() or [''])[-1]}")
    ran = fingerprint(json.loads((folder / "config.json").read_text())["preset"])
    rec = {"cell": name, "dtype": dtype, "threads": threads, "device": device, "preset": preset, "skip": skips,
           "preset_sha": ran, "commit": git_commit(), "machine": machine_with_flags(), "wall_s": wall,
           "claims": json.loads(got.stdout), "judged_at": git_commit()}
    atomic_write_json(out / f"{name}.json", rec)


def judge_again(out: Path, cell: str) -> None:
    """A finished cell's claims judged anew from its folder (``claims --json``, no training),
    kept in its record with the commit that judged them (``judged_at``); the training's commit,
    machine and wall time stay as they were."""
    path, folder = out / f"{cell}.json", out / cell
    if not folder.is_dir():
        raise CellFailed(f"{cell}: {folder} is gone; its record cannot be judged again (remove {path} to run the cell anew)")
    got = subprocess.run([sys.executable, "-m", "stackedheads", "claims", str(folder), "--json"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        raise CellFailed(f"{cell}: claims exited {got.returncode}: {(got.stderr.strip().splitlines() or [''])[-1]}")
    rec = json.loads(path.read_text())
    rec.update(claims=json.loads(got.stdout), judged_at=git_commit())
    atomic_write_json(path, rec)


def cpu_flags() -> list[str]:
    """The CPU flags that decide the bfloat16 path (/proc/cpuinfo; [] elsewhere): AVX-512,
    its native bfloat16 and AMX."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    have = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in have]


def machine_with_flags() -> str:
    """The machine (provenance.machine) and the flags of :func:`cpu_flags`."""
    return f"{machine()}; flags: {' '.join(cpu_flags()) or 'none of avx2, avx512f, avx512_bf16, amx'}"


def run_cells(out: Path, preset: str, skips: list[str], cells: list[tuple[str, int]], parallel: bool,
              device: str) -> list[str]:
    """Run the cells that have no record yet, one after another or all at once; the failures'
    lines (none: all finished)."""
    cores = available_cores()
    cells = [c for c in cells if not (out / f"{cell_name(*c)}.json").exists()]

    def one(cell: tuple[str, int]) -> str | None:
        dtype, threads = cell
        # At once, the cores are shared out: each cell's workers times its threads within its share.
        workers = max(1, cores // (threads * (len(cells) if parallel else 1)))
        log = out / f"{cell_name(*cell)}.log" if parallel else None
        try:
            run_cell(out, preset, skips, dtype, threads, workers=workers, device=device, log=log)
        except CellFailed as e:
            return str(e)
        return None

    if not parallel or not cells:
        for cell in cells:
            if failed := one(cell):
                return [failed]
        return []
    with ThreadPoolExecutor(len(cells)) as pool:
        return [f for f in pool.map(one, cells) if f]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--skip", action="append", default=None, help="a stage to leave out (default: llm)")
    ap.add_argument("--cells", default=None, help="comma-separated cells to run (default: all four): "
                    + ", ".join(cell_name(*c) for c in CELLS))
    ap.add_argument("--parallel", action="store_true", help="run the cells at once (a many-core host)")
    ap.add_argument("--device", default="cpu", help="where the cells train (default: cpu, also on a GPU host)")
    ap.add_argument("--judge-again", action="store_true",
                    help="judge the finished cells' claims anew from their folders (no training), then build the table")
    args = ap.parse_args()
    skips = ["llm"] if args.skip is None else args.skip
    try:
        cells = parse_cells(args.cells)
        args.out.mkdir(parents=True, exist_ok=True)
        read_records(args.out, args.preset, skips)  # refuse a mixed OUT before hours of work
    except (ValueError, OSError) as e:
        print(f"demo_matrix: {e}", file=sys.stderr)
        return 2
    if args.judge_again:
        try:
            for cell in read_records(args.out, args.preset, skips):
                judge_again(args.out, cell)
        except CellFailed as e:
            print(f"demo_matrix: {e}", file=sys.stderr)
            return 2
    for failed in (failures := run_cells(args.out, args.preset, skips, cells, args.parallel, args.device)):
        print(f"demo_matrix: {failed}", file=sys.stderr)
    if failures:
        return 2
    records = read_records(args.out, args.preset, skips)
    rows = verdict_rows({c: r["claims"] for c, r in records.items()})
    machines = {c: r["machine"] for c, r in records.items()}
    table = markdown(rows, {c: r["wall_s"] for c, r in records.items()}, machines)
    commits = sorted({r["commit"][:7] for r in records.values()})
    judged = sorted({r.get("judged_at", r["commit"])[:7] for r in records.values()})
    where = "; ".join(sorted(set(machines.values())))
    (args.out / "verdicts.md").write_text(
        f"`tools/maintenance/demo_matrix.py`: trained at {', '.join(commits)}, judged at {', '.join(judged)}, "
        f"preset {args.preset}, skipped: {', '.join(skips) or 'none'}; {where}\n\n" + table)
    (args.out / "verdicts.json").write_text(json.dumps(
        {"preset": args.preset, "skip": skips, "machines": machines, "commits": commits, "judged_at": judged,
         "rows": rows, "wall_s": {c: r["wall_s"] for c, r in records.items()}}, indent=2))
    print(table, end="")
    if missing := [cell_name(*c) for c in CELLS if cell_name(*c) not in records]:
        print(f"not run yet: {', '.join(missing)} (--cells runs them into the same OUT)", file=sys.stderr)
    flips = [r["id"] for r in rows if not r["agree"]]
    if flips:
        print(f"verdicts differ between the cells: {', '.join(flips)}", file=sys.stderr)
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
