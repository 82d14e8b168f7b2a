"""Attention rules (Appendix E): what each head is replaced by, as data.

Appendix E replaces each useful head's attention with "a map that is zero everywhere except for
the position I expect the head to attend to", and the others with uniform attention or the
identity. A *rule* names such a position for every token, or a whole pattern. Every token is one
of the positions ``s_0 .. s_2D`` of its chain (Appendix B, Definition 1): the query is ``s_0``,
the second token of pair ``k`` is ``s_{2k}``, the first of pair ``k + 1`` is ``s_{2k+1}``; the
family ``s+d`` ("attend to ``s_{i+d}`` of my own chain") covers the retrieval heads.

A rule's *paths* ``(src, dst)`` say what tokens ``s_src`` read: ``s_j`` of the token's own chain
(:data:`RETRIEVAL`); position 0, a fixed position ``p<k>`` or an offset ``t-<d>``
(:data:`POSITIONAL`, a shortcut: docs/results.md, "Shortcuts"); ``s_j`` of the other chains
(:data:`CROSS_CHAIN`).

One module a job: :mod:`.geometry` (where tokens sit), :mod:`.base` (the rule type, the registry
:data:`RULES` and how to add a rule), :mod:`.builtin` (the paper's rules), :mod:`.library`
(a depth's rules, patterns, fitting), and one module per kind of shortcut (:mod:`.positional`,
:mod:`.other_chains`, :mod:`.mixture`, :mod:`.measured`): :data:`RULES` imports every module of
the package on first use, so a new built-in is a new file.
"""

from stackedheads.circuits.paths import (  # noqa: F401 (what a path is, beside the rules)
    CROSS_CHAIN,
    POSITIONAL,
    RETRIEVAL,
    SINK,
    Dst,
    dst_label,
    dst_parts,
    path_kind,
    path_sort_key,
)
from stackedheads.circuits.rules.base import (  # noqa: F401
    IDENTITY,
    KEPT,
    RULES,
    UNIFORM,
    AttentionRule,
    Links,
    RuleFamily,
    Target,
    family,
    parametric,
    rule,
)
from stackedheads.circuits.rules.builtin import first_token, hop, hops, identity, previous, uniform  # noqa: F401
from stackedheads.circuits.rules.geometry import (  # noqa: F401
    ROLES,
    chain_positions,
    one_hot,
    pair_attention,
    path_attention,
    path_ends,
    positions,
    role_sources,
    s_index,
    uniform_causal,
)
from stackedheads.circuits.rules.library import (  # noqa: F401
    Library,
    baselines,
    head_pattern,
    library,
    pattern_mass,
    rule_mass,
)
