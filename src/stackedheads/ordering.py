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
