"""``publish-piece``: one piece of a result trained a seed or a few at a time, published beside the
pieces published before it (the first piece starts the result).

A piece is a finished ``train --preset sec9 ...`` run (the ``emergence`` stage, transformer D) or
``train --preset sec8 ...`` run (``circuits``, transformers A-C) holding one or more seeds, with
its circuits (``circuit discover``) and its timeline (``emergence``, Sec. 9) or attention maps
(``attention``, Sec. 8), each given as folders of ``seed<S>/`` (a seed's taken from the first that
holds it). The result is staged from what RESULTS/NAME holds plus the piece, so publishing the same
piece again writes the same reference: the command, the wall time (the pieces' training summed)
and the timeline summary are recomputed from the staged pieces, never added to, and a piece holding
the same seeds is replaced. A further piece's notes get one sentence of what it measured
("Seed S: ...") beside ``note``, and a clause of the notes saying its seeds are "to come" goes;
the reference keeps the first piece's commit, and a piece from another commit names its own.
Pieces that are not one result are refused as ``claims`` refuses them
(:func:`stackedheads.state.pieces.read_result`).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stackedheads.state import pieces
from stackedheads.publishing import references
from stackedheads.publishing.publish import Reference, destination, publish
from stackedheads.errors import UsageError
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN
from stackedheads.state.write import (
    atomic_write_json,
    atomic_write_text,
    folder_kinds,
    read_state_json,
)

RUN_FILES = ("config.json", "summary.json", "metrics.csv")  # a finished training run's; segments.jsonl too where kept
SEGMENTS = "segments.jsonl"
_RUN_GLOBS = ("runs/*/*.json", "runs/*/*.jsonl", "runs/*/*.csv", "discovered/*/*.json", "discovered/*/*.png",
              "discovered/*/*.svg")
_DISCOVER = "stackedheads circuit discover RUN {discover} --out R/{stage}/discovered"
_TAIL = ("(RUN's config.json, summary.json, metrics.csv, segments.jsonl copied to R/{stage}/runs/{run}); "
         "stackedheads claims R --json > R/claims.json; stackedheads seeds R --markdown --label {label} > R/seeds.md")


@dataclass(frozen=True)
class Stage:
    """Where a piece of one section lies in its result, and what is analysed beside its metrics."""

    run: str  # runs/<run> for the first piece, runs/<run>-s<seeds> for the others
    second: str  # the analysis beside the circuits: Sec. 9's timeline, Sec. 8's attention maps
    second_file: str  # the file in <second>/seed<S> that says a seed has it
    second_said: str  # how a piece's sentence names it ("a timeline")
    include: tuple[str, ...]
    analysis: str  # how R/<stage> was made from RUN, after the train command
    unit: str  # how partial losses' falls are told: Sec. 9 counts epochs, Sec. 8 steps
    without: str  # what judges a seed without circuits


STAGES = {
    "emergence": Stage(
        EMERGENCE_RUN, "timeline", "timeline.json", "a timeline",
        (*_RUN_GLOBS, "timeline/*.json", "timeline/*/timeline.json",
         *(f"timeline/*/{f}.{x}" for f in ("losses", "emergence_summary") for x in ("png", "svg"))),
        _DISCOVER + "; stackedheads emergence RUN --circuits R/emergence/discovered --out R/emergence/timeline " + _TAIL,
        "epochs", "E4 from metrics.csv"),
    "circuits": Stage(
        CIRCUITS_RUN, "maps", "mean.png", "attention maps",
        (*_RUN_GLOBS, "maps/*/*.png", "maps/*/*.svg"),
        _DISCOVER + "; stackedheads attention RUN --seed S --out R/circuits/maps/seedS " + _TAIL,
        "steps", "its final loss only: A1-A5 judge a seed with circuits"),
}
# The stage a result's section holds (results/sec8/..., results/sec9/...).
SECTION_STAGE = {"sec8": "circuits", "sec9": "emergence"}


@dataclass(frozen=True)
class Piece:
    """What ``publish-piece`` is asked: the piece, where it goes and what the reference says."""

    name: str  # under the results folder: "sec9/tl-stack"
    run: Path
    stage: str | None = None  # None: the section's (SECTION_STAGE by NAME's first folder)
    circuits: tuple[Path, ...] = ()
    timeline: tuple[Path, ...] = ()
    maps: tuple[Path, ...] = ()
    commit: str | None = None  # None: this checkout's HEAD
    note: str = ""
    title: str | None = None
    train_command: str | None = None
    notes: str | None = None
    results: Path | None = None  # None: the repository's results/


def _no_links(path: Path) -> None:
    """One line when ``path`` or anything under it is a symbolic link: a copy would take in the
    file it points to, from anywhere on the machine."""
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else ())]:
        if p.is_symlink():
            raise UsageError(f"{p} is a symbolic link: a piece publishes its own files only")


def _seeds(run: Path) -> list[int]:
    config = read_state_json(run / "config.json", "a training run's config")
    seeds = config.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise UsageError(f"{run / 'config.json'}: 'seeds' must be a non-empty list of whole numbers >= 0, got {str(seeds)[:60]}")
    return seeds


def _wall(run: Path) -> float:
    wall = read_state_json(run / "summary.json", "a training summary").get("wall_s")
    if not isinstance(wall, (int, float)) or isinstance(wall, bool) or not math.isfinite(wall) or wall < 0:
        raise UsageError(f"{run / 'summary.json'} has no wall time ('wall_s' {str(wall)[:30]}): not a finished training run")
    return float(wall)


def check_run(run: Path) -> list[int]:
    """A finished training run's seeds, or one line saying what ``run`` is missing or is instead."""
    if not run.is_dir():
        raise UsageError(f"{run} is not a folder")
    _no_links(run)
    kinds = folder_kinds(run)
    if kinds and "training run" not in kinds:
        raise UsageError(f"{run} is a {', '.join(sorted(kinds))} folder, not a training run: give a `train` run folder")
    for f in RUN_FILES:
        if not (run / f).is_file():
            raise UsageError(f"{run} has no {f}: not a finished training run")
    seeds = _seeds(run)
    _wall(run)
    return seeds


