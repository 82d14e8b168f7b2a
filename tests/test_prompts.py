"""Tests for stackedheads.tasks.prompts (Sec. 4, App. A).

The generator is checked against an independent text-only solver (tests/prompt_solver.py)
and against the five complete examples printed in App. A, copied verbatim below.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prompt_solver import ParseError, solve  # noqa: E402

from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.tasks.prompts import (  # noqa: E402
    Question,
    default_depth,
    generate,
    generate_many,
    max_chains,
    max_depth,
    validate,
)

# The paper's five, F1-F5 of Sec. 4 (App. A): these tests know their text. A formulation added
# later registers after them and is tested like tests/test_extending.py.
FORMULATIONS = ("equations", "lives-with", "kingdoms", "functions", "relatives")
CHAIN_FORMULATIONS = ("equations", "lives-with", "kingdoms")


def test_registry_lists_the_paper_formulations_first():
    from stackedheads.tasks import prompts

    assert prompts.FORMULATIONS[:5] == FORMULATIONS


# App. A.1-A.5, verbatim: (prompt, correct answer, acceptable answers).
PAPER_EXAMPLES = {
    "equations": (
        "b = 2\n"
        "c = 3\n"
        "d = 0\n"
        "a = 1\n"
        "e = b\n"
        "g = a\n"
        "h = d\n"
        "f = c\n"
        "k = e\n"
        "i = f\n"
        "l = g\n"
        "j = h\n"
        "n = k\n"
        "p = l\n"
        "o = i\n"
        "m = j\n"
        "q = n\n"
        "s = p\n"
        "r = o\n"
        "t = m\n"
        "What is the value of s? Say directly only the numeric value, without any other words.",
        "1",
        ("0", "1", "2", "3"),
    ),
    "lives-with": (
        "Charlie lives in Cairo\n"
        "David lives in Delhi\n"
        "Alice lives in Berlin\n"
        "Bob lives in Amsterdam\n"
        "Henry lives with David\n"
        "Eve lives with Charlie\n"
        "Frank lives with Alice\n"
        "Grace lives with Bob\n"
        "Kate lives with Grace\n"
        "Larry lives with Frank\n"
        "Jack lives with Eve\n"
        "Isabelle lives with Henry\n"
        "Mary lives with Jack\n"
        "Olivia lives with Isabelle\n"
        "Nick lives with Kate\n"
        "Peter lives with Larry\n"
        "Rose lives with Peter\n"
        "Queen lives with Nick\n"
        "Tom lives with Olivia\n"
        "Sam lives with Mary\n"
        "Where does Rose live? Say directly only the name of the city, without any other words.",
        "Berlin",
        ("Amsterdam", "Berlin", "Cairo", "Delhi"),
    ),
    "kingdoms": (
        "Bob lives in Silvania.\n"
        "Alice lives in Novaria.\n"
        "Charlie lives in Aurora.\n"
        "David lives in Florinia.\n"
        "Silvanians believe in celestianism.\n"
        "Novarians believe in harmonianism.\n"
        "Aurorans believe in elysianism.\n"
        "Florinians believe in luminism.\n"
        "Luminists eat beef.\n"
        "Elysianists eat pork.\n"
        "Harmonianists eat lamb.\n"
        "Celestianists eat chicken.\n"
        "Beef contains Astralyte.\n"
        "Chicken contains Nephryon.\n"
        "Lamb contains Zephyrium.\n"
        "Pork contains Virellium.\n"
        "Zephyrium causes Chronogy.\n"
        "Astralyte causes Aetherflux.\n"
        "Virellium causes Somnosis.\n"
        "Nephryon causes Synthemia.\n"
        "Who has Chronogy? Say directly the name without other words.",
        "Alice",
        ("Alice", "Bob", "Charlie", "David"),
    ),
    "functions": (
        "a(0) = 3\n"
        "a(1) = 2\n"
        "a(2) = 0\n"
        "a(3) = 1\n"
        "b(0) = 1\n"
        "b(1) = 3\n"
        "b(2) = 2\n"
        "b(3) = 0\n"
        "c(0) = 1\n"
        "c(1) = 0\n"
        "c(2) = 3\n"
        "c(3) = 2\n"
        "d(0) = 1\n"
        "d(1) = 0\n"
        "d(2) = 2\n"
        "d(3) = 3\n"
        "e = b\n"
        "f = a\n"
        "g = c\n"
        "h = d\n"
        "i = 0\n"
        "j = 2\n"
        "k = 3\n"
        "l = 1\n"
        "What is the value of f(i)? Say directly only the numeric value, without any other words.",
        "3",
        ("0", "1", "2", "3"),
    ),
    "relatives": (
        "Penny lives in Canada.\n"
        "Lily lives in Brazil.\n"
        "Isabelle lives in France.\n"
        "Cathy lives in Kenya.\n"
        "George lives in Italy.\n"
        "Adam lives in Mexico.\n"
        "Kevin lives in Peru.\n"
        "Ed lives in Laos.\n"
        "Hank lives in Germany.\n"
        "Mike lives in Japan.\n"
        "Jane lives in England.\n"
        "Fred lives in Hungary.\n"
        "Dana lives in Norway.\n"
        "Olivia lives in Qatar.\n"
        "Bob lives in Denmark.\n"
        "Nancy lives in Argentina.\n"
        "Johns mother is Jane.\n"
        "Johns sister is Olivia.\n"
        "Johns father is Ed.\n"
        "Johns brother is Mike.\n"
        "Chriss mother is Penny.\n"
        "Chriss sister is Dana.\n"
        "Chriss father is Adam.\n"
        "Chriss brother is George.\n"
        "Dianas mother is Nancy.\n"
        "Dianas sister is Isabelle.\n"
        "Dianas father is Hank.\n"
        "Dianas brother is Bob.\n"
        "Eves mother is Lily.\n"
        "Eves sister is Cathy.\n"
        "Eves father is Fred.\n"
        "Eves brother is Kevin.\n"
        "Doctors live with their brothers.\n"
        "Lawyers live with their mothers.\n"
        "Teachers live with their sisters.\n"
        "Engineers live with their fathers.\n"
        "John works as a doctor.\n"
        "Chris works as an engineer.\n"
        "Diana works as a teacher.\n"
        "Eve works as a lawyer.\n"
        "Where does Eve live? Say directly only the name, without any other words.",
        "Brazil",
        (
            "Argentina", "Brazil", "Canada", "Denmark", "England", "France", "Germany",
            "Hungary", "Italy", "Japan", "Kenya", "Laos", "Mexico", "Norway", "Peru", "Qatar",
        ),
    ),
}

GOLDEN_LIVES_WITH = (
    "Bob lives in Amsterdam\n"
    "Alice lives in Berlin\n"
    "David lives with Bob\n"
    "Charlie lives with Alice\n"
    "Where does David live? Say directly only the name of the city, without any other words."
)
GOLDEN_LIVES_WITH_ANSWER = "Amsterdam"


# --- helpers -----------------------------------------------------------------------------------


def _facts(prompt: str) -> list[str]:
    return prompt.split("\n")[:-1]


def _question(prompt: str) -> str:
    return prompt.split("\n")[-1]


def _blocks(lines: list[str], sizes: list[int]) -> list[list[str]]:
    assert sum(sizes) == len(lines)
    out, start = [], 0
    for size in sizes:
        out.append(lines[start:start + size])
        start += size
    return out


_LINE = re.compile(r"(\S+) (.*) (\w+)(\.?)")


def _shape(block: list[str]) -> tuple:
    """What a block determines up to the shuffling and random assignment the paper does:
    the multisets of first and last words and the sentence templates."""
    parts = [_LINE.fullmatch(line) for line in block]
    assert all(parts), block
    return (
        sorted(m[1] for m in parts),
        sorted(m[3] for m in parts),
        sorted(f"{m[2]} #{m[4]}" for m in parts),
    )


def _mask_last(line: str) -> str:
    # The article goes with the masked profession ("works as an engineer").
    return re.sub(r"(?:\ban? )?\w+(\.?)$", r"#\1", line)


def _ask(prompt: str, old: str, new: str) -> str:
    """The same prompt with the queried entity x_0 replaced by another chain's x_0."""
    lines = prompt.split("\n")
    pattern = rf"(?<= ){re.escape(old)}(?=(?: live)?\?)"
    lines[-1], count = re.subn(pattern, new, lines[-1], count=1)
    assert count == 1
    return "\n".join(lines)


