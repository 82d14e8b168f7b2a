"""Where things lie in a ``reproduce`` folder: the names every stage writes and every reader
(claims, report) looks for. One place, so that writers and readers never import each other.

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

from pathlib import Path

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