def falls(run: Path, seed: int, unit: str = "epochs") -> str:
    """The epochs (or steps) at which each partial loss first falls below C2's threshold
    (metrics.csv, as the claims read them)."""
    from stackedheads.claims.stage_files import loss_drops
    from stackedheads.training.config import TrainConfig
    from stackedheads.training.metrics import read_metrics

    config = read_state_json(run / "config.json", "a training run's config")
    drops = loss_drops(read_metrics(run), str(seed), config["task"]) or {}
    per = TrainConfig.from_dict(config).epoch(1.0) if unit == "epochs" else 1
    return ", ".join(f"{x} " + ("never" if step is None else f"{round(step * per):,}") for x, step in drops.items())


def piece_note(run: Path, seeds: list[int], commit: str, first_commit: str, note: str, folder: Path,
               stage: Stage) -> str:
    s = read_state_json(run / "summary.json", "a training summary")
    label = "Seed" if len(seeds) == 1 else "Seeds"
    finals = ", ".join(f"{s['seeds'][str(x)]['final_val_loss']:.4f}" for x in seeds)
    where = "" if commit == first_commit else f", from a clone of {commit[:7]}"
    return (f" {label} {','.join(map(str, seeds))}: the same command with --seeds {','.join(map(str, seeds))}{where}, "
            f"{_wall(run):.0f} s of training{', ' + note if note else ''}; partial losses below 0.5 at {stage.unit}: "
            f"{'; '.join(('seed %d: ' % x if len(seeds) > 1 else '') + falls(run, x, stage.unit) for x in seeds)}; "
            f"final val MSE {finals}; {analysed(folder, seeds, stage)}.")


