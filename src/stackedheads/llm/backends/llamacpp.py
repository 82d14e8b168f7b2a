"""``llamacpp``: a GGUF model in-process through llama-cpp-python."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.llm.backends._base import (
    BACKENDS,
    MODES,
    BackendOptions,
    BackendSpec,
    Generation,
    Request,
    run_in_thread,
    short,
)


@dataclass(frozen=True)
class LlamaCppOptions(BackendOptions):
    n_threads: int | None = None  # None: llama.cpp's
    n_ctx: int = 4096  # context length in tokens


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
        from stackedheads.perf import check_threads

        check_threads(n_threads, "n_threads")  # llama.cpp crashed at 100,000 threads and hung at 5,000
        self.model, self.mode = model_name, mode
        self.n_ctx = n_ctx
        self._stop = threading.Event()  # set when the draw is cancelled (Ctrl-C): see run_in_thread
        try:
            self._llm = Llama(
                model_path=str(model_path), n_ctx=n_ctx, n_threads=n_threads,
                n_threads_batch=n_threads, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as e:  # llama.cpp's answer to a damaged file
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
            raise UsageError(
                f"a prompt does not fit the model's context: {short(str(e))}; give fewer examples ('few_shot') "
                f"or a longer context ('n_ctx', now {self.n_ctx})", fields=("few_shot", "n_ctx"),
            ) from None
        return Generation(text or "", time.perf_counter() - start, choice.get("finish_reason"))

    async def complete(self, request: Request) -> Generation:
        return await run_in_thread(self.complete_sync, request, self._stop)

    async def aclose(self) -> None:
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
