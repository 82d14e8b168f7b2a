"""Helpers shared by the formulations: the person pool and interleaved chains (Sec. 4).

For the chain formulations ``N`` chains are interleaved (Sec. 4: so that the answer cannot be
guessed from the question alone) and the facts are grouped by retrieval step, the deepest step
first (the step whose fact holds the answer), with the ``N`` lines of a step shuffled (Sec. 6
does the same for the minimal formulation).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from stackedheads.tasks.formulations._base import Draft

Chain = list[str]  # e_0 (answer end) .. e_D (query end)

# Persons of lives-with and kingdoms: the first 20 are App. A.2's, in its order (used one
# block of N per step). All single words, pairwise distinct, and no name is a prefix of
# another, so that a reader (or a parser) can never confuse two of them.
PERSONS: tuple[str, ...] = (
    "Alice", "Bob", "Charlie", "David", "Eve", "Frank", "Grace", "Henry", "Isabelle", "Jack",
    "Kate", "Larry", "Mary", "Nick", "Olivia", "Peter", "Queen", "Rose", "Sam", "Tom",
    "Uma", "Victor", "Wendy", "Xavier", "Yara", "Zack", "Adam", "Bella", "Carl", "Diana",
    "Emma", "Fiona", "George", "Hannah", "Ivan", "Julia", "Kevin", "Laura", "Mike", "Nina",
    "Oscar", "Paula", "Quentin", "Rachel", "Steve", "Tina", "Ulrich", "Vera", "Walter", "Xena",
    "Yusuf", "Zoe", "Aaron", "Beth", "Colin", "Daisy", "Edgar", "Felix", "Gina", "Harold",
    "Irene", "James", "Karen", "Leo", "Monica", "Nathan", "Oliver", "Pam", "Ruth", "Simon",
    "Theo", "Ursula", "Vincent", "Wanda", "Yvonne", "Zelda", "Albert", "Brian", "Clara",
    "Dennis", "Ellen", "Fred", "Gloria", "Hugo", "Ingrid", "Joel", "Kyle", "Linda", "Martin",
    "Norah", "Otto", "Philip", "Quinn", "Ralph", "Sarah", "Tracy", "Rupert", "Wayne",
    "Yolanda", "Zane", "Andrew", "Betty", "Chloe", "Derek", "Elsa", "Gavin", "Helen", "Isaac",
    "Joyce", "Keith", "Lucy", "Mark", "Neil", "Opal", "Rita", "Sean", "Terry", "Agnes",
    "Boris", "Cora", "Dylan", "Edith", "Ferdinand", "Greta", "Howard", "Ida", "Jasper", "Kurt",
    "Lena", "Miles", "Norbert", "Ophelia", "Percy", "Regina", "Stella", "Trevor", "Ugo",
    "Valerie", "Wilma", "Yannick", "Zora", "Arthur", "Brenda", "Cedric", "Dorothy", "Emil",
    "Flora", "Gustav", "Hilda", "Igor", "Judith",
)


def draw_chains(rng: random.Random, levels: list[list[str]]) -> list[Chain]:
    """Assign each level's N entities to the N chains at random (App. A.1: "b = 2", "c = 3"
    ... names and values are not matched in order)."""
    shuffled = [rng.sample(level, len(level)) for level in levels]
    return [[level[c] for level in shuffled] for c in range(len(levels[0]))]


def step_lines(rng: random.Random, chains: list[Chain], render: Callable[[int, str, str], str]) -> list[str]:
    """Facts grouped by step, the deepest (answer-holding) step first, shuffled within a
    step (Sec. 6, App. A.1-A.3). ``render(step, old, new)`` writes the fact of step ``step``
    linking level ``step - 1`` (``old``) to level ``step`` (``new``)."""
    lines: list[str] = []
    for step in range(1, len(chains[0])):
        facts = [render(step, chain[step - 1], chain[step]) for chain in chains]
        rng.shuffle(facts)
        lines.extend(facts)
    return lines


def chain_metadata(chains: list[Chain], query: int) -> dict[str, Any]:
    # Stored from the query end x_0 to the answer end x_D (Sec. 3.1 notation).
    forward = [list(reversed(chain)) for chain in chains]
    return {"chains": forward, "query_chain": forward[query]}


def chain_draft(
    rng: random.Random,
    levels: list[list[str]],
    render: Callable[[int, str, str], str],
    ask: Callable[[str], str],
) -> Draft:
    """A retrieval question over N interleaved chains: ``levels[0]`` holds the N answers,
    ``levels[k]`` the N entities of step k; ``ask(entity)`` writes the question about one
    chain's last (query-end) entity."""
    chains = draw_chains(rng, levels)
    facts = step_lines(rng, chains, render)
    query = rng.randrange(len(chains))
    return Draft(facts, ask(chains[query][-1]), chains[query][0], chain_metadata(chains, query))
