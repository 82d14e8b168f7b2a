"""Sections 8 and 9 seed by seed, and several runs side by side (``stackedheads seeds``).

One module a job: :mod:`.rows` reads a run's seeds from its files, :mod:`.distance` measures a
seed and a run against Sec. 9's curriculum, :mod:`.screen` applies the recipe screen's rule,
:mod:`.compare` sets runs side by side, :mod:`.render` writes the tables (console and Markdown).

``claims`` gives one verdict per claim, combined over a run's seeds (any FAIL fails); this
module keeps the seeds apart: per seed, what the model reached and each claim's own verdict,
then the distribution over seeds beside the paper's numbers, and, for runs of one section
trained with different recipes, which run is closer to the paper on each measure.

Every number is read from the files a run left (the training summary, each seed's discovered
circuit, the emergence timelines), as the claims read them: a per-seed verdict is the section's
own claim evaluated on that seed alone (:func:`stackedheads.claims.sec8.circuit_claims`,
:func:`stackedheads.claims.sec9.emergence_claims`), so the table and ``claims`` never disagree.

The paper's numbers beside ours: transformers A-C reach a validation MSE below 0.01 and use
4 of 12 heads (Sec. 8.2); transformer D reaches 0.031 after about 450 epochs on the plateau
before its first head emerges, in chain order (Sec. 9.2, Fig. 6-7).

A run whose circuits were not discovered (a recipe screen's run) still has its
seeds: the final losses and each partial loss's fall below C2's threshold, from metrics.csv. A
stage trained in pieces is one run (:mod:`stackedheads.state.pieces`); a piece still training is
named, not counted.

The distance to Sec. 9's curriculum (:func:`.distance.distance`), per seed::

    |ln(x1's fall / 450 epochs)| + |ln(final val MSE / 0.031)| + (0 if its losses fall in order, else 1)

and a run's distance is the median over its seeds, shown with their range (a run whose seeds
end far apart shows as that, not as the median of mixed outcomes). The plateau term is x1's fall
below C2's threshold for every run, circuits or not, so runs compare like for like; a seed whose
x1 never fell counts at the run's length (a lower bound, shown as ">="). "In order" is x1..xD
falling at strictly increasing evaluations (one at a time, in chain order). 0 is the paper; a
factor of e off in plateau or loss adds 1, losses out of order add 1. Beside x1's fall the tables
give x1's time to 0.8 (the first evaluation its partial loss is below 0.8: onto the 1 - 1/N
plateau), so a recipe that only slows everything shows as that.
"""

from stackedheads.recipe_screen.compare import compare
from stackedheads.recipe_screen.distance import PAPER, X1_PLATEAU_LOSS, distance, in_order, seed_distance, toward, x1_fall
from stackedheads.recipe_screen.render import (
    comparison_lines,
    distance_table,
    distance_text,
    distribution_lines,
    markdown,
    seed_table,
    seed_tables,
)
from stackedheads.recipe_screen.rows import (
    RECIPE_KEYS,
    SECTION_OF,
    RunSeeds,
    SeedRow,
    collect_seeds,
    folder_seeds,
    recipe_of,
    recipe_text,
    section_seeds,
    spread,
)
from stackedheads.recipe_screen.rule import (
    MOVED_SEEDS,
    SCREEN_SEEDS,
    WITHIN,
    closest_line,
    screen,
    screen_table,
    screen_title,
    screened_name,
)

__all__ = [
    "MOVED_SEEDS", "PAPER", "RECIPE_KEYS", "SCREEN_SEEDS", "SECTION_OF", "WITHIN", "X1_PLATEAU_LOSS", "RunSeeds", "SeedRow",
    "closest_line", "collect_seeds", "compare", "comparison_lines", "distance", "distance_table", "distance_text",
    "distribution_lines", "folder_seeds", "in_order", "markdown", "recipe_of", "recipe_text", "screen", "screen_table",
    "screen_title", "screened_name", "section_seeds", "seed_distance", "seed_table", "seed_tables", "spread", "toward",
    "x1_fall",
]
