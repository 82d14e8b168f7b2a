"""Stacked heads inside a language model: the retrieval chain's hops, head by head (``llm-circuit``).

The paper shows that small transformers trained on the retrieval problem move one hop of the
chain per layer with stacked attention heads (Sec. 8-9, App. E) and that language models solve
the problem in words (Sec. 4), without looking inside them. This module looks inside one, on the
questions of a chain formulation (``equations``: ``f = a``, ``a = 2``, "What is the value of f?").

Per question (``index`` of stream ``seed``, as ``llm-bench`` asks them, chat mode):

1. the clean prompt's greedy next token decides whether the model answers it correctly; only
   correctly answered questions are analysed (accuracy, n and the Wilson interval beside);
2. counterfactual ``k`` (k = 1..D) changes one link of the chain: in link k's fact
   (``x_{k-1} = x_k``, counted from the query ``x_0``) ``x_k`` becomes another chain's entity of
   the same level, so the answer becomes that chain's; prompts keep their token count;
3. metric ``M`` = logit of the clean answer minus the mean logit of the other acceptable
   answers, at the last position; a patch's effect is ``(M_clean - M_patched) / (M_clean -
   M_cf)``: 1 is the whole of the counterfactual's change;
4. attribution patching (one forward and backward pass) estimates, for every head and position,
   the effect of patching that head's output from counterfactual k: ``s_k[l, h]`` sums it over
   positions; ``t_k = s_k - s_{k+1}`` is what changing link k does beyond changing link k+1,
   i.e. the heads whose output first depends on link k: hop k's heads;
5. the :data:`TOP` heads of ``t_k`` are confirmed by activation patching (each head's output at
   every position from counterfactual k); a head carries hop k if its patched effect is at least
   :data:`HEAD_MIN` and ``t_k > 0``; for each, the position where its effect is largest (the
   destination) and the token it attends to most there (the source) name what it moves where;
   a head confirmed for several hops counts for the one where its ``t`` is largest
   (:func:`own_carriers`, read when summarising);
6. path patching: hop k-1's confirmed heads patched from counterfactual k-1 together (``E``),
   and again with hop k's confirmed heads that are not also hop k-1's frozen at their clean
   outputs (``E_frozen``); ``(E - E_frozen) / E`` is the share of hop k-1's effect mediated by
   hop k's heads (measured where ``E`` is at least :data:`HEAD_MIN`).

Each question's result is one line of ``results.jsonl``, appended as soon as it is done, so an
interrupted run resumes where it stopped. :func:`summarise` reads the lines back; the claims
(:mod:`stackedheads.claims.llm_circuit`) are judged from them.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError

__all__ = [
    "CircuitConfig", "HEAD_MIN", "SPEC_FILE", "TOP", "analyse_question", "load_rows", "run_circuit", "summarise",
]

SPEC_FILE = "llm-circuit.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
TOP = 3  # heads per hop confirmed by activation patching (the rest: attribution only)
HEAD_MIN = 0.1  # a head carries a hop if patching it alone moves 10% of the link's effect
MIN_DROP = 1.0  # a counterfactual must lower M by a logit at least, else its hop is not measured
ROUND = 4


@dataclass(frozen=True)
class CircuitConfig:
    """One analysis: a model on ``n`` questions of ``formulation`` at depth ``depth``."""

    model: str
    formulation: str = "equations"
    depth: int = 2
    n: int = 10
    seed: int = 0
    chains: int = 4
    few_shot: int = 0
    top: int = TOP
    # False: analyse the wrongly answered questions too (their records keep ``correct``, and the
    # claims count only the correct ones); tests on untrained tiny models use it.
    only_correct: bool = True
    min_drop: float = MIN_DROP  # tiny untrained models in the tests move M by less than a logit

    def __post_init__(self) -> None:
        from stackedheads.tasks import prompts
        from stackedheads.tasks.formulations import FORMULATIONS

        if self.formulation not in prompts.FORMULATIONS:
            raise UsageError(f"unknown formulation {self.formulation!r}; choose one of: {', '.join(prompts.FORMULATIONS)}",
                             fields=("formulation",))
        if FORMULATIONS[self.formulation].conditional:
            raise UsageError(
                f"formulation {self.formulation!r} has no single chain (conditional retrieval, Sec. 3.1): "
                "llm-circuit follows one chain's hops; use equations, lives-with or kingdoms", fields=("formulation",))
        prompts.validate(self.formulation, self.depth, self.chains)
        prompts.check_seed(self.seed)
        if type(self.n) is not int or not 1 <= self.n <= 10_000:
            raise UsageError(f"'n' must be a whole number from 1 to 10000, got {self.n!r}", fields=("n",))
        if type(self.few_shot) is not int or not 0 <= self.few_shot <= 10:
            raise UsageError(f"'few_shot' must be 0 to 10, got {self.few_shot!r}", fields=("few_shot",))
        if type(self.top) is not int or not 1 <= self.top <= 20:
            raise UsageError(f"'top' must be 1 to 20, got {self.top!r}", fields=("top",))
        if not 0 < self.min_drop < float("inf"):
            raise UsageError(f"'min_drop' must be a positive number, got {self.min_drop!r}", fields=("min_drop",))
        if self.chains < 2:
            raise UsageError("'chains' must be at least 2: a counterfactual borrows another chain's entity", fields=("chains",))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- prompts, counterfactuals and token roles ------------------------------------------------------


def _word(entity: str) -> re.Pattern:
    return re.compile(rf"(?<![\w]){re.escape(entity)}(?![\w])")


def link_line(lines: Sequence[str], a: str, b: str) -> int:
    """Index of the fact line linking ``a`` (query side) and ``b``: the one line naming both."""
    found = [i for i, s in enumerate(lines) if _word(a).search(s) and _word(b).search(s)]
    if len(found) != 1:
        raise ValueError(f"no single fact links {a} and {b}")
    return found[0]


def counterfactual(question, k: int, rng: random.Random) -> list[tuple[str, str]]:
    """Candidates for counterfactual ``k``: (prompt with link k's ``x_k`` replaced by another
    chain's level-k entity, that chain's answer), in the order ``rng`` draws the chains."""
    chains, qc = question.metadata["chains"], question.metadata["query_chain"]
    lines = question.prompt.split("\n")
    i = link_line(lines[:-1], qc[k - 1], qc[k])
    others = [c for c in chains if c != qc]
    rng.shuffle(others)
    out = []
    for other in others:
        new = lines.copy()
        m = list(_word(qc[k]).finditer(new[i]))[-1]  # x_k is the link's far end: its last mention
        new[i] = new[i][: m.start()] + other[k] + new[i][m.end():]
        out.append(("\n".join(new), other[-1]))
    return out


def token_roles(enc, question, prompt_at: int) -> list[str]:
    """Each token's role: ``L{k}:x{j}`` (entity ``x_j`` in link k's fact), ``L{k}`` (the rest of
    that fact's line with its newline), ``Q:x0`` (the queried name), ``Q`` (the rest of the
    question), ``facts`` (other facts), ``pre`` (before the question: template, examples) and
    ``end`` (after it: the template's assistant turn)."""
    qc = question.metadata["query_chain"]
    lines = question.prompt.split("\n")
    starts, pos = [], prompt_at
    for s in lines:
        starts.append(pos)
        pos += len(s) + 1
    spans: list[tuple[int, int, str]] = []  # (start, end, role), the narrower first
    for k in range(1, len(qc)):
        i = link_line(lines[:-1], qc[k - 1], qc[k])
        for j in (k - 1, k):
            m = list(_word(qc[j]).finditer(lines[i]))[0 if j == k - 1 else -1]
            spans.append((starts[i] + m.start(), starts[i] + m.end(), f"L{k}:x{j}"))
        spans.append((starts[i], starts[i] + len(lines[i]) + 1, f"L{k}"))
    q = len(lines) - 1
    m = _word(qc[0]).search(lines[q])
    if m:
        spans.append((starts[q] + m.start(), starts[q] + m.end(), "Q:x0"))
    spans.append((starts[q], starts[q] + len(lines[q]), "Q"))
    spans.append((prompt_at, starts[q], "facts"))
    end_of_prompt = prompt_at + len(question.prompt)
    roles = []
    for a, b in enc.spans:
        mid = (a + b) / 2 if b > a else a
        if b <= prompt_at:
            roles.append("pre")
        elif a >= end_of_prompt:
            roles.append("end")
        else:
            roles.append(next((r for s, e, r in spans if s <= mid < e), "facts"))
    return roles


# --- hooks on the heads' outputs --------------------------------------------------------------------


class _Heads:
    """Forward pre-hooks on every layer's ``o_proj`` (its input is the heads' outputs side by
    side): ``cache`` keeps them, ``grad`` makes them leaves whose gradient a backward pass fills,
    ``patches[l]`` = [(row, head, source [T, d_head])] overwrites heads' outputs."""

    def __init__(self, lm) -> None:
        self.lm, self.mode, self.saved, self.patches = lm, "off", {}, {}
        self.handles = [layer.self_attn.o_proj.register_forward_pre_hook(self._hook(l)) for l, layer in enumerate(lm.layers)]

    def _hook(self, l: int):
        def pre(module, args):
            z = args[0]
            dh = self.lm.head_dim
            if l in self.patches:
                z = z.clone()
                for row, h, src in self.patches[l]:
                    z[row, :, h * dh:(h + 1) * dh] = src
            if self.mode == "grad":
                z = z.detach().requires_grad_(True)
            if self.mode in ("grad", "cache"):
                self.saved[l] = z
            return (z,) + tuple(args[1:]) if (l in self.patches or self.mode == "grad") else None
        return pre

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _margin(logits, answer_ids: Sequence[int], correct: int):
    """M = logit of the correct answer minus the mean of the other acceptable answers' (rows)."""
    others = [a for a in answer_ids if a != correct]
    return logits[:, correct] - logits[:, others].mean(dim=1)


def _forward(lm, ids, attentions: bool = False):
    kwargs = {"output_attentions": True} if attentions else {}
    return lm.model(input_ids=ids, logits_to_keep=1, use_cache=False, **kwargs)


PATH_SETS = "own"  # path patching's sets: each hop's own heads (own_carriers); older records lack it


def analyse_question(lm, question, cfg: CircuitConfig, previous: dict | None = None) -> dict[str, Any]:
    """One question's record (see the module's steps); only the clean pass where it is answered
    wrongly. ``previous``: a record of this question whose hops (attribution, confirmed heads)
    are kept; only the groups and path patching are measured again."""
    torch = lm.torch
    from stackedheads.llm.bench import few_shot_examples

    turns: list[tuple[str, str]] = []
    for e in few_shot_examples(question, cfg.few_shot) if cfg.few_shot else []:
        turns += [("user", e.prompt), ("assistant", e.answer)]
    enc = lm.prompt(turns + [("user", question.prompt)])
    prompt_at = enc.text.rfind(question.prompt)
    roles = token_roles(enc, question, prompt_at)
    answer_ids = [lm.answer_token(a) for a in question.acceptable]
    by_id = dict(zip(answer_ids, question.acceptable))
    correct_id = lm.answer_token(question.answer)
    ids = torch.tensor([enc.ids])
    T = ids.shape[1]
    L, H, dh = lm.n_layers, lm.n_heads, lm.head_dim
    rec: dict[str, Any] = {"index": question.index, "tokens": T, "answer": question.answer}
    hooks = _Heads(lm)
    reuse = previous is not None and bool(previous.get("hops"))
    try:
        hooks.mode = "cache" if reuse else "grad"
        with torch.enable_grad() if not reuse else torch.no_grad():
            out = _forward(lm, ids, attentions=not reuse)
            logits = out.logits[:, -1].float()
            pred = int(logits[0].argmax())
            rec["pred"] = lm_decode(by_id, pred)
            rec["correct"] = pred == correct_id
            m_clean = _margin(logits, answer_ids, correct_id)
            rec["margin"] = round(float(m_clean[0].detach()), ROUND)
            if not rec["correct"] and cfg.only_correct:
                return rec
            if not reuse:
                m_clean[0].backward()
        if not reuse:
            grads = {l: hooks.saved[l].grad[0].detach() for l in range(L)}
            att = [a[0].detach() for a in out.attentions]  # (H, T, T) per layer
        clean = {l: hooks.saved[l][0].detach() for l in range(L)}
        del out
        hooks.mode, hooks.saved = "cache", {}
        D = question.depth
        rng = random.Random(f"stackedheads/llm-circuit/{question.formulation}/{D}/{question.seed}/{question.index}")
        cf_prompts, cf_answers = [], []
        for k in range(1, D + 1):
            for text, ans in counterfactual(question, k, rng):
                cenc = lm.prompt(turns + [("user", text)])
                if len(cenc.ids) == T:
                    cf_prompts.append(cenc.ids)
                    cf_answers.append(ans)
                    break
            else:
                raise ValueError(f"no counterfactual for link {k} keeps the prompt's token count")
        with torch.no_grad():
            cf_logits = _forward(lm, torch.tensor(cf_prompts)).logits[:, -1].float()
        cf = {k: {l: hooks.saved[l][k - 1].detach() for l in range(L)} for k in range(1, D + 1)}
        m_cf = _margin(cf_logits, answer_ids, correct_id)
        hooks.mode, hooks.saved = "off", {}
        m0 = float(m_clean[0].detach())
        hops = []
        s = {}
        for k in range(1, D + 1) if not reuse else ():
            drop = m0 - float(m_cf[k - 1])
            cf_pred = int(cf_logits[k - 1].argmax())
            hop = {"k": k, "cf_answer": cf_answers[k - 1], "cf_pred": lm_decode(by_id, cf_pred),
                   "cf_follows": cf_pred == lm.answer_token(cf_answers[k - 1]), "drop": round(drop, ROUND),
                   "measured": drop >= cfg.min_drop}
            if hop["measured"]:
                # attribution: grad . (z_cf - z_clean) per head and position, as a share of the drop
                per = torch.stack([((cf[k][l] - clean[l]) * grads[l]).view(T, H, dh).sum(-1) for l in range(L)])  # (L, T, H)
                eff = -per / drop
                s[k] = eff.sum(1)  # (L, H)
                hop["_eff"] = eff
            hops.append(hop)
        if reuse:
            hops = [dict(h) for h in previous["hops"]]
        # t_k: hop k's own heads (changing link k beyond what changing link k+1 does)
        for hop in hops if not reuse else ():
            k = hop["k"]
            if not hop["measured"]:
                continue
            nxt = s.get(k + 1) if k < D else torch.zeros(L, H)
            hop["s"] = _rounded(s[k])
            if nxt is None:  # link k+1's change did not move the answer: t_k is s_k
                nxt = torch.zeros(L, H)
            t = s[k] - nxt
            hop["t"] = _rounded(t)
            order = torch.argsort(t.flatten(), descending=True)[: cfg.top]
            hop["candidates"] = []
            for flat in order.tolist():
                l, h = divmod(flat, H)
                col = hop["_eff"][l, :, h]
                dest = int(col.argmax())
                row = att[l][h, dest]
                src = int(row.argmax())
                mass: dict[str, float] = {}
                for p in range(dest + 1):
                    mass[roles[p]] = mass.get(roles[p], 0.0) + float(row[p])
                hop["candidates"].append({
                    "layer": l, "head": h, "t": round(float(t[l, h]), ROUND), "s": round(float(s[k][l, h]), ROUND),
                    "dest": dest, "dest_role": roles[dest], "src": src, "src_role": roles[src],
                    "src_attention": round(float(row[src]), ROUND),
                    "attention_by_role": {r: round(v, ROUND) for r, v in sorted(mass.items(), key=lambda kv: -kv[1])[:4]},
                })
        # activation patching of each candidate (one batch)
        rows = [(hop["k"], c) for hop in hops if hop["measured"] for c in hop["candidates"]] if not reuse else []
        if rows:
            hooks.patches = {}
            for r, (k, c) in enumerate(rows):
                hooks.patches.setdefault(c["layer"], []).append((r, c["head"], _head(cf[k][c["layer"]], c["head"], dh)))
            with torch.no_grad():
                pl = _forward(lm, ids.expand(len(rows), T)).logits[:, -1].float()
            hooks.patches = {}
            m_p = _margin(pl, answer_ids, correct_id)
            for r, (k, c) in enumerate(rows):
                drop = next(h["drop"] for h in hops if h["k"] == k)
                c["act"] = round((m0 - float(m_p[r])) / drop, ROUND)
                c["carries"] = c["act"] >= HEAD_MIN and c["t"] > 0
        # groups and path patching (one batch): each hop's heads together; hop k-1's with hop k's frozen
        carriers = own_carriers(hops)
        groups = []
        for k in range(1, D + 1):
            if carriers[k]:
                groups.append((k, {(c["layer"], c["head"]): cf[k][c["layer"]] for c in carriers[k]}))
            if k >= 2 and carriers[k - 1] and carriers[k]:
                patch = {(c["layer"], c["head"]): cf[k - 1][c["layer"]] for c in carriers[k - 1]}
                for c in carriers[k]:
                    patch.setdefault((c["layer"], c["head"]), clean[c["layer"]])
                groups.append((-k, patch))
        if groups:
            hooks.patches = {}
            for r, (_, patch) in enumerate(groups):
                for (l, h), src in patch.items():
                    hooks.patches.setdefault(l, []).append((r, h, _head(src, h, dh)))
            with torch.no_grad():
                gl = _forward(lm, ids.expand(len(groups), T)).logits[:, -1].float()
            hooks.patches = {}
            m_g = _margin(gl, answer_ids, correct_id)
            effect = {}
            for r, (key, _) in enumerate(groups):
                k = abs(key)
                drop = next(h["drop"] for h in hops if h["k"] == (k if key > 0 else k - 1))
                effect[key] = (m0 - float(m_g[r])) / drop
            rec["groups"] = [{"k": k, "effect": round(effect[k], ROUND)} for k in range(1, D + 1) if k in effect]
            rec["paths"] = [
                {"k": k, "effect": round(effect[k - 1], ROUND), "frozen": round(effect[-k], ROUND),
                 "mediated": round((effect[k - 1] - effect[-k]) / effect[k - 1], ROUND) if effect[k - 1] >= HEAD_MIN else None}
                for k in range(2, D + 1) if -k in effect
            ]
        for hop in hops:
            hop.pop("_eff", None)
        rec["hops"] = hops
        rec["path_sets"] = PATH_SETS
        return rec
    finally:
        hooks.close()


def _head(z, h: int, dh: int):
    return z[:, h * dh:(h + 1) * dh]


def _rounded(x) -> list[list[float]]:
    return [[round(float(v), ROUND) for v in row] for row in x]


def lm_decode(by_id: dict[int, str], token: int) -> str:
    """The acceptable answer a token stands for, or ``#id`` for any other token."""
    return by_id.get(token, f"#{token}")


# --- the run: resumable, one line per question --------------------------------------------------------


def load_rows(out: str | Path) -> list[dict[str, Any]]:
    """The complete lines of ``results.jsonl`` (a torn last line, from a kill mid-write, is not
    one), the last line of each question only (a record measured again replaces the earlier)."""
    path = Path(out) / RESULTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("index"), int):
            rows.append(row)
    return list({r["index"]: r for r in rows}.values())


