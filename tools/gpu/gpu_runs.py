"""Trainings on one lent GPU under one deadline, each analysed on the machine's CPUs as it ends
(a lent GPU gives 15 minutes, in calls of at most 10).

    python3 tools/gpu/gpu_runs.py OUT DEADLINE_S PRESET:RECIPE:SEEDS[:DTYPE] ...

Each argument is one run, highest priority first: `train --preset PRESET --recipe RECIPE --seeds
SEEDS --dtype DTYPE --device cuda --threads 1` (DTYPE float32 unless named; RECIPE gpt2 is the
presets' own) in ROOT/PRESET-RECIPE-DTYPE. They start together. Every 20 s each run's recent
steps per second give its time left alone; the runs that cannot end before DEADLINE (less RESERVE
for those analysed) after the runs of higher priority are stopped, all at once. A run named in
PIECES is never stopped early: it trains to the deadline, and the next call with the same ROOT
on the same warm machine (a machine keeps /tmp while it stays warm) resumes it from its last
checkpoint (sec8's 24,000 steps take about 10 minutes alone on an H100: two calls).

As a run ends (with ANALYSE set): `circuit discover --threshold 0.05` (App. E) for each seed in a
process of its own (ROOT/RUN-analysis/discovered-S), then per seed `attention` (sec8: Figure 5's
maps) or `emergence` once its circuits are there (where the checkpoints were kept: Sec. 9's
timeline, timeline-S; `stackedheads publish-piece` takes these folders as they are). Everything
stops at DEADLINE. What finished comes back as OUT/runs.tgz (configs, metrics, summaries,
segments, logs, circuits, maps, timelines; never a checkpoint) and OUT/driver.log.

Measured on one H200 (torch 2.11, eager float32, docs/training.md 'The recipe screen'): one sec9
run of 3 or 4 seeds alone 20-23 steps/s (about 330 s); two at once 12.5 steps/s each (together
only 14% more than one alone); ten bfloat16 runs 6-10 steps/s each (autocast's casts are more
launches). On one H100 with `--cuda-graph` (SCREEN_EXTRA: each step one launch) under CUDA's MPS
daemon (tools/gpu/gpu_session.sh), docs/speed.md: a sec9 run alone 20 steps/s, two at once 16-20
each, six 7.7 each (46 in all); a sec8 run of 3 seeds alone 42 steps/s.

Environment: SCREEN_DEVICE (cuda), SCREEN_ROOT (/tmp/gpu-runs), SCREEN_EXTRA (more train options
for every run, e.g. --cuda-graph), SCREEN_KEEP (set: keep every checkpoint, for timelines),
SCREEN_CHECK0 (first check, s: 60), ANALYSE ("1": analyse every run as above; else the names of
the runs to analyse, comma-separated, e.g. sec8-gpt2-float32), RESERVE (s kept for analysis
by the runs ANALYSE names: 150 with ANALYSE, else 0), ANALYSE_SPARE (runs analysed too as they end, in
the time left, none reserved), ANALYSIS_THREADS (threads per analysis process: 2), ANALYSIS_SLOTS
(analyses at once: the cores over the threads, less one), SCREEN_EXPORT ("1" or run names: each
one's last checkpoint, model only, as OUT/<run>-seed<S>.safetensors per seed: `circuit discover`
elsewhere, after `python3 tools/gpu/gpu_runs.py unpack EXPORT RUN` lays one out as a run folder).
Analyses start in the runs' priority order.
"""
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from stackedheads.training.metrics import read_metrics


def runs_to_keep(live, now, deadline, margin, pieces=()):
    """The runs to keep training: ``live`` maps each run still training, highest priority first,
    to (step, steps in the run, its steps per second now); ``margin(name)`` is the time it must
    end before ``deadline``. Each run's time alone is its remaining steps at its rate times the
    runs sharing the GPU (on an H100, eight eager sec9 runs at once made 23 steps/s in all, one
    alone 21). Kept: the longest prefix, by priority, whose times alone add up to an end in time,
    and every run in ``pieces`` (trained to the deadline, resumed by the next call)."""
    t, keep = now, []
    for name, (step, steps, rate) in live.items():
        t += (steps - step) / max(rate * len(live), 1e-6) + 15
        fits = t <= deadline - margin(name)
        if fits or name in pieces:
            keep.append(name)
        if not fits and name not in pieces:
            break
    return keep


