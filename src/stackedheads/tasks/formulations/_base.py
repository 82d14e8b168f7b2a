"""The shared types and registry of :mod:`stackedheads.tasks.formulations` (its modules import from here, so the
package and its modules never import each other)."""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stackedheads.errors import UsageError
from stackedheads.registry import Registry

MAX_QUESTIONS = 100_000  # per call: a second or two; the paper asks 500 per formulation


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


@dataclass(frozen=True)
class Draft:
    """What a formulation's ``build`` returns: the fact lines, the question without the
    closing instruction, the correct answer, and metadata (``chains`` and ``query_chain``
    from the query end to the answer end, plus anything a solver needs)."""

    facts: list[str]
    question: str
    answer: str
    metadata: dict[str, Any]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Formulation:
    """Everything one formulation owns.

    Args:
        name: the registry key, also part of every question's seed string.
        conditional: False for retrieval (facts form chains), True for conditional retrieval
            (a step reads several facts: a DAG; Sec. 3.1).
        default_depth: D when none is given (Sec. 4 benchmarks D = 5); the only D when
            ``depth_limit`` is None.
        max_chains: the largest number of interleaved chains N the name pools allow.
        close: the closing instruction sentence (App. A), appended to the question.
        build: ``build(rng, depth, chains) -> Draft``; its only randomness is ``rng``.
        acceptable: ``acceptable(chains)``: the answers of the right kind (App. A); the
            correct answer is always one of them.
        depth_limit: ``depth_limit(chains)``: the largest D for N chains; None for a fixed
            depth (App. A.4, A.5).
    """

    name: str
    conditional: bool
    default_depth: int
    max_chains: int
    close: str
    build: Callable[[random.Random, int, int], Draft]
    acceptable: Callable[[int], Sequence[str]]
    depth_limit: Callable[[int], int] | None = None

    @property
    def variable_depth(self) -> bool:
        """Whether questions can be asked at several depths D (accuracy-vs-D curves)."""
        return self.depth_limit is not None

    def check_chains(self, chains: int) -> int:
        if not _is_int(chains) or chains < 1:
            raise UsageError(f"'chains' must be a whole number >= 1, got {chains!r}", fields=("chains",))
        if chains > self.max_chains:
            raise UsageError(
                f"'chains' {chains} exceeds the maximum of {self.max_chains} for formulation {self.name!r}", fields=("chains",)
            )
        return chains

    def max_depth(self, chains: int = 4) -> int:
        """The largest depth D for ``chains`` interleaved chains."""
        self.check_chains(chains)
        return self.default_depth if self.depth_limit is None else self.depth_limit(chains)

    def validate(self, depth: int | None, chains: int) -> int:
        """Check the arguments and return the resolved depth; raise UsageError on a mistake."""
        self.check_chains(chains)
        resolved = self.default_depth if depth is None else depth
        if not _is_int(resolved):
            raise UsageError(f"'depth' must be a whole number, got {depth!r}", fields=("depth",))
        if self.depth_limit is None:
            if resolved != self.default_depth:
                raise UsageError(
                    f"formulation {self.name!r} has a fixed depth of {self.default_depth}; got 'depth' {depth}", fields=("depth",)
                )
            return resolved
        limit = self.depth_limit(chains)
        if not 1 <= resolved <= limit:
            raise UsageError(
                f"'depth' {resolved} is out of range for formulation {self.name!r} with "
                f"'chains' {chains}: allowed 1..{limit}", fields=("depth", "chains"),
            )
        return resolved

    def generate(self, depth: int | None = None, chains: int = 4, seed: int = 0, index: int = 0) -> Question:
        """Question number ``index`` of stream ``seed``; the same arguments give the same
        Question on any machine."""
        resolved = self.validate(depth, chains)
        if not _is_int(seed):
            raise UsageError(f"'seed' must be a whole number, got {seed!r}", fields=("seed",))
        if not _is_int(index) or index < 0:
            raise UsageError(f"'index' must be a whole number >= 0, got {index!r}")
        rng = random.Random(f"stackedheads/{self.name}/{resolved}/{chains}/{seed}/{index}")
        draft = self.build(rng, resolved, chains)
        return Question(
            prompt="\n".join([*draft.facts, f"{draft.question} {self.close}"]),
            answer=draft.answer,
            acceptable=tuple(self.acceptable(chains)),
            formulation=self.name,
            depth=resolved,
            chains=chains,
            seed=seed,
            index=index,
            metadata=draft.metadata,
        )

    def generate_many(self, depth: int | None = None, chains: int = 4, n: int = 1, seed: int = 0) -> list[Question]:
        """Questions ``index = 0..n-1`` of stream ``seed`` (Sec. 4 benchmarks 500 per
        formulation), at most :data:`MAX_QUESTIONS` (all are held in memory; larger sets:
        several seeds)."""
        if not _is_int(n) or not 1 <= n <= MAX_QUESTIONS:
            raise UsageError(f"'n' must be a whole number between 1 and {MAX_QUESTIONS}, got {n!r}", fields=("n",))
        self.validate(depth, chains)  # fail once, before generating anything
        return [self.generate(depth, chains, seed, i) for i in range(n)]


FORMULATIONS: Registry[Formulation] = Registry("formulation", package="stackedheads.tasks.formulations")

