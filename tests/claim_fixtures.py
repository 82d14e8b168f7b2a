"""Fabricated stage files for the Sections 8-9 claims: a training summary, a discovery summary and
an emergence timeline, as the trainer, ``circuit discover`` and ``emergence`` write them."""

from stackedheads.emergence import position_emergence, position_order
from stackedheads.ordering import order_of

DEPTH = 3
PAIR_LINKS = [[0, 0, 2, 1], [0, 0, 4, 3], [0, 0, 6, 5]]  # the first head links every pair (8.2 i)


def train(final=0.005, parts=(0.004, 0.005, 0.006), n_layers=12, chains=4, steps=None):
    steps_ = {} if steps is None else {"steps": steps}
    return {
        "config": {"n_layers": n_layers, "n_heads": 1, "task": {"chains": chains, "depth": DEPTH}, **steps_},
        "seeds": {"0": {"final_val_loss": final, "final_partial": {f"val_x{j}": p for j, p in enumerate(parts, start=1)}}},
    }


def pair_maps(paths, n_layers=12):
    """Every head's attention on the pair links as a discovery records it: 0.95 where the head
    keeps the link's path, 0.1 where it does not (tests that part the two give their own)."""
    return [[l, 0, [0.95 if [l, 0, 2 * k, 2 * k - 1] in [list(p) for p in paths] else 0.1 for k in range(1, DEPTH + 1)]]
            for l in range(n_layers)]


def found(paths=(*PAIR_LINKS, [5, 0, 0, 2], [7, 0, 0, 4], [9, 0, 0, 6]), combined=(0.02, 0.03, 0.04),
          unexplained=(), kind="absolute", threshold=0.05, groups=(), serves=None, pair_attention=None):
    budgets = [threshold] * DEPTH
    with_paths = sorted({(p[0], p[1]) for p in paths})
    useful = sorted(set(with_paths) | {(l, h) for l, h, _ in unexplained})
    return {
        "threshold": threshold, "threshold_kind": kind, "tolerance": 0.04, "budgets": budgets, "model_over_budget": [],
        "unablated": {"loss": 0.005, "partial": [0.004, 0.005, 0.006]},
        "combined": {"loss": sum(combined) / DEPTH, "partial": list(combined)},
        "over_budget": [f"x{j}" for j, (p, b) in enumerate(zip(combined, budgets), start=1) if p > b],
        "useful_heads": [list(u) for u in useful], "n_useful_heads": len(useful),
        "heads_with_paths": [list(h) for h in with_paths], "theory_min_heads": 3,
        "unexplained_heads": [list(u) for u in unexplained], "paths": [list(p) for p in paths],
        "redundant_groups": [list(g) for g in groups], "serves": serves or {}, "n_search": 64, "n_check": 64,
        "losses": [], "pair_attention": pair_maps(paths) if pair_attention is None else pair_attention,
    }


def timeline(seen, serves, groups=(), depth=4, drops=(100, 200, 300, 400)):
    """A timeline.json as :func:`stackedheads.emergence.timeline` writes it, from the first
    checkpoint at which each path is at or above 0.5 (checkpoints every 80 steps)."""
    emerged = {k: (None if v is None else v - 40.0) for k, v in seen.items()}
    positions = position_emergence(emerged, seen, serves, [list(g) for g in groups], depth)
    for p in positions.values():
        p["epoch"] = None if p["step"] is None else p["step"] / 8
    first = min((v for v in seen.values() if v is not None), default=None)
    drops = {f"x{j}": s for j, s in enumerate(drops, start=1)}
    return {
        "steps": list(range(0, 6401, 80)), "epochs": [s / 8 for s in range(0, 6401, 80)],
        "emerged": emerged, "emerged_seen": seen, "serves": serves, "groups": [list(g) for g in groups],
        "positions": positions, "order": position_order(positions),
        "first_paths": sorted(k for k, v in seen.items() if v is not None and v == first),
        "plateau_steps": min((v for v in emerged.values() if v is not None), default=None),
        "loss_drops": drops, "loss_drop_order": order_of(list(drops.values())),
    }