def export_seeds(checkpoint, prefix):
    """A checkpoint's model, without its optimizer state, as one file per seed: PREFIX-seed<S>.safetensors
    (a file the device returns holds at most 16 MiB; a sec8 seed is 9.5 MB). Each model tensor leads
    with the ensemble's axis, so a seed's file is its member's slice, with a config of that seed alone:
    a run folder of one seed for `circuit discover` and `attention`. Returns the step and the seeds."""
    from stackedheads.training.checkpoints import read_checkpoint, write_checkpoint
    from stackedheads.training.config import TrainConfig

    tensors, meta = read_checkpoint(checkpoint)
    cfg = TrainConfig.from_dict(json.loads(meta["config"]))
    for i, seed in enumerate(cfg.seeds):
        write_checkpoint(Path(f"{prefix}-seed{seed}.safetensors"),
                         {k: v[i:i + 1].clone() for k, v in tensors.items() if k.startswith("model.")},
                         int(meta["step"]), cfg.override(seeds=(seed,)))
    return int(meta["step"]), list(cfg.seeds)


def checked_out(text):
    """OUT under the rule of every verb's `--out` (not empty, not the filesystem root)."""
    import typer

    from stackedheads.cli._app import out_path
    from stackedheads.errors import UsageError

    try:
        return out_path(text)
    except typer.BadParameter as e:
        raise UsageError(f"OUT: {e.message}") from None


def unpack_export(export, out):
    """One seed's export (:func:`export_seeds`) as a run folder here: OUT/config.json (the seed's
    config, from the checkpoint's header) and OUT/checkpoints/step_<N>.safetensors, which
    `circuit discover OUT` and `attention OUT` read. The file is copied as it came (its checksums
    are verified on reading). OUT follows every verb's `--out` rules: not empty, not the root, no
    folder of another kind, nor a training run of another configuration. Everything is checked
    before anything is written. Returns the step.

        python3 tools/gpu/gpu_runs.py unpack PREFIX-seed<S>.safetensors OUT
    """
    import re

    from stackedheads.errors import UsageError
    from stackedheads.state.write import RunFolder, atomic_write_bytes, atomic_write_json
    from stackedheads.training.checkpoints import checkpoint_path, read_checkpoint
    from stackedheads.training.config import TrainConfig
    from stackedheads.training.loop import CONFIG_FILE, KIND

    out = checked_out(out)
    export = Path(export)
    _, meta = read_checkpoint(export)
    if not re.fullmatch(r"[0-9]{1,12}", meta["step"]):
        raise UsageError(f"{export}: its header's step {meta['step'][:20]!r} is not a whole number: not an export of this script")
    try:
        config = json.loads(meta["config"])
    except (json.JSONDecodeError, RecursionError):
        raise UsageError(f"{export}: its header's config is not JSON: not an export of this script") from None
    cfg = TrainConfig.from_dict(config, where=f"{export}'s header")
    step = int(meta["step"])
    folder = RunFolder(out, KIND)

    def same_run() -> None:
        old = folder.recorded(CONFIG_FILE, "a training run's config")
        if old is not None:
            folder.require_same(TrainConfig.from_dict(old, where=out / CONFIG_FILE).to_dict(), cfg.to_dict(), "another configuration")

    folder.check()
    same_run()  # before the lock, so that a refused folder keeps no .lock
    with folder.lock("gpu_runs.py unpack"):
        same_run()  # and under it: another process may have written since
        target = checkpoint_path(out, step)
        target.parent.mkdir(exist_ok=True)
        atomic_write_bytes(target, export.read_bytes())
        atomic_write_json(out / CONFIG_FILE, config)
    return step


def cli(*args):
    return [sys.executable, "-m", "stackedheads", *map(str, args)]


def analysis_jobs(name, preset, seeds, root, timelines):
    """A run's analysis as jobs keyed "NAME/JOB", each (argv, the jobs it waits for): circuits per
    seed (ROOT/NAME-analysis/discovered-S), then per seed Figure 5's maps (sec8) or, where the
    checkpoints were kept (``timelines``), Sec. 9's timeline (timeline-S). A seed's timeline waits
    for its own circuits alone: a discovery that outlasts the deadline (on a model that memorised
    and never generalised: over 6 minutes) holds back no other seed's."""
    run, an = root / name, root / f"{name}-analysis"
    jobs = {f"discover-{s}": (cli("circuit", "discover", run, "--seeds", s, "--threshold", "0.05", "--out", an / f"discovered-{s}"), [])
            for s in seeds}
    for s in seeds:
        if preset.startswith("sec8"):
            jobs[f"maps-{s}"] = (cli("attention", run, "--seed", s, "--out", an / "maps" / f"seed{s}"), [])
        if timelines:  # emergence times the seeds with a circuit in --circuits: this one
            jobs[f"emergence-{s}"] = (cli("emergence", run, "--circuits", an / f"discovered-{s}", "--out", an / f"timeline-{s}"),
                                      [f"discover-{s}"])
    return {f"{name}/{k}": (argv, [f"{name}/{d}" for d in deps]) for k, (argv, deps) in jobs.items()}


