"""One optimiser step of the ensemble (Sec. 7.1): forward, the sum of the members' MSEs, backward,
per-member clipping, AdamW at this step's lr. Eager, or captured once as a CUDA graph.

A sec9 step on one H200 is launch-bound: a few ms of GPU work in a 45 ms step of about two
thousand kernel launches (24 layers forward and backward, clipping 150 gradients, the optimiser).
:class:`GraphedStep` records those launches once and replays them as one: the same kernels on the
same buffers, so the same arithmetic as :func:`eager_step` (the learning rate is a device tensor
the graph reads, filled before each replay).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from stackedheads.training.gradclip import clip_grad_norm_per_member_
from stackedheads.model.transformer import EnsembleTransformer
from stackedheads.training.config import TrainConfig
from stackedheads.training.evaluate import member_mse

Step = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


def compile_model(model: EnsembleTransformer):
    """``torch.compile(model)`` with static shapes, for the step and the evaluation alike.

    The evaluation calls the model without gradients on chunks of another batch size than the
    step's; dynamo's default then compiles the forward again with a dynamic batch, and with it
    the compiled model evaluated five times slower than the eager one on an Intel Sapphire
    Rapids. Static shapes give each call signature (the step's batch with gradients, the
    evaluation's chunk and its remainder without) a graph of its own, compiled once, with the
    kernels of known sizes the step's graph has.
    """
    return torch.compile(model, dynamic=False)


def make_step(cfg: TrainConfig, model: EnsembleTransformer, forward, opt: torch.optim.Optimizer,
              dtype: torch.dtype) -> Step:
    """``step(inputs, targets, lr) -> per-member loss (E,)``, updating ``model`` in place."""
    if cfg.cuda_graph:
        return GraphedStep(cfg, model, opt, dtype)

    def eager_step(x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        for group in opt.param_groups:
            group["lr"] = lr
        return update(cfg, model, forward, opt, x, y, dtype)

    return eager_step


def update(cfg: TrainConfig, model: EnsembleTransformer, forward, opt: torch.optim.Optimizer, x: torch.Tensor,
           y: torch.Tensor, dtype: torch.dtype, cache: bool = True) -> torch.Tensor:
    """Forward, backward, clipping and the optimiser's step at its groups' lr; the per-member loss.
    ``cache``: autocast's cache of cast weights (off inside a graph, where it would go stale)."""
    with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32, cache_enabled=cache):
        pred = forward(x)
    # Sum of per-member means: each member's gradient is its own loss's gradient.
    per_member = member_mse(pred, y)
    per_member.sum().backward()
    if cfg.optim.grad_clip > 0:
        clip_grad_norm_per_member_(model, cfg.optim.grad_clip)
    opt.step()
    return per_member


class GraphedStep:
    """The eager step recorded as a CUDA graph on its first call and replayed after.

    Capture follows PyTorch's whole-network recipe (warm-up iterations on a side stream, then
    one recorded iteration). The warm-up steps are real updates, so the parameters and the
    optimiser state are restored to what they were before it: a run with graphs follows the
    same trajectory as one without. A run resumes with the setting its config.json recorded
    (``train`` refuses a resume that flips ``cuda_graph``, as it does any other setting).
    The optimiser must be capturable with a device-tensor lr (:func:`make_optimizer`).
    """

    WARMUP = 3

    def __init__(self, cfg: TrainConfig, model: EnsembleTransformer, opt: torch.optim.Optimizer, dtype: torch.dtype):
        self.cfg, self.model, self.opt, self.dtype = cfg, model, opt, dtype
        self.lrs = list({id(g["lr"]): g["lr"] for g in opt.param_groups}.values())
        if not all(isinstance(lr, torch.Tensor) and lr.is_cuda for lr in self.lrs) or not all(g["capturable"] for g in opt.param_groups):
            raise ValueError("a graphed step needs a capturable optimiser with a CUDA-tensor lr (make_optimizer with cfg.cuda_graph)")
        self.graph: torch.cuda.CUDAGraph | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        if self.graph is None:
            self._capture(x, y)
        self.x.copy_(x)
        self.y.copy_(y)
        for t in self.lrs:
            t.fill_(lr)
        self.graph.replay()
        return self.loss

    def _body(self) -> torch.Tensor:
        return update(self.cfg, self.model, self.model, self.opt, self.x, self.y, self.dtype, cache=False)

    def _state(self) -> list[torch.Tensor]:
        """Every tensor a step changes: parameters, then each one's optimiser state by name."""
        out = list(self.model.parameters())
        for p in self.model.parameters():
            out += [v for _, v in sorted(self.opt.state.get(p, {}).items()) if isinstance(v, torch.Tensor)]
        return out

    def _capture(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x.clone(), y.clone()
        before = [t.detach().clone() for t in self._state()]  # the optimiser state only if resumed
        cur = torch.cuda.current_stream(x.device)
        side = torch.cuda.Stream(x.device)
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                self.opt.zero_grad(set_to_none=True)
                self._body()
        cur.wait_stream(side)
        with torch.no_grad():
            after = self._state()
            for t, b in zip(after, before):
                t.copy_(b)
            for t in after[len(before):]:  # state the warm-up created: AdamW's starts at zero
                t.zero_()
        self.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = self._body()
