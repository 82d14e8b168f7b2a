"""The LLM benchmark of Sec. 4 (Figure 2), protocol of App. A.

For each (formulation, D) cell, ``n`` seeded questions from :mod:`stackedheads.tasks.prompts`.
Each question is asked directly (optionally after ``k`` solved examples of the same cell);
every draw is parsed and normalised (first line, case, surrounding whitespace, quotes and final
punctuation) and checked against the question's acceptable set (App. A: "repeatedly sampling
from the model until an acceptable answer is found"), up to ``max_draws`` draws. A question is
correct when its first acceptable answer is the correct one; questions with no acceptable
answer within ``max_draws`` are *unanswered* and count as wrong in ``accuracy`` (reported
separately, and ``accuracy_answered`` leaves them out). Chance is the mean of
``1/len(acceptable)``, the dashed lines of Fig. 2; intervals are Wilson 95%.

The run folder holds:

- ``config.json``: what identifies the run (backend, model, mode, seed, chains, few-shot,
  sampling) and every invocation's arguments. Never an API key.
- ``samples.jsonl``: one line per question, appended and flushed when the question finishes:
  the prompt, every raw draw and its parse, the final answer, correctness, latency.
  Re-running skips the questions already there, so a killed run resumes; runs with other
  ``--formulation``/``--depth``/``--n`` add questions to the same folder.
- ``results.json`` and ``figure2.png``/``.svg``, from every question in ``samples.jsonl``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, redact, redact_secrets
from stackedheads.llm.backends import Backend, Generation, Request, clean_text
from stackedheads.plots import save_figure
from stackedheads.storage import RunFolder, atomic_write_json, read_state_json
from stackedheads.tasks import prompts
from stackedheads.tasks.formulations import FORMULATIONS
from stackedheads.tasks.prompts import Question

__all__ = [
    "BenchConfig",
    "build_request",
    "draw_seed",
    "few_shot_examples",
    "normalise",
    "parse_answer",
    "parse_depths",
    "parse_formulations",
    "plan",
    "plot_figure2",
    "run_bench",
    "summarise",
    "wilson",
]

PROTOCOL_VERSION = 1
SAMPLES = "samples.jsonl"
CONFIG = "config.json"
RESULTS = "results.json"
KIND = "llm-bench run"  # what storage.folder_kinds calls a folder holding SAMPLES
_Z95 = 1.959963984540054  # two-sided 95% normal quantile

# Fields of the run identity: a folder answered under one of these values must not be mixed
# with answers under another. n, formulations and depths only select questions.
_IDENTITY_FIELDS = ("chains", "seed", "few_shot", "max_draws", "temperature", "max_tokens")
# Solved examples before each question: a hundred already overflow any small model's context,
# and an unbounded count built a prompt of gigabytes before asking anything.
MAX_FEW_SHOT = 100


@dataclass(frozen=True)
class BenchConfig:
    """The benchmark protocol's arguments (Sec. 4: n = 500 per formulation)."""

    formulations: tuple[str, ...] = field(default_factory=FORMULATIONS.names)  # all registered
    depths: tuple[int, ...] | None = None  # None: each formulation's default (Sec. 4: D = 5)
    chains: int = 4
    n: int = 500
    seed: int = 0
    few_shot: int = 0
    max_draws: int = 10
    temperature: float = 1.0
    max_tokens: int = 16

    def __post_init__(self) -> None:
        if not self.formulations:
            raise UsageError("no formulation given")
        for f in self.formulations:
            if f not in FORMULATIONS:
                raise UsageError(f"unknown formulation {f!r}; choose all or one of: {', '.join(FORMULATIONS)}")
        if self.n < 1:
            raise UsageError(f"--n must be >= 1, got {self.n}")
        if not 0 <= self.few_shot <= MAX_FEW_SHOT:
            raise UsageError(f"--few-shot must be between 0 and {MAX_FEW_SHOT}, got {self.few_shot}")
        if self.max_draws < 1:
            raise UsageError(f"--max-draws must be >= 1, got {self.max_draws}")
        if self.max_tokens < 1:
            raise UsageError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise UsageError(f"--temperature must be >= 0, got {self.temperature}")
        if self.temperature == 0 and self.max_draws > 1:
            # Greedy decoding repeats itself: resampling (App. A) needs temperature > 0.
            raise UsageError("--temperature 0 cannot resample: give a temperature > 0 or --max-draws 1")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["formulations"] = list(self.formulations)
        d["depths"] = list(self.depths) if self.depths is not None else None
        return d


# --- argument parsing ----------------------------------------------------------------------------


