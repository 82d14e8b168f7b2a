"""F3, kingdoms (App. A.3): person -lives in-> kingdom -believe in-> religion -eat-> food
-contains-> element -causes-> disease; "Who has Chronogy?"."""

from __future__ import annotations

import random

from stackedheads.tasks.formulations._base import FORMULATIONS, Draft, Formulation
from stackedheads.tasks.formulations._common import PERSONS, chain_draft

# Pools with explicit inflected forms (App. A.3 uses the first four of each).
_KINGDOMS: tuple[tuple[str, str], ...] = (  # (kingdom, demonym plural)
    ("Silvania", "Silvanians"), ("Novaria", "Novarians"), ("Aurora", "Aurorans"),
    ("Florinia", "Florinians"), ("Valdoria", "Valdorians"), ("Eldoria", "Eldorians"),
    ("Mirandia", "Mirandians"), ("Drakonia", "Drakonians"), ("Solmaria", "Solmarians"),
    ("Cendoria", "Cendorians"),
)
_RELIGIONS: tuple[tuple[str, str], ...] = (  # (religion, adherents plural)
    ("celestianism", "Celestianists"), ("harmonianism", "Harmonianists"),
    ("elysianism", "Elysianists"), ("luminism", "Luminists"), ("solarism", "Solarists"),
    ("veritism", "Veritists"), ("orbism", "Orbists"), ("serenism", "Serenists"),
    ("mystarism", "Mystarists"), ("zenithism", "Zenithists"),
)
_FOODS: tuple[str, ...] = (
    "beef", "pork", "lamb", "chicken", "salmon", "rice", "bread", "cheese", "tofu", "corn",
)
_ELEMENTS: tuple[str, ...] = (
    "Astralyte", "Nephryon", "Zephyrium", "Virellium", "Quorvium", "Lumidite", "Cryonite",
    "Solvex", "Mythrium", "Obsidane",
)
_DISEASES: tuple[str, ...] = (
    "Chronogy", "Aetherflux", "Somnosis", "Synthemia", "Nebulitis", "Vexalgia", "Mornacy",
    "Glaucora", "Pyrelia", "Dravosis",
)
_LEVELS: tuple[tuple[str, ...], ...] = (
    PERSONS,
    tuple(k for k, _ in _KINGDOMS),
    tuple(r for r, _ in _RELIGIONS),
    _FOODS,
    _ELEMENTS,
    _DISEASES,
)
# Question for each depth: the paper prints only D = 5 ("Who has Chronogy?"); the verbs for
# D = 1..4 are our extension, one natural question per relation.
_QUESTION_VERB: tuple[str, ...] = ("lives in", "believes in", "eats", "consumes", "has")

_DEMONYM = dict(_KINGDOMS)
_ADHERENTS = dict(_RELIGIONS)


def _line(step: int, old: str, new: str) -> str:
    # App. A.3 sentence per relation; the fact of step k links level k-1 to level k.
    if step == 1:
        return f"{old} lives in {new}."
    if step == 2:
        return f"{_DEMONYM[old]} believe in {new}."
    if step == 3:
        return f"{_ADHERENTS[old]} eat {new}."
    if step == 4:
        return f"{old[0].upper()}{old[1:]} contains {new}."  # food opens the sentence
    return f"{old} causes {new}."


def _build(rng: random.Random, depth: int, n: int) -> Draft:
    """App. A.3: depth D keeps the first D relations and asks for the person given the
    level-D entity. Only D = 5 ("Who has Chronogy?") is printed in the paper; the questions
    for D = 1..4 ("Who lives in Novaria?", "Who believes in harmonianism?", "Who eats lamb?",
    "Who consumes Zephyrium?") are our extension."""
    levels = [list(pool[:n]) for pool in _LEVELS[: depth + 1]]
    verb = _QUESTION_VERB[depth - 1]
    return chain_draft(rng, levels, _line, lambda entity: f"Who {verb} {entity}?")


KINGDOMS = Formulation(
    name="kingdoms",
    conditional=False,
    default_depth=5,  # Sec. 4, App. A.3
    max_chains=min(len(pool) for pool in _LEVELS),
    close="Say directly the name without other words.",  # App. A.3
    build=_build,
    acceptable=lambda n: sorted(PERSONS[:n]),
    depth_limit=lambda n: len(_LEVELS) - 1,  # five relations (App. A.3), whatever N
)
FORMULATIONS.register(KINGDOMS.name, KINGDOMS)