# A clause saying seeds are to come: after "; " or ", ", or opening a sentence, up to the next
# ";" or sentence end (a dot inside a number or an abbreviation does not end it).
_TO_COME = re.compile(r"(?P<lead>[;,] |(?<=\. )|^)[Ss]eeds? (?P<seeds>\d[\d, and-]*?) (?:are |is )?to come\b"
                      r"(?:[^.;]|\.(?!\s|$))*(?P<end>\.\s*|;\s*|$)(?P<next>[a-z]?)")


def without_seeds_to_come(notes: str, published: set[int]) -> str:
    """``notes`` less each clause saying seeds are "to come" once every seed it names is
    published; a clause naming a seed still missing, or none, stays."""
    def ranges(m: re.Match) -> list[tuple[int, int]]:
        return [tuple(sorted((int(a), int(b or a)))) for a, b in re.findall(r"(\d+)(?:-(\d+))?", m.group("seeds"))]

    def all_published(spans: list[tuple[int, int]]) -> bool:
        # A range is published when each seed in it is: one wider than the published seeds
        # ("2-99999999999") is not, without counting through it.
        return bool(spans) and all(hi - lo < len(published) and all(x in published for x in range(lo, hi + 1))
                                   for lo, hi in spans)

    def drop(m: re.Match) -> str:
        if not all_published(ranges(m)):
            return m.group(0)
        # After "; " or ", " the sentence goes on, or ends, without the clause; a clause opening a
        # sentence goes with what ends it, and the clause after it opens the sentence.
        after = m.group("next")
        if m.group("lead"):
            return m.group("end") + after
        return after.upper() if m.group("end").startswith(";") else after

    return _TO_COME.sub(drop, notes).strip()


def check_recipe_names(run: Path, label: str, train_command: str | None) -> None:
    """Refuse a piece whose name (its last folder) or train command names a recipe its run was
    not trained with: ``seeds`` ranks a result by its name's recipe, so a run at lr 1e-3 named
    ``lr-3e-4`` would be ranked as lr 3e-4. The run's config.json is what it was trained with; a
    recipe agrees with it when applying the recipe's changes to it changes nothing. A name that
    is no recipe ("screen") says nothing of the settings."""
    from dataclasses import asdict

    from stackedheads import recipes
    from stackedheads.state.write import flat
    from stackedheads.training.config import TrainConfig

    named = []
    try:
        named.append((f"NAME's last folder {label!r}", recipes.canonical(label, note=None)))
    except UsageError:
        pass
    for given in re.findall(r"--recipe[= ](\S+)", train_command or ""):
        named.append((f"--train-command's --recipe {given!r}", recipes.canonical(given.strip("'\""), note=None)))
    if not named:
        return
    config = TrainConfig.from_dict(read_state_json(run / "config.json", "a training run's config"), run / "config.json")
    have = flat(json.loads(json.dumps(asdict(config))))
    for where, name in named:
        want = flat(json.loads(json.dumps(asdict(config.override(**recipes.recipe(name, note=None).changes)))))
        differ = [k for k in want if want[k] != have.get(k)]
        if differ:
            shown = "; ".join(f"{k}: {have.get(k)} in the run, {want[k]} in {name}" for k in differ[:3])
            raise UsageError(f"{where} names recipe {name}, which {run} was not trained with ({shown}): "
                             "name the piece by the recipe its run used")