USAGE = "usage: gpu_runs.py OUT DEADLINE_S PRESET:RECIPE:SEEDS[:DTYPE] ... | gpu_runs.py unpack EXPORT.safetensors OUT"


def parse_runs(specs):
    """``PRESET:RECIPE:SEEDS[:DTYPE]`` arguments as {name: (preset, recipe, seeds, dtype)}, highest
    priority first; a malformed one is a UsageError."""
    from stackedheads.errors import UsageError

    runs = {}
    for spec in specs:
        parts = spec.split(":")
        if not 3 <= len(parts) <= 4 or not all(parts):
            raise UsageError(f"run {spec!r} is not PRESET:RECIPE:SEEDS[:DTYPE]")
        preset, recipe, seeds, dtype = (parts + ["float32"])[:4]
        try:
            seed_list = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise UsageError(f"run {spec!r}: seeds {seeds!r} are not comma-separated whole numbers") from None
        runs[f"{preset}-{recipe}-{dtype}"] = (preset, recipe, seed_list, dtype)
    return runs


def main():
    from stackedheads.errors import UsageError

    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__ if args else USAGE, file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else 2)
    try:
        if args[0] == "unpack":
            if len(args) != 3:
                raise UsageError("usage: gpu_runs.py unpack EXPORT.safetensors OUT")
            print(f"{args[2]}: a run folder of step {unpack_export(args[1], args[2])}")
            return
        if len(args) < 3:
            raise UsageError(USAGE)
        try:
            deadline = float(args[1])
        except ValueError:
            raise UsageError(f"DEADLINE_S must be a number of seconds, got {args[1]!r}") from None
        drive(checked_out(args[0]), deadline, parse_runs(args[2:]))
    except (UsageError, OSError) as e:  # bad input: one line, exit 2
        print(f"gpu_runs: {e}", file=sys.stderr)
        sys.exit(2)


