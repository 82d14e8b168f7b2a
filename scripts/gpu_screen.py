"""Recipe-screen trainings (issue 39) on one lent GPU, all at once, under one deadline.

    python3 scripts/gpu_screen.py OUT DEADLINE_S RECIPE:SEEDS[:DTYPE] ...

Each argument is one run (`train --preset sec9 --recipe RECIPE --seeds SEEDS --dtype DTYPE
--device cuda --threads 1 --no-keep-checkpoints`, DTYPE float32 unless named), highest priority
first. They start together: one sec9 training is launch-bound (a few ms of GPU work in a
20-50 ms step), so several share the GPU well. Every 20 s each run's recent steps per second
give its end; while one would end after the deadline the lowest-priority run still training is
stopped, so the others finish. What finished comes back as OUT/screen.tgz (config, metrics,
summary, segments and log of every run; no checkpoints) and OUT/driver.log.

Measured on one H200 (torch 2.11, docs/training.md, 'The recipe screen'): one float32 run alone
20-23 steps/s (5 min a run); two float32 runs 15 steps/s each; ten bfloat16 runs 6-10 steps/s
each (bfloat16 autocast is slower than float32 there: its casts are more launches).
Environment: SCREEN_PRESET (sec9), SCREEN_DEVICE (cuda), SCREEN_ROOT (/tmp/screen),
SCREEN_EXTRA (more train options for every run), SCREEN_CHECK0 (first check, s: 60),
SCREEN_EXPORT (set: each run's last checkpoint, model only, as OUT/<run>.safetensors).
"""
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from stackedheads.training.metrics import read_metrics

OUT, DEADLINE = Path(sys.argv[1]), float(sys.argv[2])
RUNS = [(a.split(":") + ["float32"])[:3] for a in sys.argv[3:]]
PRESET = os.environ.get("SCREEN_PRESET", "sec9")
ROOT = Path(os.environ.get("SCREEN_ROOT", "/tmp/screen"))
ROOT.mkdir(parents=True, exist_ok=True)
t0 = time.monotonic()
log = open(OUT / "driver.log", "a", buffering=1)


def say(msg):
    log.write(f"{time.monotonic() - t0:7.1f}s {msg}\n")


def folder(recipe, dtype):
    return f"{recipe}-{dtype}"


procs = {}
for recipe, seeds, dtype in RUNS:
    name = folder(recipe, dtype)
    args = [sys.executable, "-m", "stackedheads", "train", "--preset", PRESET, "--recipe", recipe,
            "--seeds", seeds, "--dtype", dtype, "--device", os.environ.get("SCREEN_DEVICE", "cuda"),
            "--threads", "1", "--no-keep-checkpoints", "--out", str(ROOT / name),
            *os.environ.get("SCREEN_EXTRA", "").split()]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH="src")
    procs[name] = subprocess.Popen(args, env=env, stdout=open(ROOT / f"{name}.log", "w"), stderr=subprocess.STDOUT)
    say(f"started {name}: {' '.join(args[3:])}")


def progress(name):
    """(last step, steps per second over the last 30 s of the run's own clock), or None."""
    try:
        pts = sorted({(int(r["step"]), float(r["wall_s"])) for r in read_metrics(ROOT / name)})
    except Exception:  # not yet written, or a row half-written: judged at the next check
        return None
    if len(pts) < 2:
        return None
    s1, w1 = pts[-1]
    s0, w0 = ([p for p in pts if p[1] <= w1 - 30] or pts[:1])[-1]
    return s1, (s1 - s0) / max(w1 - w0, 1e-6)


steps = int(os.environ.get("SCREEN_STEPS", "6400"))
next_check = float(os.environ.get("SCREEN_CHECK0", "60"))
while any(p.poll() is None for p in procs.values()):
    now = time.monotonic() - t0
    if now > DEADLINE:
        for name, p in procs.items():
            if p.poll() is None:
                say(f"deadline: stopping {name} at {progress(name)}")
                p.kill()
        break
    if now >= next_check:
        next_check = now + 20
        ends = {}
        for name, p in procs.items():
            if p.poll() is None and (pr := progress(name)):
                ends[name] = now + (steps - pr[0]) / max(pr[1], 1e-6) + 15
                say(f"{name}: step {pr[0]}, {pr[1]:.1f} steps/s, ends at about {ends[name]:.0f}s")
        if ends and max(ends.values()) > DEADLINE - 10:
            victim = [n for n in procs if n in ends][-1]
            say(f"an end after the deadline ({max(ends.values()):.0f}s > {DEADLINE - 10:.0f}s): stopping {victim}")
            procs[victim].kill()
    time.sleep(2)
for name, p in procs.items():
    say(f"{name}: exit {p.wait()}")
with tarfile.open(OUT / "screen.tgz", "w:gz") as tar:
    for f in sorted(ROOT.rglob("*")):
        if f.is_file() and f.suffix != ".safetensors" and ".lock" not in f.name:
            tar.add(f, arcname=str(f.relative_to(ROOT.parent)))
say(f"archived; total {time.monotonic() - t0:.0f}s")
# The last checkpoint of each run without its optimizer state (a quarter of the bytes), as
# OUT/<run>.safetensors: enough for `circuit discover` here, not for resuming.
if os.environ.get("SCREEN_EXPORT"):
    from stackedheads.training.checkpoints import list_checkpoints, read_checkpoint, write_checkpoint
    from stackedheads.training.config import TrainConfig

    for name in procs:
        if ckpts := list_checkpoints(ROOT / name):
            tensors, meta = read_checkpoint(ckpts[-1][1])
            cfg = TrainConfig.from_dict(json.loads(meta["config"]))
            write_checkpoint(OUT / f"{name}.safetensors", {k: v for k, v in tensors.items() if k.startswith("model.")},
                             int(meta["step"]), cfg)
            say(f"exported {name} step {meta['step']}")
