"""A run's seeds read from its files: what each seed reached and each claim's verdict on it alone,
and their distribution over seeds (:class:`RunSeeds`)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stackedheads.claims import DEPENDS, NOT_RUN, VERDICTS
from stackedheads.errors import UsageError
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN, timeline
from stackedheads.emergence.ordering import end_of_plateau, order_of
from stackedheads.state.pieces import unfinished
from stackedheads.recipe_screen.distance import X1_PLATEAU_LOSS, distance
from stackedheads.claims.stage_files import (
    finished_metrics,
    heads_in,
    loss_drops,
    position_times,
    read_timeline,
    relabelled_timeline,
    stage_from_files,
    times_order,
    training_summary,
)

SECTION_OF = {"circuits": "sec8", "emergence": "sec9"}


@dataclass
class SeedRow:
    """One seed of one run: what it reached and each claim's verdict on it alone."""

    seed: str
    final_val_loss: float | None  # None: the run's training summary is lost
    final_partial: dict[str, float]
    useful_heads: int | None = None  # None: no circuit discovered for this seed
    n_heads: int | None = None
    unexplained_rows: int | None = None
    shortcut_heads: int | None = None
    loss_drops: dict[str, int | None] | None = None  # Sec. 9: first step each partial is below C2's threshold
    plateau_epochs: float | None = None  # Sec. 9: epochs before the first path serving a position crosses 0.5
    plateau_from: str | None = None  # "path" (a timeline's first serving path) or "x1" (x1's loss falls below C2's threshold)
    drop_epochs: dict[str, float | None] | None = None  # loss_drops on the epoch axis
    x1_below_08_epochs: float | None = None  # Sec. 9: first evaluated epoch x1's partial loss is below 0.8
    run_epochs: float | None = None  # the run's length in epochs (where a never-fallen x1 is censored)
    train_val_gap: float | None = None  # val minus the training batches' loss (before each update) over the final window
    first_paths: list[str] = field(default_factory=list)
    loss_drop_order: str | None = None  # ordering.order_of over loss_drops (E4)
    emerged_at: dict[str, int | None] | None = None  # Sec. 9: the step each position's first new path crosses 0.5 (E3's primary reading)
    no_path_of_its_own: list[str] = field(default_factory=list)  # positions E3 cannot time
    emergence_order: str | None = None  # the timeline's order of the positions (E3)
    verdicts: dict[str, str] = field(default_factory=dict)  # claim id -> verdict on this seed
    measured: dict[str, str] = field(default_factory=dict)  # claim id -> what it measured


@dataclass
class RunSeeds:
    """A run's seeds for one section, and how it was trained (what differs between recipes)."""

    label: str
    folder: str
    section: str  # "sec8" or "sec9"
    recipe: dict
    rows: list[SeedRow]
    unfinished: list[str] = field(default_factory=list)  # pieces still training: not counted

    def summary(self) -> dict:
        """The distribution over seeds: the median, the range, and each claim's verdict counts."""
        finals = [r.final_val_loss for r in self.rows if r.final_val_loss is not None]
        out = {"seeds": len(self.rows), "final_val_loss": spread(finals)}
        if self.section == "sec9":
            out["timelines"] = sum(r.emerged_at is not None for r in self.rows)
            out["loss_drop_seeds"] = sum(r.loss_drops is not None for r in self.rows)
            out["plateau_epochs"] = spread([r.plateau_epochs for r in self.rows if r.plateau_epochs is not None])
            out["plateau_from"] = sorted({r.plateau_from for r in self.rows if r.plateau_from})
            # x1's fall, a never-fallen seed at the run's length: the distance's plateau term
            falls = [(r.drop_epochs["x1"], False) if r.drop_epochs["x1"] is not None else (r.run_epochs, True)
                     for r in self.rows if r.drop_epochs and r.run_epochs is not None]
            out["x1_fall_epochs"] = spread([v for v, _ in falls])
            if out["x1_fall_epochs"]:
                out["x1_fall_epochs"]["censored"] = sum(c for _, c in falls)
            out["x1_below_08_epochs"] = spread([r.x1_below_08_epochs for r in self.rows if r.x1_below_08_epochs is not None])
            out["unfinished_pieces"] = list(self.unfinished)
            out["train_val_gap"] = spread([r.train_val_gap for r in self.rows if r.train_val_gap is not None])
            # In order means every position did it, at strictly increasing steps (E3's and E4's shape).
            out["loss_drops_in_order"] = sum(r.loss_drop_order == "in order" and None not in r.loss_drops.values()
                                             for r in self.rows if r.loss_drops)
            out["emerged_in_order"] = sum(r.emergence_order == "in order" and None not in r.emerged_at.values()
                                          for r in self.rows if r.emerged_at)
        if self.section == "sec9":
            out["distance"] = distance(self.rows)
        useful = [r.useful_heads for r in self.rows if r.useful_heads is not None]
        out["useful_heads"] = spread(useful)
        ids = sorted({k for r in self.rows for k in r.verdicts})
        out["verdicts"] = {k: {v: n for v in (*VERDICTS, DEPENDS) if (n := sum(r.verdicts.get(k) == v for r in self.rows))}
                           for k in ids}
        return out

    def to_dict(self) -> dict:
        return {"label": self.label, "folder": self.folder, "section": self.section, "recipe": self.recipe,
                "seeds": [asdict(r) for r in self.rows], "summary": self.summary()}


