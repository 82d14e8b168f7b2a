"""Whether chain positions x1..xD did something in chain order: a measurement, shared by the
Figure 4 sweep's losses (C2), the emergence of heads and of losses (Sec. 9: E3, E4), and read by
the claims that judge them. No torch: the claims import it.
"""

from __future__ import annotations


def order_of(steps: list[float | None]) -> str:
    """When x1..xD first did something (None: never) as evidence of the chain order (C2, E3, E4).

    ``out of order``: some x_k crosses strictly before x_j (j < k), or x_k crosses while x_j
    never does (even when x_k is the only one: x2 learned without x1 contradicts the order).
    ``undecided``: otherwise, fewer than two positions cross (no order to see). ``tie``: two
    positions first seen below the threshold at the same evaluation (they crossed within one
    evaluation interval, or one checkpoint interval). Otherwise ``in order``: strictly increasing.
    """
    seen_never = False
    for s in steps:
        if s is None:
            seen_never = True
        elif seen_never:
            return "out of order"
    crossed = [s for s in steps if s is not None]
    if len(crossed) < 2:
        return "undecided"
    if any(a > b for a, b in zip(crossed, crossed[1:])):
        return "out of order"
    if any(a == b for a, b in zip(crossed, crossed[1:])):
        return "tie"
    return "in order"


def end_of_plateau(t: dict) -> tuple[float | None, list[str], list[str]]:
    """Sec. 9.2's plateau ends when the first head that does part of the task emerges: of a
    timeline (``Timeline.to_dict``), the interpolated step the first path serving a chain
    position crosses 0.5, the paths serving one seen first, and the paths with no measured role
    (ablated, they raise no position's loss: e.g. a positional shortcut) that crossed earlier.

    A path with no measured role does not end the plateau: it retrieves nothing the partial
    losses see. Read from the timeline's own fields, so a timeline written before this rule
    (whose stored ``plateau_steps`` counted every path) is read by it too."""
    serves, emerged = t["serves"], t["emerged"]
    serving = [k for k in emerged if serves.get(k)]
    plateau = min((emerged[k] for k in serving if emerged[k] is not None), default=None)
    seen = t.get("emerged_seen")
    if seen is None:  # written before emerged_seen was kept: its first paths, less the silent
        # ones, or else the serving paths that cross first
        first = [k for k in t["first_paths"] if serves.get(k)] or sorted(
            k for k in serving if plateau is not None and emerged[k] == plateau)
    else:
        s0 = min((seen[k] for k in serving if seen.get(k) is not None), default=None)
        first = sorted(k for k in serving if s0 is not None and seen.get(k) == s0)
    silent = sorted(k for k in emerged if not serves.get(k) and emerged[k] is not None
                    and (plateau is None or emerged[k] < plateau))
    return plateau, first, silent
