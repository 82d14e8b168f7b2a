"""``llamacpp``: a GGUF model in-process through llama-cpp-python."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.llm.backends._base import (
    BACKENDS,
    MODES,
    BackendError,
    BackendOptions,
    BackendSpec,
    Generation,
    Request,
    run_in_thread,
    short,
)


# Context lengths: no model is trained on more than a million tokens; each model's own length
# (its GGUF header's) bounds it further when the model is loaded.
MAX_CTX = 2**20


def check_n_ctx(n_ctx: object) -> None:
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or not 1 <= n_ctx <= MAX_CTX:
        raise UsageError(f"'n_ctx' must be a whole number of tokens between 1 and {MAX_CTX:,}, got {n_ctx!r}", fields=("n_ctx",))


@dataclass(frozen=True)
class LlamaCppOptions(BackendOptions):
    n_threads: int | None = None  # None: llama.cpp's
    n_ctx: int = 4096  # context length in tokens

    def __post_init__(self) -> None:
        check_n_ctx(self.n_ctx)


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
        from stackedheads.execution.process import check_threads

        check_threads(n_threads, "n_threads")  # llama.cpp crashed at 100,000 threads and hung at 5,000
        check_n_ctx(n_ctx)
        from stackedheads.llm.models import trained_context

        trained = trained_context(model_path)
        if trained is not None and n_ctx > trained:
            raise UsageError(
                f"'n_ctx' {n_ctx:,} is more than {model_name} was trained on: give at most {trained:,} tokens", fields=("n_ctx",),
            )
        self.model, self.mode = model_name, mode
        self.n_ctx = n_ctx
        self._stop = threading.Event()  # set when the draw is cancelled (Ctrl-C): see run_in_thread
        # Held by the thread that decodes, and by aclose() while it frees the model: the model is
        # never freed under a draw, however the draw was interrupted.
        self._busy = threading.Lock()
        self._closed = False
        try:
            self._llm = Llama(
                model_path=str(model_path), n_ctx=n_ctx, n_threads=n_threads,
                n_threads_batch=n_threads, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as e:
            if "llama_context" in str(e):  # the model loaded; the context's memory could not be had
                raise UsageError(
                    f"llama.cpp could not make a context of {n_ctx:,} tokens for {model_name} (not enough memory?): "
                    "give a smaller 'n_ctx'", fields=("n_ctx",),
                ) from None
            raise UsageError(f"cannot load {model_path}: not a usable GGUF model ({short(str(e))})") from None

    def _interrupt_hook(self, input_ids, scores):
        """Called by llama.cpp before each token is sampled: a cancelled draw gets only the
        end-of-text token, so it ends at once. (Not an exception: llama.cpp calls this from a
        C callback, which prints an exception and goes on generating.)"""
        if self._stop.is_set():
            scores[:] = -float("inf")
            scores[self._llm.token_eos()] = 0.0
        return scores

    def complete_sync(self, request: Request) -> Generation:
        with self._busy:
            if self._closed:  # a draw that started after the run ended (Ctrl-C): nothing to decode with
                raise BackendError("the model was closed before this draw started")
            return self._complete(request)

    def _complete(self, request: Request) -> Generation:
        from llama_cpp import LogitsProcessorList

        start = time.perf_counter()
        common = dict(
            temperature=request.temperature, max_tokens=request.max_tokens,
            seed=request.seed, stop=list(request.stop), logits_processor=LogitsProcessorList([self._interrupt_hook]),
        )
        try:
            if self.mode == "chat":
                out = self._llm.create_chat_completion(messages=request.chat_messages(), **common)
                choice = out["choices"][0]
                text = choice["message"]["content"]
            else:
                out = self._llm.create_completion(prompt=request.prompt or "", **common)
                choice = out["choices"][0]
                text = choice["text"]
        except ValueError as e:
            # llama.cpp counts the prompt's tokens before it evaluates any: a prompt longer than
            # the context is the user's choice of examples or context, not a crash.
            if "exceed context window" not in str(e):
                raise
            tokens = re.search(r"Requested tokens \((\d+)\)", str(e))
            made = self._llm.n_ctx()
            asked = f" ('n_ctx' {self.n_ctx} rounded up by llama.cpp)" if made != self.n_ctx else ""
            raise UsageError(
                f"a prompt{f' of {tokens[1]} tokens' if tokens else ''} does not fit the model's context of {made} tokens"
                f"{asked}: give fewer examples ('few_shot') or a longer context ('n_ctx')", fields=("few_shot", "n_ctx"),
            ) from None
        return Generation(text or "", time.perf_counter() - start, choice.get("finish_reason"))

    async def complete(self, request: Request) -> Generation:
        return await run_in_thread(self.complete_sync, request, self._stop)

    async def aclose(self) -> None:
        self._stop.set()  # a draw in flight ends at its next token
        with self._busy:
            self._closed = True
            close = getattr(self._llm, "close", None)
            if close is not None:
                close()


def _build(model: str, o: LlamaCppOptions) -> LlamaCppBackend:
    """``model``: a name of ``stackedheads models`` or a PATH.gguf."""
    from stackedheads.llm.models import resolve

    resolved = resolve(model)
    return LlamaCppBackend(resolved.path, resolved.name, o.mode or resolved.default_mode, o.n_threads, o.n_ctx)


def _check(model: str, o: LlamaCppOptions) -> None:
    from stackedheads.llm.models import REGISTRY

    if model not in REGISTRY and not (model.lower().endswith(".gguf") and Path(model).expanduser().is_file()):
        raise UsageError(
            f"unknown model {model!r} for 'backend' llamacpp: give one of {', '.join(REGISTRY)} "
            "or a path to a .gguf file", fields=("backend",),
        )


def _prepare(model: str, progress: Callable[[str, int, int], None] | None) -> None:
    """Fetch a named model once into the user cache (a no-op later; a path is used as it is)."""
    from stackedheads.llm.fetch import REGISTRY, fetch, is_fetched
    from stackedheads.llm.models import find_smollm2

    if model in REGISTRY and not is_fetched(REGISTRY[model]) and not (model == "smollm2" and find_smollm2() is not None):
        label = f"fetch {model} (MB)"
        fetch(model, progress=(lambda d, t, _w: progress(label, d >> 20, t >> 20)) if progress else None)


BACKENDS.register(
    "llamacpp",
    BackendSpec("in-process GGUF", LlamaCppOptions, _build, needs="llama_cpp", check=_check, prepare=_prepare),
)