def _sizes(formulation: str, depth: int, n: int) -> list[int]:
    if formulation in CHAIN_FORMULATIONS:
        return [n] * depth
    if formulation == "functions":
        return [n * n, n, n]
    return [4 * n, 4 * n, n, n]


def _check_question(q: Question) -> None:
    """Everything a generated question must satisfy, checked through the text only."""
    n = q.chains
    lines = q.prompt.split("\n")
    assert len(lines) == sum(_sizes(q.formulation, q.depth, n)) + 1
    assert len(set(lines)) == len(lines)
    assert all(line == line.strip() and line for line in lines)

    solution = solve(q.prompt)
    assert solution.formulation == q.formulation
    assert solution.answer == q.answer
    assert q.answer in q.acceptable
    assert solution.candidates == set(q.acceptable)
    assert len(q.acceptable) == len(set(q.acceptable))
    assert solution.steps == q.depth
    assert list(solution.path) == q.metadata["query_chain"]
    assert q.chance == pytest.approx(1 / len(q.acceptable))

    chains = q.metadata["chains"]
    expected = n * n if q.formulation == "functions" else n
    assert len(chains) == expected
    assert all(len(chain) == q.depth + 1 for chain in chains)
    # Every chain, not just the queried one, leads where the metadata says.
    for chain in chains:
        other = solve(_ask(q.prompt, q.metadata["query_chain"][0], chain[0]))
        assert other.answer == chain[-1]
        assert list(other.path) == chain
    if q.formulation in CHAIN_FORMULATIONS:
        # Interleaved chains end in distinct acceptable answers (Sec. 4).
        assert sorted(chain[-1] for chain in chains) == sorted(q.acceptable)
    assert json.loads(json.dumps(q.to_dict())) == q.to_dict()


