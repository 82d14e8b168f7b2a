"""Where things lie in a ``reproduce`` folder: the names every stage writes and every reader
(claims, report) looks for. One place, so that writers and readers never import each other; :func:`stage_done` is the one reader
of a stage's done marker.

    DIR/config.json, DIR/summary.json
    DIR/<stage>/done.json                       a stage is finished (its summary, wall time, files)
    DIR/theory/theory.jsonl                     Sec. 5
    DIR/prompts/<formulation>.jsonl             Sec. 3-4
    DIR/llm/[<model>/]results.json, comparison.json, figure2*.png    Sec. 4
    DIR/figure4/{sweep.json, runs/<job>/, summary.csv, claims.json, figure4.png}   Sec. 7 (runs/<job>: any sweep)
    DIR/circuits/{runs/transformers-A-C/, maps/seed*/, discovered/seed*/}          Sec. 8
    DIR/emergence/{runs/transformer-D/, discovered/seed*/, timeline/seed*/}        Sec. 9
    DIR/report/{index.html, claims.json, img/}
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.write import DONE, RunFolder

STAGE_NAMES = ("theory", "prompts", "llm", "figure4", "circuits", "emergence")
CIRCUITS_RUN = "transformers-A-C"  # Sec. 8: transformers A, B and C (one ensemble member each)
EMERGENCE_RUN = "transformer-D"  # Sec. 9


def training_run(folder: Path, name: str) -> Path:
    """The run folder of a training job inside a sweep's or a stage's folder (``<folder>/runs/<name>``)."""
    return Path(folder) / "runs" / name


def maps(stage_folder: Path) -> Path:
    return Path(stage_folder) / "maps"


def discovered(stage_folder: Path) -> Path:
    return Path(stage_folder) / "discovered"


def timeline(stage_folder: Path) -> Path:
    return Path(stage_folder) / "timeline"


def stage_done(stage: RunFolder, name: str, note: bool = True) -> dict | None:
    """A stage's summary if it finished and every file it wrote is still there and parses;
    None when it must run (again: it resumes and rebuilds what is missing). The one reader of a
    stage's done.json, for ``reproduce``, ``report`` and ``claims`` (``note``: say on stderr
    that a stage will run again)."""
    saved = stage.done(f"the {name} stage's summary")
    wall = saved.get("wall_s") if saved is not None else 0.0
    # Written last: its absence means damage; a NaN or a negative time is damage too.
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall) or wall < 0:
        raise UsageError(f"{stage.path / DONE} is damaged (no wall_s of seconds): delete it to run the {name} stage again (it resumes)")
    if stage.missing is not None and note:
        print(f"stackedheads: note: {stage.missing} is missing or damaged: running the {name} stage again to rebuild it",
              file=sys.stderr)
    return saved
