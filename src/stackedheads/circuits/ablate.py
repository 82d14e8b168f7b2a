"""Circuits as data, and the ablations that validate them (Appendix E, steps 3, 5 and 6).

A circuit lists, per layer and head, what replaces the head's attention: a baseline rule
(``uniform``, ``identity``) or ``kept`` (the head's own attention) for the whole head, or per
token role (first / second / query) any rule of :data:`.rules.RULES` or ``kept`` (rows no rule
explains). It also lists the paths each useful head carries: ``(src, dst)`` meaning "tokens
``s_src`` attend to ``s_dst`` of their own chain". Which names are valid comes from the
registry, so a rule registered from outside the package is valid here too.

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

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from stackedheads.circuits.rules import (
    KEPT,
    ROLES,
    SINK,
    UNIFORM,
    Dst,
    baselines,
    dst_parts,
    dst_label,
    head_pattern,
    library,
    role_sources,
    s_index,
    uniform_causal,
)
from stackedheads.errors import UsageError
from stackedheads.model import EnsembleTransformer
from stackedheads.tasks.vectors import Batch, Meta, VectorTaskConfig


def path_key(path: tuple[int, int, int, Dst]) -> str:
    """``(layer, head, src, dst)`` as text: ``L3.0 s2->s4`` (``s2->p0`` for the first position,
    ``s0->p7`` for a fixed one)."""
    layer, head, src, dst = path
    return f"L{layer}.{head} s{src}->" + dst_label(dst)


def row_key(row: tuple[int, int, str]) -> str:
    """``(layer, head, role)`` as text: ``L3.0 query``."""
    return f"L{row[0]}.{row[1]} {row[2]}"


@dataclass
class HeadSpec:
    layer: int
    head: int
    rules: dict[str, str] | str  # a baseline rule's name, KEPT, or {role: rule name}
    paths: list[tuple[int, Dst]] = field(default_factory=list)  # useful (src, dst), dst as in the module docstring
    maps: dict[str, list] = field(default_factory=dict)  # role -> what a measured rule measured (its map)

    @property
    def kind(self) -> str:
        return self.rules if isinstance(self.rules, str) else "rule"

    def to_dict(self) -> dict:
        out = {"layer": self.layer, "head": self.head, "rules": self.rules, "paths": [list(p) for p in self.paths]}
        return {**out, "maps": self.maps} if self.maps else out

    @classmethod
    def from_dict(cls, d: dict) -> HeadSpec:
        rules = d["rules"]
        if isinstance(rules, dict) and set(rules) != set(ROLES):
            raise UsageError(f"head {d['layer']}.{d['head']}: rules must name every role {sorted(ROLES)}")
        return cls(int(d["layer"]), int(d["head"]), rules, [tuple(p) for p in d.get("paths", [])], dict(d.get("maps", {})))


@dataclass
class Circuit:
    """One model's circuit: ``heads`` covers every (layer, head) of the model."""

    depth: int
    heads: list[HeadSpec]
    info: dict = field(default_factory=dict)  # run, seed, checkpoint, threshold, losses...

    def head(self, layer: int, head: int) -> HeadSpec:
        for h in self.heads:
            if (h.layer, h.head) == (layer, head):
                return h
        raise KeyError((layer, head))

    def useful_heads(self) -> list[HeadSpec]:
        return [h for h in self.heads if h.paths]

    def kept(self) -> list[tuple[int, int, str]]:
        """``(layer, head, role)`` whose rows keep the head's own attention."""
        out = []
        for h in self.heads:
            if h.kind == KEPT:
                out += [(h.layer, h.head, r) for r in ROLES]
            elif h.kind == "rule":
                out += [(h.layer, h.head, r) for r, name in h.rules.items() if name == KEPT]
        return out

    def mapped(self) -> list[tuple[int, int, str]]:
        """``(layer, head, role)`` whose rows follow a measured map (:mod:`.rules.measured`)."""
        lib = library(self.depth)
        return [(h.layer, h.head, r) for h in self.heads if h.kind == "rule" for r, n in h.rules.items()
                if n != KEPT and lib[n].measured]

    def paths(self) -> list[tuple[int, int, int, Dst]]:
        """Every useful path as ``(layer, head, src, dst)``."""
        return [(h.layer, h.head, s, d) for h in self.heads for s, d in h.paths]

    def to_dict(self) -> dict:
        return {"depth": self.depth, "heads": [h.to_dict() for h in self.heads], "info": self.info}

    @classmethod
    def from_dict(cls, d: dict) -> Circuit:
        check_circuit_dict(d)
        return cls(int(d["depth"]), [HeadSpec.from_dict(h) for h in d["heads"]], d.get("info", {}))

    def save(self, path: str | Path) -> None:
        from stackedheads.storage import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        p = Path(path)
        if not p.exists():
            raise UsageError(f"no circuit file {p}")
        if p.is_dir():
            raise UsageError(f"{p} is a folder, not a circuit file")
        try:
            return cls.from_dict(json.loads(p.read_text()))
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

    ``remove = (layer, head, src)`` (or a list of them) also makes the rows of tokens ``s_src``
    of that head uniform: the per-path ablation of step 6. ``strict`` makes ``kept`` rows
    uniform too: the combined ablation with nothing left unexplained (step 5).
    """
    B, T = meta.role.shape
    lib = library(circuit.depth)
    every_row = torch.ones(B, T, dtype=torch.bool)
    if remove is not None and len(remove) == 3 and isinstance(remove[0], int):
        remove = [remove]
    removals = [tuple(r) for r in (remove or [])]
    out: dict[int, dict[int, Replacement]] = {}
    for h in circuit.heads:
        if h.kind == KEPT and strict:
            pat, rows = uniform_causal(B, T), every_row
        elif h.kind == KEPT:
            pat, rows = torch.zeros(B, T, T), ~every_row
        elif h.kind == "rule":
            rules = {r: (UNIFORM if strict and n == KEPT else n) for r, n in h.rules.items()}
            pat, rows = head_pattern(rules, meta, lib, h.maps)
        else:  # a baseline for the whole head
            pat, rows = lib[h.kind].pattern(meta), every_row
        for layer, head, src in removals:
            if (layer, head) != (h.layer, h.head):
                continue
            gone = s_index(meta) == src
            pat = torch.where(gone[..., None], uniform_causal(B, T), pat)
            rows = rows | gone
        if rows.any():
            out.setdefault(h.layer, {})[h.head] = (pat, rows)
    return out


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
    """Validation MSE and partial MSE per chain position with ``patterns`` replacing heads.

    ``model`` must hold one member (``EnsembleTransformer.member(e)``).
    """
    if model.n_members != 1:
        raise UsageError("ablations run on one model: use model.member(e)")
    pred = model.run_with_hooks(batch.inputs, batch.meta, pattern_hooks(patterns or {}))[0]  # (B, N, d_out)
    err = (pred - batch.targets) ** 2
    positions = task.depth if task.ic else 1
    partial = err.view(*err.shape[:2], positions, task.dims).mean(dim=(0, 1, 3))
    return float(partial.mean()), [float(p) for p in partial]


@dataclass
class LossRow:
    ablation: str
    loss: float
    partial: list[float]

    def to_dict(self) -> dict:
        return asdict(self)


COMBINED, COMBINED_KEPT = "combined", "combined, unexplained rows kept"


def loss_table(model: EnsembleTransformer, batch: Batch, task: VectorTaskConfig, circuit: Circuit) -> list[LossRow]:
    """Appendix E steps 5 and 6: no ablation; the combined ablation (every row replaced,
    unexplained rows uniform); with unexplained rows, the same leaving them to the head; then
    each useful path removed, each row following a measured map removed (made uniform), and
    each redundant group removed together."""
    rows = [LossRow("none", *ablated_loss(model, batch, task))]
    rows.append(LossRow(COMBINED, *ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta, strict=True))))
    if circuit.kept():
        rows.append(LossRow(COMBINED_KEPT, *ablated_loss(model, batch, task, replaced_patterns(circuit, batch.meta))))
    for path in circuit.paths():
        pats = replaced_patterns(circuit, batch.meta, remove=path[:3])
        rows.append(LossRow("-" + path_key(path), *ablated_loss(model, batch, task, pats)))
    for layer, head, role in circuit.mapped():  # rows with no path: what removing them breaks
        pats = replaced_patterns(circuit, batch.meta, remove=[(layer, head, i) for i in role_sources(role, circuit.depth)])
        rows.append(LossRow(f"-{row_key((layer, head, role))}", *ablated_loss(model, batch, task, pats)))
    by_key = {path_key(p): p for p in circuit.paths()}
    for group in circuit.info.get("redundant_groups", []):
        pats = replaced_patterns(circuit, batch.meta, remove=[by_key[k][:3] for k in group if k in by_key])
        rows.append(LossRow("-(" + " + ".join(group) + ")", *ablated_loss(model, batch, task, pats)))
    return rows


def check_shape(circuit: Circuit, model: EnsembleTransformer, task: VectorTaskConfig) -> None:
    """The circuit must describe this model: every head once, the task's depth."""
    cfg = model.config
    want = {(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)}
    have = [(h.layer, h.head) for h in circuit.heads]
    if sorted(have) != sorted(want) or len(set(have)) != len(have):
        raise UsageError(f"the circuit must list each of the model's {len(want)} heads exactly once")
    if circuit.depth != task.depth:
        raise UsageError(f"the circuit is for D={circuit.depth}, the run has D={task.depth}")


def format_table(rows: Sequence[LossRow]) -> list[list[str]]:
    return [[r.ablation, f"{r.loss:.4f}", " ".join(f"{p:.3f}" for p in r.partial)] for r in rows]


def validate_run(run_dir: str | Path, spec: str | Path, checkpoint: int | None = None, n_val: int = 512) -> list[LossRow]:
    """Appendix E steps 5-6 for a circuit file on the member its ``info.seed`` names (or member 0)."""
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    circuit = Circuit.load(spec)
    model, cfg, _ = load_model(checkpoint_for(run_dir, checkpoint))
    seed = circuit.info.get("seed", cfg.seeds[0])
    if seed not in cfg.seeds:
        raise UsageError(f"the circuit is for seed {seed}; {run_dir} has seeds {list(cfg.seeds)}")
    member = model.member(cfg.seeds.index(seed))
    check_shape(circuit, member, cfg.task)
    return loss_table(member, validation_batch(cfg)[:n_val], cfg.task, circuit)