def parse_formulations(text: str) -> tuple[str, ...]:
    """``all``, one formulation, or a comma-separated list."""
    if text.strip() == "all":
        return FORMULATIONS.names()
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    for f in names:
        if f not in FORMULATIONS:
            raise UsageError(f"unknown formulation {f!r}; choose all or one of: {', '.join(FORMULATIONS)}")
    if not names:
        raise UsageError("--formulation is empty")
    return names


def parse_depths(text: str | None) -> tuple[int, ...] | None:
    """``5``, ``1-10`` or ``1,3,5`` -> sorted depths; None or ``default`` -> None."""
    if text is None or text.strip() in ("", "default"):
        return None
    depths: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                depths.update(range(lo, hi + 1))
            else:
                depths.add(int(part))
    except ValueError:
        raise UsageError(f"--depth must be D, A-B or a comma list, got {text!r}") from None
    if min(depths) < 1:
        raise UsageError(f"depths must be >= 1, got {text!r}")
    return tuple(sorted(depths))


# --- the questions -------------------------------------------------------------------------------


def cells(cfg: BenchConfig) -> list[tuple[str, int]]:
    """The (formulation, D) cells of a run. Explicit depths apply to the formulations with a
    variable depth; those with a fixed depth (functions and relatives, App. A.4, A.5) keep it
    when asked together with others."""
    out: list[tuple[str, int]] = []
    for f in cfg.formulations:
        fixed = not FORMULATIONS[f].variable_depth
        if cfg.depths is None or (fixed and len(cfg.formulations) > 1):
            depths: Iterable[int] = (prompts.default_depth(f),)
        else:
            depths = cfg.depths
        for d in depths:
            out.append((f, prompts.validate(f, d, cfg.chains)))
    return out


def plan(cfg: BenchConfig) -> list[Question]:
    """All questions of a run: ``n`` per cell, indices ``0..n-1`` of stream ``seed``."""
    return [
        q
        for f, d in cells(cfg)
        for q in prompts.generate_many(f, depth=d, chains=cfg.chains, n=cfg.n, seed=cfg.seed)
    ]


def few_shot_examples(question: Question, k: int) -> list[Question]:
    """``k`` solved examples of the question's cell, from another seed stream (``-1 - seed``,
    never equal to ``seed``), the same for every question of the cell (so a server's prompt
    cache can reuse them); an example that happens to equal the question is skipped."""
    out: list[Question] = []
    index = 0
    while len(out) < k:
        ex = prompts.generate(
            question.formulation, question.depth, question.chains, -1 - question.seed, index
        )
        index += 1
        if ex.prompt != question.prompt:
            out.append(ex)
    return out


def draw_seed(seed: int, question: Question, draw: int) -> int:
    """Sampling seed of one draw: a pure function of (seed, question, draw), 31 bits."""
    key = f"stackedheads/llm/{seed}/{question.formulation}/{question.depth}/{question.chains}/{question.index}/{draw}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF


def completion_prompt(question: Question, examples: Sequence[Question]) -> str:
    """Completion mode: ``Question: ...\\nAnswer: X\\n\\n`` per example, then the question."""
    shots = "".join(f"Question: {e.prompt}\nAnswer: {e.answer}\n\n" for e in examples)
    return f"{shots}Question: {question.prompt}\nAnswer:"


def build_request(
    question: Question, examples: Sequence[Question], mode: str, cfg: BenchConfig, draw: int
) -> Request:
    """The request of one draw: chat turns (examples as user/assistant pairs) or a
    completion prompt, with the draw's own seed."""
    seed = draw_seed(cfg.seed, question, draw)
    if mode == "chat":
        turns: list[tuple[str, str]] = []
        for e in examples:
            turns += [("user", e.prompt), ("assistant", e.answer)]
        turns.append(("user", question.prompt))
        return Request(tuple(turns), None, cfg.temperature, cfg.max_tokens, seed)
    return Request(
        None, completion_prompt(question, examples), cfg.temperature, cfg.max_tokens, seed,
        stop=("\n\n", "\nQuestion:"),
    )


# --- parsing -------------------------------------------------------------------------------------

_LABEL = re.compile(r"^answer\s*:\s*", re.IGNORECASE)
_WRAP = "\"'`*_“”‘’"
_FINAL_PUNCT = ".,;:!?。"


def normalise(text: str) -> str:
    """First non-empty line, an ``Answer:`` label removed, surrounding whitespace, quotes and
    markdown emphasis removed, final punctuation removed, case folded."""
    line = next((x for x in text.strip().splitlines() if x.strip()), "")
    line = _LABEL.sub("", line.strip())
    previous = None
    while previous != line:  # e.g. '"3."' -> '3.' -> '3'
        previous = line
        line = line.strip().strip(_WRAP).rstrip(_FINAL_PUNCT)
    return line.casefold()


