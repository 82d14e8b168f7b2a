"""``hf``: a local transformers causal LM (a folder, or a name already in the local cache)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
class HFOptions(BackendOptions):
    n_threads: int | None = None  # None: torch's


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
        from stackedheads.execution.process import check_threads

        check_threads(n_threads, "n_threads")  # the rule of every verb that takes threads
        self._stop = threading.Event()  # set when the draw is cancelled (Ctrl-C): see run_in_thread
        try:
            self._tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
            self._lm = AutoModelForCausalLM.from_pretrained(model, local_files_only=True)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot load {model!r} locally (never downloaded here): {short(str(e))}") from None
        if mode == "chat" and not getattr(self._tok, "chat_template", None):
            raise UsageError(f"{model!r} has no chat template: use 'mode' completion", fields=("mode",))
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
        n_ctx = getattr(self._lm.config, "max_position_embeddings", None)
        if isinstance(n_ctx, int) and enc["input_ids"].shape[1] + request.max_tokens > n_ctx:
            raise UsageError(
                f"a prompt of {enc['input_ids'].shape[1]} tokens and {request.max_tokens} more does not fit the model's "
                f"context of {n_ctx}: give fewer examples ('few_shot')", fields=("few_shot",),
            )
        sample = request.temperature > 0
        def interrupted(input_ids, scores, **_) -> bool:  # checked after each token: a cancelled draw ends
            return self._stop.is_set()

        from transformers import StoppingCriteriaList

        kwargs: dict[str, Any] = dict(
            max_new_tokens=request.max_tokens, do_sample=sample, stopping_criteria=StoppingCriteriaList([interrupted]),
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
        return await run_in_thread(self.complete_sync, request, self._stop)

    async def aclose(self) -> None:
        return None


BACKENDS.register(
    "hf",
    BackendSpec(
        "local transformers model", HFOptions, lambda model, o: HFBackend(model, o.mode or "chat", o.n_threads),
        needs="transformers", install="pip install transformers",
    ),
)