# --- App. A examples -----------------------------------------------------------------------


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_solver_reproduces_paper_answers(formulation):
    prompt, correct, acceptable = PAPER_EXAMPLES[formulation]
    solution = solve(prompt)
    assert solution.formulation == formulation
    assert solution.answer == correct
    assert solution.candidates == set(acceptable)
    assert solution.steps == default_depth(formulation)


def test_solver_rejects_malformed_prompts():
    prompt = PAPER_EXAMPLES["relatives"][0]
    with pytest.raises(ParseError):
        solve(prompt.replace("Johns mother", "John's mother"))
    with pytest.raises(ParseError):
        solve(prompt.replace("works as an engineer", "works as a engineer"))
    with pytest.raises(ParseError):
        solve(PAPER_EXAMPLES["equations"][0].replace("b = 2", "b = 2."))
    with pytest.raises(ParseError):
        solve(PAPER_EXAMPLES["lives-with"][0] + "\nRose lives with Alice")


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("seed", range(3))
def test_same_shape_as_paper_example(formulation, seed):
    """At N = 4 and the paper's depth the generator produces App. A's example up to the
    random assignment and the shuffling within a step: same blocks, same entities per
    block, same sentence templates, same closing sentence."""
    paper = PAPER_EXAMPLES[formulation][0]
    q = generate(formulation, chains=4, seed=seed)
    assert q.depth == default_depth(formulation)
    sizes = _sizes(formulation, q.depth, 4)
    ours_blocks = _blocks(_facts(q.prompt), sizes)
    paper_blocks = _blocks(_facts(paper), sizes)
    fixed_order = {"functions": (0, 1, 2), "relatives": (1, 3)}.get(formulation, ())
    for k, (ours, theirs) in enumerate(zip(ours_blocks, paper_blocks)):
        if k in fixed_order:  # printed in a fixed order: only the values are random
            assert [_mask_last(x) for x in ours] == [_mask_last(x) for x in theirs]
        assert _shape(ours) == _shape(theirs)
    # The question line differs only in the queried entity, which is one the paper could ask.
    pattern = r"^(.*?\b(?:of|does|in|eats|consumes|has) )(\S+?)((?: live)?\?.*)$"
    ours_q = re.fullmatch(pattern, _question(q.prompt))
    theirs_q = re.fullmatch(pattern, _question(paper))
    assert ours_q and theirs_q
    assert (ours_q[1], ours_q[3]) == (theirs_q[1], theirs_q[3])
    assert solve(_ask(paper, theirs_q[2], ours_q[2])).answer in PAPER_EXAMPLES[formulation][2]
    assert q.acceptable == PAPER_EXAMPLES[formulation][2]


@pytest.mark.parametrize(
    ("formulation", "sentence"),
    [
        ("equations", "Say directly only the numeric value, without any other words."),
        ("lives-with", "Say directly only the name of the city, without any other words."),
        ("kingdoms", "Say directly the name without other words."),
        ("functions", "Say directly only the numeric value, without any other words."),
        ("relatives", "Say directly only the name, without any other words."),
    ],
)
@pytest.mark.parametrize("chains", [1, 2, 4])
def test_closing_sentence_verbatim(formulation, sentence, chains):
    q = generate(formulation, chains=chains, seed=7)
    assert _question(q.prompt).endswith("? " + sentence)
    assert _question(PAPER_EXAMPLES[formulation][0]).endswith("? " + sentence)