def parse_answer(text: str, acceptable: Iterable[str]) -> str | None:
    """The acceptable answer (in its canonical spelling) that ``text`` gives, or None."""
    table = {a.casefold(): a for a in acceptable}
    return table.get(normalise(text))


# --- one question --------------------------------------------------------------------------------


def _key(q: Question) -> str:
    return f"{q.formulation}/D{q.depth}/N{q.chains}/{q.index}"


async def ask(backend: Backend, question: Question, examples: Sequence[Question], cfg: BenchConfig) -> dict[str, Any]:
    """Sample until an acceptable answer or ``max_draws`` (App. A); the log record."""
    draws: list[dict[str, Any]] = []
    final: str | None = None
    start = time.perf_counter()
    first_request: Request | None = None
    for d in range(cfg.max_draws):
        request = build_request(question, examples, backend.mode, cfg, d)
        first_request = first_request or request
        gen: Generation = await backend.complete(request)
        parsed = parse_answer(gen.text, question.acceptable)
        # Scored as given, stored redacted (servers echo headers) and capped (a server that
        # ignores max_tokens must not grow the log without bound).
        text = redact(clean_text(gen.text))
        draws.append({
            "text": text, "parsed": _hidden(parsed), "normalised": normalise(text)[:_MAX_NORMALISED],
            "acceptable": parsed is not None, "seed": request.seed,
            "latency_s": round(gen.latency_s, 4), "finish_reason": gen.finish_reason,
            "retries": gen.retries,
        })
        if parsed is not None:
            final = parsed
            break
    assert first_request is not None
    prompt: Any = (
        [{"role": r, "content": c} for r, c in first_request.messages]
        if first_request.messages is not None else first_request.prompt
    )
    return {
        "key": _key(question),
        "formulation": question.formulation,
        "depth": question.depth,
        "chains": question.chains,
        "seed": question.seed,
        "index": question.index,
        "backend": backend.name,
        "model": backend.model,
        "mode": backend.mode,
        # The rest of the run identity, so that a resumed record can be checked on its own.
        "protocol": PROTOCOL_VERSION,
        **{k: getattr(cfg, k) for k in _IDENTITY_FIELDS if k not in ("chains", "seed")},
        "prompt": _hidden(prompt),
        "answer": _hidden(question.answer),
        "acceptable": _hidden(list(question.acceptable)),
        "draws": draws,
        "final": _hidden(final),
        "answered": final is not None,
        "correct": final == question.answer,
        "n_draws": len(draws),
        "latency_s": round(time.perf_counter() - start, 4),
    }


def _hidden(value: Any) -> Any:
    """``value`` (text, or lists and dicts of it) without a registered secret, as it is stored."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, list):
        return [_hidden(v) for v in value]
    if isinstance(value, dict):
        return {k: _hidden(v) for k, v in value.items()}
    return value


# --- the run folder ------------------------------------------------------------------------------


_MAX_NORMALISED = 200  # the parse of a draw: an answer is a word or a number
# What scoring reads from a record: one without these (a damaged line) is asked again.
_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str, "formulation": str, "depth": int, "chains": int, "answered": bool, "correct": bool,
    "acceptable": list, "n_draws": int, "latency_s": (int, float), "backend": str, "model": str, "mode": str,
}


def _valid_record(rec: Any) -> bool:
    return (
        isinstance(rec, dict)
        and all(isinstance(rec.get(k), t) for k, t in _RECORD_TYPES.items())
        and rec["formulation"] in FORMULATIONS
        and len(rec["acceptable"]) > 0
    )


def load_records(path: Path) -> dict[str, dict[str, Any]]:
    """Records of ``samples.jsonl`` by key; a line cut short by a kill, or a record missing
    what scoring needs, is ignored (its question is asked again)."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if _valid_record(rec):
                records[rec["key"]] = rec
    return records


