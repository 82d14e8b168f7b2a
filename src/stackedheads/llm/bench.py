"""The LLM benchmark of Sec. 4 (Figure 2), protocol of App. A: the questions and the sampling.

For each (formulation, D) cell, ``n`` seeded questions from :mod:`stackedheads.tasks.prompts`.
Each question is asked directly (optionally after ``k`` solved examples of the same cell);
every draw is parsed and checked against the question's acceptable set (App. A: "repeatedly
sampling from the model until an acceptable answer is found"), up to ``max_draws`` draws. A
question is correct when its first acceptable answer is the correct one; questions with no
acceptable answer within ``max_draws`` are *unanswered* and count as wrong.

The benchmark is four modules, as inspect_ai splits a task: this one (configuration, questions,
requests, asynchronous sampling, :func:`run_bench`); :mod:`.runlog` (``samples.jsonl``, the run's
identity, resuming); :mod:`.scoring` (parsing, Wilson intervals, ``results.json``; no backend);
:mod:`.figure2` (the figure).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, redact
from stackedheads.llm.backends import Backend, Generation, Request, clean_text
from stackedheads.llm.figure2 import plot_figure2
from stackedheads.llm.runlog import (
    CONFIG,
    IDENTITY_FIELDS,
    KIND,
    MAX_NORMALISED,
    PROTOCOL_VERSION,
    RESULTS,
    SAMPLES,
    check_folder,
    check_records,
    load_records,
    record_invocation,
    record_key,
    repair_tail,
    run_identity,
    scored,
    stored,
)
from stackedheads.llm.scoring import normalise, parse_answer, summarize
from stackedheads.state.write import RunFolder, atomic_write_json
from stackedheads.tasks import prompts
from stackedheads.tasks.formulations import FORMULATIONS
from stackedheads.tasks.prompts import Question

__all__ = [
    "BenchConfig",
    "ask",
    "build_request",
    "cells",
    "draw_seed",
    "few_shot_examples",
    "parse_depths",
    "parse_formulations",
    "plan",
    "run_bench",
]

# Solved examples before each question: a hundred already overflow any small model's context,
# and an unbounded count built a prompt of gigabytes before asking anything.
MAX_FEW_SHOT = 100
# Tokens per draw: an answer is a word (16 by default), stored to 2,000 characters; 100 million
# spent 88.8 s on one question of a small model.
MAX_TOKENS = 1024


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
            raise UsageError(f"'n' must be >= 1, got {self.n}", fields=("n",))
        prompts.check_seed(self.seed)
        if not 0 <= self.few_shot <= MAX_FEW_SHOT:
            raise UsageError(f"'few_shot' must be between 0 and {MAX_FEW_SHOT}, got {self.few_shot}", fields=("few_shot",))
        if self.max_draws < 1:
            raise UsageError(f"'max_draws' must be >= 1, got {self.max_draws}", fields=("max_draws",))
        if not 1 <= self.max_tokens <= MAX_TOKENS:
            raise UsageError(f"'max_tokens' must be between 1 and {MAX_TOKENS}, got {self.max_tokens}", fields=("max_tokens",))
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise UsageError(f"'temperature' must be >= 0, got {self.temperature}", fields=("temperature",))
        if self.temperature == 0 and self.max_draws > 1:
            # Greedy decoding repeats itself: resampling (App. A) needs temperature > 0.
            raise UsageError(
                "'temperature' 0 cannot resample: give a temperature > 0 or 'max_draws' 1", fields=("temperature", "max_draws"),
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["formulations"] = list(self.formulations)
        d["depths"] = list(self.depths) if self.depths is not None else None
        return d


# --- the questions asked for, as text ------------------------------------------------------------


def parse_formulations(text: str) -> tuple[str, ...]:
    """``all``, one formulation, or a comma-separated list."""
    if text.strip() == "all":
        return FORMULATIONS.names()
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    for f in names:
        if f not in FORMULATIONS:
            raise UsageError(f"unknown formulation {f!r}; choose all or one of: {', '.join(FORMULATIONS)}")
    if not names:
        raise UsageError("'formulations' is empty", fields=("formulations",))
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
        raise UsageError(f"'depths' must be D, A-B or a comma list, got {text!r}", fields=("depths",)) from None
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


# --- one question --------------------------------------------------------------------------------


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
            "text": text, "parsed": scored(parsed), "normalised": normalise(text)[:MAX_NORMALISED],
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
        "key": record_key(question),
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
        **{k: getattr(cfg, k) for k in IDENTITY_FIELDS if k not in ("chains", "seed")},
        "prompt": stored(prompt),
        "answer": scored(question.answer),
        "acceptable": scored(list(question.acceptable)),
        "draws": draws,
        "final": scored(final),
        "answered": final is not None,
        "correct": final == question.answer,
        "n_draws": len(draws),
        "latency_s": round(time.perf_counter() - start, 4),
    }


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
    identity = run_identity(backend, cfg)
    vouched = (out / CONFIG).exists()
    invocation = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": cfg.to_dict(),
        "backend": backend_info or {},
    }
    samples = out / SAMPLES
    repair_tail(samples)
    done = load_records(samples)
    check_records(done, identity, samples, vouched)
    runs = check_folder(out, identity)
    todo = [q for q in questions if record_key(q) not in done]
    total = len(questions)
    if progress:
        progress(total - len(todo), total)

    def record() -> None:
        record_invocation(out, identity, [*runs, invocation])

    if todo:
        asyncio.run(_ask_all(backend, todo, cfg, samples, record, total - len(todo), total, progress))
    else:
        record()
        asyncio.run(backend.aclose())
    results = summarize(load_records(samples).values(), identity)
    atomic_write_json(out / RESULTS, results)
    results["figures"] = plot_figure2(results, out)
    return results


async def _ask_all(backend, todo, cfg, samples: Path, record, done: int, total: int, progress) -> None:
    """Ask ``todo``, appending each record to ``samples`` as it finishes; ``record()`` writes
    config.json just before the first record is appended."""
    queue: asyncio.Queue[Question] = asyncio.Queue()
    for q in todo:
        queue.put_nowait(q)
    counter = {"done": done}
    shots: dict[tuple[str, int], list[Question]] = {}
    log = None

    async def worker() -> None:
        nonlocal log
        while True:
            try:
                q = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            examples = shots.get((q.formulation, q.depth))
            if examples is None or any(e.prompt == q.prompt for e in examples):
                examples = few_shot_examples(q, cfg.few_shot)
                shots.setdefault((q.formulation, q.depth), examples)
            answer = await ask(backend, q, examples, cfg)
            if log is None:
                record()
                log = open(samples, "a", encoding="utf-8")
            # One event loop thread: a whole line is written and flushed at a time.
            log.write(json.dumps(answer, ensure_ascii=False) + "\n")
            log.flush()
            counter["done"] += 1
            if progress:
                progress(counter["done"], total)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(max(1, min(backend.max_concurrency, len(todo)))):
                group.create_task(worker())
    except* Exception as eg:  # the first real error, not an ExceptionGroup, reaches the user
        raise eg.exceptions[0] from None
    finally:
        if log is not None:
            log.close()
        await backend.aclose()
