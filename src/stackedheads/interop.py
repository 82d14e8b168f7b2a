"""Trained models in TransformerLens: one call gives a ``HookedTransformer`` equal to ours.

    hooked, embed = to_transformer_lens("runs/sec9", seed=0)          # the last checkpoint
    out = hooked(embed(batch.inputs), start_at_layer=0)[:, -N:]        # == our model's outputs
    _, cache = hooked.run_with_cache(embed(batch.inputs), start_at_layer=0)
    cache["blocks.3.attn.hook_pattern"]                                # == our patterns, (B, H, T, T)

The mapping. Our model is GPT-2's block (Sec. 7.1) on vectors (Sec. 6), so every weight has a
place in TransformerLens's GPT-2: Q, K, V, O per head, pre-LN LayerNorms (eps 1e-5), the MLP with
GELU's tanh approximation (``act_fn="gelu_pytorch_tanh"``, the same torch call as ours), ln_f as
``ln_final``, and the linear readout as the unembedding (``d_vocab_out = d_out``). What TL has no
place for is the input side: inputs are vectors, not token ids. So ``embed`` (:class:`VectorEmbed`)
applies the input projection, its bias and, when the run learned one, the position table, and
the forward pass starts at block 0 (``start_at_layer=0`` skips TL's own embedding). ``hooked.W_E``
*is* the input projection (the same parameter as ``embed.W_in``, ``d_vocab = d_in``: a one-hot
input would read its row) and, with a learned table, ``hooked.W_pos`` is ``embed.W_pos``, so TL's
weight tools see them; the input bias lives in ``embed`` only.

The reverse (:func:`from_transformer_lens`, :func:`write_run`): a HookedTransformer of a shape
that maps back (the checks name what does not) becomes our model again, or a run folder that
``circuit validate`` and ``circuit discover`` read, so a model edited in TransformerLens is
judged by the project's own tools.

And an independent check of circuit validation (App. E, steps 5-6): :func:`ablation_losses`
recomputes every row of ``circuit validate`` through TransformerLens's forward pass and hooks
(the replaced rows, uniform ones included, set at ``hook_pattern``) and its own MSE;
:func:`check_run` puts both side by side (``stackedheads circuit validate RUN --circuit FILE --transformer-lens``).
Its pieces serve a notebook too (docs/tutorial.ipynb, part 4): :func:`partial_losses` is the val
MSE per chain position under any TL hooks, :func:`uniform_attention_hook` App. E's ablation of one head.

TransformerLens is an optional dependency (``pip install 'stackedheads[interop]'``) and is
imported inside the functions: ``import stackedheads`` stays cheap. Pinned to 3.9.0, the last
release with ``HookedTransformer`` (4.0 replaced it with ``TransformerBridge``, which wraps
HuggingFace models only).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from stackedheads.errors import UsageError
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import LN_EPS, EnsembleTransformer

INSTALL = "pip install 'stackedheads[interop]'"
# ModelConfig's fields this module maps; a field added later is refused by name until it is mapped
# here (a silent mismatch would make the "equal" model compute something else).
MAPPED_FIELDS = {"d_in", "d_out", "n_queries", "n_layers", "n_heads", "d_model", "d_head", "mlp", "n_ctx",
                 "pos_embed", "in_init", "resid_scale", "weight_init"}  # the last three: initialisation only
GELU_TANH = ("gelu_pytorch_tanh", "gelu_new")  # ours is F.gelu(approximate="tanh"); gelu_new is that formula
DEFAULT_N_CTX = 1024  # TL needs some n_ctx; only a learned position table reads it (ours sets it then)


def _whole(name: str, value: object, least: int | None = None) -> None:
    """One line unless ``value`` is an int (a bool is not), at least ``least`` when given."""
    if not isinstance(value, int) or isinstance(value, bool) or (least is not None and value < least):
        floor = "" if least is None else f" >= {least}"
        raise UsageError(f"{name} must be a whole number{floor}, got {value!r}", fields=(name,))


def _tl() -> Any:
    """The transformer_lens module, or one line saying how to install it."""
    try:
        with warnings.catch_warnings():
            # tqdm.auto in a notebook without ipywidgets warns once, about progress bars TL never shows here.
            warnings.filterwarnings("ignore", message="IProgress not found")
            import transformer_lens
            from transformer_lens import HookedTransformer  # noqa: F401 (4.x raises ImportError here)
    except ImportError as e:
        if "removed in TransformerLens 4.0" in str(e):
            raise UsageError(f"this TransformerLens has no HookedTransformer (removed in 4.0): {INSTALL} "
                             "(pins transformer-lens 3.9.0)") from None
        raise UsageError(f"TransformerLens is not installed: {INSTALL}") from None
    return transformer_lens


class VectorEmbed(nn.Module):
    """The input side TL has no place for: ``x @ W_in + b_in`` (+ ``W_pos[:T]``), (B, T, d_in) ->
    (B, T, d_model): the residual stream before block 0, what ``start_at_layer=0`` takes."""

    def __init__(self, W_in: nn.Parameter, b_in: nn.Parameter, W_pos: nn.Parameter | None) -> None:
        super().__init__()
        self.W_in, self.b_in, self.W_pos = W_in, b_in, W_pos

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.W_in.shape[0]:
            raise UsageError(f"expected inputs (B, T, d_in={self.W_in.shape[0]}), got {tuple(x.shape)}")
        h = torch.addmm(self.b_in, x.reshape(-1, x.shape[-1]).to(self.W_in.dtype), self.W_in)
        h = h.view(*x.shape[:-1], -1)
        if self.W_pos is not None:
            if x.shape[1] > self.W_pos.shape[0]:
                raise UsageError(f"inputs of {x.shape[1]} positions exceed the learned position table's {self.W_pos.shape[0]}")
            h = h + self.W_pos[: x.shape[1]]
        return h


# ----------------------------------------------------------------------------- ours -> TL


def hooked_config(cfg: ModelConfig, device: str | torch.device = "cpu") -> Any:
    """The ``HookedTransformerConfig`` of our shape (float32), or one line naming what does not map."""
    tl = _tl()
    unmapped = [f.name for f in fields(cfg) if f.name not in MAPPED_FIELDS and getattr(cfg, f.name) != f.default]
    if unmapped:
        raise UsageError(f"{', '.join(repr(n) for n in unmapped)} of this model does not map to TransformerLens "
                         "(stackedheads.interop does not know it yet)", fields=tuple(unmapped))
    return tl.HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=cfg.d_model, n_heads=cfg.n_heads, d_head=cfg.head_dim,
        d_mlp=4 * cfg.d_model if cfg.mlp else None, attn_only=not cfg.mlp,
        act_fn=GELU_TANH[0] if cfg.mlp else None,
        d_vocab=cfg.d_in, d_vocab_out=cfg.d_out, n_ctx=cfg.n_ctx or DEFAULT_N_CTX,
        normalization_type="LN", eps=LN_EPS, positional_embedding_type="standard",
        default_prepend_bos=False, init_weights=False,  # every weight is ours, set below
        device=str(device), dtype=torch.float32, model_name="stackedheads",
    )


@torch.no_grad()
def model_to_transformer_lens(model: EnsembleTransformer, member: int = 0) -> tuple[Any, VectorEmbed]:
    """``(hooked, embed)`` for member ``member`` (an index) of ``model``, in float32 on its device."""
    _whole("member", member)
    tl = _tl()
    one = model.member(member)
    cfg = one.config
    w = {k: v[0].detach().float() for k, v in one.state_dict().items()}  # bfloat16 runs load in float32
    device = one.W_in.device
    with warnings.catch_warnings():
        # 3.9 warns that HookedTransformer goes in 4.0; the pin is deliberate (the module docstring).
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        hooked = tl.HookedTransformer(hooked_config(cfg, device))
    H, dh, d = cfg.n_heads, cfg.head_dim, cfg.d_model
    sd = hooked.state_dict()

    def put(name: str, value: Tensor) -> None:  # load_state_dict(strict=True) checks names and shapes
        sd[name] = value.contiguous()

    for l in range(cfg.n_layers):
        p, q = f"blocks.{l}.", f"blocks.{l}.attn."
        # W_qkv's columns are [q | k | v], each heads side by side (Attention.forward's view).
        W_q, W_k, W_v = w[q + "W_qkv"].view(d, 3, H, dh).permute(1, 2, 0, 3)  # each (H, d_model, dh)
        b_q, b_k, b_v = w[q + "b_qkv"].view(3, H, dh)
        for name, value in (("W_Q", W_q), ("W_K", W_k), ("W_V", W_v), ("b_Q", b_q), ("b_K", b_k), ("b_V", b_v)):
            put(q + name, value)
        put(q + "W_O", w[q + "W_O"].view(H, dh, d))
        put(q + "b_O", w[q + "b_O"])
        put(p + "ln1.w", w[p + "ln1.weight"])
        put(p + "ln1.b", w[p + "ln1.bias"])
        if cfg.mlp:
            put(p + "ln2.w", w[p + "ln2.weight"])
            put(p + "ln2.b", w[p + "ln2.bias"])
            for ours, theirs in (("W_up", "W_in"), ("b_up", "b_in"), ("W_down", "W_out"), ("b_down", "b_out")):
                put(p + "mlp." + theirs, w[p + "mlp." + ours])
    put("ln_final.w", w["ln_f.weight"])
    put("ln_final.b", w["ln_f.bias"])
    put("unembed.W_U", w["W_readout"])
    put("unembed.b_U", w["b_readout"])
    put("embed.W_E", w["W_in"])
    put("pos_embed.W_pos", w["W_pos"] if "W_pos" in w else torch.zeros_like(sd["pos_embed.W_pos"]))
    hooked.load_state_dict(sd, strict=True)
    hooked.eval()
    # One parameter, two homes: an edit of hooked.W_E (or W_pos) is an edit of the embedding.
    embed = VectorEmbed(hooked.embed.W_E, nn.Parameter(w["b_in"].clone()),
                        hooked.pos_embed.W_pos if cfg.pos_embed == "learned" else None)
    return hooked, embed


def to_transformer_lens(run_dir: str | Path, seed: int, step: int | None = None, device: str = "cpu") -> tuple[Any, VectorEmbed]:
    """``(hooked, embed)``: the member ``seed`` of a run at checkpoint ``step`` (default: the last).

    ``hooked(embed(batch.inputs), start_at_layer=0)[:, -N:]`` are our outputs at the N readout
    positions and ``blocks.{l}.attn.hook_pattern`` our patterns, to float32 rounding."""
    _whole("seed", seed)
    _tl()  # one line before any file is read
    from stackedheads.training import checkpoint_for, load_model

    model, cfg, _ = load_model(checkpoint_for(run_dir, step), device)
    if seed not in cfg.seeds:
        raise UsageError(f"{run_dir} has seeds {list(cfg.seeds)}; asked for seed {seed}", fields=("seed",))
    return model_to_transformer_lens(model, cfg.seeds.index(seed))


# ----------------------------------------------------------------------------- TL -> ours


def _check_maps_back(hooked: Any, embed: VectorEmbed, config: ModelConfig) -> None:
    """One line naming the first setting of ``hooked`` our model has no counterpart for, or a
    size that differs from ``config``'s."""
    c = hooked.cfg
    fixed = {  # setting: (value ours computes with, how to say it)
        "normalization_type": ("LN", "LayerNorm with gain and bias"),
        "positional_embedding_type": ("standard", "positions added before block 0 (embed's W_pos)"),
        "attention_dir": ("causal", "causal attention"),
        "use_attn_scale": (True, "scores divided by sqrt(d_head)"),
        "attn_scale": (math.sqrt(c.d_head), "scores divided by sqrt(d_head)"),
        "eps": (LN_EPS, f"LayerNorm eps {LN_EPS}"),
        "gated_mlp": (False, "an ungated MLP"),
        "parallel_attn_mlp": (False, "attention, then the MLP"),
        "final_rms": (False, "a final LayerNorm"),
        "scale_attn_by_inverse_layer_idx": (False, "the same attention scale in every layer"),
        "use_local_attn": (False, "global attention"),
        "post_embedding_ln": (False, "no LayerNorm after the embedding"),
        "use_normalization_before_and_after": (False, "pre-LN only"),
        "use_qk_norm": (False, "no norm on queries and keys"),
        "num_experts": (None, "one MLP"),
        "n_key_value_heads": (None, "one key and value per head"),
        "use_attention_sinks": (False, "no attention sinks"),
        "clip_qkv": (None, "unclipped queries, keys and values"),
    }
    for name, (want, ours) in fixed.items():
        if hasattr(c, name) and getattr(c, name) != want:
            raise UsageError(f"TransformerLens setting {name}={getattr(c, name)!r} does not map back (ours: {ours})")
    for name in ("attn_scores_soft_cap", "output_logits_soft_cap"):
        if getattr(c, name, -1.0) > 0:
            raise UsageError(f"TransformerLens setting {name}={getattr(c, name)!r} does not map back (ours: no soft cap)")
    if not c.attn_only:
        if c.act_fn not in GELU_TANH:
            raise UsageError(f"TransformerLens setting act_fn={c.act_fn!r} does not map back (ours: GELU's tanh "
                             f"approximation, {' or '.join(GELU_TANH)})")
        if c.d_mlp != 4 * c.d_model:
            raise UsageError(f"TransformerLens setting d_mlp={c.d_mlp} does not map back (ours: 4 d_model = {4 * c.d_model})")
    have = {"n_layers": c.n_layers, "n_heads": c.n_heads, "d_model": c.d_model, "head size": c.d_head,
            "mlp": not c.attn_only, "d_out": c.d_vocab_out, "d_in": embed.W_in.shape[0],
            "learned positions": embed.W_pos is not None}
    want = {"n_layers": config.n_layers, "n_heads": config.n_heads, "d_model": config.d_model, "head size": config.head_dim,
            "mlp": config.mlp, "d_out": config.d_out, "d_in": config.d_in, "learned positions": config.pos_embed == "learned"}
    for name in have:
        if have[name] != want[name]:
            raise UsageError(f"the HookedTransformer has {name} {have[name]}, the run's model {want[name]}")
    if embed.W_pos is not None and embed.W_pos.shape[0] != config.n_ctx:
        raise UsageError(f"the position table has {embed.W_pos.shape[0]} rows, the run's model {config.n_ctx}")


