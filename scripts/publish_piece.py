"""Publish one piece of a result trained a seed or a few at a time (issues 39 and 40): a finished
transformer-D run (Sec. 9, the recipe screen) or transformers A-C run (Sec. 8) holding one or more
seeds, with its circuits and its timeline (Sec. 9) or attention maps (Sec. 8), into RESULTS/NAME,
as the result's first piece or beside the pieces published there before.

    python3 scripts/publish_piece.py NAME RUN [--stage emergence|circuits] [--circuits DISC...]
        [--timeline TL... | --maps MAPS...] [--commit C] [--results DIR]
        [--note TEXT]                                     # a further piece
        --title T --train-command CMD --notes TEXT       # the first piece (NAME not published yet)

RUN is a `train --preset sec9 ... --seeds S --out RUN` folder (``--stage emergence``, the default,
published under results/sec9) or a `train --preset sec8 ...` one (``--stage circuits``,
under results/sec8), summary.json written. DISC is `circuit discover RUN --threshold 0.05 --out DISC`,
TL `emergence RUN --circuits DISC --out TL`, MAPS a folder of `attention RUN --seed S --out
MAPS/seedS`; each may be several folders, each seed's taken from the first that holds it
(scripts/gpu_runs.py writes one a seed); without circuits the piece's seeds are judged from
metrics.csv alone (E4; Sec. 8's claims wait for its circuits). The result is staged from what NAME
holds plus RUN, so publishing the same piece again writes the same reference: the command, the wall
time (the pieces' training summed) and the timeline summary
(stackedheads.emergence.timeline_summary) are recomputed from the staged pieces, never added to,
and a piece holding the same seeds is replaced. A further piece's notes get one sentence of what it
measured ("Seed S: ...") beside --note; the reference keeps the first piece's commit, and a piece
from another commit names its own. Pieces of other settings are refused by `seeds` and `publish`
(stackedheads.pieces).
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stackedheads.claims._circuits import loss_drops
from stackedheads.emergence import timeline_summary
from stackedheads.errors import UsageError
from stackedheads.layout import CIRCUITS_RUN, EMERGENCE_RUN
from stackedheads.provenance import git_commit
from stackedheads.storage import atomic_write_json
from stackedheads.training.config import TrainConfig
from stackedheads.training.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RUN_FILES = ("config.json", "summary.json", "metrics.csv", "segments.jsonl")
_RUN_GLOBS = ("runs/*/*.json", "runs/*/*.jsonl", "runs/*/*.csv", "discovered/*/*.json", "discovered/*/*.png",
              "discovered/*/*.svg")
_DISCOVER = "stackedheads circuit discover RUN --threshold 0.05 --out R/{stage}/discovered"
_TAIL = ("(RUN's config.json, summary.json, metrics.csv, segments.jsonl copied to R/{stage}/runs/{run}); "
         "stackedheads claims R --json > R/claims.json; stackedheads seeds R --markdown --label {name} > R/seeds.md")


@dataclass(frozen=True)
class Stage:
    """Where a piece of one section lies in its result, and what is analysed beside its metrics."""

    run: str  # runs/<run> for the first piece, runs/<run>-s<seeds> for the others
    second: str  # the analysis beside the circuits: Sec. 9's timeline, Sec. 8's attention maps
    second_file: str  # the file in <second>/seed<S> that says a seed has it
    second_said: str  # how a piece's sentence names it ("a timeline")
    include: tuple[str, ...]
    analysis: str  # how R/<stage> was made from RUN, after the train command
    results: str  # the default RESULTS, relative to the repository
    unit: str  # how partial losses' falls are told: Sec. 9 counts epochs, Sec. 8 steps
    without: str  # what judges a seed without circuits


STAGES = {
    "emergence": Stage(
        EMERGENCE_RUN, "timeline", "timeline.json", "a timeline",
        (*_RUN_GLOBS, "timeline/*.json", "timeline/*/timeline.json",
         *(f"timeline/*/{f}.{x}" for f in ("losses", "emergence_summary") for x in ("png", "svg"))),
        _DISCOVER + "; stackedheads emergence RUN --circuits R/emergence/discovered --out R/emergence/timeline " + _TAIL,
        "results/sec9", "epochs", "E4 from metrics.csv"),
    "circuits": Stage(
        CIRCUITS_RUN, "maps", "mean.png", "attention maps",
        (*_RUN_GLOBS, "maps/*/*.png", "maps/*/*.svg"),
        _DISCOVER + "; stackedheads attention RUN --seed S --out R/circuits/maps/seedS " + _TAIL,
        "results/sec8", "steps", "its final loss only: A1-A5 judge a seed with circuits"),
}


def sh(*args: str, out: Path | None = None) -> None:
    """A `stackedheads` command of this interpreter; its stdout to ``out`` where given."""
    r = subprocess.run([sys.executable, "-m", "stackedheads", *args], capture_output=True, text=True)
    if r.returncode:
        raise UsageError(f"stackedheads {args[0]}: {(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}")
    if out is not None:
        out.write_text(r.stdout)


def seeds_of(run: Path) -> list[int]:
    return [int(s) for s in json.loads((run / "config.json").read_text())["seeds"]]


def falls(run: Path, seed: int, unit: str = "epochs") -> str:
    """The epochs (or steps) at which each partial loss first falls below C2's threshold
    (metrics.csv, as the claims read them: stackedheads.claims._circuits.loss_drops)."""
    config = json.loads((run / "config.json").read_text())
    drops = loss_drops(read_metrics(run), str(seed), config["task"]) or {}
    per = TrainConfig.from_dict(config).epoch(1.0) if unit == "epochs" else 1
    return ", ".join(f"{x} " + ("never" if step is None else f"{round(step * per):,}") for x, step in drops.items())


def piece_note(run: Path, seeds: list[int], commit: str, first_commit: str, note: str, folder: Path,
               stage: Stage) -> str:
    s = json.loads((run / "summary.json").read_text())
    label = "Seed" if len(seeds) == 1 else "Seeds"
    finals = ", ".join(f"{s['seeds'][str(x)]['final_val_loss']:.4f}" for x in seeds)
    where = "" if commit == first_commit else f", from a clone of {commit[:7]}"
    return (f" {label} {','.join(map(str, seeds))}: the same command with --seeds {','.join(map(str, seeds))}{where}, "
            f"{s['wall_s']:.0f} s of training{', ' + note if note else ''}; partial losses below 0.5 at {stage.unit}: "
            f"{'; '.join(('seed %d: ' % x if len(seeds) > 1 else '') + falls(run, x, stage.unit) for x in seeds)}; "
            f"final val MSE {finals}; {analysed(folder, seeds, stage)}.")


def analysed(folder: Path, seeds: list[int], stage: Stage = STAGES["emergence"]) -> str:
    """What the piece's seeds hold beside their metrics: circuits and a timeline (or attention
    maps), naming the seeds that have one where some have not."""
    def held(kind, file):
        have = [s for s in seeds if (folder / kind / f"seed{s}" / file).is_file()]
        return None if not have else "" if have == seeds else f" for seed{'s' * (len(have) > 1)} {','.join(map(str, have))}"
    circuits, second = held("discovered", "circuit.json"), held(stage.second, stage.second_file)
    if circuits is None:
        return f"no circuits yet ({stage.without})"
    return (f"circuits (App. E's 0.05 on its last checkpoint){circuits}"
            + (f" and {stage.second_said}{second}" if second is not None else f"; no {stage.second_said.removeprefix('a ')}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("run", type=Path)
    ap.add_argument("--stage", choices=sorted(STAGES), default="emergence",
                    help="emergence: transformer D (Sec. 9); circuits: transformers A-C (Sec. 8)")
    ap.add_argument("--circuits", type=Path, nargs="+", help="folders of seed*/: each seed's from the first that holds it")
    ap.add_argument("--timeline", type=Path, nargs="+", help="likewise (gpu_runs.py writes one folder a seed); emergence only")
    ap.add_argument("--maps", type=Path, nargs="+", help="folders of seed*/ holding `attention` maps; circuits only")
    ap.add_argument("--commit", help="the commit RUN's code came from (default: this checkout's HEAD)")
    ap.add_argument("--note", default="", help="a further piece: what its sentence in the notes adds (how it ran)")
    ap.add_argument("--title", help="the first piece: the reference's title; a further piece keeps it unless given, so give it "
                    "where the seeds it names change (tests/test_references.py checks every title's seeds)")
    ap.add_argument("--train-command", help="the first piece: its train command without --seeds and --out")
    ap.add_argument("--notes", help="the first piece: the reference's notes")
    ap.add_argument("--results", type=Path, help="where NAME goes (default: results/sec9 for emergence, results/sec8 for circuits)")
    a = ap.parse_args()
    try:
        publish_piece(a)
    except UsageError as e:  # bad input: one line, exit 2, results/ untouched
        print(f"publish_piece: {e}", file=sys.stderr)
        sys.exit(2)


def publish_piece(a) -> None:
    kind = a.stage
    st = STAGES[kind]
    extra = {"timeline": a.timeline, "maps": a.maps}
    if wrong := next((k for k, v in extra.items() if v and k != st.second), None):
        raise UsageError(f"--{wrong} belongs to the {next(n for n, x in STAGES.items() if x.second == wrong)} stage, not {kind}")
    run = a.run
    dest = (a.results or ROOT / st.results) / a.name
    if not (run / "summary.json").is_file():
        raise UsageError(f"{run} has no summary.json: not a finished training run")
    if re.search(r"\bSeeds? \d|partial losses below|final val MSE", a.note):
        # the piece's sentence already says these from its files: a note repeating them read twice
        raise UsageError("--note says how the piece ran; its seeds, partial losses and final loss are written from RUN")
    seeds = seeds_of(run)
    commit = a.commit or git_commit()
    ref = json.loads((dest / "reference.json").read_text()) if (dest / "reference.json").exists() else None
    if ref is None and not (a.title and a.train_command and a.notes):
        raise UsageError(f"{dest} is not published yet: its first piece needs --title, --train-command and --notes")
    if ref is not None and not (dest / kind).is_dir():
        raise UsageError(f"{dest} holds no {kind} stage: a piece of another section's result")
    with tempfile.TemporaryDirectory(prefix=f"piece-{a.name}-") as tmp:
        stage = Path(tmp) / a.name
        folder = stage / kind
        if ref is not None:
            shutil.copytree(dest / kind, folder)
        runs = folder / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        held = {p.name: seeds_of(p) for p in sorted(runs.iterdir())}
        same = [n for n, s in held.items() if s == seeds]
        clash = [n for n, s in held.items() if set(s) & set(seeds) and s != seeds]
        if clash:
            raise UsageError(f"{dest}/{kind}/runs/{clash[0]} holds some of seeds {seeds}, not exactly them")
        piece = same[0] if same else st.run if not held else f"{st.run}-s{'-'.join(map(str, seeds))}"
        shutil.rmtree(runs / piece, ignore_errors=True)
        (runs / piece).mkdir()
        for f in RUN_FILES:
            shutil.copy(run / f, runs / piece / f)
        for sub, srcs in (("discovered", a.circuits), (st.second, extra[st.second])):
            for s in seeds:
                shutil.rmtree(folder / sub / f"seed{s}", ignore_errors=True)
                if src := next((d for d in srcs or () if (d / f"seed{s}").is_dir()), None):
                    shutil.copytree(src / f"seed{s}", folder / sub / f"seed{s}", ignore=shutil.ignore_patterns(".lock"))
        if kind == "emergence" and any((folder / "timeline").glob("seed*/timeline.json")):
            cfg = TrainConfig.from_dict(json.loads((run / "config.json").read_text()))
            atomic_write_json(folder / "timeline" / "summary.json", timeline_summary(folder / "timeline", cfg, run))
        sh("claims", str(stage), "--json", out=stage / "claims.json")
        sh("seeds", str(stage), "--markdown", "--label", a.name, out=stage / "seeds.md")

        pieces = sorted(runs.iterdir(), key=lambda p: (p.name != st.run, seeds_of(p)))
        if ref is None:
            base = (f"{a.train_command} --seeds {','.join(map(str, seeds))} --out RUN; "
                    + st.analysis.format(stage=kind, run=st.run, name=a.name))
            notes, first_commit = a.notes, commit
        else:
            base, first_commit = ref["command"].split("; seed ")[0], ref["commit"]
            notes = ref["notes"]
            if piece != st.run:  # a further piece: its sentence replaces one written before
                notes = re.sub(rf" Seeds? {','.join(map(str, seeds))}: .*?(?= Seeds? \d[\d,]*: |$)", "", notes).strip()
                notes += piece_note(run, seeds, commit, first_commit, a.note, folder, st)
        command = base + "".join(
            f"; seed {','.join(map(str, seeds_of(p)))}: the same with --seeds {','.join(map(str, seeds_of(p)))} "
            f"(config.json, summary.json, metrics.csv, segments.jsonl to R/{kind}/runs/{p.name})" for p in pieces[1:])
        wall = sum(json.loads((p / "summary.json").read_text())["wall_s"] for p in pieces)
        include = [x for g in st.include for x in ("--include", f"{kind}/{g}") if any(folder.glob(g))]
        sh("publish", str(stage), "--name", a.name, "--results", str(dest.parent), "--title", a.title or ref["title"],
           "--command", command, "--commit", first_commit, "--wall-s", f"{wall:.3f}", "--notes", notes, *include)
    print(f"{dest}: pieces {', '.join(p.name for p in pieces)}; wall {wall:.0f} s")
    print((dest / "seeds.md").read_text()[:2000])


if __name__ == "__main__":
    main()
