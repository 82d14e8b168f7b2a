"""Prompt formulations of the retrieval problem (Sec. 4, App. A), one module each.

Five built-ins, F1-F5 of Sec. 4: three retrieval formulations (``equations``, ``lives-with``,
``kingdoms``), where every fact links one entity to the next along a chain
``x_0 -> x_1 -> ... -> x_D`` (Sec. 3.1), and two conditional retrieval formulations
(``functions``, ``relatives``), where a step depends on several earlier facts, so the facts
form a DAG rather than a line (Sec. 3.1). The text follows App. A line for line: one fact per
line, then the question and the exact instruction sentence of the paper.

Every question is a pure function of its arguments: the random generator is seeded with a
string (``random.Random`` hashes strings with SHA-512, the same on every machine and every
run; ``hash()`` is salted per process and is never used).

How to add a formulation: write ONE new module in this package (any name without a leading
underscore; the registry imports it on first use) that builds a :class:`Formulation` and
registers it under its name. ``build(rng, depth, chains)`` returns a :class:`Draft`: the fact
lines, the question without the closing sentence, the correct answer and JSON-ready metadata,
using only ``rng`` for randomness. Everything else (validation, seeding, the CLI, the LLM
benchmark, exports, the report) finds it through :data:`FORMULATIONS`. Code outside the
package registers the same way before use (importing from the package; a module inside it
imports from ``_base``, so that the package and its modules never import each other: the
import-cycle test checks it). A minimal example (``pets.py``)::

    from stackedheads.tasks.formulations._base import FORMULATIONS, Formulation
    from stackedheads.tasks.formulations._common import PERSONS, chain_draft

    _PETS = ("cat", "dog", "parrot", "hamster", "rabbit", "turtle")

    def _line(step: int, old: str, new: str) -> str:
        return f"{new} has a {old}." if step == 1 else f"{new} has the same pet as {old}."

    def _build(rng, depth, chains):
        levels = [list(_PETS[:chains])]
        levels += [list(PERSONS[k * chains:(k + 1) * chains]) for k in range(depth)]
        return chain_draft(rng, levels, _line, lambda person: f"Which pet does {person} have?")

    PETS = Formulation(
        name="pets", conditional=False, default_depth=3, max_chains=len(_PETS),
        close="Say directly only the animal, without any other words.",
        build=_build, acceptable=lambda chains: sorted(_PETS[:chains]),
        depth_limit=lambda chains: len(PERSONS) // chains,
    )
    FORMULATIONS.register(PETS.name, PETS)

See docs/extending.md ("Adding a formulation") for how to test it.
"""

from __future__ import annotations

from stackedheads.tasks.formulations._base import (  # noqa: F401
    FORMULATIONS,
    MAX_QUESTIONS,
    Draft,
    Formulation,
    Question,
)

# The built-ins, imported here in the paper's order F1-F5 (Sec. 4) so that the registry, and
# every table and figure, lists them so; the registry finds any other module by itself.
# isort: off
from stackedheads.tasks.formulations import equations, lives_with, kingdoms, functions, relatives  # noqa: F401
# isort: on
