"""F5, relatives (App. A.5, conditional retrieval): where relatives live, who they are, which
profession lives with which relative, who works as what; "Where does John live?"."""

from __future__ import annotations

import random

from stackedheads.tasks.formulations._base import FORMULATIONS, Draft, Formulation

# Subjects, relatives (female for mother/sister, male for father/brother) and countries start
# as in App. A.5. Subjects and relatives never share a name.
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


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _rule_relations(rng: random.Random, n: int) -> list[str]:
    """One relation per profession: distinct for N <= 4; beyond that, shuffled copies of
    the four relations, so each relation is used (almost) equally often."""
    relations: list[str] = []
    while len(relations) < n:
        relations += rng.sample(_RELATIONS, len(_RELATIONS))
    return relations[:n]


def _build(rng: random.Random, depth: int, n: int) -> Draft:
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
    return Draft([*lives, *kin, *rules, *works], f"Where does {asked} live?", query[-1], metadata)


RELATIVES = Formulation(
    name="relatives",
    conditional=True,
    default_depth=4,  # the only depth: works as -> live with their -> relative is -> lives in
    max_chains=min(  # 2N women, 2N men and 4N countries
        len(_SUBJECTS), len(_PROFESSIONS), len(_FEMALE) // 2, len(_MALE) // 2, len(_COUNTRIES) // 4
    ),
    close="Say directly only the name, without any other words.",  # App. A.5
    build=_build,
    acceptable=lambda n: sorted(_COUNTRIES[:4 * n]),
)
FORMULATIONS.register(RELATIVES.name, RELATIVES)