def discovery(folder: Path) -> tuple[str, str]:
    """How the circuits under ``folder/discovered`` were found, read from their circuit.json
    (``info.config``): the option ``circuit discover`` was given, and how a sentence says it. A
    reference records what its files hold, never a default; circuits found under different
    settings are no one result."""
    found = set()
    for path in sorted((folder / "discovered").glob("seed*/circuit.json")):
        info = read_state_json(path, "a discovered circuit").get("info")
        config = info.get("config") if isinstance(info, dict) else None
        if not isinstance(config, dict):
            raise UsageError(f"{path} records no discovery settings (info.config): discover its circuits again")
        threshold, tolerance = config.get("threshold"), config.get("tolerance")
        found.add(("threshold", threshold) if threshold is not None else ("tolerance", tolerance))
    if len(found) > 1:
        raise UsageError(f"{folder / 'discovered'} holds circuits found under different settings "
                         f"({', '.join(f'--{k} {v}' for k, v in sorted(found, key=str))}): discover them under one")
    kind, value = next(iter(found), ("threshold", 0.05))
    if kind == "threshold":
        return f"--threshold {value:g}", ("App. E's 0.05" if value == 0.05 else f"an absolute threshold of {value:g}")
    return f"--tolerance {value:g}", f"a tolerance of {value:g} over the unablated loss"


def analysed(folder: Path, seeds: list[int], stage: Stage = STAGES["emergence"]) -> str:
    """What the piece's seeds hold beside their metrics: circuits and a timeline (or attention
    maps), naming the seeds that have one where some have not."""
    def held(kind, file):
        have = [s for s in seeds if (folder / kind / f"seed{s}" / file).is_file()]
        return None if not have else "" if have == seeds else f" for seed{'s' * (len(have) > 1)} {','.join(map(str, have))}"
    circuits, second = held("discovered", "circuit.json"), held(stage.second, stage.second_file)
    if circuits is None:
        return f"no circuits yet ({stage.without})"
    return (f"circuits ({discovery(folder)[1]} on its last checkpoint){circuits}"
            + (f" and {stage.second_said}{second}" if second is not None else f"; no {stage.second_said.removeprefix('a ')}"))


def _stage_of(a: Piece) -> str:
    if a.stage is not None:
        if a.stage not in STAGES:
            raise UsageError(f"--stage {a.stage!r}: one of {', '.join(STAGES)}")
        return a.stage
    section = a.name.split("/")[0]
    if section not in SECTION_STAGE:
        raise UsageError(f"NAME {a.name!r} is under no section's folder (sec8/..., sec9/...): give --stage")
    return SECTION_STAGE[section]