def test_punctuation_as_printed():
    for formulation in FORMULATIONS:
        facts = _facts(generate(formulation, chains=3, seed=1).prompt)
        if formulation in ("equations", "lives-with", "functions"):
            assert not any(line.endswith(".") for line in facts)
        else:
            assert all(line.endswith(".") for line in facts)
    relatives = generate("relatives", chains=4, seed=0).prompt
    assert "Johns mother is " in relatives
    assert "Chriss father is " in relatives
    assert "'" not in relatives
    assert re.search(r"^Chris works as an? \w+\.$", relatives, re.M)


def test_kingdoms_questions_per_depth():
    expected = {
        1: r"Who lives in [A-Z][a-z]+\?",
        2: r"Who believes in [a-z]+ism\?",
        3: r"Who eats [a-z]+\?",
        4: r"Who consumes [A-Z][a-z]+\?",
        5: r"Who has [A-Z][a-z]+\?",
    }
    for depth, pattern in expected.items():
        q = generate("kingdoms", depth=depth, chains=4, seed=3)
        assert re.match(pattern + " Say directly the name without other words.$",
                        _question(q.prompt))
    # D = 5 with the paper's pools asks about one of the paper's diseases.
    diseases = {"Chronogy", "Aetherflux", "Somnosis", "Synthemia"}
    assert _question(generate("kingdoms", chains=4).prompt).split()[2][:-1] in diseases


# --- ordering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("formulation", ["equations", "lives-with"])
@pytest.mark.parametrize(("depth", "chains"), [(5, 4), (20, 4), (3, 7), (1, 1)])
def test_steps_deepest_first(formulation, depth, chains):
    q = generate(formulation, depth=depth, chains=chains, seed=11)
    blocks = _blocks(_facts(q.prompt), [chains] * depth)
    if formulation == "equations":
        pairs = [[line.split(" = ") for line in block] for block in blocks]
        assert all(value.isdigit() for _, value in pairs[0])
    else:
        pairs = [[re.split(r" lives (?:in|with) ", line) for line in block] for block in blocks]
        assert all(" lives in " in line for line in blocks[0])
        assert not any(" lives in " in line for block in blocks[1:] for line in block)
    for k in range(1, depth):
        defined = {name for name, _ in pairs[k - 1]}
        assert {ref for _, ref in pairs[k]} == defined
    last = {name for name, _ in pairs[-1]}
    queried = q.metadata["query_chain"][0]
    assert queried in last
    assert re.search(rf" {re.escape(queried)}(?: live)?\?", _question(q.prompt))


def test_equations_names_in_step_order():
    q = generate("equations", depth=20, chains=4, seed=5)
    names = [line.split(" = ")[0] for line in _facts(q.prompt)]
    letters = [chr(ord("a") + i) for i in range(26)]
    expected = letters + [a + b for a in letters for b in letters]
    for k in range(20):
        assert sorted(names[4 * k:4 * k + 4], key=expected.index) == expected[4 * k:4 * k + 4]


def test_lives_with_persons_in_pool_order():
    q = generate("lives-with", depth=5, chains=4, seed=2)
    paper_blocks = _blocks(_facts(PAPER_EXAMPLES["lives-with"][0]), [4] * 5)
    ours_blocks = _blocks(_facts(q.prompt), [4] * 5)
    for ours, theirs in zip(ours_blocks, paper_blocks):
        assert {x.split()[0] for x in ours} == {x.split()[0] for x in theirs}


def test_shuffled_within_steps():
    orders = {
        tuple(line.split()[0] for line in _facts(generate("equations", 2, 4, seed=s).prompt)[:4])
        for s in range(20)
    }
    assert len(orders) > 5
    rules = {
        tuple(_facts(generate("relatives", chains=4, seed=s).prompt)[32:36]) for s in range(20)
    }
    assert len({tuple(r.split()[0] for r in rule) for rule in rules}) > 3


