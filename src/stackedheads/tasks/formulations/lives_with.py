"""F2, lives-with (App. A.2): ``Charlie lives in Cairo``, ``Henry lives with David`` ...;
"Where does Rose live?"."""

from __future__ import annotations

import random

from stackedheads.tasks.formulations._base import FORMULATIONS, Draft, Formulation
from stackedheads.tasks.formulations._common import PERSONS, chain_draft

# Cities: App. A.2 uses the first four. Single words, none a person's name.
_CITIES: tuple[str, ...] = (
    "Amsterdam", "Berlin", "Cairo", "Delhi", "Edinburgh", "Frankfurt", "Geneva", "Helsinki",
    "Istanbul", "Jakarta", "Kyoto", "Lisbon", "Madrid", "Nairobi", "Oslo", "Prague", "Quito",
    "Rome", "Stockholm", "Tokyo", "Utrecht", "Vienna", "Warsaw", "Yokohama", "Zurich",
    "Athens", "Barcelona", "Chicago", "Dublin", "Budapest", "Copenhagen", "Seoul", "Toronto",
    "Lagos", "Lima", "Manila", "Munich", "Naples", "Osaka", "Bangkok",
)


def _line(step: int, old: str, new: str) -> str:
    return f"{new} lives in {old}" if step == 1 else f"{new} lives with {old}"


def _build(rng: random.Random, depth: int, n: int) -> Draft:
    """App. A.2: step 1 places the first N persons in the first N cities; each later step
    has the next N persons (in pool order) live with persons of the previous step."""
    levels = [list(_CITIES[:n])]
    levels += [list(PERSONS[k * n:(k + 1) * n]) for k in range(depth)]
    return chain_draft(rng, levels, _line, lambda person: f"Where does {person} live?")


LIVES_WITH = Formulation(
    name="lives-with",
    conditional=False,
    default_depth=5,  # Sec. 4, App. A.2
    max_chains=min(len(_CITIES), len(PERSONS)),
    close="Say directly only the name of the city, without any other words.",  # App. A.2
    build=_build,
    acceptable=lambda n: sorted(_CITIES[:n]),
    depth_limit=lambda n: len(PERSONS) // n,  # a fresh block of N persons per step
)
FORMULATIONS.register(LIVES_WITH.name, LIVES_WITH)
