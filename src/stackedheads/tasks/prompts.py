"""Natural-language prompts for the retrieval problem (Sec. 4, App. A), by formulation name.

A facade over the registry :data:`stackedheads.tasks.formulations.FORMULATIONS`, where each
formulation lives in its own module (see that package for the formulations and how to add
one). ``FORMULATIONS`` here is the tuple of registered names, F1-F5 of Sec. 4 first.
"""

from __future__ import annotations

from stackedheads.tasks.formulations import FORMULATIONS as _REGISTRY
from stackedheads.tasks.formulations import MAX_QUESTIONS, Question

__all__ = [
    "FORMULATIONS",
    "MAX_QUESTIONS",
    "Question",
    "default_depth",
    "generate",
    "generate_many",
    "max_chains",
    "max_depth",
    "validate",
]

FORMULATIONS: tuple[str, ...]  # declared for readers and type checkers; see __getattr__


def __getattr__(name: str) -> tuple[str, ...]:
    # ``FORMULATIONS`` is read from the registry on each access, so that it lists the
    # formulations registered after this module was imported too.
    if name == "FORMULATIONS":
        return _REGISTRY.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def max_chains(formulation: str) -> int:
    """The largest number of interleaved chains ``N`` the name pools allow (at depth 1)."""
    return _REGISTRY[formulation].max_chains


def max_depth(formulation: str, chains: int = 4) -> int:
    """The largest depth ``D`` for ``chains`` interleaved chains.

    Equations and lives-with use a fresh block of ``N`` names per step (App. A.1, A.2), so
    ``D * N`` is bounded by the name pool; kingdoms has five relations (App. A.3); functions
    and relatives have a fixed structure (App. A.4, A.5).
    """
    return _REGISTRY[formulation].max_depth(chains)


def default_depth(formulation: str) -> int:
    """Depth used when none is given: D = 5 as benchmarked in Sec. 4 / App. A.1-A.3; the
    fixed depths of the conditional formulations (App. A.4, A.5)."""
    return _REGISTRY[formulation].default_depth


def validate(formulation: str, depth: int | None, chains: int) -> int:
    """Check the arguments and return the resolved depth; raise UsageError on a mistake."""
    return _REGISTRY[formulation].validate(depth, chains)


def generate(
    formulation: str,
    depth: int | None = None,
    chains: int = 4,
    seed: int = 0,
    index: int = 0,
) -> Question:
    """Generate question number ``index`` of stream ``seed``; the same arguments give the
    same Question on any machine."""
    return _REGISTRY[formulation].generate(depth, chains, seed, index)


def generate_many(
    formulation: str,
    depth: int | None = None,
    chains: int = 4,
    n: int = 1,
    seed: int = 0,
) -> list[Question]:
    """Questions ``index = 0..n-1`` of stream ``seed`` (Sec. 4 benchmarks 500 per formulation),
    at most :data:`MAX_QUESTIONS` (all are held in memory; larger sets: several seeds)."""
    check_seed(seed)
    return _REGISTRY[formulation].generate_many(depth, chains, n, seed)


def check_seed(seed: object) -> None:
    """A user's question stream follows the seed rule of every seed (0 to 2**63-1, as
    :func:`~stackedheads.state.write.check_seeds`); the negative streams are the few-shot examples'."""
    from stackedheads.errors import UsageError
    from stackedheads.state.write import MAX_SEED

    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"'seed' must be a whole number from 0 to 2**63-1, got {seed!r}", fields=("seed",))
