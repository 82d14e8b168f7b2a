"""F4, functions (App. A.4, conditional retrieval): a table of functions, aliases and
variables; "What is the value of f(i)?"."""

from __future__ import annotations

import random
import string

from stackedheads.tasks.formulations._base import FORMULATIONS, Draft, Formulation


def _build(rng: random.Random, depth: int, n: int) -> Draft:
    """App. A.4: N functions over 0..N-1, each a random permutation, listed in order
    a(0)..a(N-1), b(0).. (not shuffled); then the next N letters as aliases of distinct
    functions and the next N letters as variables holding a permutation of 0..N-1, both in
    name order; the question applies a random alias to a random variable."""
    letters = string.ascii_lowercase
    functions, aliases, variables = letters[:n], letters[n:2 * n], letters[2 * n:3 * n]
    table = {f: rng.sample(range(n), n) for f in functions}
    alias_of = dict(zip(aliases, rng.sample(functions, n)))
    value_of = dict(zip(variables, rng.sample(range(n), n)))
    facts = [f"{f}({x}) = {table[f][x]}" for f in functions for x in range(n)]
    facts += [f"{a} = {alias_of[a]}" for a in aliases]
    facts += [f"{v} = {value_of[v]}" for v in variables]
    alias, variable = rng.choice(aliases), rng.choice(variables)
    chains = [
        [f"{a}({v})", f"{alias_of[a]}({value_of[v]})", str(table[alias_of[a]][value_of[v]])]
        for a in aliases
        for v in variables
    ]
    query = chains[aliases.index(alias) * n + variables.index(variable)]
    metadata = {
        "chains": chains,
        "query_chain": query,
        "table": {f: list(table[f]) for f in functions},
        "aliases": alias_of,
        "variables": value_of,
        "query": {"alias": alias, "variable": variable},
    }
    return Draft(facts, f"What is the value of {alias}({variable})?", query[-1], metadata)


FUNCTIONS = Formulation(
    name="functions",
    conditional=True,
    default_depth=2,  # the only depth: alias + variable -> table entry
    max_chains=len(string.ascii_lowercase) // 3,  # N functions, N aliases, N variables
    close="Say directly only the numeric value, without any other words.",  # App. A.4
    build=_build,
    acceptable=lambda n: [str(v) for v in range(n)],
)
FORMULATIONS.register(FUNCTIONS.name, FUNCTIONS)
