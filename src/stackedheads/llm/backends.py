"""Text generators behind one small protocol (Sec. 4 benchmarks large language models).

As in inspect_ai, a backend only turns a :class:`Request` into text; prompting, parsing,
resampling and scoring live in :mod:`stackedheads.llm.bench`. A new backend is one class
with ``name``, ``model``, ``mode``, ``complete`` and ``aclose``.

- :class:`OpenAIBackend`: any OpenAI-compatible server (vLLM, the llama.cpp server, Ollama,
  OpenAI) through the official ``openai`` client, async, chat or completion endpoint, with
  retries (exponential backoff with jitter, Retry-After honoured) on 429, 5xx, timeouts and
  connection errors.
- :class:`LlamaCppBackend`: a GGUF file in-process through llama-cpp-python.
- :class:`HFBackend`: a local transformers causal LM (a folder or an already-downloaded
  name; never downloads).

The API key is read from the environment and kept only inside the client: no attribute,
``describe()`` or error message of ours carries it. It is registered with
:func:`stackedheads.errors.register_secret`, and all text that came from a server (error
bodies, answers) passes through :func:`~stackedheads.errors.redact`, since servers echo
request headers. Answers are capped at :data:`MAX_TEXT_CHARS` (a server may ignore
``max_tokens``); a Retry-After above :data:`MAX_RETRY_AFTER_S` is capped, and said so.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from stackedheads.errors import UsageError, public_url, redact, register_secret

__all__ = [
    "BACKENDS",
    "MODES",
    "Backend",
    "BackendError",
    "Generation",
    "HFBackend",
    "LlamaCppBackend",
    "OpenAIBackend",
    "Request",
    "backoff_delay",
    "make_backend",
]

BACKENDS = ("openai", "llamacpp", "hf")
MODES = ("chat", "completion")
MAX_TEXT_CHARS = 2000  # one answer as stored and shown; the benchmark's answers are a few tokens
MAX_RETRY_AFTER_S = 120.0  # a longer Retry-After is capped (and reported): the run should not stall


class _Malformed(Exception):
    """A 200 reply that is not a completion (invalid JSON, HTML, no choices)."""


def clean_text(text: str) -> str:
    """Server text as it may be stored: secrets redacted, at most MAX_TEXT_CHARS."""
    text = redact(text)
    if len(text) > MAX_TEXT_CHARS + 64:  # the slack keeps a second pass from cutting the marker
        text = text[:MAX_TEXT_CHARS] + f"...[{len(text) - MAX_TEXT_CHARS} more characters dropped]"
    return text


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
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """What the benchmark needs from a model: text for a request, nothing else."""

    name: str  # backend kind, e.g. "openai"
    model: str  # model name as recorded in the run
    mode: str  # "chat" or "completion"
    max_concurrency: int  # 1 for in-process models (one forward pass at a time)

    async def complete(self, request: Request) -> Generation: ...

    async def aclose(self) -> None: ...


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


# --- openai --------------------------------------------------------------------------------------


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
            raise UsageError(f"--timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise UsageError(f"--max-retries must be >= 0, got {max_retries}")
        key = os.environ.get(api_key_env)
        register_secret(key)
        self._where = public_url(base_url) or "OpenAI"  # also registers a password in the URL
        if not key:
            if base_url is None:
                raise UsageError(
                    f"no API key: set ${api_key_env} (or name another variable with "
                    "--api-key-env), or give --base-url for a local server"
                )
            key = "sk-no-key"  # local servers ignore it; the client insists on one
        self.model = model
        self.mode = mode
        self.base_url = self._where if base_url else None  # never the URL's credentials
        self.max_concurrency = max(1, concurrency)
        self._max_retries = max_retries
        self._base, self._cap = backoff_base, backoff_cap
        self._rng = random.Random(jitter_seed)
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=0
        )

    def _retryable(self, exc: Exception) -> tuple[bool, float | None]:
        o = self._openai
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError)):
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
            return f"HTTP {exc.status_code}: {_short(exc.message)}"
        if isinstance(exc, (self._openai.APITimeoutError, self._openai.APIConnectionError)):
            return f"{type(exc).__name__}: {_short(str(exc))}"
        return f"malformed reply ({_short(str(exc)) or type(exc).__name__})"

    def _extract(self, response: Any) -> tuple[str, str | None]:
        """(text, finish_reason) of a reply, or _Malformed."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            kind = "no choices" if isinstance(choices, list) else f"a JSON {type(response).__name__}, not a completion"
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
        for attempt in range(self._max_retries + 1):
            try:
                text, finish = self._extract(await self._call(request))
                break
            except Exception as exc:  # noqa: BLE001 - classified just below
                retry, after = self._retryable(exc)
                if not retry:
                    if isinstance(exc, self._openai.APIStatusError):
                        raise BackendError(f"{self._where} answered {self._describe(exc)}") from None
                    raise
                if attempt == self._max_retries:
                    raise BackendError(
                        f"{self._where}: giving up after {attempt + 1} attempts: {self._describe(exc)}"
                    ) from None
                if after is not None and after > MAX_RETRY_AFTER_S:
                    print(
                        f"stackedheads: note: {self._where} asked to wait {after:.0f} s (Retry-After); "
                        f"waiting {MAX_RETRY_AFTER_S:.0f} s instead",
                        file=sys.stderr,
                    )
                    after = MAX_RETRY_AFTER_S
                await asyncio.sleep(backoff_delay(attempt, after, self._base, self._cap, self._rng))
        return Generation(
            text=clean_text(text),
            latency_s=time.perf_counter() - start,
            finish_reason=finish,
            retries=attempt,
        )

    async def aclose(self) -> None:
        await self._client.close()


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(redact(str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- llama.cpp in-process --------------------------------------------------------------------------


class LlamaCppBackend:
    """A GGUF model in-process through llama-cpp-python.

    Prompts that share a prefix (the few-shot examples) reuse llama.cpp's KV cache, so only
    the question is evaluated anew. One forward pass at a time: ``max_concurrency = 1``.
    """

    name = "llamacpp"
    max_concurrency = 1

    def __init__(
        self,
        model_path: Path,
        model_name: str,
        mode: str = "chat",
        n_threads: int | None = None,
        n_ctx: int = 4096,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise UsageError(
                "backend llamacpp needs llama-cpp-python: pip install 'stackedheads[llm]'"
            ) from None
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose chat or completion")
        if n_threads is not None and n_threads < 1:
            raise UsageError(f"--threads must be >= 1, got {n_threads}")
        self.model, self.mode = model_name, mode
        try:
            self._llm = Llama(
                model_path=str(model_path), n_ctx=n_ctx, n_threads=n_threads,
                n_threads_batch=n_threads, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as e:  # llama.cpp's answer to a damaged file
            raise UsageError(f"cannot load {model_path}: not a usable GGUF model ({_short(str(e))})") from None

    def complete_sync(self, request: Request) -> Generation:
        start = time.perf_counter()
        common = dict(
            temperature=request.temperature, max_tokens=request.max_tokens,
            seed=request.seed, stop=list(request.stop),
        )
        if self.mode == "chat":
            out = self._llm.create_chat_completion(messages=request.chat_messages(), **common)
            choice = out["choices"][0]
            text = choice["message"]["content"]
        else:
            out = self._llm.create_completion(prompt=request.prompt or "", **common)
            choice = out["choices"][0]
            text = choice["text"]
        return Generation(text or "", time.perf_counter() - start, choice.get("finish_reason"))

    async def complete(self, request: Request) -> Generation:
        return self.complete_sync(request)

    async def aclose(self) -> None:
        close = getattr(self._llm, "close", None)
        if close is not None:
            close()


# --- transformers ----------------------------------------------------------------------------------


class HFBackend:
    """A local transformers causal LM: a folder, or a name already in the local cache.

    ``local_files_only=True``: never downloads. Sampling uses a forked torch RNG seeded per
    draw, so the global RNG is left as it was.
    """

    name = "hf"
    max_concurrency = 1

    def __init__(self, model: str, mode: str = "chat", n_threads: int | None = None) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise UsageError("backend hf needs transformers: pip install transformers") from None
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose chat or completion")
        try:
            self._tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
            self._lm = AutoModelForCausalLM.from_pretrained(model, local_files_only=True)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot load {model!r} locally (never downloaded here): {_short(str(e))}") from None
        if mode == "chat" and not getattr(self._tok, "chat_template", None):
            raise UsageError(f"{model!r} has no chat template: use --mode completion")
        self._lm.eval()
        self._torch = torch
        self._threads = n_threads
        self.model = Path(model).name if Path(model).exists() else model
        self.mode = mode

    def complete_sync(self, request: Request) -> Generation:
        torch = self._torch
        start = time.perf_counter()
        if self.mode == "chat":
            text_in = self._tok.apply_chat_template(
                request.chat_messages(), tokenize=False, add_generation_prompt=True
            )
        else:
            text_in = request.prompt or ""
        enc = self._tok(text_in, return_tensors="pt")
        sample = request.temperature > 0
        kwargs: dict[str, Any] = dict(
            max_new_tokens=request.max_tokens, do_sample=sample,
            pad_token_id=self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id,
        )
        if sample:
            kwargs["temperature"] = request.temperature
            kwargs["top_k"] = 0  # plain temperature sampling, as the API backends do
        threads = torch.get_num_threads()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            if self._threads:
                torch.set_num_threads(self._threads)
            torch.manual_seed(request.seed)
            try:
                out = self._lm.generate(**enc, **kwargs)
            finally:
                torch.set_num_threads(threads)
        text = self._tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        finish = "length"
        for s in request.stop:  # generate() knows no stop strings for every tokenizer
            if s in text:
                text, finish = text[: text.index(s)], "stop"
        return Generation(text, time.perf_counter() - start, finish)

    async def complete(self, request: Request) -> Generation:
        return self.complete_sync(request)

    async def aclose(self) -> None:
        return None


# --- factory -------------------------------------------------------------------------------------


def make_backend(
    backend: str,
    model: str,
    mode: str | None = None,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    timeout: float = 60.0,
    max_retries: int = 5,
    concurrency: int = 1,
    n_threads: int | None = None,
    n_ctx: int = 4096,
) -> Backend:
    """Build a backend from CLI-level arguments; ``mode=None`` picks the model's own."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if mode is not None and mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose chat or completion")
    if concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1, got {concurrency}")
    if backend != "openai":
        if concurrency > 1:
            raise UsageError(
                f"--concurrency applies to the openai backend; {backend} runs one question at "
                "a time in-process (use --threads)"
            )
        if base_url is not None:
            raise UsageError(f"--base-url applies to the openai backend, not {backend}")
    if backend == "openai":
        return OpenAIBackend(
            model, base_url, mode or "chat", api_key_env, timeout, max_retries, concurrency
        )
    if backend == "llamacpp":
        from stackedheads.llm.models import resolve

        resolved = resolve(model)
        return LlamaCppBackend(resolved.path, resolved.name, mode or resolved.default_mode, n_threads, n_ctx)
    return HFBackend(model, mode or "chat", n_threads)
