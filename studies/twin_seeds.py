"""Each seed of the demo's twins alone: its Sec. 8-9 verdicts in float32 and bfloat16, on 1 and
2 threads.

The demo judges A1-A5 and E1-E4 over seeds 0-3 of each twin, trained together (no seed is chosen
by its outcome). This study runs the demo's own stage (`reproduce.stage_circuits` or
`stage_emergence`) for one seed at a time in each cell and tabulates every seed's verdicts per
cell, to show which of a seed's verdicts the rounding decides (a seed whose useful heads are the
causal minimum in one dtype and one more in the other flips A5). It is a study: the demo takes
no input from it.

    python3 studies/twin_seeds.py --out RUNS [--twin circuits|emergence] [--demo quick]
        [--seeds 0,1,2,3] [--cells float32-t1,float32-t2,bfloat16-t1,bfloat16-t2] [--parallel]
    python3 studies/twin_seeds.py --out RUNS [--twin ...] --as-is   # the table of what is there

RUNS/<cell>/seed<S> is laid out as a `reproduce` folder holding that one stage (run by a child
process under OMP_NUM_THREADS=T, `--dtype`, `--threads T`, `--device cpu`, as
tools/maintenance/demo_matrix.py runs a cell) and judged by the section's own claims, as `claims` judges
the demo. A stage cut short resumes; a finished one is kept. `--parallel` runs the cells at once
(a many-core host, such as a lent GPU's 16 cores). Written: RUNS/<twin>.md. A seed's row says
"yes" where its verdicts agree in every measured cell (two or more). Run it alone on the
machine: one A-C seed is about 4 minutes on 2 threads of a 2-core AVX2 CPU in float32; bfloat16
is emulated there and several times slower.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from stackedheads import presets, reproduce
from stackedheads.claims import SECTIONS
from stackedheads.state.provenance import machine
from stackedheads.state.write import RunFolder, read_state_json

CELLS = [("float32", 1), ("float32", 2), ("bfloat16", 1), ("bfloat16", 2)]
# twin -> (the section its claims are in, the preset's seeds field, the stage that runs it)
TWINS = {"circuits": ("sec8", "circuits_seeds", reproduce.stage_circuits),
         "emergence": ("sec9", "emergence_seeds", reproduce.stage_emergence)}


def cell_name(dtype: str, threads: int) -> str:
    return f"{dtype}-t{threads}"


def parse_cell(name: str) -> tuple[str, int]:
    """``float32-t2`` -> ("float32", 2): the four cells, or any thread count."""
    dtype, _, t = name.strip().partition("-t")
    if dtype not in ("float32", "bfloat16") or not t.isdigit() or int(t) < 1:
        raise ValueError(f"--cells: {name.strip()!r} is not a cell (DTYPE-tTHREADS: {', '.join(cell_name(*c) for c in CELLS)})")
    return dtype, int(t)


def folder(out: Path, cell: str, seed: int) -> Path:
    """The seed's `reproduce`-shaped folder in one cell (both twins' stages can sit in it)."""
    return out / cell / f"seed{seed}"


def run_one(out: Path, demo: str, twin: str, dtype: str, threads: int, seed: int) -> None:
    """One seed's stage in one cell, as `reproduce` runs it (a finished stage is kept)."""
    _, seeds_field, run_stage = TWINS[twin]
    preset = replace(presets.REPRODUCE.get(demo), **{seeds_field: (seed,)})
    stage = RunFolder(folder(out, cell_name(dtype, threads), seed) / twin)
    if reproduce.stage_done(stage, twin, note=False) is not None:
        return
    stage.path.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = run_stage(preset, stage.path, reproduce.Context(device="cpu", dtype=dtype, workers=1, threads=threads))
    stage.mark_done({**result, "wall_s": round(time.perf_counter() - t0, 3)})