def spread(values: list[float]) -> dict | None:
    """Median, min and max (None when there is nothing to summarise)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def recipe_text(recipe: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in recipe.items()) or "recipe unknown (no training summary)"


RECIPE_KEYS = ("steps", "batch_size", "lr", "warmup_steps", "schedule", "min_lr_ratio", "grad_clip",
               "weight_decay", "decay_exempt", "dtype", "device", "n_train", "pe", "in_init", "resid_scale", "pos_embed",
               "weight_init")


def recipe_of(config: dict, devices: list[str] | None = None) -> dict:
    """What tells recipes apart, from a run's config (as its summary.json holds it; the
    optimiser's, task's and model's settings under their parts, or at the top level in configs
    written before them). A choice left at None (its first, "as before") is not shown. ``devices``:
    every piece's device, for a result trained in pieces (:func:`stackedheads.state.pieces.combine`)."""
    parts = [config.get(p, {}) for p in ("optim", "task", "model")] + [config]
    recipe = {k: v for k in RECIPE_KEYS if (v := next((p[k] for p in parts if k in p), None)) is not None}
    if devices:
        recipe["device"] = "+".join(devices)
    return recipe


def _one_seed(stage: dict, seed: str) -> dict:
    return {**stage, "circuits": {seed: stage["circuits"][seed]} if seed in stage["circuits"] else {}}


def _from_metrics(row: SeedRow, rows: list[dict], config: dict) -> None:
    """What metrics.csv says of one seed: each partial's fall below C2's threshold, the gap
    between validation and training loss over the final window, and (for a run without an
    emergence timeline) the plateau up to x1's fall."""
    mine = [r for r in rows if str(r["seed"]) == row.seed]
    if not mine:
        return
    if row.loss_drops is None and (drops := loss_drops(mine, row.seed, config["task"])) is not None:
        row.loss_drops, row.loss_drop_order = drops, order_of(list(drops.values()))
    from stackedheads.training.config import TrainConfig

    cfg = TrainConfig.from_dict(config)
    last = max(r["step"] for r in mine)
    below = [r["step"] for r in sorted(mine, key=lambda r: r["step"]) if r.get("val_x1") is not None
             and r["val_x1"] < X1_PLATEAU_LOSS]
    if below and config.get("task", {}).get("ic", True):
        row.x1_below_08_epochs = cfg.epoch(below[0])
    if row.loss_drops is not None:
        row.drop_epochs = {k: None if v is None else cfg.epoch(v) for k, v in row.loss_drops.items()}
        row.run_epochs = cfg.epoch(last)
        if row.plateau_epochs is None and row.plateau_from is None and row.drop_epochs.get("x1") is not None:
            row.plateau_epochs, row.plateau_from = row.drop_epochs["x1"], "x1"
    window = [r for r in mine if r["step"] > last - int(config.get("final_window", 100))]
    if window:
        row.train_val_gap = sum(r["val_loss"] - r["train_loss"] for r in window) / len(window)


