"""The shared types and registry of :mod:`stackedheads.llm.backends` (its modules import from here, so the
package and its modules never import each other)."""
from __future__ import annotations

import asyncio
import importlib.util
import random
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from stackedheads.errors import UsageError, redact
from stackedheads.registry import Registry

T = TypeVar("T")

MODES = ("chat", "completion")
MAX_TEXT_CHARS = 2000  # one answer as stored and shown; the benchmark's answers are a few tokens
MAX_RETRY_AFTER_S = 120.0  # a longer Retry-After is capped (and reported): the run should not stall


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def check_env_name(name: object, field: str = "api_key_env") -> None:
    """Refuse an option that names an environment variable but is no variable's name. The
    refusal never repeats it: a key typed there (``sk-proj-...``) was written to config.json,
    summary.json and the report, and printed in "no API key: set $sk-proj-..."."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise UsageError(
            f"'{field}' must be the name of an environment variable (letters, digits and _, not starting "
            "with a digit), not the key itself; what was given is not repeated here", fields=(field,),
        )


def clean_text(text: str) -> str:
    """Server text capped at MAX_TEXT_CHARS. Not redacted: an answer is scored as the server
    gave it (a key may equal an answer word); the benchmark redacts what it stores, after."""
    if len(text) > MAX_TEXT_CHARS + 64:  # the slack keeps a second pass from cutting the marker
        text = text[:MAX_TEXT_CHARS] + f"...[{len(text) - MAX_TEXT_CHARS} more characters dropped]"
    return text


def short(text: str, limit: int = 200) -> str:
    """One redacted line of at most ``limit`` characters, for error messages."""
    text = " ".join(redact(str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BackendError(RuntimeError):
    """A backend failed for good (server down after all retries, model failed to load)."""


@dataclass(frozen=True)
class Request:
    """One draw: ``messages`` in chat mode, ``prompt`` in completion mode."""

    messages: tuple[tuple[str, str], ...] | None  # (role, content) pairs
    prompt: str | None
    temperature: float
    max_tokens: int
    seed: int
    stop: tuple[str, ...] = ()

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages or ()]


@dataclass
class Generation:
    text: str
    latency_s: float
    finish_reason: str | None = None
    retries: int = 0


@runtime_checkable
class Backend(Protocol):
    """What the benchmark needs from a model: text for a request, nothing else."""

    name: str  # backend kind, e.g. "openai"
    model: str  # model name as recorded in the run
    mode: str  # "chat" or "completion"
    max_concurrency: int  # 1 for in-process models (one forward pass at a time)

    async def complete(self, request: Request) -> Generation: ...

    async def aclose(self) -> None: ...


async def run_in_thread(generate: Callable[[Request], Generation], request: Request, stop: threading.Event) -> Generation:
    """``generate(request)`` in a worker thread, for in-process models (llama.cpp, transformers).

    Why: asyncio turns Ctrl-C into a cancellation of the waiting task, and a model generating
    in the event loop's own thread never lets the loop run: the benchmark answered every
    remaining question before it stopped. Here the loop stays free; on cancellation (or a
    KeyboardInterrupt raised in this task) ``stop`` is set, which the model's per-token hook
    checks to end the generation at its next token, and the thread is awaited before the
    interruption goes on, so the model is never used by two threads at once nor freed under a
    draw."""
    stop.clear()
    future = asyncio.get_running_loop().run_in_executor(None, generate, request)
    try:
        return await asyncio.shield(future)
    except (asyncio.CancelledError, KeyboardInterrupt):
        stop.set()
        await asyncio.wait([future])  # ends at the next token
        if not future.cancelled():
            future.exception()  # retrieved: the cut-short draw (or its own error) is no news now
        raise


# --- registry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendOptions:
    """The options every backend takes; a backend's own options subclass this (frozen, every
    field with a default)."""

    mode: str | None = None  # chat or completion; None: the model's own (chat unless known)

    def public(self) -> dict[str, Any]:
        """The options as ``config.json`` records them: override to hide credentials."""
        return asdict(self)


O = TypeVar("O", bound=BackendOptions)


@dataclass(frozen=True)
class BackendSpec(Generic[O]):
    """A registered backend.

    Args:
        summary: a few words for ``--backend``'s help ("in-process GGUF").
        options: its options dataclass (a :class:`BackendOptions`).
        build: ``(model, options) -> Backend``, e.g. the backend class itself.
        needs: a module it imports (``reproduce`` checks it is installed before starting).
        install: how to get ``needs``.
        check: ``(model, options)``: raise UsageError now for what would stop the run at its
            start, without loading a model; name an option as a field
            (``UsageError("'base_url' ...", fields=("base_url",))``): the command line writes
            its flag as the command spells it (``--base-url``, ``--llm-base-url``).
        prepare: ``(model, progress)``: make the model available (download it) before
            ``reproduce`` times the benchmark; ``progress(label, done, total)`` or None.
    """

    summary: str
    options: type[O]
    build: Callable[[str, O], Backend]
    needs: str | None = None
    install: str = "pip install 'stackedheads[llm]'"
    check: Callable[[str, O], None] | None = None
    prepare: Callable[[str, Callable[[str, int, int], None] | None], None] | None = None


# Built-in backends register themselves in this package's modules (openai_compat.py, ...).
BACKENDS: Registry[BackendSpec] = Registry("backend", package="stackedheads.llm.backends")


def backend_options(name: str, options: dict[str, Any]) -> BackendOptions:
    """The options of backend ``name`` from ``options``: ``None`` leaves one at its default;
    one the backend does not take is a UsageError naming it."""
    spec = BACKENDS.get(name)
    given = {k: v for k, v in options.items() if v is not None}
    taken = {f.name for f in fields(spec.options)}
    for k in given:
        if k not in taken:
            raise UsageError(f"'{k}' does not apply to backend {name}", fields=(k,))
    if "n_threads" in given:  # the rule of every verb that takes threads (train's too)
        from stackedheads.execution.process import check_threads

        check_threads(given["n_threads"], "n_threads")
    mode = given.get("mode")
    if mode is not None and mode not in MODES:
        raise UsageError(f"unknown 'mode' {mode!r}; choose chat or completion", fields=("mode",))
    return spec.options(**given)


def make_backend(name: str, model: str, **options: Any) -> Backend:
    """Backend ``name`` for ``model``, with the options of :func:`backend_options` (``mode``
    None picks the model's own)."""
    return BACKENDS.get(name).build(model, backend_options(name, options))


def check_backend(name: str, models: Sequence[str], options: dict[str, Any]) -> None:
    """Refuse now, loading nothing, what would stop a run of ``models`` at its start: an
    unknown backend, options it does not take, a missing package, what its ``check`` refuses.
    ``reproduce`` records its choice before it runs, so it asks first."""
    if name not in BACKENDS:
        raise UsageError(f"unknown 'backend' {name!r}; choose one of: {', '.join(BACKENDS)}", fields=("backend",))
    spec = BACKENDS[name]
    opts = backend_options(name, options)
    if spec.needs and importlib.util.find_spec(spec.needs) is None:
        raise UsageError(f"'backend' {name} needs {spec.needs}: {spec.install}", fields=("backend",))
    if spec.check is not None:
        for model in models:
            spec.check(model, opts)


# --- retries -------------------------------------------------------------------------------------


def backoff_delay(
    attempt: int,
    retry_after: float | None = None,
    base: float = 0.5,
    cap: float = 30.0,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based).

    A server's Retry-After wins (it knows when it will have capacity); otherwise exponential
    backoff ``base * 2**attempt`` capped at ``cap``, with "equal jitter" (half fixed, half
    random) so that concurrent clients do not retry in lockstep.
    """
    if retry_after is not None and retry_after >= 0:
        return float(retry_after)
    delay = min(cap, base * (2 ** attempt))
    rng = rng or random.Random()
    return delay / 2 + rng.uniform(0, delay / 2)


def _retry_after(headers: Any) -> float | None:
    """Retry-After (seconds or an HTTP date) or retry-after-ms, in seconds; None if absent."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    retryable: Callable[[Exception], tuple[bool, float | None]],
    describe: Callable[[Exception], str],
    where: str,
    max_retries: int,
    backoff_base: float = 0.5,
    backoff_cap: float = 30.0,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """``await call()`` until it succeeds; return its result and the retries it took.

    ``retryable(exc)`` says whether a failure is worth another try, and the server's
    Retry-After in seconds (or None); other failures propagate as they are. After
    ``max_retries`` retries, a :class:`BackendError` names ``where`` and ``describe(exc)``
    (which must not leak secrets: see :func:`short`). Waits follow :func:`backoff_delay`.
    """
    attempt = 0
    while True:
        try:
            return await call(), attempt
        except Exception as exc:
            retry, after = retryable(exc)
            if not retry:
                raise
            if attempt == max_retries:
                raise BackendError(f"{where}: giving up after {attempt + 1} attempts: {describe(exc)}") from None
            if after is not None and after > MAX_RETRY_AFTER_S:
                print(
                    f"stackedheads: note: {where} asked to wait {after:.0f} s (Retry-After); "
                    f"waiting {MAX_RETRY_AFTER_S:.0f} s instead",
                    file=sys.stderr,
                )
                after = MAX_RETRY_AFTER_S
            await asyncio.sleep(backoff_delay(attempt, after, backoff_base, backoff_cap, rng))
        attempt += 1


