"""An independent solver for the App. A prompts, used by the tests.

It reads only the prompt TEXT: strict regular expressions per formulation (every line must
match one), a fact graph, and a walk from the queried entity to the answer. It shares no
code and no name pools with ``stackedheads.tasks.prompts``, so it checks the generator
rather than repeating it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class ParseError(ValueError):
    """The prompt has a line no template accepts, or its facts are inconsistent."""


@dataclass(frozen=True)
class Solution:
    formulation: str
    answer: str
    candidates: frozenset[str]  # every answer of the right kind the prompt offers
    steps: int  # facts followed from the question to the answer
    path: tuple[str, ...]  # entities visited, query end first


_QUESTIONS = {
    "functions": re.compile(
        r"What is the value of ([a-z]+)\(([a-z]+)\)\? "
        r"Say directly only the numeric value, without any other words\."
    ),
    "equations": re.compile(
        r"What is the value of ([a-z]+)\? "
        r"Say directly only the numeric value, without any other words\."
    ),
    "lives-with": re.compile(
        r"Where does ([A-Z][a-z]+) live\? "
        r"Say directly only the name of the city, without any other words\."
    ),
    "kingdoms": re.compile(
        r"Who (lives in|believes in|eats|consumes|has) ([A-Za-z]+)\? "
        r"Say directly the name without other words\."
    ),
    "relatives": re.compile(
        r"Where does ([A-Z][a-z]+) live\? Say directly only the name, without any other words\."
    ),
}


def solve(prompt: str) -> Solution:
    lines = prompt.split("\n")
    question = lines[-1]
    for name, pattern in _QUESTIONS.items():
        match = pattern.fullmatch(question)
        if match:
            return _SOLVERS[name](lines[:-1], match)
    raise ParseError(f"unrecognised question line: {question!r}")


def _define(table: dict, key: str, value, line: str) -> None:
    if key in table:
        raise ParseError(f"{key!r} defined twice (line {line!r})")
    table[key] = value


def _follow(start: str, edges: dict[str, str], is_end) -> list[str]:
    path = [start]
    while not is_end(path[-1]):
        if path[-1] not in edges:
            raise ParseError(f"dangling reference {path[-1]!r}")
        path.append(edges[path[-1]])
        if len(path) > len(edges) + 2:
            raise ParseError("cycle in the facts")
    return path


# --- equations ---------------------------------------------------------------------------------

_ASSIGN = re.compile(r"([a-z]+) = ([a-z]+|\d+)")


def _solve_equations(facts: list[str], match: re.Match) -> Solution:
    edges: dict[str, str] = {}
    for line in facts:
        m = _ASSIGN.fullmatch(line)
        if not m:
            raise ParseError(f"bad equations line: {line!r}")
        _define(edges, m[1], m[2], line)
    path = _follow(match[1], edges, str.isdigit)
    values = frozenset(v for v in edges.values() if v.isdigit())
    return Solution("equations", path[-1], values, len(path) - 1, tuple(path))


# --- lives-with --------------------------------------------------------------------------------

_LIVES = re.compile(r"([A-Z][a-z]+) lives (in|with) ([A-Z][a-z]+)")


def _solve_lives_with(facts: list[str], match: re.Match) -> Solution:
    edges: dict[str, str] = {}
    cities: set[str] = set()
    for line in facts:
        m = _LIVES.fullmatch(line)
        if not m:
            raise ParseError(f"bad lives-with line: {line!r}")
        _define(edges, m[1], m[3], line)
        if m[2] == "in":
            cities.add(m[3])
    path = _follow(match[1], edges, cities.__contains__)
    return Solution("lives-with", path[-1], frozenset(cities), len(path) - 1, tuple(path))


# --- kingdoms ----------------------------------------------------------------------------------

# Relation sentences in chain order; group 1 is the subject, group 2 the object.
_KINGDOM_FACTS = (
    ("lives in", re.compile(r"([A-Z][a-z]+) lives in ([A-Z][a-z]+)\.")),
    ("believes in", re.compile(r"([A-Z][a-z]+) believe in ([a-z]+)\.")),
    ("eats", re.compile(r"([A-Z][a-z]+) eat ([a-z]+)\.")),
    ("consumes", re.compile(r"([A-Z][a-z]+) contains ([A-Z][a-z]+)\.")),
    ("has", re.compile(r"([A-Z][a-z]+) causes ([A-Z][a-z]+)\.")),
)


def _stem(word: str, level: int) -> str:
    """Map an inflected subject back to the object it names one level earlier:
    'Novarians' -> 'novaria', 'Harmonianists' -> 'harmonian', 'Lamb' -> 'lamb'."""
    word = word.lower()
    if level == 1:  # demonym: kingdom + "ns"
        if not word.endswith("ns"):
            raise ParseError(f"unexpected demonym {word!r}")
        return word[:-2]
    if level == 2:  # adherents of an -ism are -ists
        if not word.endswith("ists"):
            raise ParseError(f"unexpected adherents {word!r}")
        return word[:-4]
    return word


def _object_key(word: str, level: int) -> str:
    word = word.lower()
    if level == 2:  # religion: harmonianism -> harmonian
        if not word.endswith("ism"):
            raise ParseError(f"unexpected religion {word!r}")
        return word[:-3]
    return word


def _solve_kingdoms(facts: list[str], match: re.Match) -> Solution:
    # links[level]: key of the level-(level) object -> level-(level+1) object
    links: list[dict[str, str]] = [{} for _ in _KINGDOM_FACTS]
    for line in facts:
        for level, (_, pattern) in enumerate(_KINGDOM_FACTS):
            m = pattern.fullmatch(line)
            if m:
                key = m[1] if level == 0 else _stem(m[1], level)
                _define(links[level], key, m[2], line)
                break
        else:
            raise ParseError(f"bad kingdoms line: {line!r}")
    depth = [verb for verb, _ in _KINGDOM_FACTS].index(match[1]) + 1
    if any(links[level] for level in range(depth, len(links))):
        raise ParseError("facts deeper than the question")
    persons = frozenset(links[0])
    found = []
    for person in persons:
        path = [person]
        for level in range(depth):
            key = path[-1] if level == 0 else _object_key(path[-1], level)
            if key not in links[level]:
                raise ParseError(f"broken chain at {path[-1]!r}")
            path.append(links[level][key])
        if path[-1] == match[2]:
            found.append(path)
    if len(found) != 1:
        raise ParseError(f"{len(found)} persons match the question")
    path = found[0][::-1]
    return Solution("kingdoms", path[-1], persons, len(path) - 1, tuple(path))


# --- functions ---------------------------------------------------------------------------------

_TABLE = re.compile(r"([a-z]+)\((\d+)\) = (\d+)")


def _solve_functions(facts: list[str], match: re.Match) -> Solution:
    table: dict[tuple[str, str], str] = {}
    names: dict[str, str] = {}
    for line in facts:
        m = _TABLE.fullmatch(line)
        if m:
            _define(table, (m[1], m[2]), m[3], line)
            continue
        m = _ASSIGN.fullmatch(line)
        if not m:
            raise ParseError(f"bad functions line: {line!r}")
        _define(names, m[1], m[2], line)
    alias, variable = match[1], match[2]
    function, argument = names[alias], names[variable]
    if function.isdigit() or not argument.isdigit():
        raise ParseError("alias must name a function and variable must hold a number")
    answer = table[(function, argument)]
    path = (f"{alias}({variable})", f"{function}({argument})", answer)
    return Solution("functions", answer, frozenset(table.values()), 2, path)


# --- relatives ---------------------------------------------------------------------------------

_RELATIVE_FACTS = {
    "lives": re.compile(r"([A-Z][a-z]+) lives in ([A-Z][a-z]+)\."),
    "kin": re.compile(r"([A-Z][a-z]+)s (mother|sister|father|brother) is ([A-Z][a-z]+)\."),
    "rule": re.compile(r"([A-Z][a-z]+)s live with their (mother|sister|father|brother)s\."),
    "works": re.compile(r"([A-Z][a-z]+) works as (a|an) ([a-z]+)\."),
}


def _solve_relatives(facts: list[str], match: re.Match) -> Solution:
    tables: dict[str, dict] = {kind: {} for kind in _RELATIVE_FACTS}
    for line in facts:
        for kind, pattern in _RELATIVE_FACTS.items():
            m = pattern.fullmatch(line)
            if m:
                break
        else:
            raise ParseError(f"bad relatives line: {line!r}")
        if kind == "lives":
            _define(tables[kind], m[1], m[2], line)
        elif kind == "kin":
            _define(tables[kind], (m[1], m[2]), m[3], line)
        elif kind == "rule":
            _define(tables[kind], m[1].lower(), m[2], line)
        else:
            if (m[2] == "an") != (m[3][0] in "aeiou"):
                raise ParseError(f"wrong article: {line!r}")
            _define(tables[kind], m[1], m[3], line)
    subject = match[1]
    profession = tables["works"][subject]
    relation = tables["rule"][profession]
    relative = tables["kin"][(subject, relation)]
    country = tables["lives"][relative]
    path = (subject, profession, relation, relative, country)
    return Solution("relatives", country, frozenset(tables["lives"].values()), 4, path)


_SOLVERS = {
    "equations": _solve_equations,
    "lives-with": _solve_lives_with,
    "kingdoms": _solve_kingdoms,
    "functions": _solve_functions,
    "relatives": _solve_relatives,
}