def section_seeds(folder: Path, stage_name: str, label: str) -> RunSeeds | None:
    """The seeds of one stage (``circuits`` or ``emergence``) of a reproduce-style folder, or
    None when the stage has neither discovered circuits nor a finished training run (a run
    without circuits gives what its training left: losses, their falls, the plateau up to x1's)."""
    from stackedheads.claims import sec8, sec9

    stage_dir = folder / stage_name
    run_name = CIRCUITS_RUN if stage_name == "circuits" else EMERGENCE_RUN
    stage = stage_from_files(stage_dir, run_name)
    if stage is None:
        train = training_summary(stage_dir, run_name)
        if train is None:
            return None
        stage = {"train": train, "circuits": {}}
    elif not stage["circuits"]:  # stage_from_files keeps only the seeds the run trained
        raise UsageError(f"{stage_dir}: its discovered circuits are for seeds its training run did not train "
                         "(circuits of another run?)")
    # A reference whose training summary is lost still has its circuits: their seeds, no final losses.
    train = stage["train"] or {"config": {}, "seeds": {s: {} for s in stage["circuits"]}}
    section = SECTION_OF[stage_name]
    tl_dir = timeline(stage_dir)
    metrics = finished_metrics(stage_dir, run_name) if stage["train"] else []
    rows = []
    for seed in sorted(train["seeds"], key=int):
        final = train["seeds"][seed]
        row = SeedRow(seed, final.get("final_val_loss"), dict(final.get("final_partial", {})))
        found = stage["circuits"].get(seed)
        if found is not None:
            row.useful_heads = found["n_useful_heads"]
            row.n_heads = heads_in(train["config"]) if stage["train"] else None
            # As the discovery's ablations decide them (A2, A5): labels describe rows, they do not count them.
            row.unexplained_rows = len(found["unexplained_heads"])
            row.shortcut_heads = len(found.get("shortcut_heads", []))
        if section == "sec8":
            claims = [] if found is None else sec8.circuit_claims(_one_seed(stage, seed))
        else:  # E4 needs no circuit: a seed without one is judged from its metrics
            ic = stage["train"] and train["config"]["task"].get("ic", True)
            claims = sec9.emergence_claims(_one_seed(stage, seed), tl_dir,
                                           {seed: loss_drops(metrics, seed, train["config"]["task"])} if ic else None)
            claims = claims if found is not None else [c for c in claims if c.id == "E4" and c.verdict != NOT_RUN]
        for c in claims:
            row.verdicts[c.id] = c.verdict
            row.measured[c.id] = c.measured.removeprefix(f"seed {seed}: ")
        if section == "sec9" and found is not None and (tl_dir / f"seed{seed}" / "timeline.json").exists():
            t = read_timeline(tl_dir / f"seed{seed}" / "timeline.json", stage_dir)
            row.loss_drops, row.loss_drop_order = t["loss_drops"], t["loss_drop_order"]
            per = t["epochs"][-1] / t["steps"][-1] if t["steps"][-1] else 0.0
            plateau, row.first_paths, _ = end_of_plateau(t)
            row.plateau_epochs = None if plateau is None else plateau * per
            row.plateau_from = "path"
            # E3's primary reading: each position at its first new path's interpolated crossing
            times = position_times(relabelled_timeline(t, found), "first-path", found)
            row.emerged_at = {x: None if w is None else round(w) for x, (w, _, _) in times.items()}
            row.no_path_of_its_own = [x for x, (_, paths, _) in times.items() if not paths]
            row.emergence_order = times_order(times)
        if section == "sec9" and stage["train"]:
            _from_metrics(row, metrics, train["config"])
        rows.append(row)
    return RunSeeds(label, str(folder), section, recipe_of(train["config"], train.get("devices")), rows,
                    [d.name for d in unfinished(stage_dir, run_name)])


def folder_seeds(folder: Path, label: str) -> list[RunSeeds]:
    """The sections of one folder that have discovered circuits or a finished training run ([] when none has)."""
    return [s for name in SECTION_OF if (s := section_seeds(Path(folder), name, label))]


def collect_seeds(folders: list[Path], labels: list[str] | None = None) -> list[RunSeeds]:
    """Every section with circuits in every folder (a reproduce folder, or stage folders laid
    out by hand: ``circuits/`` and ``emergence/`` as :mod:`stackedheads.state.layout` names them)."""
    labels = list(labels or [])
    if labels and len(labels) != len(folders):
        raise UsageError(f"{len(labels)} labels for {len(folders)} folders: give one --label per folder, or none")
    out = []
    for i, folder in enumerate(folders):
        folder = Path(folder)
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a folder")
        found = folder_seeds(folder, labels[i] if labels else folder.name)
        if not found:
            raise UsageError(f"{folder} has neither discovered circuits nor a finished training run under "
                             "circuits/ or emergence/ (lay a run out as emergence/runs/transformer-D, or run "
                             "`stackedheads circuit discover` on it)")
        out.extend(found)
    return out