def _repair_tail(path: Path) -> None:
    """Drop a partial last line (the process was killed mid-write) before appending."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(cut)


def _identity(backend: Backend, cfg: BenchConfig) -> dict[str, Any]:
    ident = {"protocol": PROTOCOL_VERSION, "backend": backend.name, "model": backend.model, "mode": backend.mode}
    ident.update({k: getattr(cfg, k) for k in _IDENTITY_FIELDS})
    return ident


def _check_folder(out: Path, identity: dict[str, Any], invocation: dict[str, Any]) -> None:
    """Refuse to mix answers of different runs in one folder; record this invocation."""
    path = out / CONFIG
    runs: list[dict[str, Any]] = []
    if path.exists():
        saved = read_state_json(path, "the run's identity")
        old = saved.get("identity", {})
        if not isinstance(old, dict):
            raise UsageError(f"{path} has the wrong shape (identity is not an object): use another --out")
        diff = [k for k in identity if old.get(k) != identity[k]]
        if diff:
            what = ", ".join(f"{k}: {old.get(k)!r} there, {identity[k]!r} now" for k in diff)
            raise UsageError(f"{out} holds a run with other settings ({what}); use another --out")
        runs = saved.get("invocations", [])
        runs = runs if isinstance(runs, list) else []
    runs.append(invocation)
    atomic_write_json(path, {"identity": identity, "invocations": runs})


def check_records(
    records: dict[str, dict[str, Any]], identity: dict[str, Any], samples: Path, vouched: bool,
    advice: str = "use another --out",
) -> None:
    """Every answer must come from this run's identity (a samples.jsonl without its
    config.json, or copied from elsewhere, must not credit one model with another's answers).
    Records from before these fields were stored are accepted only where config.json vouches."""
    for key, rec in records.items():
        for k, want in identity.items():
            if k not in rec and vouched:
                continue
            if rec.get(k, "(not recorded)") != want:
                raise UsageError(
                    f"{samples} holds answers of another run ({key}: {k} {str(rec.get(k, '(not recorded)'))[:60]!r} "
                    f"there, {want!r} expected); {advice}"
                )


def run_bench(
    backend: Backend,
    cfg: BenchConfig,
    out: Path,
    progress: Callable[[int, int], None] | None = None,
    backend_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ask every question of ``cfg`` not yet in ``out/samples.jsonl``; write the results and
    Figure 2; return the results. ``backend_info`` (JSON, no secrets) goes to config.json."""
    out = Path(out)
    questions = plan(cfg)  # validates before anything is written
    # A run folder may hold the comparison of its one model (reproduce's llm stage), nothing else.
    with RunFolder(out, KIND, shares=("llm comparison",)).lock("llm-bench"):
        return _run_bench_locked(backend, cfg, out, questions, progress, backend_info)


def _run_bench_locked(backend, cfg, out: Path, questions, progress, backend_info) -> dict[str, Any]:
    identity = _identity(backend, cfg)
    vouched = (out / CONFIG).exists()
    invocation = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": cfg.to_dict(),
        "backend": backend_info or {},
    }
    samples = out / SAMPLES
    _repair_tail(samples)
    done = load_records(samples)
    check_records(done, identity, samples, vouched)  # before config.json records this invocation
    _check_folder(out, identity, invocation)
    todo = [q for q in questions if _key(q) not in done]
    total = len(questions)
    if progress:
        progress(total - len(todo), total)
    if todo:
        asyncio.run(_ask_all(backend, todo, cfg, samples, total - len(todo), total, progress))
    else:
        asyncio.run(backend.aclose())
    results = summarise(load_records(samples).values(), identity)
    atomic_write_json(out / RESULTS, results)
    results["figures"] = plot_figure2(results, out)
    return results


async def _ask_all(backend, todo, cfg, samples: Path, done: int, total: int, progress) -> None:
    queue: asyncio.Queue[Question] = asyncio.Queue()
    for q in todo:
        queue.put_nowait(q)
    counter = {"done": done}
    shots: dict[tuple[str, int], list[Question]] = {}

    async def worker(log) -> None:
        while True:
            try:
                q = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            examples = shots.get((q.formulation, q.depth))
            if examples is None or any(e.prompt == q.prompt for e in examples):
                examples = few_shot_examples(q, cfg.few_shot)
                shots.setdefault((q.formulation, q.depth), examples)
            record = await ask(backend, q, examples, cfg)
            # One event loop thread: a whole line is written and flushed at a time.
            log.write(json.dumps(record, ensure_ascii=False) + "\n")
            log.flush()
            counter["done"] += 1
            if progress:
                progress(counter["done"], total)

    try:
        with open(samples, "a", encoding="utf-8") as log:
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, min(backend.max_concurrency, len(todo)))):
                    group.create_task(worker(log))
    except* Exception as eg:  # the first real error, not an ExceptionGroup, reaches the user
        raise eg.exceptions[0] from None
    finally:
        await backend.aclose()


