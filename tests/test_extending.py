"""Extension points, used the way a newcomer would: from outside the package (docs/extending.md).

Each test registers its own entry, checks that the library, the CLI and the benchmark find it,
and unregisters it again, so that the other tests see only the built-ins.
"""

from __future__ import annotations

import json
import random

import pytest

# --- formulations ------------------------------------------------------------------------------

_FORMULATION_NAME = "toy-boxes"
_FORMULATION_COLOURS = ("red", "green", "blue", "yellow", "white", "black")


def _formulation_build(rng: random.Random, depth: int, chains: int):
    """Box ``B1x`` holds a coloured ball; box ``Bkx`` holds what a box of step k-1 holds."""
    from stackedheads.tasks.formulations import Draft

    paths = [[c] for c in rng.sample(_FORMULATION_COLOURS[:chains], chains)]  # answer end first
    facts = []
    for step in range(1, depth + 1):
        boxes = [f"B{step}{chr(ord('a') + i)}" for i in rng.sample(range(chains), chains)]
        for box, path in zip(boxes, paths):
            held = f"a {path[-1]} ball" if step == 1 else f"what {path[-1]} holds"
            facts.append(f"{box} holds {held}.")
            path.append(box)
    query = rng.randrange(chains)
    forward = [list(reversed(p)) for p in paths]  # query end first, as the built-ins store it
    return Draft(facts, f"Which colour is the ball in {paths[query][-1]}?", paths[query][0],
                 {"chains": forward, "query_chain": forward[query]})


def _formulation_toy():
    from stackedheads.tasks.formulations import Formulation

    return Formulation(
        name=_FORMULATION_NAME,
        conditional=False,
        default_depth=2,
        max_chains=len(_FORMULATION_COLOURS),
        close="Say directly only the colour, without any other words.",
        build=_formulation_build,
        acceptable=lambda chains: sorted(_FORMULATION_COLOURS[:chains]),
        depth_limit=lambda chains: 9,  # box names carry the step as one digit
    )


def test_add_a_formulation_from_outside(cli):
    from stackedheads.errors import UsageError
    from stackedheads.llm.bench import (
        BenchConfig,
        cells,
        few_shot_examples,
        parse_formulations,
        plan,
    )
    from stackedheads.tasks import prompts
    from stackedheads.tasks.formulations import FORMULATIONS

    builtins = prompts.FORMULATIONS
    assert _FORMULATION_NAME not in FORMULATIONS
    toy = _formulation_toy()
    FORMULATIONS.register(toy.name, toy)
    try:
        assert prompts.FORMULATIONS == (*builtins, _FORMULATION_NAME)
        assert prompts.default_depth(_FORMULATION_NAME) == 2
        assert prompts.max_depth(_FORMULATION_NAME, 3) == 9
        assert prompts.max_chains(_FORMULATION_NAME) == 6
        with pytest.raises(UsageError, match="allowed 1..9"):
            prompts.generate(_FORMULATION_NAME, depth=10)

        # The public API: answers among the acceptable ones, the same question every time.
        q = prompts.generate(_FORMULATION_NAME, depth=3, chains=3, seed=1, index=2)
        assert q.formulation == _FORMULATION_NAME and q.depth == 3 and q.chains == 3
        assert q.answer in q.acceptable and q.acceptable == ("blue", "green", "red")
        assert q.prompt.endswith("? " + toy.close)
        assert len(q.prompt.splitlines()) == 3 * 3 + 1
        assert q == prompts.generate(_FORMULATION_NAME, depth=3, chains=3, seed=1, index=2)
        many = prompts.generate_many(_FORMULATION_NAME, depth=3, chains=3, n=20, seed=1)
        assert many[2] == q and all(x.answer in x.acceptable for x in many)
        assert len({x.prompt for x in many}) > 1  # the index moves the stream
        # The toy's metadata names the answer at the end of the asked chain.
        assert all(x.metadata["query_chain"][-1] == x.answer for x in many)

        # The CLI finds it by name.
        args = ["prompts", "--formulation", _FORMULATION_NAME, "--depth", "3", "--chains", "3",
                "--n", "20", "--seed", "1"]
        result = cli(*args)
        assert result.code == 0, result.err
        assert [json.loads(line) for line in result.out.splitlines()] == [x.to_dict() for x in many]

        # The LLM benchmark plans it, at its own depths and by default among all.
        assert parse_formulations(_FORMULATION_NAME) == (_FORMULATION_NAME,)
        assert _FORMULATION_NAME in BenchConfig().formulations
        cfg = BenchConfig(formulations=(_FORMULATION_NAME,), depths=(1, 3), chains=3, n=4, seed=0)
        assert cells(cfg) == [(_FORMULATION_NAME, 1), (_FORMULATION_NAME, 3)]
        planned = plan(cfg)
        assert [(x.depth, x.index) for x in planned] == [(d, i) for d in (1, 3) for i in range(4)]
        assert all(x.formulation == _FORMULATION_NAME and x.answer in x.acceptable for x in planned)
        assert len(few_shot_examples(planned[0], 2)) == 2
    finally:
        FORMULATIONS.unregister(_FORMULATION_NAME)
    assert prompts.FORMULATIONS == builtins
    with pytest.raises(UsageError, match="unknown formulation"):
        prompts.generate(_FORMULATION_NAME)