def drive(OUT, DEADLINE, runs):
    """Train ``runs`` (:func:`parse_runs`) until DEADLINE seconds from now, as the module says."""
    OUT.mkdir(parents=True, exist_ok=True)
    ROOT = Path(os.environ.get("SCREEN_ROOT", "/tmp/gpu-runs"))
    ROOT.mkdir(parents=True, exist_ok=True)
    ANALYSE = os.environ.get("ANALYSE", "")  # "1": every run; else the names of the runs to analyse, comma-separated
    SPARE = os.environ.get("ANALYSE_SPARE", "").split(",")  # analysed too, with no time reserved for them
    RESERVE = float(os.environ.get("RESERVE", "150" if ANALYSE else "0"))
    PIECES = os.environ.get("PIECES", "").split(",")  # trained to the deadline, resumed by the next call
    THREADS = os.environ.get("ANALYSIS_THREADS", "2")
    SLOTS = int(os.environ.get("ANALYSIS_SLOTS", 0)) or max(1, (os.cpu_count() or 2) // int(THREADS) - 1)
    t0 = time.monotonic()
    log = open(OUT / "driver.log", "a", buffering=1)


    def say(msg):
        log.write(f"{time.monotonic() - t0:7.1f}s {msg}\n")


    def env(threads):
        path = os.pathsep.join(p for p in ("src", os.environ.get("PYTHONPATH", "")) if p)  # carried wheels stay visible
        return dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONPATH=path, PYTHONUNBUFFERED="1")


    RUNS = {name: (preset, seeds) for name, (preset, _, seeds, _) in runs.items()}  # highest priority first
    train = {}
    for name, (preset, recipe, seed_list, dtype) in runs.items():
        seeds = ",".join(map(str, seed_list))
        keep = "--keep-checkpoints" if os.environ.get("SCREEN_KEEP") else "--no-keep-checkpoints"
        args = cli("train", "--preset", preset, "--recipe", recipe, "--seeds", seeds, "--dtype", dtype,
                   "--device", os.environ.get("SCREEN_DEVICE", "cuda"), "--threads", "1", keep, "--out", ROOT / name,
                   *os.environ.get("SCREEN_EXTRA", "").split())
        train[name] = subprocess.Popen(args, env=env("1"), stdout=open(ROOT / f"{name}.log", "a"), stderr=subprocess.STDOUT)
        say(f"started {name}: {' '.join(args[3:])}")


    def reserved(name):
        return ANALYSE == "1" or name in ANALYSE.split(",")


    def progress(name):
        """(last step, steps in the run, steps per second over the last 30 s of its own clock), or None."""
        try:
            steps = json.loads((ROOT / name / "config.json").read_text())["steps"]
            pts = sorted({(int(r["step"]), float(r["wall_s"])) for r in read_metrics(ROOT / name)})
        except Exception:  # not yet written, or a row half-written: judged at the next check
            return None
        if len(pts) < 2:
            return None
        s1, w1 = pts[-1]
        s0, w0 = ([p for p in pts if p[1] <= w1 - 30] or pts[:1])[-1]
        return s1, steps, (s1 - s0) / max(w1 - w0, 1e-6)


    queue, running, finished, failed, analysed = {}, {}, set(), set(), set()
    next_check = float(os.environ.get("SCREEN_CHECK0", "60"))
    while True:
        now = time.monotonic() - t0
        if now > DEADLINE:
            for name, p in [*train.items(), *running.items()]:
                if p.poll() is None:
                    say(f"deadline: stopping {name}" + (f" at {progress(name)}" if name in train else ""))
                    p.kill()
            break
        for name, p in train.items():  # a training that just ended successfully queues its analysis
            if p.poll() == 0 and (reserved(name) or name in SPARE) and name not in analysed:
                analysed.add(name)
                queue.update(analysis_jobs(name, *RUNS[name], ROOT, bool(os.environ.get("SCREEN_KEEP"))))
                say(f"{name}: trained; analysis queued")
        for job, p in list(running.items()):
            if p.poll() is not None:
                (finished if p.returncode == 0 else failed).add(job)
                say(f"{job}: exit {p.returncode}")
                del running[job]
        for job, (argv, deps) in sorted(queue.items(), key=lambda kv: list(RUNS).index(kv[0].split("/")[0])):
            if any(d in failed for d in deps):
                failed.add(job)
                del queue[job]
            elif len(running) < SLOTS and all(d in finished for d in deps):
                logf = open(ROOT / f"{job.replace('/', '--')}.log", "w")
                running[job] = subprocess.Popen(argv, env=env(THREADS), stdout=logf, stderr=subprocess.STDOUT)
                del queue[job]
                say(f"{job}: started")
        if now >= next_check:
            next_check = now + 20
            live = {n: pr for n, p in train.items() if p.poll() is None and (pr := progress(n))}
            if len(live) == sum(p.poll() is None for p in train.values()) and live:
                for name, (step, steps, rate) in live.items():
                    say(f"{name}: step {step}, {rate:.1f} steps/s")
                keep = runs_to_keep(live, now, DEADLINE, lambda n: (RESERVE if reserved(n) else 0) + 10, PIECES)
                for name in live:
                    if name not in keep:
                        say(f"{name}: cannot end before the deadline with {', '.join(keep) or 'nothing'} before it: stopping it")
                        train[name].kill()
        if not (running or queue or any(p.poll() is None for p in train.values())):
            break
        time.sleep(1)
    for name, p in train.items():
        code = p.wait()
        last = (ROOT / f"{name}.log").read_text(errors="replace").strip().splitlines()[-1:] if code > 0 else []
        say(f"{name}: exit {code}" + "".join(f": {line[-300:]}" for line in last))  # why it refused, where it did
    SMALL = (".json", ".jsonl", ".csv", ".log", ".png", ".svg")
    with tarfile.open(OUT / "runs.tgz", "w:gz") as tar:
        for f in sorted(ROOT.rglob("*")):
            if f.is_file() and not f.is_symlink() and f.suffix in SMALL and ".lock" not in f.name:
                tar.add(f, arcname=str(f.relative_to(ROOT.parent)))
    say(f"archived; total {time.monotonic() - t0:.0f}s")
    EXPORT = os.environ.get("SCREEN_EXPORT", "")
    if EXPORT:
        from stackedheads.training.checkpoints import list_checkpoints

        for name in train:
            if (EXPORT == "1" or name in EXPORT.split(",")) and (ckpts := list_checkpoints(ROOT / name)):
                step, seeds = export_seeds(ckpts[-1][1], OUT / name)
                say(f"exported {name} step {step}, seeds {seeds}")


if __name__ == "__main__":
    main()