def verdicts(out: Path, twin: str, cell: str, seed: int) -> dict | None:
    """``{claim id: verdict}``, the final val MSE and the useful heads of one finished (cell,
    seed); None before its stage is done."""
    where = folder(out, cell, seed)
    saved = reproduce.stage_done(RunFolder(where / twin), twin, note=False) if (where / twin).is_dir() else None
    if saved is None:
        return None
    section = SECTIONS.get(TWINS[twin][0])
    train = read_state_json(where / twin / saved["run"] / "summary.json", "training summary")
    return {"claims": {c.id: c.verdict for c in section.evaluate(where)},
            "final": train["seeds"][str(seed)]["final_val_loss"],
            "useful": saved["circuits"][str(seed)]["n_useful_heads"]}


def table(out: Path, twin: str, cells: list[str], seeds: list[int], demo_seeds: tuple[int, ...]) -> str:
    lines = ["| seed | " + " | ".join(cells) + " | the same verdicts in every measured cell |",
             "|---|" + "---|" * len(cells) + "---|"]
    for s in seeds:
        got = {c: verdicts(out, twin, c, s) for c in cells}
        shown = ["-" if v is None else " ".join(f"{k}:{v['claims'][k][0]}" for k in v["claims"])
                 + f" ({v['useful']} heads; {v['final']:.4f})" for v in got.values()]
        done = [v["claims"] for v in got.values() if v]
        same = "-" if len(done) < 2 else ("yes" if all(d == done[0] for d in done) else "**no**")
        mark = " (the demo's)" if s in demo_seeds else ""
        lines.append(f"| {s}{mark} | " + " | ".join(shown) + f" | {same} ({len(done)} cell{'' if len(done) == 1 else 's'}) |")
    return "\n".join(lines) + ("\n\nEach cell: every claim as P(ASS), F(AIL), I(NCONCLUSIVE), N(OT RUN); (useful heads "
                               f"in the circuit; the model's final val MSE). {machine()}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--twin", default="circuits", help="circuits (A-C, Sec. 8) or emergence (D, Sec. 9)")
    ap.add_argument("--demo", default="quick", help="the reproduce preset whose twin to study (default quick)")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--cells", default=",".join(cell_name(*c) for c in CELLS))
    ap.add_argument("--parallel", action="store_true", help="the cells at once (a many-core host)")
    ap.add_argument("--as-is", action="store_true", help="train nothing: tabulate the folders as they stand")
    ap.add_argument("--one", nargs=2, metavar=("CELL", "SEED"), help=argparse.SUPPRESS)  # a child's work
    args = ap.parse_args()
    try:
        if args.twin not in TWINS:
            raise ValueError(f"--twin: {args.twin!r}; choose one of {', '.join(TWINS)}")
        preset = presets.REPRODUCE.get(args.demo)
        seeds = [int(s) for s in args.seeds.split(",")]
        cells = [parse_cell(c) for c in args.cells.split(",")]
    except ValueError as e:
        print(f"twin_seeds: {e}", file=sys.stderr)
        return 2
    if args.one:
        run_one(args.out, args.demo, args.twin, *parse_cell(args.one[0]), int(args.one[1]))
        return 0

    def run_cell(cell: tuple[str, int]) -> str | None:
        env = {**os.environ, "OMP_NUM_THREADS": str(cell[1])}
        for s in seeds:
            cmd = [sys.executable, __file__, "--out", str(args.out), "--twin", args.twin, "--demo", args.demo,
                   "--one", cell_name(*cell), str(s)]
            if subprocess.run(cmd, env=env).returncode != 0:
                return f"{cell_name(*cell)} seed {s} failed; rerun the same line to resume it"
        return None

    if not args.as_is:
        args.out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(len(cells) if args.parallel else 1) as pool:
            failed = [f for f in pool.map(run_cell, cells) if f]
        for f in failed:
            print(f"twin_seeds: {f}", file=sys.stderr)
        if failed:
            return 2
    text = table(args.out, args.twin, [cell_name(*c) for c in cells], seeds,
                 getattr(preset, TWINS[args.twin][1]))
    if args.out.is_dir():
        (args.out / f"{args.twin}.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
