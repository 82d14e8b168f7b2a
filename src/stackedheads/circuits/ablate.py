"""Circuits as data, and the ablations that validate them (Appendix E, steps 3, 5 and 6).

A circuit lists, per layer, head and token role (first / second / query), what replaces the
head's attention: any rule of :data:`.rules.RULES`, or ``kept`` (the head's own attention: rows
no rule explains). A head with no useful computation has one baseline (``uniform``,
``identity``) for every role; circuit.json files written before every head was ``{role: rule}``
name it once for the whole head, and still load. It also lists the paths each useful head
carries: ``(src, dst)`` meaning "tokens ``s_src`` attend to ``s_dst`` of their own chain"
(:mod:`.paths`). Which names are valid comes from the registry, so a rule registered from
outside the package is valid here too.

* Combined ablation (step 5): every head replaced at once, rows no rule explains (``kept``)
  included: they are made uniform (``strict``), so the check hides nothing. The validation MSE
  of every chain position must stay within its budget.
* Per-path ablation (step 6): on top of the combined ablation (kept rows left to the head),
  one path's rows, or a redundant group's, are made uniform; a necessary path raises the loss.

A path's ``dst`` is an s-index of the source token's own chain (retrieval), :data:`~.rules.SINK`
(-1) for the first position of the sequence (a sink rule such as ``first-token``), or a label
for the shortcuts: ``"p7"`` (a fixed position), ``"t-3"`` (an offset), ``"o4"`` (the other
chains' ``s4``) (:mod:`.rules`). Attending there copies a real token, so each is a path like
any other until its removal is shown to be harmless.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from stackedheads.circuits.paths import COMBINED_KEPT_TEXT, SINK, CircuitPath, Link, Row, dst_parts, path_key  # noqa: F401 (path_key: the CLI's)
from stackedheads.circuits.rules import (
    KEPT,
    ROLES,
    UNIFORM,
    baselines,
    head_pattern,
    library,
    role_sources,
    s_index,
    uniform_causal,
)
from stackedheads.errors import UsageError
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.tasks.vectors import Batch, Meta, VectorTaskConfig
from stackedheads.training.evaluate import partial_losses


@dataclass
class HeadSpec:
    """What replaces one head's attention: a rule name (or :data:`KEPT`) per token role. A head
    with "no useful computation" (App. E) has the same baseline for every role
    (:meth:`whole`)."""

    layer: int
    head: int
    rules: dict[str, str]  # role -> rule name, or KEPT
    paths: list[Link] = field(default_factory=list)  # useful (src, dst), dst as in the module docstring
    maps: dict[str, list] = field(default_factory=dict)  # role -> what a measured rule measured (its map)

    @classmethod
    def whole(cls, layer: int, head: int, name: str) -> HeadSpec:
        """A head whose every role follows rule ``name`` (a baseline, or :data:`KEPT`)."""
        return cls(layer, head, dict.fromkeys(ROLES, name))

    @property
    def shared(self) -> str | None:
        """The rule every role follows, if they all follow one (``uniform``, ``kept``...)."""
        names = set(self.rules.values())
        return names.pop() if len(names) == 1 else None

    def to_dict(self) -> dict:
        out = {"layer": self.layer, "head": self.head, "rules": dict(self.rules), "paths": [list(p) for p in self.paths]}
        return {**out, "maps": self.maps} if self.maps else out

    @classmethod
    def from_dict(cls, d: dict) -> HeadSpec:
        """circuit.json's head; a name for the whole head (files written before every head was
        ``{role: rule}``) is that rule for every role."""
        rules = d["rules"]
        if isinstance(rules, str):
            rules = dict.fromkeys(ROLES, rules)
        elif set(rules) != set(ROLES):
            raise UsageError(f"head {d['layer']}.{d['head']}: rules must name every role {sorted(ROLES)}")
        return cls(int(d["layer"]), int(d["head"]), dict(rules), [tuple(p) for p in d.get("paths", [])], dict(d.get("maps", {})))


@dataclass
class DiscoveryRecord:
    """What discovery (:mod:`.discover`) records beside a circuit: circuit.json's ``info``. A
    hand-written circuit may leave any of it out; keys it does not know are not read."""

    run: str | None = None
    seed: int | None = None  # which member of the run (validate_run picks it)
    checkpoint: int | None = None  # the step discovered on
    config: dict | None = None  # the DiscoverConfig, as JSON
    threshold: float | None = None  # the absolute threshold, or the mean of the per-position budgets
    tolerance: float | None = None
    unablated_loss: float | None = None
    budgets: list[float] | None = None  # per chain position, on the held-out half
    n_search: int | None = None
    n_check: int | None = None
    redundant_groups: list[list[CircuitPath]] = field(default_factory=list)  # paths useful only together
    serves: dict[str, list[int]] = field(default_factory=dict)  # path or row key -> chain positions j

    @property
    def absolute(self) -> bool:
        """Whether the budgets are App. E's absolute threshold (else relative to the model's loss)."""
        return (self.config or {}).get("threshold") is not None

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return {**out, "redundant_groups": [[p.key for p in g] for g in self.redundant_groups]}

    @classmethod
    def from_dict(cls, d: dict) -> DiscoveryRecord:
        known = {f.name for f in fields(cls)} - {"redundant_groups"}
        groups = [[CircuitPath.parse(k) for k in g] for g in d.get("redundant_groups", [])]
        return cls(**{k: v for k, v in d.items() if k in known}, redundant_groups=groups)


@dataclass
class Circuit:
    """One model's circuit: ``heads`` covers every (layer, head) of the model."""

    depth: int
    heads: list[HeadSpec]
    info: DiscoveryRecord = field(default_factory=DiscoveryRecord)

    def head(self, layer: int, head: int) -> HeadSpec:
        for h in self.heads:
            if (h.layer, h.head) == (layer, head):
                return h
        raise KeyError((layer, head))

    def useful_heads(self) -> list[HeadSpec]:
        return [h for h in self.heads if h.paths]

    def kept(self) -> list[Row]:
        """The rows that keep the head's own attention."""
        return [Row(h.layer, h.head, r) for h in self.heads for r, name in h.rules.items() if name == KEPT]

    def mapped(self) -> list[Row]:
        """The rows that follow a measured map (:mod:`.rules.measured`)."""
        lib = library(self.depth)
        return [Row(h.layer, h.head, r) for h in self.heads for r, n in h.rules.items() if n != KEPT and lib[n].measured]

    def paths(self) -> list[CircuitPath]:
        """Every useful path."""
        return [CircuitPath(h.layer, h.head, s, d) for h in self.heads for s, d in h.paths]

    def to_dict(self) -> dict:
        return {"depth": self.depth, "heads": [h.to_dict() for h in self.heads], "info": self.info.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> Circuit:
        check_circuit_dict(d)
        return cls(int(d["depth"]), [HeadSpec.from_dict(h) for h in d["heads"]], DiscoveryRecord.from_dict(d.get("info", {})))

    def save(self, path: str | Path) -> None:
        from stackedheads.state.write import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        p = Path(path)
        if not p.exists():
            raise UsageError(f"no circuit file {p}")
        if p.is_dir():
            raise UsageError(f"{p} is a folder, not a circuit file")
        from stackedheads.state.schemas import CircuitFile, check
        from stackedheads.state.write import read_state_json

        try:  # bounded in size and depth: --circuit /dev/zero would be read forever
            data = read_state_json(p, "a circuit file")
            circuit = cls.from_dict(data)
            check(CircuitFile, data, p, "discover it again")  # its recorded values too (stackedheads.state.schemas)
            return circuit
        except UsageError:
            raise
        except (KeyError, ValueError, TypeError) as e:
            raise UsageError(f"{p} is not a circuit file: {e}") from None


def check_circuit_dict(d: object) -> None:
    """circuit.json's schema, checked on load: a hand-edited file with an unknown rule, a bad
    kind or a path index outside ``0..2D`` (``dst`` may be SINK or a shortcut's label) fails in
    one line instead of measuring the wrong positions (a negative index would silently count
    from the end)."""

    def bad(msg: str) -> None:
        raise UsageError(msg)

    def is_int(x: object) -> bool:
        return type(x) is int  # not bool, not float

    if not isinstance(d, dict):
        bad("expected a JSON object with depth, heads and info")
    depth = d.get("depth")
    if not is_int(depth) or not 1 <= depth <= 1000:
        bad(f"depth must be an integer >= 1, got {str(depth)[:40]!r}")
    heads = d.get("heads")
    if not isinstance(heads, list) or not heads:
        bad("heads must be a non-empty list")
    if not isinstance(d.get("info", {}), dict):
        bad("info must be an object")
    lib = library(depth)
    wholes = [*baselines(lib), KEPT]
    top = 2 * depth
    for i, h in enumerate(heads):
        if not isinstance(h, dict):
            bad(f"heads[{i}] must be an object")
        layer, head = h.get("layer"), h.get("head")
        if not (is_int(layer) and is_int(head) and layer >= 0 and head >= 0):
            bad(f"heads[{i}]: layer and head must be integers >= 0")
        where = f"head {layer}.{head}"
        rules = h.get("rules")
        if isinstance(rules, str):
            if rules not in wholes:
                bad(f"{where}: unknown kind {rules[:40]!r}; use {', '.join(wholes)} or rules per role")
        elif isinstance(rules, dict):
            if set(rules) != set(ROLES):
                bad(f"head {layer}.{head}: rules must name every role {sorted(ROLES)}")
            for role, name in rules.items():
                if name != KEPT and (not isinstance(name, str) or name not in lib):
                    bad(f"{where}: unknown rule {str(name)[:40]!r} for role {role}")
                if name != KEPT and lib[name].measured and not _is_map(h.get("maps", {}).get(role)):
                    bad(f"{where}: rule {name} for role {role} needs its map in maps: entries [t, k, (cell,) weight]")
        else:
            bad(f"{where}: rules must be a kind ({', '.join(wholes)}) or an object of rules per role")
        paths = h.get("paths", [])
        if not isinstance(paths, list):
            bad(f"{where}: paths must be a list of [src, dst]")
        for path in paths:
            if not (isinstance(path, list) and len(path) == 2 and is_int(path[0]) and (is_int(path[1]) or isinstance(path[1], str))):
                bad(f"{where}: a path must be [src, dst], src an integer, got {str(path)[:40]}")
            src, dst = path
            try:
                kind, n = dst_parts(dst)
            except ValueError as e:
                bad(f"{where}: {e}")
            if not 0 <= src <= top or (kind in "so" and not 0 <= n <= top):
                bad(f"{where}: path {path} is out of range (s-indices 0..{top}; dst {SINK} for the first position, "
                    f"'p<k>', 't-<d>' or 'o<j>' for a shortcut)")


def _is_map(m: object) -> bool:
    """A measured map: entries ``[t, k, weight]`` or ``[t, k, cell, weight]``, ``k <= t``."""
    def entry(e: object) -> bool:
        return (isinstance(e, list) and len(e) in (3, 4) and all(type(x) is int and x >= 0 for x in e[:-1])
                and isinstance(e[-1], (int, float)) and not isinstance(e[-1], bool) and e[1] <= e[0])

    return isinstance(m, list) and len(m) > 0 and all(entry(e) for e in m)


Replacement = tuple[torch.Tensor, torch.Tensor]  # pattern (B, T, T), rows replaced (B, T)


Removal = tuple[int, int, int]  # (layer, head, src): that head's rows of tokens s_src


def replaced_patterns(
    circuit: Circuit, meta: Meta, remove: Removal | Sequence[Removal] | None = None, strict: bool = False
) -> dict[int, dict[int, Replacement]]:
    """``{layer: {head: (pattern, rows)}}`` for every head the circuit replaces, on ``meta``.

    ``remove = (layer, head, src)`` (or a list of them, e.g. :attr:`CircuitPath.removal`) also
    makes the rows of tokens ``s_src`` of that head uniform: the per-path ablation of step 6.
    ``strict`` makes ``kept`` rows uniform too: the combined ablation with nothing left
    unexplained (step 5).
    """
    lib = library(circuit.depth)
    removals = _removals(remove)
    out: dict[int, dict[int, Replacement]] = {}
    for h in circuit.heads:
        pat, rows = _replacement(h, meta, lib, strict, [src for l, hd, src in removals if (l, hd) == (h.layer, h.head)])
        if rows.any():
            out.setdefault(h.layer, {})[h.head] = (pat, rows)
    return out


def _removals(remove: Removal | Sequence[Removal] | None) -> list[Removal]:
    if remove is not None and len(remove) == 3 and isinstance(remove[0], int):
        remove = [remove]
    return [tuple(r) for r in (remove or [])]


def _replacement(h: HeadSpec, meta: Meta, lib, strict: bool, removed: Sequence[int]) -> Replacement:
    """One head's replacement on ``meta``: its rules (``kept`` rows uniform if ``strict``), then
    the rows of tokens ``s_src`` for each ``src`` in ``removed`` made uniform."""
    B, T = meta.role.shape
    rules = {r: (UNIFORM if strict and n == KEPT else n) for r, n in h.rules.items()}
    pat, rows = head_pattern(rules, meta, lib, h.maps)
    for src in removed:
        gone = s_index(meta) == src
        pat = torch.where(gone[..., None], uniform_causal(B, T), pat)
        rows = rows | gone
    return pat, rows


def pattern_hooks(patterns: dict[int, dict[int, Replacement]]):
    """Hooks that put each replacement's rows into ``blocks.{l}.attn.hook_pattern``."""

    def make(heads: dict[int, Replacement]):
        def fn(pattern: torch.Tensor, **_) -> torch.Tensor:  # (E, B, H, T, T)
            pattern = pattern.clone()
            for h, (pat, rows) in heads.items():
                pattern[:, :, h] = torch.where(rows[..., None], pat.to(pattern.dtype), pattern[:, :, h])
            return pattern

        return fn

    return [(f"blocks.{layer}.attn.hook_pattern", make(heads)) for layer, heads in patterns.items()]


@torch.no_grad()
def ablated_loss(
    model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, patterns: dict[int, dict[int, torch.Tensor]] | None = None
) -> tuple[float, list[float]]:
    """Validation MSE and partial MSE per chain position with ``patterns`` replacing heads
    (the training's own :func:`~stackedheads.training.evaluate.partial_losses`).

    ``model`` must hold one member (``EnsembleTransformer.member(e)``).
    """
    if model.n_members != 1:
        raise UsageError("ablations run on one model: use model.member(e)")
    pred = model.run_with_hooks(batch.inputs, batch.meta, pattern_hooks(patterns or {}))  # (1, B, N, d_out)
    return _losses(pred, batch, task)


def _losses(pred: torch.Tensor, batch: Batch, task: VectorTaskConfig) -> tuple[float, list[float]]:
    partial = partial_losses(pred, batch.targets[None], task)[0]
    return float(partial.mean()), [float(p) for p in partial]


HeadKey = tuple  # what fixes one head's replacement: (head, rules, maps, removed sources)


class Ablator:
    """:func:`ablated_loss` for one member, one batch and many circuits, rerunning only the
    layers from the first whose replacement differs from a circuit already run.

    Discovery (App. E) tries one change at a time on a circuit it keeps: a rule for one row, a
    path removed. The residual stream entering layer ``l`` depends only on the replacements of
    layers below ``l``, so the streams of the circuit kept (the *anchor*, :meth:`promote`) and of
    the last circuit run are kept, each under its layers' keys (a head's rules, maps and
    removed rows), and a circuit that agrees with one of them on its first ``l`` layers starts at
    layer ``l``. A circuit run before (discovery tests the same paths again when simplifying
    changed nothing) is not run again: its losses are kept by its keys. Each layer runs the code
    :meth:`EnsembleTransformer.forward` runs (hooked layers by the explicit pattern, the others
    fused), on the same inputs, so the losses are the bytes :func:`ablated_loss` gives
    (tests/test_circuits.py checks this): only the time changes. Head replacements are kept by
    key too (a few dozen, LRU), as building them costs a tenth of a forward pass at Sec. 9.1's
    size.
    """

    PATTERNS = 64  # head replacements kept (each B x T x T floats)

    def __init__(self, model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig) -> None:
        if model.n_members != 1:
            raise UsageError("ablations run on one model: use model.member(e)")
        self.model, self.batch, self.task = model, batch, task
        self.n_layers = model.config.n_layers
        with torch.no_grad():
            self.h0 = model.embed(batch.inputs)
        # A chain: (the keys of layers 0..n-1, the streams after those layers), n < n_layers.
        self._last: tuple[list, list[torch.Tensor]] = ([], [])
        self._anchor: tuple[list, list[torch.Tensor]] = ([], [])
        self._asked: list = []  # the keys of the circuit asked last (run, or found in _losses)
        self._losses: dict[tuple, tuple[float, list[float]]] = {}
        self._patterns: OrderedDict[HeadKey, Replacement] = OrderedDict()
        self.layers_run = 0  # layers computed, over all calls (what the reuse saves is visible)
        self.calls = 0

    def _keys(self, circuit: Circuit, removals: list[Removal], strict: bool) -> list[tuple[HeadKey, ...]]:
        keys: list[list[HeadKey]] = [[] for _ in range(self.n_layers)]
        for h in circuit.heads:
            rules = tuple((r, UNIFORM if strict and n == KEPT else n) for r, n in sorted(h.rules.items()))
            maps = repr(sorted(h.maps.items())) if h.maps else ""
            removed = tuple(sorted(src for l, hd, src in removals if (l, hd) == (h.layer, h.head)))
            keys[h.layer].append((h.head, rules, maps, removed))
        return [tuple(k) for k in keys]

    def _replacement(self, key: HeadKey, spec: HeadSpec, lib, strict: bool) -> Replacement:
        got = self._patterns.get(key)
        if got is None:
            got = self._patterns[key] = _replacement(spec, self.batch.meta, lib, strict, key[3])
            if len(self._patterns) > self.PATTERNS:
                self._patterns.popitem(last=False)
        else:
            self._patterns.move_to_end(key)
        return got

    def _longest(self, keys: list) -> tuple[int, list[torch.Tensor]]:
        """The most layers of ``keys`` a kept chain has run, and their streams."""
        start, streams = 0, []
        for chain_keys, chain_streams in (self._anchor, self._last):
            n = 0
            while n < len(chain_keys) and chain_keys[n] == keys[n]:
                n += 1
            if n > start:
                start, streams = n, chain_streams[:n]
        return start, streams

    @torch.no_grad()
    def loss(self, circuit: Circuit, remove: Removal | Sequence[Removal] | None = None,
             strict: bool = False) -> tuple[float, list[float]]:
        """What ``ablated_loss(model, batch, task, replaced_patterns(circuit, meta, remove,
        strict))`` gives."""
        keys = self._keys(circuit, _removals(remove), strict)
        self._asked = keys
        self.calls += 1
        seen = self._losses.get(tuple(keys))
        if seen is not None:
            return seen[0], list(seen[1])
        start, streams = self._longest(keys)
        lib, specs = library(circuit.depth), {(h.layer, h.head): h for h in circuit.heads}
        patterns: dict[int, dict[int, Replacement]] = {}
        for layer in range(start, self.n_layers):
            for key in keys[layer]:
                pat, rows = self._replacement(key, specs[layer, key[0]], lib, strict)
                if rows.any():
                    patterns.setdefault(layer, {})[key[0]] = (pat, rows)
        with self.model.hooks(pattern_hooks(patterns), self.batch.meta):
            pred = self.model.run_from(streams[-1] if streams else self.h0, start, streams)
        self._last = (keys[: len(streams)], streams)
        self.layers_run += self.n_layers - start
        got = self._losses[tuple(keys)] = _losses(pred, self.batch, self.task)
        return got[0], list(got[1])

    def promote(self) -> None:
        """Keep the circuit asked last as the anchor: the circuit the next changes are made to
        (of its streams, what a kept chain holds when its losses were known already)."""
        n, streams = self._longest(self._asked)
        self._anchor = (self._asked[:n], streams)


@dataclass(frozen=True)
class Ablation:
    """What one loss row (App. E steps 5-6) ablates: nothing, every head at once (``combined``,
    unexplained rows made uniform, or ``combined-kept``, left to the head), or on top of that
    some ``paths`` (one, or a redundant group) or a ``row`` following a measured map. A value:
    loss rows are looked up by it; ``str`` is its text in losses.json."""

    kind: str  # "none", "combined", "combined-kept", "paths" or "row"
    paths: tuple[CircuitPath, ...] = ()
    row: Row | None = None

    def __str__(self) -> str:
        if self.kind == "paths":
            keys = [p.key for p in self.paths]
            return "-" + keys[0] if len(keys) == 1 else "-(" + " + ".join(keys) + ")"
        if self.kind == "row":
            return "-" + self.row.key
        return {"combined-kept": COMBINED_KEPT_TEXT}.get(self.kind, self.kind)

    @classmethod
    def removed(cls, *paths: tuple) -> Ablation:
        """The per-path ablation of ``paths`` (one path, or a group removed together)."""
        return cls("paths", tuple(CircuitPath(*p) for p in paths))

    @classmethod
    def removed_row(cls, row: tuple) -> Ablation:
        return cls("row", row=Row(*row))


UNABLATED, COMBINED, COMBINED_KEPT = Ablation("none"), Ablation("combined"), Ablation("combined-kept")


@dataclass
class LossRow:
    ablation: Ablation
    loss: float
    partial: list[float]

    def to_dict(self) -> dict:
        return {"ablation": str(self.ablation), "loss": self.loss, "partial": self.partial}


def loss_table(model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, circuit: Circuit) -> list[LossRow]:
    """Appendix E steps 5 and 6: no ablation; the combined ablation (every row replaced,
    unexplained rows uniform); with unexplained rows, the same leaving them to the head; then
    each useful path removed, each row following a measured map removed (made uniform), and
    each redundant group removed together."""

    ablator = Ablator(model, batch, task)  # each removal reruns the layers from its own

    def row(ablation: Ablation, remove=None, strict: bool = False) -> LossRow:
        return LossRow(ablation, *ablator.loss(circuit, remove, strict))

    rows = [LossRow(UNABLATED, *ablated_loss(model, batch, task)), row(COMBINED, strict=True)]
    if circuit.kept():
        rows.append(row(COMBINED_KEPT))
    ablator.promote()  # the circuit with kept rows left to the head: what each removal changes
    for path in circuit.paths():
        rows.append(row(Ablation.removed(path), path.removal))
    for r in circuit.mapped():  # rows with no path: what removing them breaks
        rows.append(row(Ablation.removed_row(r), [(r.layer, r.head, i) for i in role_sources(r.role, circuit.depth)]))
    for group in circuit.info.redundant_groups:
        rows.append(row(Ablation.removed(*group), [p.removal for p in group]))
    return rows


def check_shape(circuit: Circuit, model: ModelConfig, task: VectorTaskConfig) -> None:
    """The circuit must describe this model (its config): every head once, the task's depth."""
    want = {(l, h) for l in range(model.n_layers) for h in range(model.n_heads)}
    have = [(h.layer, h.head) for h in circuit.heads]
    if sorted(have) != sorted(want) or len(set(have)) != len(have):
        raise UsageError(f"the circuit must list each of the model's {len(want)} heads exactly once")
    if circuit.depth != task.depth:
        raise UsageError(f"the circuit is for D={circuit.depth}, the run has D={task.depth}")


def format_table(rows: Sequence[LossRow]) -> list[list[str]]:
    return [[str(r.ablation), f"{r.loss:.4f}", " ".join(f"{p:.3f}" for p in r.partial)] for r in rows]


def validate_run(run_dir: str | Path, spec: str | Path, checkpoint: int | None = None, n_val: int = 512) -> list[LossRow]:
    """Appendix E steps 5-6 for a circuit file on the member its ``info.seed`` names (or member 0)."""
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    circuit = Circuit.load(spec)
    model, cfg, _ = load_model(checkpoint_for(run_dir, checkpoint))
    seed = cfg.seeds[0] if circuit.info.seed is None else circuit.info.seed
    if seed not in cfg.seeds:
        raise UsageError(f"the circuit is for seed {seed}; {run_dir} has seeds {list(cfg.seeds)}")
    member = model.member(cfg.seeds.index(seed))
    check_shape(circuit, member.config, cfg.task)
    return loss_table(member, validation_batch(cfg)[:n_val], cfg.task, circuit)