def _append(path: Path, row: dict) -> None:
    """Append one line and fsync it; a torn tail left by a kill is cut off first."""
    data = path.read_bytes() if path.exists() else b""
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
    with open(path, "ab") as f:
        f.write((json.dumps(row, separators=(",", ":")) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def run_circuit(cfg: CircuitConfig, out: str | Path, lm=None, progress: Callable[[int, int], None] | None = None,
                load: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Analyse ``cfg.n`` questions into ``out`` (resuming the questions already there) and write
    ``summary.json`` and the figures; ``lm`` a :class:`~stackedheads.llm.torchlm.TorchLM` (else
    loaded from ``cfg.model`` by ``load``)."""
    from stackedheads.state.locks import FolderLock
    from stackedheads.state.write import atomic_write_json
    from stackedheads.tasks import prompts

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder", fields=("out",))
    spec = {"kind": "llm-circuit", "config": cfg.to_dict()}
    with FolderLock(out, "llm-circuit run"):
        old_spec = out / SPEC_FILE
        if old_spec.exists():
            try:
                old = json.loads(old_spec.read_text())
            except (OSError, json.JSONDecodeError):
                raise UsageError(f"{old_spec} is unreadable: delete it or choose another 'out'", fields=("out",)) from None
            if old != spec:
                diff = [f"{k}={old.get('config', {}).get(k)!r} there, {v!r} now" for k, v in cfg.to_dict().items()
                        if old.get("config", {}).get(k) != v]
                raise UsageError(f"{out} holds another llm-circuit run ({'; '.join(diff) or 'another kind'}): "
                                 "choose another 'out'", fields=("out",))
        questions = prompts.generate_many(cfg.formulation, cfg.depth, cfg.chains, cfg.n, cfg.seed)
        if lm is None:
            lm = (load or _default_load)(cfg.model)
        lm.prompt([("user", questions[0].prompt)])  # a prompt beyond the context: one line, before any work
        atomic_write_json(old_spec, spec)
        latest = {r["index"]: r for r in load_rows(out)}  # a later line of a question replaces an earlier one
        done = {i for i, r in latest.items() if not r.get("hops") or r.get("path_sets") == PATH_SETS}
        if progress:
            progress(len(done & set(range(cfg.n))), cfg.n)
        for q in questions:
            if q.index in done:
                continue
            _append(out / RESULTS, analyse_question(lm, q, cfg, previous=latest.get(q.index)))
            done.add(q.index)
            if progress:
                progress(len(done & set(range(cfg.n))), cfg.n)
        summary = summarise(load_rows(out), cfg, layers=lm.n_layers, heads=lm.n_heads)
        atomic_write_json(out / SUMMARY, summary)
        from stackedheads.llm.circuit_plots import plot_summary

        summary["figures"] = [Path(p).name for p in plot_summary(summary, out)]  # beside summary.json
        atomic_write_json(out / SUMMARY, summary)
        return summary


def _default_load(model: str):
    from stackedheads.llm.torchlm import load_gguf

    return load_gguf(model)


# --- summary ----------------------------------------------------------------------------------------


def own_carriers(hops: Sequence[dict]) -> dict[int, list[dict]]:
    """Each hop's confirmed heads in one question, a head confirmed for several hops counted
    for the one where its ``t`` (what its link adds beyond the next link) is largest."""
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for hop in hops:
        for c in hop.get("candidates", []):
            if c.get("carries"):
                key = (c["layer"], c["head"])
                if key not in best or c["t"] > best[key][0]:
                    best[key] = (c["t"], hop["k"])
    return {hop["k"]: [c for c in hop.get("candidates", []) if c.get("carries") and best[(c["layer"], c["head"])][1] == hop["k"]]
            for hop in hops}


def hop_layers(hops: Sequence[dict]) -> dict[int, int | None]:
    """The layer of each hop's strongest own head (:func:`own_carriers`) in one question, or None."""
    return {k: (max(cs, key=lambda c: c["act"])["layer"] if cs else None) for k, cs in own_carriers(hops).items()}


def summarise(rows: Sequence[dict], cfg: CircuitConfig | dict, layers: int | None = None, heads: int | None = None) -> dict[str, Any]:
    """Accuracy over the questions and, over the correctly answered ones, each hop's heads,
    whether they stack and how much path patching says is mediated (the claims' inputs)."""
    from stackedheads.llm.scoring import wilson

    c = cfg.to_dict() if isinstance(cfg, CircuitConfig) else dict(cfg)
    D = c["depth"]
    rows = sorted({r["index"]: r for r in rows if r["index"] < c["n"]}.values(), key=lambda r: r["index"])
    n, k = len(rows), sum(bool(r.get("correct")) for r in rows)
    lo, hi = wilson(k, n)
    chance = 1.0 / c["chains"]
    analysed = [r for r in rows if (r.get("correct") or not c.get("only_correct", True)) and r.get("hops")]
    measured = [r for r in analysed if all(h["measured"] for h in r["hops"])]
    if layers is None:
        any_s = next((h["s"] for r in analysed for h in r["hops"] if "s" in h), None)
        layers, heads = (len(any_s), len(any_s[0])) if any_s else (0, 0)
    hop_rows = []
    for hk in range(1, D + 1):
        hs = [h for r in analysed for h in r["hops"] if h["k"] == hk]
        ms = [h for h in hs if h["measured"]]
        mean_t = [[sum(h["t"][l][j] for h in ms) / len(ms) for j in range(heads)] for l in range(layers)] if ms else []
        counts: dict[tuple[int, int], list[float]] = {}
        head_moves: dict[tuple[int, int], dict[str, int]] = {}
        moves: dict[str, int] = {}
        lays = []
        for r in analysed:
            own = own_carriers(r["hops"])
            if not any(h["k"] == hk and h["measured"] for h in r["hops"]):
                continue
            lays.append(hop_layers(r["hops"])[hk])
            for cnd in own[hk]:
                counts.setdefault((cnd["layer"], cnd["head"]), []).append(cnd["act"])
                mv = head_moves.setdefault((cnd["layer"], cnd["head"]), {})
                key = f"{cnd['src_role']} -> {cnd['dest_role']}"
                mv[key] = mv.get(key, 0) + 1
                moves[key] = moves.get(key, 0) + 1
        top_heads = sorted(counts.items(), key=lambda kv: (-len(kv[1]), -sum(kv[1])))
        hop_rows.append({
            "k": hk, "questions": len(hs), "measured": len(ms),
            "cf_follows": sum(h["cf_follows"] for h in hs),
            "present": sum(x is not None for x in lays),
            "layers": [x for x in lays if x is not None],
            "heads": [{"layer": l, "head": j, "questions": len(v), "mean_act": round(sum(v) / len(v), ROUND),
                       "moves": head_moves[(l, j)]}
                      for (l, j), v in top_heads[:8]],
            "moves": dict(sorted(moves.items(), key=lambda kv: -kv[1])[:6]),
            "mean_t": [[round(v, ROUND) for v in row] for row in mean_t],
            "group_effect": _median([g["effect"] for r in analysed for g in r.get("groups", []) if g["k"] == hk]),
        })
    stacked = 0
    for r in measured:
        by_hop = hop_layers(r["hops"])
        lays = [by_hop[k] for k in sorted(by_hop)]
        if all(x is not None for x in lays) and all(a < b for a, b in zip(lays, lays[1:])):
            stacked += 1
    mediation = {}
    for hk in range(2, D + 1):
        # only records whose path patching froze each hop's own heads (PATH_SETS) measure mediation
        vals = [p["mediated"] for r in analysed if r.get("path_sets") == PATH_SETS
                for p in r.get("paths", []) if p["k"] == hk and p["mediated"] is not None]
        mediation[str(hk)] = {"questions": len(vals), "median": _median(vals),
                              "older_records": sum(r.get("path_sets") != PATH_SETS for r in analysed)}
    return {
        "config": c, "depth": D, "n": n, "correct": k, "accuracy": k / n if n else None, "ci95": [lo, hi],
        "chance": chance, "analysed": len(analysed), "all_hops_measured": len(measured), "stacked": stacked,
        "layers": layers, "heads": heads, "hops": hop_rows, "mediation": mediation,
        "thresholds": {"head_min": HEAD_MIN, "min_drop": c.get("min_drop", MIN_DROP), "top": c.get("top", TOP)},
    }


def _median(vals: Sequence[float]) -> float | None:
    if not vals:
        return None
    v = sorted(vals)
    m = len(v) // 2
    return round(v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2, ROUND)