def test_functions_layout():
    for seed in range(10):
        q = generate("functions", chains=4, seed=seed)
        facts = _facts(q.prompt)
        table = [re.fullmatch(r"([a-d])\((\d)\) = (\d)", line) for line in facts[:16]]
        assert all(table)
        assert [(m[1], m[2]) for m in table] == [(f, str(x)) for f in "abcd" for x in range(4)]
        for f in "abcd":  # every function is a permutation of 0..N-1
            assert sorted(m[3] for m in table if m[1] == f) == ["0", "1", "2", "3"]
        aliases = [line.split(" = ") for line in facts[16:20]]
        assert [a for a, _ in aliases] == list("efgh")
        assert sorted(f for _, f in aliases) == list("abcd")
        variables = [line.split(" = ") for line in facts[20:24]]
        assert [v for v, _ in variables] == list("ijkl")
        assert sorted(x for _, x in variables) == ["0", "1", "2", "3"]
        assert re.fullmatch(r"What is the value of [e-h]\([i-l]\)\? .*", _question(q.prompt))


def test_relatives_layout():
    for n in (1, 3, 4, 6, 10):
        q = generate("relatives", chains=n, seed=n)
        lives, kin, rules, works = _blocks(_facts(q.prompt), _sizes("relatives", 4, n))
        subjects = [line.split()[0] for line in works]
        assert subjects == ["John", "Chris", "Diana", "Eve", "Alex", "Maria", "Paul", "Sofia",
                            "Tim", "Ruth"][:n]
        relations = ["mother", "sister", "father", "brother"]
        assert [line.split()[:2] for line in kin] == [
            [f"{s}s", r] for s in subjects for r in relations
        ]
        relatives = [line.split()[-1][:-1] for line in kin]
        assert sorted(relatives) == sorted(line.split()[0] for line in lives)
        assert len(set(relatives)) == 4 * n
        assert not set(relatives) & set(subjects)
        professions = [line.split()[-1][:-1] for line in works]
        assert len(set(professions)) == n
        assert sorted(p.capitalize() + "s" for p in professions) == sorted(
            line.split()[0] for line in rules
        )
        used = [line.split()[-1] for line in rules]
        if n <= 4:
            assert len(set(used)) == n
        else:
            assert set(used) == {r + "s." for r in relations}


# --- property tests ----------------------------------------------------------------------------


@st.composite
def _arguments(draw, formulation):
    top = {"equations": 12, "lives-with": max_chains("lives-with")}.get(
        formulation, max_chains(formulation)
    )
    chains = draw(st.integers(1, top))
    if formulation in CHAIN_FORMULATIONS:
        depth = draw(st.integers(1, min(max_depth(formulation, chains), 30)))
    else:
        depth = draw(st.sampled_from([None, default_depth(formulation)]))
    seed = draw(st.integers(-(2**40), 2**40))
    index = draw(st.integers(0, 10_000))
    return formulation, depth, chains, seed, index


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_solver_agrees(formulation, data):
    formulation, depth, chains, seed, index = data.draw(_arguments(formulation))
    q = generate(formulation, depth, chains, seed, index)
    assert (q.formulation, q.chains, q.seed, q.index) == (formulation, chains, seed, index)
    assert q.depth == (default_depth(formulation) if depth is None else depth)
    _check_question(q)


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_extremes(formulation):
    top = max_chains(formulation)
    cases = [(1, 1), (top, 1)]
    if formulation in CHAIN_FORMULATIONS:
        cases += [(4, max_depth(formulation, 4)), (1, max_depth(formulation, 1))]
    for chains, depth in cases:
        if formulation not in CHAIN_FORMULATIONS:
            depth = None
        _check_question(generate(formulation, depth, chains, seed=1))


# --- limits, pools and errors ---------------------------------------------------------------


def test_limits():
    assert {f: default_depth(f) for f in FORMULATIONS} == {
        "equations": 5, "lives-with": 5, "kingdoms": 5, "functions": 2, "relatives": 4,
    }
    assert max_depth("equations", 4) >= 20
    assert max_depth("lives-with", 4) >= 30
    assert max_depth("lives-with", 1) >= 120
    assert max_depth("kingdoms", 4) == 5
    assert max_depth("functions", 4) == 2
    assert max_depth("relatives", 4) == 4
    assert max_chains("functions") == 8
    assert min(max_chains(f) for f in FORMULATIONS) >= 8
    for f in FORMULATIONS:
        assert validate(f, None, 4) == default_depth(f)