# --- scoring -------------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Exact ends at k = 0 and k = n (the formula gives them up to round-off).
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def _cell_stats(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    correct = sum(r["correct"] for r in records)
    answered = sum(r["answered"] for r in records)
    lo, hi = wilson(correct, n)
    return {
        "formulation": records[0]["formulation"],
        "depth": records[0]["depth"],
        "chains": records[0]["chains"],
        "n": n,
        "correct": correct,
        "accuracy": correct / n,
        "ci95": [lo, hi],
        "answered": answered,
        "unanswered": n - answered,
        "accuracy_answered": correct / answered if answered else None,
        "chance": sum(1 / len(r["acceptable"]) for r in records) / n,
        "mean_draws": sum(r["n_draws"] for r in records) / n,
        "mean_latency_s": sum(r["latency_s"] for r in records) / n,
    }


def summarise(records: Iterable[dict[str, Any]], identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """results.json: every (formulation, D) cell; ``per_formulation`` picks each
    formulation's default depth (Fig. 2 left, Sec. 4: D = 5), or its only depth;
    ``per_depth`` lists each formulation's cells by D (Fig. 2 right for equations)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["formulation"], r["depth"]), []).append(r)
    order = {f: i for i, f in enumerate(FORMULATIONS)}
    keys = sorted(groups, key=lambda k: (order[k[0]], k[1]))
    stats = [_cell_stats(groups[k]) for k in keys]
    per_formulation: dict[str, Any] = {}
    per_depth: dict[str, dict[str, Any]] = {}
    for s in stats:
        per_depth.setdefault(s["formulation"], {})[str(s["depth"])] = s
    for f, by_d in per_depth.items():
        default = str(prompts.default_depth(f))
        if default in by_d:
            per_formulation[f] = by_d[default]
        elif len(by_d) == 1:
            per_formulation[f] = next(iter(by_d.values()))
    return {
        "identity": identity or {},
        "definitions": {
            "accuracy": "first acceptable answer correct, over all questions (unanswered count as wrong)",
            "accuracy_answered": "the same over answered questions only",
            "unanswered": "no acceptable answer within max_draws draws",
            "chance": "mean of 1/len(acceptable)",
            "ci95": "Wilson score interval, 95%",
        },
        "per_formulation": per_formulation,
        "per_depth": per_depth,
        "cells": stats,
    }


# --- Figure 2 ------------------------------------------------------------------------------------


def plot_figure2(results: dict[str, Any], out: Path) -> list[str]:
    """Fig. 2: left, accuracy per formulation (Wilson 95% bars) with dashed chance lines;
    right, equations accuracy vs D. PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ident = results.get("identity", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.2, 1]})
    per_f = results["per_formulation"]
    names = [f for f in FORMULATIONS if f in per_f]
    for i, f in enumerate(names):
        s = per_f[f]
        lo, hi = s["ci95"]
        left.bar(i, s["accuracy"], width=0.7, color="C0")
        err = [[max(0.0, s["accuracy"] - lo)], [max(0.0, hi - s["accuracy"])]]  # float round-off
        left.errorbar(i, s["accuracy"], yerr=err, color="k", capsize=4)
        left.hlines(s["chance"], i - 0.4, i + 0.4, colors="C3", linestyles="--", label="chance" if i == 0 else None)
    left.set_xticks(range(len(names)), [f"{f}\nD={per_f[f]['depth']}" for f in names])
    left.set_ylim(0, 1.02)
    left.set_ylabel("accuracy")
    left.set_title("accuracy per formulation")
    if names:
        left.legend(loc="upper right", frameon=False)
    eq = results["per_depth"].get("equations", {})
    if eq:
        ds = sorted(int(d) for d in eq)
        acc = [eq[str(d)]["accuracy"] for d in ds]
        lo = [eq[str(d)]["ci95"][0] for d in ds]
        hi = [eq[str(d)]["ci95"][1] for d in ds]
        err = [[max(0.0, a - l) for a, l in zip(acc, lo)], [max(0.0, h - a) for a, h in zip(acc, hi)]]
        right.errorbar(ds, acc, yerr=err, fmt="o-", color="C0", capsize=3, label="accuracy (Wilson 95%)")
        right.plot(ds, [eq[str(d)]["chance"] for d in ds], "--", color="C3", label="chance")
        right.set_xticks(ds)
        right.legend(loc="upper right", frameon=False)
    else:
        right.text(0.5, 0.5, "no equations questions", ha="center", va="center", transform=right.transAxes)
    right.set_ylim(0, 1.02)
    right.set_xlabel("D (equations)")
    right.set_title("equations: accuracy vs D")
    shots = ident.get("few_shot")
    fig.suptitle(
        f"{ident.get('model', '?')} ({ident.get('backend', '?')}, {ident.get('mode', '?')}"
        + (f", {shots}-shot" if shots else "") + ")"
    )
    return save_figure(fig, out, "figure2")
