"""Natural-language prompts for the retrieval problem (Sec. 4, App. A).

Five formulations, F1-F5 of Sec. 4: three retrieval formulations (``equations``,
``lives-with``, ``kingdoms``), where every fact links one entity to the next along a chain
``x_0 -> x_1 -> ... -> x_D`` (Sec. 3.1), and two conditional retrieval formulations
(``functions``, ``relatives``), where a step depends on several earlier facts, so the facts
form a DAG rather than a line (Sec. 3.1).

The text follows App. A line for line: one fact per line, then the closing question with the
exact instruction sentence of the paper. For the chain formulations ``N`` chains are
interleaved (Sec. 4: so that the answer cannot be guessed from the question alone) and the
facts are grouped by retrieval step, the deepest step first (the step whose fact holds the
answer), with the ``N`` lines of a step shuffled (Sec. 6 does the same for the minimal
formulation). The name pools start with the entities App. A prints, so that output looks like
the paper's examples.

Every question is a pure function of its arguments: the random generator is seeded with a
string (``random.Random`` hashes strings with SHA-512, the same on every machine and every
run; ``hash()`` is salted per process and is never used).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from stackedheads.errors import UsageError

__all__ = [
    "FORMULATIONS",
    "Question",
    "default_depth",
    "generate",
    "generate_many",
    "max_chains",
    "max_depth",
    "validate",
]

FORMULATIONS: tuple[str, ...] = ("equations", "lives-with", "kingdoms", "functions", "relatives")

# Closing sentences, copied verbatim from App. A.1-A.5.
_EQUATIONS_CLOSE = "Say directly only the numeric value, without any other words."
_LIVES_WITH_CLOSE = "Say directly only the name of the city, without any other words."
_KINGDOMS_CLOSE = "Say directly the name without other words."
_RELATIVES_CLOSE = "Say directly only the name, without any other words."

# --- name pools ------------------------------------------------------------------------------

# F1 variables: a..z as in App. A.1, then aa, ab, ..., zz (702 names in all).
_VARIABLES: tuple[str, ...] = tuple(string.ascii_lowercase) + tuple(
    a + b for a, b in product(string.ascii_lowercase, repeat=2)
)

# F2/F3 persons: the first 20 are App. A.2's, in its order (used one block of N per step).
# All single words, pairwise distinct, and no name is a prefix of another, so that a reader
# (or a parser) can never confuse two of them.
_PERSONS: tuple[str, ...] = (
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

# F2 cities: App. A.2 uses the first four. Single words, none a person's name.
_CITIES: tuple[str, ...] = (
    "Amsterdam", "Berlin", "Cairo", "Delhi", "Edinburgh", "Frankfurt", "Geneva", "Helsinki",
    "Istanbul", "Jakarta", "Kyoto", "Lisbon", "Madrid", "Nairobi", "Oslo", "Prague", "Quito",
    "Rome", "Stockholm", "Tokyo", "Utrecht", "Vienna", "Warsaw", "Yokohama", "Zurich",
    "Athens", "Barcelona", "Chicago", "Dublin", "Budapest", "Copenhagen", "Seoul", "Toronto",
    "Lagos", "Lima", "Manila", "Munich", "Naples", "Osaka", "Bangkok",
)

# F3 pools with explicit inflected forms (App. A.3 uses the first four of each).
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
# Question for each depth: the paper prints only D = 5 ("Who has Chronogy?"); the verbs for
# D = 1..4 are our extension, one natural question per relation.
_KINGDOMS_QUESTION_VERB: tuple[str, ...] = ("lives in", "believes in", "eats", "consumes", "has")

# F5 pools: subjects, relatives (female for mother/sister, male for father/brother) and
# countries start as in App. A.5. Subjects and relatives never share a name.
_SUBJECTS: tuple[str, ...] = (
    "John", "Chris", "Diana", "Eve", "Alex", "Maria", "Paul", "Sofia", "Tim", "Ruth",
)
_FEMALE: tuple[str, ...] = (
    "Penny", "Lily", "Isabelle", "Cathy", "Jane", "Dana", "Olivia", "Nancy", "Amy", "Beth",
    "Carol", "Donna", "Fay", "Gwen", "Holly", "Iris", "Joan", "Kim", "Lola", "Megan",
)
_MALE: tuple[str, ...] = (
    "George", "Adam", "Kevin", "Ed", "Hank", "Mike", "Fred", "Bob", "Alan", "Ben",
    "Gary", "Ian", "Jim", "Ken", "Luke", "Neil", "Oscar", "Ray", "Sid", "Walt",
)
_COUNTRIES: tuple[str, ...] = (
    "Canada", "Brazil", "France", "Kenya", "Italy", "Mexico", "Peru", "Laos", "Germany",
    "Japan", "England", "Hungary", "Norway", "Qatar", "Denmark", "Argentina", "Chile", "Egypt",
    "Finland", "Greece", "India", "Ireland", "Nepal", "Oman", "Poland", "Portugal", "Spain",
    "Sweden", "Turkey", "Uganda", "Vietnam", "Austria", "Belgium", "Cuba", "Iceland", "Latvia",
    "Malta", "Morocco", "Nigeria", "Zambia",
)
_PROFESSIONS: tuple[tuple[str, str], ...] = (  # (profession, plural)
    ("doctor", "Doctors"), ("lawyer", "Lawyers"), ("teacher", "Teachers"),
    ("engineer", "Engineers"), ("architect", "Architects"), ("nurse", "Nurses"),
    ("pilot", "Pilots"), ("artist", "Artists"), ("chef", "Chefs"), ("farmer", "Farmers"),
)
# App. A.5 prints each subject's relatives in this order.
_RELATIONS: tuple[str, ...] = ("mother", "sister", "father", "brother")

# Fixed depths of the conditional formulations: the longest path of facts in the DAG.
_FUNCTIONS_DEPTH = 2  # alias + variable -> table entry
_RELATIVES_DEPTH = 4  # works as -> live with their -> relative is -> lives in

_DEFAULT_DEPTH = {"equations": 5, "lives-with": 5, "kingdoms": 5, "functions": 2, "relatives": 4}
_KINGDOMS_MAX_DEPTH = 5


# --- public data type --------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One prompt with its correct and acceptable answers, as in App. A.

    ``acceptable`` is the filter of App. A: answers of the right kind (all chain ends), so
    ``chance`` is the accuracy of random guessing (dashed lines of Fig. 2).
    ``metadata["chains"]`` lists the chains from the query end ``x_0`` to the answer end
    ``x_D`` (Sec. 3.1); ``metadata["query_chain"]`` is the one asked about.
    """

    prompt: str
    answer: str
    acceptable: tuple[str, ...]
    formulation: str
    depth: int
    chains: int
    seed: int
    index: int
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def chance(self) -> float:
        """Probability that a uniform guess among the acceptable answers is correct."""
        return 1.0 / len(self.acceptable)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists, strings and ints only)."""
        return {
            "prompt": self.prompt,
            "answer": self.answer,
            "acceptable": list(self.acceptable),
            "formulation": self.formulation,
            "depth": self.depth,
            "chains": self.chains,
            "seed": self.seed,
            "index": self.index,
            "metadata": _jsonable(self.metadata),
        }


def _jsonable(value: Any) -> Any:
    # Tuples become lists so that to_dict() equals its own JSON round trip.
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# --- limits and validation ---------------------------------------------------------------------


def _check_formulation(formulation: str) -> str:
    if formulation not in FORMULATIONS:
        raise UsageError(
            f"unknown formulation {formulation!r}; choose one of: {', '.join(FORMULATIONS)}"
        )
    return formulation


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def max_chains(formulation: str) -> int:
    """The largest number of interleaved chains ``N`` the name pools allow (at depth 1)."""
    _check_formulation(formulation)
    if formulation == "equations":
        return len(_VARIABLES)  # values 0..N-1 are unbounded; names run out first
    if formulation == "lives-with":
        return min(len(_CITIES), len(_PERSONS))
    if formulation == "kingdoms":
        pools = (_PERSONS, _KINGDOMS, _RELIGIONS, _FOODS, _ELEMENTS, _DISEASES)
        return min(len(pool) for pool in pools)
    if formulation == "functions":
        return len(string.ascii_lowercase) // 3  # N functions, N aliases, N variables
    return min(  # relatives: 2N women, 2N men and 4N countries
        len(_SUBJECTS), len(_PROFESSIONS), len(_FEMALE) // 2, len(_MALE) // 2,
        len(_COUNTRIES) // 4,
    )


def _check_chains(formulation: str, chains: int) -> int:
    if not _is_int(chains) or chains < 1:
        raise UsageError(f"chains must be an integer >= 1, got {chains!r}")
    limit = max_chains(formulation)
    if chains > limit:
        raise UsageError(
            f"chains={chains} exceeds the maximum of {limit} for formulation {formulation!r}"
        )
    return chains


def max_depth(formulation: str, chains: int = 4) -> int:
    """The largest depth ``D`` for ``chains`` interleaved chains.

    Equations and lives-with use a fresh block of ``N`` names per step (App. A.1, A.2), so
    ``D * N`` is bounded by the name pool; kingdoms has five relations (App. A.3); functions
    and relatives have a fixed structure (App. A.4, A.5).
    """
    _check_formulation(formulation)
    _check_chains(formulation, chains)
    if formulation == "equations":
        return len(_VARIABLES) // chains
    if formulation == "lives-with":
        return len(_PERSONS) // chains
    if formulation == "kingdoms":
        return _KINGDOMS_MAX_DEPTH
    if formulation == "functions":
        return _FUNCTIONS_DEPTH
    return _RELATIVES_DEPTH


def default_depth(formulation: str) -> int:
    """Depth used when none is given: D = 5 as benchmarked in Sec. 4 / App. A.1-A.3; the
    fixed depths of the conditional formulations (App. A.4, A.5)."""
    return _DEFAULT_DEPTH[_check_formulation(formulation)]


def validate(formulation: str, depth: int | None, chains: int) -> int:
    """Check the arguments and return the resolved depth; raise UsageError on a mistake."""
    _check_formulation(formulation)
    _check_chains(formulation, chains)
    resolved = default_depth(formulation) if depth is None else depth
    if not _is_int(resolved):
        raise UsageError(f"depth must be an integer, got {depth!r}")
    if formulation in ("functions", "relatives"):
        fixed = default_depth(formulation)
        if resolved != fixed:
            raise UsageError(
                f"formulation {formulation!r} has a fixed depth of {fixed}; got depth={depth}"
            )
        return fixed
    limit = max_depth(formulation, chains)
    if not 1 <= resolved <= limit:
        raise UsageError(
            f"depth={resolved} is out of range for formulation {formulation!r} with "
            f"chains={chains}: allowed 1..{limit}"
        )
    return resolved


# --- generation ----------------------------------------------------------------------------


def generate(
    formulation: str,
    depth: int | None = None,
    chains: int = 4,
    seed: int = 0,
    index: int = 0,
) -> Question:
    """Generate question number ``index`` of stream ``seed``; the same arguments give the
    same Question on any machine."""
    resolved = validate(formulation, depth, chains)
    if not _is_int(seed):
        raise UsageError(f"seed must be an integer, got {seed!r}")
    if not _is_int(index) or index < 0:
        raise UsageError(f"index must be an integer >= 0, got {index!r}")
    rng = random.Random(f"stackedheads/{formulation}/{resolved}/{chains}/{seed}/{index}")
    builder = _BUILDERS[formulation]
    facts, question, answer, acceptable, metadata = builder(rng, resolved, chains)
    return Question(
        prompt="\n".join([*facts, question]),
        answer=answer,
        acceptable=tuple(acceptable),
        formulation=formulation,
        depth=resolved,
        chains=chains,
        seed=seed,
        index=index,
        metadata=metadata,
    )


MAX_QUESTIONS = 100_000  # per call: a second or two; the paper asks 500 per formulation


def generate_many(
    formulation: str,
    depth: int | None = None,
    chains: int = 4,
    n: int = 1,
    seed: int = 0,
) -> list[Question]:
    """Questions ``index = 0..n-1`` of stream ``seed`` (Sec. 4 benchmarks 500 per formulation),
    at most :data:`MAX_QUESTIONS` (all are held in memory; larger sets: several seeds)."""
    if not _is_int(n) or not 1 <= n <= MAX_QUESTIONS:
        raise UsageError(f"n must be an integer between 1 and {MAX_QUESTIONS}, got {n!r}")
    validate(formulation, depth, chains)  # fail once, before generating anything
    return [generate(formulation, depth, chains, seed, i) for i in range(n)]


# --- chain formulations (F1-F3) ----------------------------------------------------------------

Chain = list[str]  # e_0 (answer end) .. e_D (query end)


def _draw_chains(rng: random.Random, levels: list[list[str]]) -> list[Chain]:
    """Assign each level's N entities to the N chains at random (App. A.1: "b = 2", "c = 3"
    ... names and values are not matched in order)."""
    shuffled = [rng.sample(level, len(level)) for level in levels]
    return [[level[c] for level in shuffled] for c in range(len(levels[0]))]


def _step_lines(rng: random.Random, chains: list[Chain], render) -> list[str]:
    """Facts grouped by step, the deepest (answer-holding) step first, shuffled within a
    step (Sec. 6, App. A.1-A.3)."""
    lines: list[str] = []
    for step in range(1, len(chains[0])):
        facts = [render(step, chain[step - 1], chain[step]) for chain in chains]
        rng.shuffle(facts)
        lines.extend(facts)
    return lines


def _chain_metadata(chains: list[Chain], query: int) -> dict[str, Any]:
    # Stored from the query end x_0 to the answer end x_D (Sec. 3.1 notation).
    forward = [list(reversed(chain)) for chain in chains]
    return {"chains": forward, "query_chain": forward[query]}


def _build_equations(rng: random.Random, depth: int, n: int):
    """App. A.1: step 1 assigns the values 0..N-1 to the first N names, step k > 1 assigns
    to the k-th block of N names a name of block k-1."""
    levels = [[str(v) for v in range(n)]]
    levels += [list(_VARIABLES[k * n:(k + 1) * n]) for k in range(depth)]
    chains = _draw_chains(rng, levels)
    facts = _step_lines(rng, chains, lambda step, old, new: f"{new} = {old}")
    query = rng.randrange(n)
    question = f"What is the value of {chains[query][depth]}? {_EQUATIONS_CLOSE}"
    acceptable = [str(v) for v in range(n)]
    return facts, question, chains[query][0], acceptable, _chain_metadata(chains, query)


def _lives_with_line(step: int, old: str, new: str) -> str:
    return f"{new} lives in {old}" if step == 1 else f"{new} lives with {old}"


def _build_lives_with(rng: random.Random, depth: int, n: int):
    """App. A.2: step 1 places the first N persons in the first N cities; each later step
    has the next N persons (in pool order) live with persons of the previous step."""
    levels = [list(_CITIES[:n])]
    levels += [list(_PERSONS[k * n:(k + 1) * n]) for k in range(depth)]
    chains = _draw_chains(rng, levels)
    facts = _step_lines(rng, chains, _lives_with_line)
    query = rng.randrange(n)
    question = f"Where does {chains[query][depth]} live? {_LIVES_WITH_CLOSE}"
    acceptable = sorted(_CITIES[:n])
    return facts, question, chains[query][0], acceptable, _chain_metadata(chains, query)


_DEMONYM = dict(_KINGDOMS)
_ADHERENTS = dict(_RELIGIONS)


def _kingdoms_line(step: int, old: str, new: str) -> str:
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


def _build_kingdoms(rng: random.Random, depth: int, n: int):
    """App. A.3: person -lives in-> kingdom -(demonyms) believe in-> religion -(adherents)
    eat-> food -contains-> element -causes-> disease; depth D keeps the first D relations
    and asks for the person given the level-D entity. Only D = 5 ("Who has Chronogy?") is
    printed in the paper; the questions for D = 1..4 ("Who lives in Novaria?", "Who believes
    in harmonianism?", "Who eats lamb?", "Who consumes Zephyrium?") are our extension."""
    pools = (
        _PERSONS,
        [k for k, _ in _KINGDOMS],
        [r for r, _ in _RELIGIONS],
        _FOODS,
        _ELEMENTS,
        _DISEASES,
    )
    levels = [list(pool[:n]) for pool in pools[: depth + 1]]
    chains = _draw_chains(rng, levels)
    facts = _step_lines(rng, chains, _kingdoms_line)
    query = rng.randrange(n)
    verb = _KINGDOMS_QUESTION_VERB[depth - 1]
    question = f"Who {verb} {chains[query][depth]}? {_KINGDOMS_CLOSE}"
    acceptable = sorted(_PERSONS[:n])
    return facts, question, chains[query][0], acceptable, _chain_metadata(chains, query)


# --- conditional formulations (F4, F5) ---------------------------------------------------------


def _build_functions(rng: random.Random, depth: int, n: int):
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
    question = f"What is the value of {alias}({variable})? {_EQUATIONS_CLOSE}"
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
    return facts, question, query[-1], [str(v) for v in range(n)], metadata


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _rule_relations(rng: random.Random, n: int) -> list[str]:
    """One relation per profession: distinct for N <= 4; beyond that, shuffled copies of
    the four relations, so each relation is used (almost) equally often."""
    relations: list[str] = []
    while len(relations) < n:
        relations += rng.sample(_RELATIONS, len(_RELATIONS))
    return relations[:n]


def _build_relatives(rng: random.Random, depth: int, n: int):
    """App. A.5: 4N relatives each live in one of 4N countries (lines shuffled); each
    subject's mother, sister, father and brother (subjects in order, relations in the
    printed order); one rule "Doctors live with their brothers." per profession (shuffled);
    one profession per subject, in subject order. Path: works as -> rule -> relative ->
    lives in, so depth 4."""
    subjects = list(_SUBJECTS[:n])
    women = rng.sample(_FEMALE[:2 * n], 2 * n)
    men = rng.sample(_MALE[:2 * n], 2 * n)
    family = {
        s: {"mother": women[i], "sister": women[n + i], "father": men[i], "brother": men[n + i]}
        for i, s in enumerate(subjects)
    }
    relatives = [family[s][r] for s in subjects for r in _RELATIONS]
    home = dict(zip(relatives, rng.sample(_COUNTRIES[:4 * n], 4 * n)))
    professions = _PROFESSIONS[:n]
    rule = dict(zip((p for p, _ in professions), _rule_relations(rng, n)))
    job = dict(zip(subjects, rng.sample([p for p, _ in professions], n)))

    lives = [f"{person} lives in {home[person]}." for person in relatives]
    rng.shuffle(lives)
    kin = [f"{s}s {r} is {family[s][r]}." for s in subjects for r in _RELATIONS]
    rules = [f"{plural} live with their {rule[p]}s." for p, plural in professions]
    rng.shuffle(rules)
    works = [f"{s} works as {_article(job[s])} {job[s]}." for s in subjects]

    asked = rng.choice(subjects)
    question = f"Where does {asked} live? {_RELATIVES_CLOSE}"
    chains = []
    for s in subjects:
        relative = family[s][rule[job[s]]]
        chains.append([s, job[s], rule[job[s]], relative, home[relative]])
    query = chains[subjects.index(asked)]
    metadata = {
        "chains": chains,
        "query_chain": query,
        "lives_in": home,
        "family": family,
        "rules": rule,
        "professions": job,
    }
    acceptable = sorted(_COUNTRIES[:4 * n])
    return [*lives, *kin, *rules, *works], question, query[-1], acceptable, metadata


_BUILDERS = {
    "equations": _build_equations,
    "lives-with": _build_lives_with,
    "kingdoms": _build_kingdoms,
    "functions": _build_functions,
    "relatives": _build_relatives,
}
