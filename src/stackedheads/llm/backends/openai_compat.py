"""``openai``: any OpenAI-compatible server (vLLM, the llama.cpp server, Ollama, OpenAI).

The module is not named ``openai`` so that it can never stand in for the client package.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from stackedheads.errors import MIN_SECRET_CHARS, UsageError, holds_secret, public_url, register_secret
from stackedheads.llm.backends._base import (
    BACKENDS,
    MODES,
    BackendError,
    BackendOptions,
    BackendSpec,
    Generation,
    Request,
    _retry_after,
    call_with_retries,
    check_env_name,
    clean_text,
    short,
)


# Requests in flight at once: vLLM batches at most 256 sequences by default; more only queue.
MAX_CONCURRENCY = 256
# Retries of one request: with waits capped at 30 s, 20 retries already hold a draw about ten minutes.
MAX_RETRIES = 20

_JSON_NAMES = {dict: "object", list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}


class _Malformed(Exception):
    """A 200 reply that is not a completion (invalid JSON, HTML, no choices)."""


class _Timeout(Exception):
    """No whole reply within the timeout."""


@dataclass(frozen=True)
class OpenAIOptions(BackendOptions):
    base_url: str | None = None  # None: OpenAI itself
    api_key_env: str = "OPENAI_API_KEY"  # the variable that holds the key; the key is no option
    concurrency: int = 1  # questions in flight at once
    timeout: float = 60.0  # seconds per request
    max_retries: int = 5

    def __post_init__(self) -> None:
        check_env_name(self.api_key_env)
        check_counts(self.concurrency, self.max_retries)

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "base_url": public_url(self.base_url)}


def _check_count(value: object, name: str, lo: int, hi: int, why: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"'{name}' must be a whole number, got {value!r}", fields=(name,))
    if value < lo:
        raise UsageError(f"'{name}' must be >= {lo}, got {value}", fields=(name,))
    if value > hi:
        raise UsageError(f"'{name}' must be at most {hi} ({why}), got {value}", fields=(name,))


def check_counts(concurrency: object, max_retries: object) -> None:
    """Requests in flight and retries, each a whole number within its bound."""
    _check_count(concurrency, "concurrency", 1, MAX_CONCURRENCY, "a server batches a few hundred requests; more only queue")
    _check_count(max_retries, "max_retries", 0, MAX_RETRIES, "with waits of up to 30 s, more would hold one draw for hours")


def check_key(key: str, env: str) -> None:
    """Refuse, never repeating it, a key that no request can carry (a space, a control character
    such as a newline copied with it, a character outside ASCII: an HTTP header holds none). Any
    other key a server accepts is taken: one of :data:`~stackedheads.errors.MIN_SECRET_CHARS` or
    more is hidden from what is shown and written (:func:`stackedheads.errors.redact_secrets`),
    a shorter one is a placeholder ("EMPTY"), sent and never hidden."""
    where = f"the API key in ${env}"
    if not key.isascii():
        raise UsageError(f"{where} holds a character outside ASCII, which an HTTP header cannot carry; it is not repeated here")
    if any(c.isspace() or not c.isprintable() for c in key):
        raise UsageError(f"{where} holds a space, tab, newline or other control character (copied with it?); it is not repeated here")


def check_model_name(model: str) -> None:
    """Refuse a model name no request can carry: bytes that are not UTF-8 text (a JSON body
    cannot hold them; the request failed in the client and was retried as the server's fault)."""
    try:
        str(model).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("'model' holds bytes that are not UTF-8 text: give the server's model name as UTF-8", fields=("model",)) from None


def check_not_carried(key: str | None, env: str, **given: str | None) -> None:
    """Refuse an argument that holds the API key (``--model sk-...``): what a run is given is
    written (a folder's name, config.json, samples.jsonl, figures), and a key that could be one of
    the run's own words is never replaced there, so it must not enter."""
    if not key or len(key) < MIN_SECRET_CHARS:
        return
    register_secret(key)
    for name, value in given.items():
        if value and holds_secret(str(value)):
            raise UsageError(f"'{name}' holds the API key in ${env}: give the server's {name.replace('_', ' ')} "
                             "there, and the key in the environment only (it is not repeated here)", fields=(name,))


def check_base_url(url: str | None) -> None:
    """Refuse a server URL the client could not connect to (a port out of range failed deep in
    the network stack, as a 150-line exception group)."""
    if url is None:
        return
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number in 0-65535
    except ValueError as e:
        raise UsageError(f"'base_url' {public_url(url)!r} is not a valid URL ({e})", fields=("base_url",)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"'base_url' {public_url(url)!r} is not an http(s)://host[:port]/... URL", fields=("base_url",))
    if port == 0:
        raise UsageError(f"'base_url' {public_url(url)!r}: port 0 is no server's port", fields=("base_url",))


class OpenAIBackend:
    """An OpenAI-compatible server through ``openai.AsyncOpenAI``.

    The client's own retries are turned off (``max_retries=0``) and done here instead, so
    that every draw records how many retries it needed and long Retry-After values are
    honoured (the client ignores those above 60 s).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        mode: str = "chat",
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        concurrency: int = 1,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        jitter_seed: int | None = None,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise UsageError("backend openai needs the openai client: pip install 'stackedheads[llm]'") from None
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose chat or completion")
        if not 0 < timeout < float("inf"):  # also refuses nan
            raise UsageError(f"'timeout' must be > 0 seconds, got {timeout}", fields=("timeout",))
        check_counts(concurrency, max_retries)
        check_base_url(base_url)
        check_env_name(api_key_env)
        key = os.environ.get(api_key_env)
        if key:
            check_key(key, api_key_env)
        check_not_carried(key, api_key_env, model=model)
        check_model_name(model)
        register_secret(key)
        self._where = public_url(base_url) or "OpenAI"  # also registers a password in the URL
        if not key:
            if base_url is None:
                raise UsageError(
                    f"no API key: set ${api_key_env} (or name another variable with "
                    "'api_key_env'), or give 'base_url' for a local server", fields=("api_key_env", "base_url"),
                )
            key = "sk-no-key"  # local servers ignore it; the client insists on one
        self.model = model
        self.mode = mode
        self.base_url = self._where if base_url else None  # never the URL's credentials
        self.max_concurrency = concurrency
        self._max_retries = max_retries
        self._timeout = timeout
        self._base, self._cap = backoff_base, backoff_cap
        self._rng = random.Random(jitter_seed)
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=0
        )

    def _retryable(self, exc: Exception) -> tuple[bool, float | None]:
        o = self._openai
        if isinstance(exc, (_Timeout, o.APITimeoutError, o.APIConnectionError)):
            return True, None
        if isinstance(exc, o.APIStatusError):
            status = exc.status_code
            if status == 429 or status >= 500 or status == 408:
                return True, _retry_after(exc.response.headers)
            return False, None
        # A garbled reply (a proxy's HTML page, cut-off JSON) is often transient: retry it.
        if isinstance(exc, (_Malformed, o.APIError, ValueError, TypeError, AttributeError, KeyError, IndexError)):
            return True, None
        return False, None

    def _describe(self, exc: Exception) -> str:
        if isinstance(exc, self._openai.APIStatusError):
            return f"HTTP {exc.status_code}: {short(exc.message)}"
        if isinstance(exc, _Timeout):
            return f"Timeout: no whole reply within {self._timeout:g} s"
        if isinstance(exc, (self._openai.APITimeoutError, self._openai.APIConnectionError)):
            return f"{type(exc).__name__}: {short(str(exc))}"
        return f"malformed reply ({short(str(exc)) or type(exc).__name__})"

    def _extract(self, response: Any) -> tuple[str, str | None]:
        """(text, finish_reason) of a reply, or _Malformed."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            if isinstance(choices, list):
                kind = "no choices"
            elif isinstance(response, str):  # the client hands over a body it could not parse as JSON
                kind = f"not JSON: {short(response, 60)!r}"
            else:
                kind = f"a JSON {_JSON_NAMES.get(type(response), 'value')}, not a completion"
            raise _Malformed(kind)
        choice = choices[0]
        try:
            text = choice.message.content if self.mode == "chat" else choice.text
            finish = choice.finish_reason
        except AttributeError:
            raise _Malformed("a choice without text") from None
        if text is not None and not isinstance(text, str):
            raise _Malformed(f"text of type {type(text).__name__}")
        return text or "", finish if isinstance(finish, str) else None

    async def _call(self, request: Request):
        extra = {"stop": list(request.stop)} if request.stop else {}  # omit rather than null
        if self.mode == "chat":
            return await self._client.chat.completions.create(
                model=self.model,
                messages=request.chat_messages(),
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                seed=request.seed,
                **extra,
            )
        return await self._client.completions.create(
            model=self.model,
            prompt=request.prompt or "",
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            seed=request.seed,
            **extra,
        )

    async def complete(self, request: Request) -> Generation:
        start = time.perf_counter()

        async def once() -> tuple[str, str | None]:
            # The client's timeout bounds each read, not the request: a server dripping a byte
            # every 0.5 s held one request for 50 s under --timeout 3. This bounds the whole.
            try:
                async with self._deadline():
                    response = await self._call(request)
            except TimeoutError:
                raise _Timeout from None
            return self._extract(response)

        try:
            (text, finish), retries = await call_with_retries(
                once, self._retryable, self._describe, self._where, self._max_retries,
                self._base, self._cap, self._rng,
            )
        except self._openai.APIStatusError as exc:  # a status no retry fixes (401, 404, ...)
            raise BackendError(f"{self._where} answered {self._describe(exc)}") from None
        return Generation(
            text=clean_text(text),
            latency_s=time.perf_counter() - start,
            finish_reason=finish,
            retries=retries,
        )

    def _deadline(self):
        """The bound of one attempt (a test replaces it with one its server expires)."""
        return asyncio.timeout(self._timeout)

    async def aclose(self) -> None:
        await self._client.close()


def _build(model: str, o: OpenAIOptions) -> OpenAIBackend:
    return OpenAIBackend(model, o.base_url, o.mode or "chat", o.api_key_env, o.timeout, o.max_retries, o.concurrency)


def _check(model: str, o: OpenAIOptions) -> None:
    check_base_url(o.base_url)
    key = os.environ.get(o.api_key_env)
    if key:
        check_key(key, o.api_key_env)
    check_not_carried(key, o.api_key_env, model=model)
    check_model_name(model)
    if o.base_url is None and not key:
        raise UsageError(f"no API key: set ${o.api_key_env}, or give 'base_url' for a local server", fields=("base_url",))


BACKENDS.register(
    "openai",
    BackendSpec("any OpenAI-compatible server", OpenAIOptions, _build, needs="openai", check=_check),
)
