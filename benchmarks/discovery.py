"""Circuit discovery's time per seed: a base commit against this tree, on a real checkpoint.

A seed's discovery (App. E's greedy search, :mod:`stackedheads.circuits.discover`)
at Sec. 9.1's size should take at most 5 minutes on two threads; at commit 25719e9 it took about
17 minutes on one thread. Each side runs ``stackedheads circuit discover RUN --seeds S
--threshold T`` from its own source (the base commit in a temporary git worktree), in a fresh
process with ``--threads`` OpenMP threads, one after the other, and the benchmark times it and
then checks that both wrote the same bytes (circuit.json, summary.json, losses.json): a faster
search that finds another circuit is a different search, not a faster one.

Run on an idle machine (nothing else heavy running: two cores are easily disturbed)::

    .venv/bin/python benchmarks/discovery.py RUN --seed 1                 # base 25719e9 and this tree
    .venv/bin/python benchmarks/discovery.py RUN --seed 1 --only new      # this tree alone

``RUN`` is a run folder with checkpoints, e.g. a ``--preset sec9`` training. The last line is
JSON with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from train_throughput import base_tree  # the base commit in a temporary git worktree

ROOT = Path(__file__).resolve().parent.parent
BASE = "25719e9"
FILES = ("circuit.json", "summary.json", "losses.json")


def discover(tree: Path, run: Path, out: Path, args) -> float:
    """Seconds one discovery takes from ``tree``'s source, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(args.threads)}
    cmd = [sys.executable, "-c", "from stackedheads.cli import main; main()", "circuit", "discover", str(run),
           "--out", str(out), "--seeds", str(args.seed), "--threshold", str(args.threshold)]
    if args.checkpoint is not None:
        cmd += ["--checkpoint", str(args.checkpoint)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=tree)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"discovery failed in {tree}:\n{r.stderr[-3000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder with checkpoints (IC)")
    ap.add_argument("--seed", type=int, default=0, help="the member to discover")
    ap.add_argument("--checkpoint", type=int, default=None, help="its step (default: the last)")
    ap.add_argument("--threshold", type=float, default=0.05, help="App. E's absolute threshold (default 0.05)")
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads per discovery (default 2)")
    ap.add_argument("--base", default=BASE, help=f"the commit to measure against (default {BASE})")
    ap.add_argument("--only", choices=("base", "new"), default=None, help="run one side only")
    ap.add_argument("--keep", type=Path, default=None, help="copy this tree's seed folder here (a discovery to keep)")
    args = ap.parse_args()
    if not args.run.is_dir():
        print(f"error: no run folder {args.run}", file=sys.stderr)
        raise SystemExit(2)

    sides = [s for s in ("base", "new") if args.only in (None, s)]
    result: dict = {"seed": args.seed, "threads": args.threads, "base": args.base, "cores": os.cpu_count(), "seconds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"new": ROOT}
        if "base" in sides:
            trees["base"] = base_tree(args.base, Path(tmp) / "base")
        try:
            for side in sides:
                result["seconds"][side] = discover(trees[side], args.run.resolve(), Path(tmp) / f"out-{side}", args)
                print(f"{side:<5} {result['seconds'][side]:8.1f} s  ({args.threads} threads, seed {args.seed})", flush=True)
            if len(sides) == 2:
                a, b = (Path(tmp) / "out-base" / f"seed{args.seed}", Path(tmp) / "out-new" / f"seed{args.seed}")
                result["same_files"] = {f: (a / f).read_bytes() == (b / f).read_bytes() for f in FILES}
                result["speedup"] = result["seconds"]["base"] / result["seconds"]["new"]
                print(f"speedup {result['speedup']:.2f}x; same files: "
                      + ", ".join(f"{f} {'yes' if same else 'NO'}" for f, same in result["same_files"].items()))
            if args.keep is not None and "new" in sides:
                shutil.copytree(Path(tmp) / "out-new" / f"seed{args.seed}", args.keep / f"seed{args.seed}", dirs_exist_ok=True)
        finally:
            if "base" in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["base"])],
                               check=False, capture_output=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
