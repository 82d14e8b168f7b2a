"""A circuit's paths and rows as values, and their text; no torch, so the claims and the report
read summaries with the same names and keys that discovery wrote.

One name per concept:

* an *s-index* ``i``: ``s_i``, a position along one chain (Appendix B, Definition 1);
* a *dst*: what a token reads, an s-index of its own chain, :data:`SINK` (sequence position 0)
  or a shortcut's label ``"p<k>"``, ``"t-<d>"``, ``"o<j>"`` (:mod:`.rules`);
* a :data:`Link` ``(src, dst)``: tokens ``s_src`` of a head read ``dst`` (a head's ``paths``);
* a :class:`CircuitPath` ``(layer, head, src, dst)``: a link of one head of the circuit;
* a :class:`Row` ``(layer, head, role)``: one head's rows of the tokens of a role.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# losses.json's name for the combined ablation with unexplained rows left to the head (App. E step 5).
COMBINED_KEPT_TEXT = "combined, unexplained rows kept"

SINK = -1  # a path's dst: sequence position 0 (an attention sink), not a chain position
RETRIEVAL, POSITIONAL, CROSS_CHAIN = "retrieval", "positional", "cross-chain"  # kinds of path

Dst = int | str  # an s-index of the own chain, SINK, or "p<k>", "t-<d>", "o<j>"
Link = tuple[int, Dst]  # (src, dst) within one head

_LABEL = re.compile(r"^(?:p(?P<p>[1-9]\d*)|t-(?P<t>[1-9]\d*)|o(?P<o>\d+))$")
_KEY = re.compile(r"^L(\d+)\.(\d+) s(\d+)->(\S+)$")


def dst_parts(dst: Dst) -> tuple[str, int]:
    """``("s", j)``, ``("p", k)`` (SINK is ``("p", 0)``), ``("t", d)`` or ``("o", j)``."""
    if isinstance(dst, int) and not isinstance(dst, bool):
        return ("p", 0) if dst == SINK else ("s", dst)
    m = _LABEL.match(dst) if isinstance(dst, str) else None
    if not m:
        raise ValueError(f"not a path destination: {dst!r} (an s-index, {SINK}, 'p<k>', 't-<d>' or 'o<j>')")
    kind = next(k for k, v in m.groupdict().items() if v is not None)
    return kind, int(m[kind])


def dst_label(dst: Dst) -> str:
    """A path's dst as text: ``s4``, ``p0`` for :data:`SINK`, ``p7``, ``t-2``, ``o4``."""
    kind, n = dst_parts(dst)
    return f"{kind}-{n}" if kind == "t" else f"{kind}{n}"


def parse_dst(label: str) -> Dst:
    """:func:`dst_label`'s inverse: ``s4`` is 4, ``p0`` is :data:`SINK`, other labels stay."""
    if label.startswith("s") and label[1:].isdigit():
        return int(label[1:])
    if label == "p0":
        return SINK
    dst_parts(label)  # refuses a label that is no dst
    return label


def path_kind(dst: Dst) -> str:
    """:data:`RETRIEVAL` (the own chain's ``s_j``), :data:`POSITIONAL` (a fixed position or
    offset, ``p0`` included) or :data:`CROSS_CHAIN` (the other chains' ``s_j``)."""
    return {"s": RETRIEVAL, "p": POSITIONAL, "t": POSITIONAL, "o": CROSS_CHAIN}[dst_parts(dst)[0]]


def path_sort_key(path: tuple) -> tuple:
    """Sorts paths ``(..., src, dst)`` whose dsts mix s-indices and labels."""
    *head, src, dst = path
    kind, n = dst_parts(dst)
    return (*head, src, kind != "s", kind, n)


class CircuitPath(NamedTuple):
    """A link ``src -> dst`` of head ``layer.head``; a tuple, so ``[l, h, src, dst]`` in JSON."""

    layer: int
    head: int
    src: int
    dst: Dst

    @property
    def key(self) -> str:
        """As text: ``L3.0 s2->s4`` (``s2->p0`` for the first position, ``s0->p7`` for a fixed one)."""
        return f"L{self.layer}.{self.head} s{self.src}->" + dst_label(self.dst)

    @property
    def removal(self) -> tuple[int, int, int]:
        """``(layer, head, src)``: the rows a per-path ablation makes uniform."""
        return self.layer, self.head, self.src

    @classmethod
    def parse(cls, key: str) -> CircuitPath:
        """:attr:`key`'s inverse (circuit.json's redundant groups are written as keys)."""
        m = _KEY.match(key) if isinstance(key, str) else None
        if not m:
            raise ValueError(f"not a path: {str(key)[:40]!r} (e.g. 'L3.0 s2->s4')")
        return cls(int(m[1]), int(m[2]), int(m[3]), parse_dst(m[4]))


class Row(NamedTuple):
    """Head ``layer.head``'s rows of the tokens of ``role`` (first / second / query)."""

    layer: int
    head: int
    role: str

    @property
    def key(self) -> str:
        """As text: ``L3.0 query``."""
        return f"L{self.layer}.{self.head} {self.role}"


def path_key(path: tuple) -> str:
    """``(layer, head, src, dst)`` (a :class:`CircuitPath` or the list JSON gives) as text."""
    return CircuitPath(*path).key


def key_kind(key: str) -> str:
    """The kind of a path key such as ``L7.0 s0->p7``."""
    return path_kind(parse_dst(key.rsplit("->", 1)[1]))
