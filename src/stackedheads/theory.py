"""The information-flow model of Section 5 and Appendix B, simulated exactly.

Assumption 1: a position can attend to another only if they already share a piece of
information. Assumption 2: attending retrieves everything the attended position holds.
One layer is one union step: every position takes the union of what it holds with what every
position it may attend to holds.

For a single retrieval chain, Definition 1 orders the relevant positions ``s_0 .. s_{2D}``
(``s_0`` the query, ``s_{2k}`` / ``s_{2k+1}`` the second / first occurrence of ``x_k``) and
Definition 3 names the shared pieces ``e_0 .. e_{2D}`` (``e_{2k} = x_k``, ``e_{2k-1} = p_k``,
the positional encoding of pair ``k``). Before any layer ``s_0`` holds ``{e_0}`` and ``s_i``
holds ``{e_{i-1}, e_i}``. By Lemma 2 every position holds an interval of pieces, so the chain
simulation tracks two integers per position. Theorem 1 gives the bound ``ceil(log3(2D))``.

With causal masking a position may only attend to itself and earlier positions, in the actual
order of Section 6: pairs grouped by step with the deepest step first, then the query.

Conditional retrieval (Section 3.1; the functions and relatives formulations) is the same model
over arbitrary facts: each fact is a group of adjacent tokens sharing a positional piece, each
token also holds its symbol. :func:`min_layers_facts` simulates it with boolean set matrices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from stackedheads.errors import UsageError
from stackedheads.report.plots import pyplot, save_figure


def paper_bound(depth: int) -> int:
    """Theorem 1: no fewer than ``log3(2D)`` layers, i.e. ``ceil(log3(2D))`` (exact integer math)."""
    _check_depth(depth)
    t, power = 0, 1
    while power < 2 * depth:
        t, power = t + 1, power * 3
    return t


def _check_depth(depth: int) -> None:
    if depth < 1:
        raise UsageError(f"depth must be >= 1, got {depth}")


def chain_order(depth: int) -> np.ndarray:
    """Sequence position of each ``s_i`` in one chain laid out as in Section 6.

    Pair ``k`` sits in block ``D - k``: its first token (``s_{2k-1}``) at ``2(D - k)``, its
    second (``s_{2k}``) at ``2(D - k) + 1``; the query ``s_0`` comes last, at ``2D``. Other
    chains interleave but never share a piece with this one, so only the order matters.
    """
    D = depth
    pos = np.empty(2 * D + 1, dtype=np.int64)
    pos[0] = 2 * D
    k = np.arange(1, D + 1)
    pos[2 * k - 1] = 2 * (D - k)
    pos[2 * k] = 2 * (D - k) + 1
    return pos


def simulate_chain(depth: int, layers: int, causal: bool = False) -> np.ndarray:
    """Intervals held after each layer: ``(layers + 1, 2D + 1, 2)`` array of ``[lo, hi]``.

    Row ``t`` is after ``t`` layers; ``[t, i]`` is the interval of pieces held by ``s_i``.
    """
    _check_depth(depth)
    n = 2 * depth + 1
    idx = np.arange(n)
    lo, hi = np.maximum(idx - 1, 0), idx.copy()  # s_0 holds {e_0}; s_i holds {e_{i-1}, e_i}
    pos = chain_order(depth)
    allowed = pos[None, :] <= pos[:, None] if causal else np.ones((n, n), dtype=bool)
    out = [np.stack([lo, hi], axis=1)]
    for _ in range(layers):
        share = (lo[None, :] <= hi[:, None]) & (lo[:, None] <= hi[None, :]) & allowed
        lo = np.where(share, lo[None, :], n).min(axis=1)
        hi = np.where(share, hi[None, :], -1).max(axis=1)
        out.append(np.stack([lo, hi], axis=1))
    return np.stack(out)


def _first_layer_holding(depth: int, pieces: Sequence[int], causal: bool) -> list[int | None]:
    """For each piece, the fewest layers after which the query ``s_0`` holds it (None: never)."""
    n = 2 * depth + 1
    pos = chain_order(depth)
    allowed = pos[None, :] <= pos[:, None] if causal else np.ones((n, n), dtype=bool)
    idx = np.arange(n)
    lo, hi = np.maximum(idx - 1, 0), idx.copy()
    found: dict[int, int] = {}
    t = 0
    while True:
        for p in pieces:
            if p not in found and lo[0] <= p <= hi[0]:
                found[p] = t
        if len(found) == len(pieces):
            break
        share = (lo[None, :] <= hi[:, None]) & (lo[:, None] <= hi[None, :]) & allowed
        new_lo = np.where(share, lo[None, :], n).min(axis=1)
        new_hi = np.where(share, hi[None, :], -1).max(axis=1)
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            break  # a fixed point: nothing more will ever flow
        lo, hi, t = new_lo, new_hi, t + 1
    return [found.get(p) for p in pieces]


def min_layers(depth: int, causal: bool = False) -> int | None:
    """Fewest layers after which the query holds the target ``x_D`` (piece ``e_{2D}``)."""
    _check_depth(depth)
    return _first_layer_holding(depth, [2 * depth], causal)[0]


def min_layers_per_position(depth: int, causal: bool = True) -> list[int | None]:
    """For ``j = 1..D``, the fewest layers after which the query holds ``x_j`` (``e_{2j}``)."""
    _check_depth(depth)
    return _first_layer_holding(depth, [2 * j for j in range(1, depth + 1)], causal)


@dataclass(frozen=True)
class TheoryRow:
    depth: int
    paper_bound: int
    min_layers: int | None
    min_layers_causal: int | None
    min_layers_causal_per_position: list[int | None]

    def to_dict(self) -> dict:
        return asdict(self)


def theory_row(depth: int) -> TheoryRow:
    return TheoryRow(
        depth=depth,
        paper_bound=paper_bound(depth),
        min_layers=min_layers(depth),
        min_layers_causal=min_layers(depth, causal=True),
        min_layers_causal_per_position=min_layers_per_position(depth, causal=True),
    )


MAX_DEPTH = 200  # the table costs ~max_depth**3 (a few seconds at 200); the paper needs 50


def theory_table(max_depth: int) -> list[TheoryRow]:
    """One :class:`TheoryRow` per ``D = 1..max_depth`` (at most :data:`MAX_DEPTH`)."""
    if not 1 <= max_depth <= MAX_DEPTH:
        raise UsageError(f"'max_depth' must be between 1 and {MAX_DEPTH}, got {max_depth}", fields=("max_depth",))
    return [theory_row(d) for d in range(1, max_depth + 1)]


# --- conditional retrieval: arbitrary facts ---------------------------------------------------


def min_layers_facts(
    facts: Sequence[Sequence[str]], target: str, causal: bool = False, max_layers: int = 64
) -> int | None:
    """Fewest layers after which the query's last token holds ``target``.

    ``facts`` lists, in sequence order, groups of symbols; the last group is the query. Each
    token holds its symbol and its group's positional piece (the tokens of one fact are
    adjacent, as the two tokens of a pair are in Appendix B). Returns None if never.
    """
    symbols = sorted({s for f in facts for s in f})
    if target not in symbols:
        raise UsageError(f"target {target!r} does not occur in the facts")
    sym_id = {s: i for i, s in enumerate(symbols)}
    tokens = [(g, s) for g, f in enumerate(facts) for s in f]
    n, n_pieces = len(tokens), len(symbols) + len(facts)
    held = np.zeros((n, n_pieces), dtype=bool)
    for i, (g, s) in enumerate(tokens):
        held[i, sym_id[s]] = True
        held[i, len(symbols) + g] = True
    allowed = np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    q, tgt = n - 1, sym_id[target]
    for t in range(max_layers + 1):
        if held[q, tgt]:
            return t
        h = held.astype(np.float32)
        share = ((h @ h.T) > 0) & allowed
        new = (share.astype(np.float32) @ h) > 0
        if np.array_equal(new, held):
            return None
        held = new
    return None


def chain_facts(depth: int) -> tuple[list[tuple[str, ...]], str]:
    """One retrieval chain as facts (Section 6 order) and its target, for :func:`min_layers_facts`."""
    _check_depth(depth)
    facts = [(f"x{k - 1}", f"x{k}") for k in range(depth, 0, -1)] + [("x0",)]
    return facts, f"x{depth}"


def functions_facts(n: int = 4) -> tuple[list[tuple[str, ...]], str]:
    """The functions formulation (App. A.4) as facts: table, aliases, variables, query ``g(v)``."""
    # Each row's output gets its own symbol: the answer is that row's value, not any equal number.
    table = [(f"f{a}", f"v{i}", f"y{a}_{i}") for a in range(n) for i in range(n)]
    aliases = [(f"g{a}", f"f{a}") for a in range(n)]
    variables = [(f"u{i}", f"v{i}") for i in range(n)]
    return table + aliases + variables + [("g0", f"u{1 % n}")], f"y0_{1 % n}"


def relatives_facts(n: int = 4) -> tuple[list[tuple[str, ...]], str]:
    """The relatives formulation (App. A.5) as facts, query: where does subject 0 live?"""
    rels = ["mother", "sister", "father", "brother"]
    homes = [(f"r{s}{r}", f"c{s}{r}") for s in range(n) for r in rels]
    relations = [(f"p{s}", r, f"r{s}{r}") for s in range(n) for r in rels]
    rules = [(f"job{s}", rels[s % 4]) for s in range(n)]
    jobs = [(f"p{s}", f"job{s}") for s in range(n)]
    return homes + relations + rules + jobs + [("p0",)], f"c0{rels[0]}"


def plot_theory(rows: Sequence[TheoryRow], out_dir) -> list[str]:
    """Minimum layers vs D (no mask, causal, paper bound) as PNG and SVG; returns the paths."""
    from pathlib import Path

    from matplotlib import ticker

    plt = pyplot()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    d = [r.depth for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(d, [r.paper_bound for r in rows], where="mid", label=r"paper bound $\lceil\log_3 2D\rceil$")
    ax.plot(d, [r.min_layers for r in rows], "o-", label="simulated, no mask")
    ax.plot(d, [r.min_layers_causal for r in rows], "s--", label="simulated, causal mask")
    ax.set_xlabel("retrieval steps D")
    ax.set_ylabel("minimum layers")
    ax.set_title("Information flow (Sec. 5, App. B)")
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, out, "theory")


def save_table(rows: Sequence[TheoryRow], out_dir) -> list[str]:
    """``out_dir/theory.jsonl`` (one row per D) and the plot; returns the paths written."""
    import json
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from stackedheads.state.write import atomic_write_text

    atomic_write_text(out / "theory.jsonl", "".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    return [str(out / "theory.jsonl"), *plot_theory(rows, out)]
