"""F1, equations (App. A.1): ``b = 2`` ... ``s = p``; "What is the value of s?"."""

from __future__ import annotations

import random
import string
from itertools import product

from stackedheads.tasks.formulations._base import FORMULATIONS, Draft, Formulation
from stackedheads.tasks.formulations._common import chain_draft

# Variables: a..z as in App. A.1, then aa, ab, ..., zz (702 names in all).
_VARIABLES: tuple[str, ...] = tuple(string.ascii_lowercase) + tuple(
    a + b for a, b in product(string.ascii_lowercase, repeat=2)
)


def _build(rng: random.Random, depth: int, n: int) -> Draft:
    """App. A.1: step 1 assigns the values 0..N-1 to the first N names, step k > 1 assigns
    to the k-th block of N names a name of block k-1."""
    levels = [[str(v) for v in range(n)]]
    levels += [list(_VARIABLES[k * n:(k + 1) * n]) for k in range(depth)]
    return chain_draft(rng, levels, lambda step, old, new: f"{new} = {old}", lambda x: f"What is the value of {x}?")


EQUATIONS = Formulation(
    name="equations",
    conditional=False,
    default_depth=5,  # Sec. 4, App. A.1
    max_chains=len(_VARIABLES),  # values 0..N-1 are unbounded; names run out first
    close="Say directly only the numeric value, without any other words.",  # App. A.1
    build=_build,
    acceptable=lambda n: [str(v) for v in range(n)],
    depth_limit=lambda n: len(_VARIABLES) // n,  # a fresh block of N names per step
)
FORMULATIONS.register(EQUATIONS.name, EQUATIONS)