@torch.no_grad()
def from_transformer_lens(hooked: Any, embed: VectorEmbed, config: ModelConfig, seed: int = 0) -> EnsembleTransformer:
    """Our model (an ensemble of one, float32, on the hooked model's device) with ``hooked``'s and
    ``embed``'s weights; ``config`` is the run's shape (``TrainConfig.model_config()``), which
    supplies what TL does not hold (the readout positions). One line names what does not map."""
    _check_maps_back(hooked, embed, config)
    H, dh, d = config.n_heads, config.head_dim, config.d_model
    t = {k: v.detach().float() for k, v in hooked.state_dict().items()}
    w: dict[str, Tensor] = {}
    for l in range(config.n_layers):
        p, q = f"blocks.{l}.", f"blocks.{l}.attn."
        w[q + "W_qkv"] = torch.stack([t[q + n] for n in ("W_Q", "W_K", "W_V")]).permute(2, 0, 1, 3).reshape(d, 3 * H * dh)
        w[q + "b_qkv"] = torch.stack([t[q + n] for n in ("b_Q", "b_K", "b_V")]).reshape(3 * H * dh)
        w[q + "W_O"] = t[q + "W_O"].reshape(H * dh, d)
        w[q + "b_O"] = t[q + "b_O"]
        w[p + "ln1.weight"], w[p + "ln1.bias"] = t[p + "ln1.w"], t[p + "ln1.b"]
        if config.mlp:
            w[p + "ln2.weight"], w[p + "ln2.bias"] = t[p + "ln2.w"], t[p + "ln2.b"]
            for ours, theirs in (("W_up", "W_in"), ("b_up", "b_in"), ("W_down", "W_out"), ("b_down", "b_out")):
                w[p + "mlp." + ours] = t[p + "mlp." + theirs]
    w["ln_f.weight"], w["ln_f.bias"] = t["ln_final.w"], t["ln_final.b"]
    w["W_readout"], w["b_readout"] = t["unembed.W_U"], t["unembed.b_U"]
    w["W_in"], w["b_in"] = embed.W_in.detach().float(), embed.b_in.detach().float()
    if embed.W_pos is not None:
        w["W_pos"] = embed.W_pos.detach().float()
    model = EnsembleTransformer(config, [seed], init=False)
    model.load_state_dict({k: v[None].clone() for k, v in w.items()}, strict=True)
    return model.to(t["unembed.W_U"].device)