def test_pools_are_clean():
    # All persons appear at N = 1 and maximal depth; all cities at maximal N.
    persons = [line.split()[0] for line in _facts(
        generate("lives-with", max_depth("lives-with", 1), 1).prompt)]
    cities = generate("lives-with", 1, max_chains("lives-with")).acceptable
    assert len(set(persons)) == len(persons) >= 120
    for names in (persons, cities):
        assert all(re.fullmatch(r"[A-Z][a-z]+", x) for x in names)
        assert not [(a, b) for a in names for b in names if a != b and b.startswith(a)]
    assert not set(persons) & set(cities)
    n = max_chains("kingdoms")
    facts = _facts(generate("kingdoms", 5, n).prompt)
    entities = [line.split()[0] for line in facts[:n]]  # persons
    entities += [line.split()[-1][:-1].lower() for line in facts]  # every later level
    assert len(set(entities)) == len(entities) == 6 * n
    n = max_chains("relatives")
    q = generate("relatives", chains=n)
    assert len(set(q.acceptable)) == 4 * n
    assert all(re.fullmatch(r"[A-Z][a-z]+", c) for c in q.acceptable)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: generate("equation"), "equations"),
        (lambda: generate("equations", depth=0), "1..175"),
        (lambda: generate("equations", depth=176, chains=4), "1..175"),
        (lambda: generate("lives-with", depth=max_depth("lives-with", 4) + 1), "1..37"),
        (lambda: generate("kingdoms", depth=6), "1..5"),
        (lambda: generate("kingdoms", depth=-1), "1..5"),
        (lambda: generate("equations", chains=0), ">= 1"),
        (lambda: generate("equations", chains=-3), ">= 1"),
        (lambda: generate("functions", chains=9), "maximum of 8"),
        (lambda: generate("relatives", chains=max_chains("relatives") + 1), "maximum of"),
        (lambda: generate("kingdoms", chains=max_chains("kingdoms") + 1), "maximum of"),
        (lambda: generate("lives-with", chains=max_chains("lives-with") + 1), "maximum of"),
        (lambda: generate("lives-with", chains=40), "1..3"),  # default D = 5 too deep
        (lambda: generate("functions", depth=3), "fixed depth of 2"),
        (lambda: generate("functions", depth=1), "fixed depth of 2"),
        (lambda: generate("relatives", depth=2), "fixed depth of 4"),
        (lambda: generate("equations", depth=2.0), "whole number"),
        (lambda: generate("equations", index=-1), "index"),
        (lambda: generate_many("equations", n=0), "'n' must be"),
        (lambda: max_depth("functions", 0), ">= 1"),
        (lambda: default_depth("nope"), "equations, lives-with, kingdoms, functions, relatives"),
        (lambda: validate("relatives", None, 11), "maximum of 10"),
    ],
)
def test_usage_errors(call, needle):
    with pytest.raises(UsageError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert needle in message


# --- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_deterministic(formulation):
    a = generate(formulation, chains=4, seed=3, index=2)
    b = generate(formulation, chains=4, seed=3, index=2)
    assert a == b and a.to_dict() == b.to_dict()
    assert generate(formulation, default_depth(formulation), 4, 3, 2) == a
    prompts = {generate(formulation, chains=4, seed=s).prompt for s in range(10)}
    assert len(prompts) == 10
    many = generate_many(formulation, chains=4, n=5, seed=3)
    assert [q.index for q in many] == list(range(5))
    assert many[2] == a
    assert len({q.prompt for q in many}) == 5


def test_to_dict_keys():
    d = generate("lives-with", 2, 2).to_dict()
    assert set(d) >= {"prompt", "answer", "acceptable", "formulation", "depth", "chains",
                      "seed", "index", "metadata"}
    assert f" {d['metadata']['query_chain'][0]} live?" in _question(d["prompt"])
    assert d["answer"] == d["metadata"]["query_chain"][-1]
    assert isinstance(d["acceptable"], list)


def test_golden_sample():
    """Pins the stream: a change here changes every benchmark question."""
    q = generate("lives-with", depth=2, chains=2, seed=0)
    assert q.prompt == GOLDEN_LIVES_WITH
    assert q.answer == GOLDEN_LIVES_WITH_ANSWER


def test_independent_of_hash_seed():
    code = (
        "from stackedheads.tasks.prompts import generate\n"
        f"print(repr([generate(f, chains=3, seed=9, index=4).to_dict() for f in {FORMULATIONS!r}]))"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, check=True)
        outputs.add(result.stdout)
    here = repr([generate(f, chains=3, seed=9, index=4).to_dict() for f in FORMULATIONS])
    assert outputs == {here + "\n"}
