"""Local language models as torch models, for looking inside them (``llm-circuit``).

A GGUF file (a pinned model of ``stackedheads models`` or any ``PATH.gguf``) is loaded by
transformers, which dequantizes every tensor into a float32 torch model with the ``gguf``
package; nothing is downloaded (``HF_HUB_OFFLINE=1``, ``local_files_only``). The model's own
tokenizer and chat template come from the same file.

Only decoder architectures whose attention ends in a bias-free ``o_proj`` over the heads side by
side are supported (:data:`ARCHITECTURES`): the input of ``o_proj`` is then the heads' outputs
``z`` concatenated, and replacing one head's slice of it replaces exactly that head's write to
the residual stream (activation patching of a head's output). Any transformers causal LM of
such an architecture (a tiny one built in the tests) goes through :class:`TorchLM` too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError

__all__ = ["ARCHITECTURES", "Encoded", "TorchLM", "gguf_architecture", "load_gguf"]

# GGUF ``general.architecture`` -> transformers model type; each has per-head attention whose
# outputs meet in ``model.layers[i].self_attn.o_proj`` (Llama, Mistral, Qwen2, Qwen3; SmolLM2 is
# a Llama).
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}


@dataclass(frozen=True)
class Encoded:
    """A prompt as the model reads it: the rendered text, its token ids and each token's
    character span in the text (to find which token holds which fact)."""

    text: str
    ids: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]


class TorchLM:
    """A transformers causal LM with what the analysis needs: its heads, a prompt renderer and
    the token of each answer.

    ``render(user_turns)`` builds the model's input text from chat turns
    (``[(role, content), ...]``); ``encode(text)`` returns ids and character spans. Both are
    given for a transformers tokenizer by :meth:`from_tokenizer`.
    """

    def __init__(self, model: Any, name: str, render, encode, token_of) -> None:
        import torch

        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.name = name
        self._render, self._encode, self._token_of = render, encode, token_of
        cfg = model.config
        kind = getattr(cfg, "model_type", None)
        if kind not in ARCHITECTURES.values():
            raise UsageError(
                f"model {name}: architecture {kind!r} is not supported by llm-circuit "
                f"(supported: {', '.join(sorted(ARCHITECTURES.values()))})"
            )
        self.layers = list(model.model.layers)
        self.n_layers = len(self.layers)
        self.n_heads = int(cfg.num_attention_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.n_ctx = int(getattr(cfg, "max_position_embeddings", 0) or 0) or None
        for layer in self.layers:
            o = layer.self_attn.o_proj
            if o.in_features != self.n_heads * self.head_dim or o.bias is not None:
                raise UsageError(f"model {name}: o_proj is not a bias-free map of the heads side by side")
        self.torch = torch

    @classmethod
    def from_tokenizer(cls, model: Any, tokenizer: Any, name: str) -> "TorchLM":
        if not getattr(tokenizer, "is_fast", False):
            raise UsageError(f"model {name}: its tokenizer gives no character offsets (a fast tokenizer is needed)")
        if not getattr(tokenizer, "chat_template", None):
            raise UsageError(f"model {name}: no chat template in the file (llm-circuit asks in chat mode, as llm-bench)")

        def render(turns: Sequence[tuple[str, str]]) -> str:
            return tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in turns], tokenize=False, add_generation_prompt=True
            )

        def encode(text: str) -> Encoded:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return Encoded(text, tuple(enc["input_ids"]), tuple(tuple(s) for s in enc["offset_mapping"]))

        def token_of(answer: str) -> int:
            return tokenizer(answer, add_special_tokens=False)["input_ids"][0]

        return cls(model, name, render, encode, token_of)

    def prompt(self, turns: Sequence[tuple[str, str]]) -> Encoded:
        enc = self._encode(self._render(turns))
        if self.n_ctx is not None and len(enc.ids) > self.n_ctx:
            raise UsageError(
                f"a prompt of {len(enc.ids)} tokens exceeds the model's context of {self.n_ctx}: "
                "give a smaller 'depth' or fewer 'few_shot' examples", fields=("depth", "few_shot"),
            )
        return enc

    def answer_token(self, answer: str) -> int:
        return self._token_of(answer)


def gguf_architecture(path: str | Path) -> str | None:
    """``general.architecture`` of a GGUF file, read from its header (no tensor is loaded)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UsageError("loading GGUF models as torch models needs the gguf package: pip install -e '.[llm]'") from None
    try:
        reader = GGUFReader(str(path), "r")
        field = reader.fields.get("general.architecture")
        if field is None:
            return None
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise UsageError(f"{path} is not a readable GGUF file: {str(e).splitlines()[0][:200]}") from None


def load_gguf(model: str, threads: int | None = None) -> TorchLM:
    """A pinned model name (``stackedheads models``) or a ``PATH.gguf``, dequantized into a float32
    torch model with eager attention (its patterns are read); never downloads."""
    from stackedheads.llm.models import resolve

    resolved = resolve(model)  # one line if unknown, not fetched or not a .gguf
    arch = gguf_architecture(resolved.path)
    if arch not in ARCHITECTURES:
        raise UsageError(
            f"model {resolved.name}: GGUF architecture {arch!r} is not supported by llm-circuit "
            f"(supported: {', '.join(ARCHITECTURES)})"
        )
    os.environ["HF_HUB_OFFLINE"] = "1"  # never reach a hub: the file holds model and tokenizer
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise UsageError("llm-circuit needs transformers and torch: pip install -e '.[llm]'") from None
    hf_logging.disable_progress_bar()
    if threads:
        torch.set_num_threads(threads)
    folder, file = str(resolved.path.parent), resolved.path.name
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=file, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=file, local_files_only=True, dtype=torch.float32, attn_implementation="eager"
        )
    except (OSError, ValueError, KeyError, RuntimeError, NotImplementedError) as e:
        raise UsageError(f"cannot load {resolved.name} as a torch model: {str(e).splitlines()[0][:200]}") from None
    return TorchLM.from_tokenizer(lm, tok, resolved.name)