def publish_piece(a: Piece) -> tuple[Path, Reference]:
    """Publish the piece ``a``; return where and the reference written. Everything is checked
    before RESULTS/NAME changes; nothing is written on a refusal."""
    from stackedheads import claims
    from stackedheads import recipe_screen
    from stackedheads.emergence.timeline import timeline_summary
    from stackedheads.state.provenance import git_commit
    from stackedheads.training.config import TrainConfig

    kind = _stage_of(a)
    st = STAGES[kind]
    extra = {"timeline": a.timeline, "maps": a.maps}
    if wrong := next((k for k, v in extra.items() if v and k != st.second), None):
        raise UsageError(f"--{wrong} belongs to the {next(n for n, x in STAGES.items() if x.second == wrong)} stage, not {kind}")
    root = a.results or references.REPOSITORY_RESULTS
    dest = destination(root, a.name)
    run = a.run
    if re.search(r"\bSeeds? \d|partial losses below|final val MSE", a.note):
        # the piece's sentence already says these from its files: a note repeating them read twice
        raise UsageError("--note says how the piece ran; its seeds, partial losses and final loss are written from RUN")
    if re.search(r"\bclone of\b|\bcommit [0-9a-f]{7}", a.note):
        raise UsageError("--note says how the piece ran; the commit it ran from is --commit's, written where it differs")
    run_seeds = check_run(run)
    check_recipe_names(run, a.name.split("/")[-1], a.train_command)
    for d in (*a.circuits, *extra[st.second]):
        for s in run_seeds:
            _no_links(d / f"seed{s}")
    commit = a.commit or git_commit()
    ref = references.read_reference(dest) if (dest / references.REFERENCE_FILE).exists() else None
    if ref is None and not (a.title and a.train_command and a.notes):
        raise UsageError(f"{dest} is not published yet: its first piece needs --title, --train-command and --notes")
    if ref is not None and not (dest / kind).is_dir():
        raise UsageError(f"{dest} holds no {kind} stage: a piece of another section's result")
    label = a.name.split("/")[-1]
    with tempfile.TemporaryDirectory(prefix="piece-") as tmp:
        stage = Path(tmp) / label
        folder = stage / kind
        if ref is not None:
            shutil.copytree(dest / kind, folder, symlinks=True)
        runs = folder / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        held = {p.name: _seeds(p) for p in sorted(runs.iterdir())}
        same = [n for n, s in held.items() if s == run_seeds]
        clash = [n for n, s in held.items() if set(s) & set(run_seeds) and s != run_seeds]
        if clash:
            raise UsageError(f"{dest}/{kind}/runs/{clash[0]} holds some of seeds {run_seeds}, not exactly them")
        piece = same[0] if same else st.run if not held else f"{st.run}-s{'-'.join(map(str, run_seeds))}"
        shutil.rmtree(runs / piece, ignore_errors=True)
        (runs / piece).mkdir()
        for f in (*RUN_FILES, SEGMENTS):
            if (run / f).is_file():
                shutil.copyfile(run / f, runs / piece / f, follow_symlinks=False)
        for sub, srcs in (("discovered", a.circuits), (st.second, extra[st.second])):
            for s in run_seeds:
                shutil.rmtree(folder / sub / f"seed{s}", ignore_errors=True)
                if src := next((d for d in srcs or () if (d / f"seed{s}").is_dir()), None):
                    shutil.copytree(src / f"seed{s}", folder / sub / f"seed{s}", symlinks=True,
                                    ignore=shutil.ignore_patterns(".lock"))
        pieces.read_result(folder, st.run)  # pieces that are not one result: refused as claims refuses them
        if kind == "emergence" and any((folder / "timeline").glob("seed*/timeline.json")):
            cfg = TrainConfig.from_dict(read_state_json(run / "config.json", "a training run's config"))
            atomic_write_json(folder / "timeline" / "summary.json", timeline_summary(folder / "timeline", cfg, run))
        found = claims.folder_claims(stage)
        atomic_write_text(stage / "claims.json", json.dumps([c.to_dict() for c in found], indent=2) + "\n")
        atomic_write_text(stage / "seeds.md", recipe_screen.markdown(recipe_screen.collect_seeds([stage], [label])))

        ordered = sorted(runs.iterdir(), key=lambda p: (p.name != st.run, _seeds(p)))
        if ref is None:
            base = (f"{a.train_command} --seeds {','.join(map(str, run_seeds))} --out RUN; "
                    + st.analysis.format(stage=kind, run=st.run, label=label, discover=discovery(folder)[0]))
            notes, first_commit = a.notes, commit
        else:
            base, first_commit = str(ref.get("command", "")).split("; seed ")[0], str(ref.get("commit", ""))
            notes = str(ref.get("notes", ""))
            if piece != st.run:  # a further piece: its sentence replaces one written before
                notes = re.sub(rf" Seeds? {','.join(map(str, run_seeds))}: .*?(?= Seeds? \d[\d,]*: |$)", "", notes).strip()
                notes = without_seeds_to_come(notes, {x for p in ordered for x in _seeds(p)})
                notes += piece_note(run, run_seeds, commit, first_commit, a.note, folder, st)
        command = base + "".join(
            f"; seed {','.join(map(str, _seeds(p)))}: the same with --seeds {','.join(map(str, _seeds(p)))} "
            f"(config.json, summary.json, metrics.csv, segments.jsonl to R/{kind}/runs/{p.name})" for p in ordered[1:])
        wall = sum(_wall(p) for p in ordered)
        include = tuple(f"{kind}/{g}" for g in st.include if any(folder.glob(g)))
        written = publish(stage, dest, name=a.name, title=a.title or str(ref.get("title", "")), command=command,
                                     commit=first_commit, wall_s=round(wall, 3), notes=notes, include=include)
    return dest, written