def write_run(hooked: Any, embed: VectorEmbed, like: str | Path, out: str | Path, seed: int | None = None,
              step: int | None = None) -> Path:
    """A run folder ``out`` holding ``hooked`` as member ``seed`` of the run ``like`` (its config,
    with that one seed), checkpoint ``step`` (default: ``like``'s last): what ``circuit validate``,
    ``circuit discover`` and ``attention`` read. ``out`` must not exist yet."""
    from stackedheads.state.write import atomic_write_json, read_state_json
    from stackedheads.training import TrainConfig, checkpoint_path, list_checkpoints
    from stackedheads.training.checkpoints import write_checkpoint

    like, out = Path(like), Path(out)
    cfg = TrainConfig.from_dict(read_state_json(like / "config.json", "a training run's config"))
    if seed is not None:
        _whole("seed", seed)
    seed = cfg.seeds[0] if seed is None else seed
    if seed not in cfg.seeds:
        raise UsageError(f"{like} has seeds {list(cfg.seeds)}; asked for seed {seed}", fields=("seed",))
    if step is None:
        steps = [s for s, _ in list_checkpoints(like)]
        step = steps[-1] if steps else 0
    if out.exists():
        raise UsageError(f"{out} exists: write the edited model into a new folder")
    model = from_transformer_lens(hooked, embed, cfg.model_config(), seed)
    one = TrainConfig.from_dict({**cfg.to_dict(), "seeds": [seed]})
    tensors = {f"model.{k}": v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    out.mkdir(parents=True)
    atomic_write_json(out / "config.json", one.to_dict())
    write_checkpoint(checkpoint_path(out, step), tensors, step, one)
    return out


# ----------------------------------------------------------------------------- circuit check


def _ablations(circuit: Any, meta: Any) -> Iterator[tuple[Any, dict]]:
    """Every row ``circuit validate`` reports (App. E steps 5-6), in its order, with the
    replacement patterns of each: :func:`stackedheads.circuits.ablate.loss_table`'s list."""
    from stackedheads.circuits.ablate import COMBINED, COMBINED_KEPT, UNABLATED, Ablation, replaced_patterns
    from stackedheads.circuits.rules import role_sources

    yield UNABLATED, {}
    yield COMBINED, replaced_patterns(circuit, meta, strict=True)
    if circuit.kept():
        yield COMBINED_KEPT, replaced_patterns(circuit, meta)
    for path in circuit.paths():
        yield Ablation.removed(path), replaced_patterns(circuit, meta, remove=path.removal)
    for r in circuit.mapped():
        gone = [(r.layer, r.head, i) for i in role_sources(r.role, circuit.depth)]
        yield Ablation.removed_row(r), replaced_patterns(circuit, meta, remove=gone)
    for group in circuit.info.redundant_groups:
        yield Ablation.removed(*group), replaced_patterns(circuit, meta, remove=[p.removal for p in group])


def _tl_hooks(patterns: dict) -> list:
    """TransformerLens hooks putting each replacement's rows into ``blocks.{l}.attn.hook_pattern``,
    (B, H, T, T): the paper's ablation (App. E), e.g. uniform attention over the causal prefix."""

    def make(heads: dict):
        def fn(pattern: Tensor, hook: Any) -> Tensor:
            pattern = pattern.clone()
            for h, (pat, rows) in heads.items():
                pattern[:, h] = torch.where(rows[..., None].to(pattern.device), pat.to(pattern), pattern[:, h])
            return pattern

        return fn

    return [(f"blocks.{layer}.attn.hook_pattern", make(heads)) for layer, heads in patterns.items()]


def uniform_attention_hook(layer: int, head: int) -> tuple[str, Any]:
    """A ``(hook name, hook)`` pair for ``run_with_hooks``: head ``head`` of layer ``layer``
    attends uniformly over the causal prefix (every row ``t``: ``1/(t+1)`` on ``0..t``), the
    paper's ablation of a head (App. E)."""
    _whole("layer", layer, least=0)
    _whole("head", head, least=0)

    from stackedheads.circuits.rules import uniform_causal

    def fn(pattern: Tensor, hook: Any) -> Tensor:  # (B, H, T, T)
        if head >= pattern.shape[1]:
            raise UsageError(f"layer {layer} has {pattern.shape[1]} heads; asked for head {head}")
        pattern = pattern.clone()
        pattern[:, head] = uniform_causal(1, pattern.shape[-1])[0].to(pattern)
        return pattern

    return f"blocks.{layer}.attn.hook_pattern", fn


@torch.no_grad()
def partial_losses(hooked: Any, embed: VectorEmbed, batch: Any, task: Any, fwd_hooks: list | tuple = ()) -> tuple[float, list[float]]:
    """``(val MSE, [MSE at x_1, ..., x_D])`` of ``hooked`` on ``batch`` under ``fwd_hooks``
    (TransformerLens's ``(name, hook)`` pairs): the metrics.csv columns, computed through TL."""
    x = embed(batch.inputs.to(embed.W_in.device))
    N, K = batch.targets.shape[1], task.dims
    pred = hooked.run_with_hooks(x, start_at_layer=0, fwd_hooks=list(fwd_hooks))[:, -N:]
    err = (pred.double() - batch.targets.to(x.device).double()) ** 2  # (B, N, d_out): float64 sums, so only the forward rounds
    partial = err.view(err.shape[0], N, -1, K).mean(dim=(0, 1, 3))  # per chain position x_1..x_D (x_D without IC)
    return float(partial.mean()), [float(p) for p in partial]


def ablation_losses(hooked: Any, embed: VectorEmbed, batch: Any, task: Any, circuit: Any) -> list[Any]:
    """``circuit validate``'s rows (:class:`~stackedheads.circuits.ablate.LossRow`), recomputed with
    TransformerLens: its forward pass and hooks, and the MSE per chain position computed here."""
    from stackedheads.circuits.ablate import LossRow

    return [LossRow(ablation, *partial_losses(hooked, embed, batch, task, _tl_hooks(patterns)))
            for ablation, patterns in _ablations(circuit, batch.meta)]


def check_run(run_dir: str | Path, circuit: str | Path, checkpoint: int | None = None, n_val: int = 512) -> dict:
    """``circuit validate`` beside its TransformerLens recomputation on the same member, checkpoint
    and validation sequences: ``{"rows": [(ablation, ours, theirs)], "max_diff": float}``."""
    from stackedheads.circuits.ablate import Circuit, validate_run
    from stackedheads.training import checkpoint_for, load_model, validation_batch

    _whole("n_val", n_val, least=1)  # a slice [:0] is empty and [:-5] keeps all but five
    _tl()  # one line before anything is computed
    ours = validate_run(run_dir, circuit, checkpoint=checkpoint, n_val=n_val)
    spec = Circuit.load(circuit)
    model, cfg, _ = load_model(checkpoint_for(run_dir, checkpoint))
    seed = cfg.seeds[0] if spec.info.seed is None else spec.info.seed
    hooked, embed = model_to_transformer_lens(model, cfg.seeds.index(seed))
    theirs = ablation_losses(hooked, embed, validation_batch(cfg)[:n_val], cfg.task, spec)
    if [str(r.ablation) for r in ours] != [str(r.ablation) for r in theirs]:
        raise AssertionError("the two tables list other ablations: update interop._ablations to loss_table's")
    diff = max(max(abs(a.loss - b.loss), *(abs(p - q) for p, q in zip(a.partial, b.partial))) for a, b in zip(ours, theirs))
    return {"seed": seed, "rows": [(str(a.ablation), a, b) for a, b in zip(ours, theirs)], "max_diff": diff}
