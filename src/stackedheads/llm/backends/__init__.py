"""Text generators behind one small protocol (Sec. 4 benchmarks large language models).

As in inspect_ai, a backend only turns a :class:`Request` into text; prompting and
resampling live in :mod:`stackedheads.llm.bench`, parsing and scoring in
:mod:`stackedheads.llm.scoring`. Backends are registered by name in :data:`BACKENDS`;
:func:`make_backend` builds one, and the command line (``llm-bench --backend``, ``reproduce
--llm-backend``) offers every registered name. Built in, one module each:

- ``openai`` (:mod:`.openai_compat`): any OpenAI-compatible server (vLLM, the llama.cpp
  server, Ollama, OpenAI) through the official ``openai`` client, async, chat or completion
  endpoint, with retries (:func:`call_with_retries`: exponential backoff with jitter,
  Retry-After honoured) on 429, 5xx, timeouts and connection errors.
- ``llamacpp`` (:mod:`.llamacpp`): a GGUF file in-process through llama-cpp-python.
- ``hf`` (:mod:`.hf`): a local transformers causal LM (a folder or an already-downloaded
  name; never downloads).

The API key is read from the environment and kept only inside the client: no attribute,
option, ``describe()`` or error message of ours carries it. It is registered with
:func:`stackedheads.errors.register_secret` (a key of fewer than 8 characters is not: it is too
likely to be an ordinary word; a key that could be one of the run's words is hidden as a whole
token, see :func:`stackedheads.errors.redact_secrets`, and an argument holding it is refused,
:func:`.openai_compat.check_not_carried`), and all text that came from a server passes through
:func:`~stackedheads.errors.redact` where it is shown or stored (error bodies at once, answers
after they are scored, so that a key equal to an answer word costs no answer), since servers
echo request headers. Answers are capped at :data:`MAX_TEXT_CHARS` (a server may ignore
``max_tokens``); a Retry-After above :data:`MAX_RETRY_AFTER_S` is capped, and said so.

How to add a backend
--------------------
One new module in this package; nothing else changes (the registry imports every module of
the package on first use). Code outside the package runs the same lines before use::

    # src/stackedheads/llm/backends/echo.py
    import time
    from dataclasses import dataclass

    from stackedheads.llm.backends import (
        BACKENDS, BackendOptions, BackendSpec, Generation, Request, clean_text)

    @dataclass(frozen=True)
    class EchoOptions(BackendOptions):  # ``mode``, plus what this backend takes
        timeout: float = 60.0  # an option named like an existing one gets its flag: --timeout

    class EchoBackend:
        name = "echo"  # as registered: every answer records it
        max_concurrency = 1  # questions in flight at once

        def __init__(self, model: str, options: EchoOptions) -> None:
            self.model, self.mode = model, options.mode or "chat"

        async def complete(self, request: Request) -> Generation:
            start = time.perf_counter()
            text = request.messages[-1][1] if self.mode == "chat" else request.prompt or ""
            return Generation(clean_text(text), time.perf_counter() - start)

        async def aclose(self) -> None:
            return None

    BACKENDS.register("echo", BackendSpec("repeats the question", EchoOptions, EchoBackend))

Then ``stackedheads llm-bench --backend echo --model x ...`` and ``reproduce --llm-backend
echo`` run it. The rules:

- Options are the fields of a frozen dataclass that subclasses :class:`BackendOptions`, each
  with a default. The command lines pass only the options a user gave (``None`` means "not
  given"), under these names: ``mode`` (``--mode``), ``base_url``, ``api_key_env``,
  ``concurrency``, ``timeout``, ``max_retries``, ``n_ctx`` (``--base-url`` ...) and
  ``n_threads`` (``--threads``); ``reproduce`` has ``--llm-*`` flags for the first four and
  ``n_threads``. An option the backend does not declare is refused in one line. A new option
  name needs its flag in ``cli/llm.py`` (and, for ``reproduce``, in ``cli/run.py`` and
  ``reproduce.LLMChoice``); a flag named otherwise than the option, in ``cli._app.OPTION_NAMES``.
- :meth:`BackendOptions.public` is written to ``config.json``: never make a secret an
  option (name the environment variable that holds it, like ``api_key_env``); pass it to
  :func:`~stackedheads.errors.register_secret`, server text through :func:`clean_text`, and
  server text in an error through :func:`short` (the benchmark redacts the answers it stores).
- A user's mistake is a :class:`~stackedheads.errors.UsageError` (one line, exit 2); a
  failure retrying did not fix is a :class:`BackendError` (exit 1, answers kept). A network
  backend wraps its calls in :func:`call_with_retries`. A model computing in this process
  generates in :func:`run_in_thread` and ends a draw when its ``stop`` event is set (Ctrl-C
  must reach the event loop); an option ``n_threads`` obeys :func:`stackedheads.execution.process.check_threads`
  (:func:`backend_options` applies it).
- :class:`BackendSpec` has optional hooks: ``needs`` (a module ``reproduce`` checks before it
  starts), ``check`` (refuse a model or options without loading anything) and ``prepare``
  (fetch what a model needs before ``reproduce`` times it).
"""


from __future__ import annotations

from stackedheads.llm.backends._base import (  # noqa: F401
    BACKENDS,
    MAX_RETRY_AFTER_S,
    MAX_TEXT_CHARS,
    MODES,
    Backend,
    BackendError,
    BackendOptions,
    BackendSpec,
    Generation,
    Request,
    _retry_after,
    backend_options,
    backoff_delay,
    call_with_retries,
    check_backend,
    check_env_name,
    clean_text,
    make_backend,
    run_in_thread,
    short,
)

# The built-ins stay importable from here (the registry would import them on first use anyway).
from stackedheads.llm.backends.hf import HFBackend
from stackedheads.llm.backends.llamacpp import LlamaCppBackend
from stackedheads.llm.backends.openai_compat import OpenAIBackend

__all__ = [
    "BACKENDS",
    "MAX_RETRY_AFTER_S",
    "MAX_TEXT_CHARS",
    "MODES",
    "Backend",
    "BackendError",
    "BackendOptions",
    "BackendSpec",
    "Generation",
    "HFBackend",
    "LlamaCppBackend",
    "OpenAIBackend",
    "Request",
    "backend_options",
    "backoff_delay",
    "call_with_retries",
    "check_backend",
    "check_env_name",
    "clean_text",
    "make_backend",
    "run_in_thread",
    "short",
]
