"""The minimal vector formulation of the retrieval problem (Sections 6 and 7).

A sequence holds ``N`` chains ``x_0 -> x_1 -> ... -> x_D`` of ``K``-dimensional symbols drawn
i.i.d. from N(0, 1). Layout (Section 6), with ``T = N (2D + 1)`` positions:

* ``D`` blocks of ``N`` pairs ``(x_{k-1}, x_k)``, grouped by step, the deepest step ``k = D``
  first; the chains' pairs are shuffled within each block ("perfectly interleaving the pairs");
* then the ``N`` query tokens ``x_0``, shuffled.

Each token is concatenated with a ``K``-dimensional sinusoidal ("rotary", Su et al.) encoding
of its position, giving inputs of shape ``(B, T, 2K)``. Targets sit at the query positions
(Section 7): IC targets are ``x_1 .. x_D`` concatenated (``D K`` dims), non-IC ones ``x_D``.

Randomness is counter-based: sequence ``i`` of a split is a pure function of
``(seed, split, i)`` computed by an integer hash in batched tensor ops, so any batch of a
2^20-sequence training set is reproducible without storing the set and without a
per-sample Python loop.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import torch

from stackedheads.errors import UsageError

FIRST, SECOND, QUERY = 0, 1, 2
SPLITS = {"train": 0, "val": 1, "test": 2}
PE_KINDS = ("token", "pair")

_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class VectorTaskConfig:
    """The task of Sections 6-7. Paper values: N=4, K=4, n_train=2^20 (Sec. 7.1)."""

    chains: int = field(default=4, metadata={"help": "N, the interleaved chains (Sec. 6: 4)."})
    depth: int = field(default=3, metadata={"help": "D, the retrieval steps per chain."})
    dims: int = field(default=4, metadata={"help": (
        "K, the symbols' dimensions (even: the positional code is sin/cos pairs; Sec. 6: 4)."
    )})
    ic: bool = field(default=True, metadata={"help": (
        "the implicit curriculum: predict x_1..x_D, not only x_D (Sec. 7)."
    )})
    n_train: int = field(default=2**20, metadata={"help": "the finite training set's size (Sec. 7.1: 2^20)."})
    n_val: int = field(default=4096, metadata={"help": "held-out sequences every member is validated on."})
    seed: int = field(default=0, metadata={"help": (
        "the task's seed (a training run gives each ensemble member its own)."
    )})
    pe_base: float = field(default=10000.0, metadata={"help": (
        "the positional code's base (RoFormer's 10000)."
    )})
    pe: str = field(default="token", metadata={"help": (
        "\"token\", every position its own code (Sec. 6, \"concatenate each token embedding with a "
        "positional encoding\"); or \"pair\", App. B Def. 2-3's reading, where both tokens of an input"
        " pair share the code p_k (queries get codes of their own)."
    )})

    def __post_init__(self) -> None:
        from stackedheads.validation import check_types

        check_types(self)  # first: the checks below compare numbers (pe_base=inf, chains=None)
        for name in ("chains", "depth", "n_train", "n_val"):
            if getattr(self, name) < 1:
                raise UsageError(f"'{name}' must be >= 1, got {getattr(self, name)}", fields=(name,))
        if self.dims < 2 or self.dims % 2:
            raise UsageError(f"'dims' (K) must be even and >= 2 (sin/cos pairs), got {self.dims}", fields=("dims",))
        if self.pe_base <= 1:
            raise UsageError(f"'pe_base' must be > 1, got {self.pe_base}", fields=("pe_base",))
        if self.pe not in PE_KINDS:
            raise UsageError(f"'pe' must be one of {', '.join(PE_KINDS)}, got {self.pe!r}", fields=("pe",))

    @property
    def seq_len(self) -> int:
        return self.chains * (2 * self.depth + 1)

    @property
    def d_in(self) -> int:
        return 2 * self.dims

    @property
    def d_out(self) -> int:
        return self.depth * self.dims if self.ic else self.dims

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> VectorTaskConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Meta:
    """Per-token metadata, shapes ``(B, T)`` unless noted. Circuit rules are built on it.

    ``paths[b, q, i]`` is the position of ``s_i`` (Appendix B, Definition 1) for the chain of
    query slot ``q``: ``s_0`` the query, ``s_{2k}`` the second occurrence of ``x_k`` (in pair
    ``k``), ``s_{2k+1}`` its first occurrence (in pair ``k + 1``). Shape ``(B, N, 2D + 1)``.
    """

    chain: torch.Tensor  # chain id 0..N-1
    chain_pos: torch.Tensor  # k of the symbol x_k held by the token: its place along the chain x_0..x_D
    role: torch.Tensor  # FIRST, SECOND or QUERY
    pair: torch.Tensor  # k of the pair (x_{k-1}, x_k) the token belongs to; 0 for queries
    query_chain: torch.Tensor  # (B, N): chain of query slot q
    paths: torch.Tensor  # (B, N, 2D + 1)

    def to(self, device: torch.device | str) -> Meta:
        return Meta(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def __getitem__(self, idx) -> Meta:
        return Meta(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T, 2K)
    targets: torch.Tensor  # (B, N, D*K) for IC, (B, N, K) otherwise
    symbols: torch.Tensor  # (B, N, D + 1, K): x_0..x_D of each chain, in chain order
    meta: Meta

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.inputs.to(device), self.targets.to(device), self.symbols.to(device), self.meta.to(device)
        )

    def __getitem__(self, idx) -> Batch:
        """A sub-batch (e.g. ``batch[:32]``)."""
        return Batch(self.inputs[idx], self.targets[idx], self.symbols[idx], self.meta[idx])


# --- counter-based randomness -------------------------------------------------------------


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2^32`` for ``x < 2^32`` without int64 overflow (split the constant)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' lowbias32 integer hash on int64 tensors holding 32-bit values."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _keys(seed: int | torch.Tensor, split: int, index: torch.Tensor) -> torch.Tensor:
    """One 32-bit key per sequence from (seed, split, index); index may exceed 2^32, and seed
    may be one per sequence (a tensor like ``index``: every member of an ensemble at once)."""
    seed = torch.as_tensor(seed, dtype=torch.int64, device=index.device).expand_as(index)
    k = _hash32(seed & _MASK32)
    k = _hash32(k ^ (seed >> 32) & _MASK32 ^ split)
    k = _hash32(k ^ (index & _MASK32))
    return _hash32(k ^ (index >> 32))


def _uniform(keys: torch.Tensor, stream: int, n: int) -> torch.Tensor:
    """``(B, n)`` float64 uniforms in (0, 1), draw ``j`` of ``stream`` for each key."""
    ctr = torch.arange(n, dtype=torch.int64, device=keys.device) + (stream << 24)
    h = _hash32(_hash32(keys[:, None] ^ _hash32(ctr)[None, :]) + 0x9E3779B9 & _MASK32)
    return (h.double() + 0.5) / 2**32


def _normal(keys: torch.Tensor, stream: int, n: int) -> torch.Tensor:
    """``(B, n)`` standard normals by Box-Muller."""
    u = _uniform(keys, stream, 2 * n)
    return torch.sqrt(-2.0 * torch.log(u[:, :n])) * torch.cos(2.0 * math.pi * u[:, n:])


def _permutations(keys: torch.Tensor, stream: int, rows: int, n: int) -> torch.Tensor:
    """``(B, rows, n)`` independent random permutations of ``0..n-1`` (argsort of uniforms)."""
    # stable: a tie between two 32-bit draws sorts the same on every device
    return _uniform(keys, stream, rows * n).view(-1, rows, n).argsort(dim=-1, stable=True)


# --- the sequences --------------------------------------------------------------------------


def positional_encoding(seq_len: int, dims: int, base: float = 10000.0) -> torch.Tensor:
    """``(T, K)`` sinusoidal encoding: (sin, cos) pairs at frequencies ``base^(-2i/K)``.

    The rotary encoding of Su et al. rotates features by these angles; the paper concatenates
    the encoding to the token instead of rotating it (Section 6), so we give the angles' sin/cos.
    """
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    ang = pos * freq
    return torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2).float()


def position_codes(cfg: VectorTaskConfig) -> torch.Tensor:
    """``(T, K)`` positional features of every position, by ``cfg.pe``."""
    T = cfg.seq_len
    if cfg.pe == "token":
        return positional_encoding(T, cfg.dims, cfg.pe_base)
    n_pairs = cfg.chains * cfg.depth
    index = torch.cat([torch.arange(2 * n_pairs) // 2, n_pairs + torch.arange(cfg.chains)])
    return positional_encoding(n_pairs + cfg.chains, cfg.dims, cfg.pe_base)[index]


def layout(cfg: VectorTaskConfig, pair_perm: torch.Tensor, query_perm: torch.Tensor) -> Meta:
    """Per-token metadata for given within-step chain orders.

    ``pair_perm``: ``(B, D, N)``, block ``b`` (step ``k = D - b``) slot ``m`` holds chain
    ``pair_perm[:, b, m]``; ``query_perm``: ``(B, N)``, query slot ``q`` holds that chain.
    """
    N, D = cfg.chains, cfg.depth
    B, dev = pair_perm.shape[0], pair_perm.device
    k_of_block = torch.arange(D, 0, -1, device=dev)  # (D,): deepest step first
    # Two tokens per pair: (first = x_{k-1}, second = x_k).
    chain_pairs = pair_perm.repeat_interleave(2, dim=-1).reshape(B, 2 * N * D)
    role_pairs = torch.tensor([FIRST, SECOND], device=dev).repeat(N * D).expand(B, -1)
    pair_k = k_of_block.repeat_interleave(2 * N).expand(B, -1)
    chain_pos_pairs = pair_k - (role_pairs == FIRST).long()
    chain = torch.cat([chain_pairs, query_perm], dim=1)
    role = torch.cat([role_pairs, torch.full((B, N), QUERY, device=dev)], dim=1)
    chain_pos = torch.cat([chain_pos_pairs, torch.zeros(B, N, dtype=torch.long, device=dev)], dim=1)
    pair = torch.cat([pair_k, torch.zeros(B, N, dtype=torch.long, device=dev)], dim=1)

    # Position of chain c's pair k: block D - k, slot where pair_perm == c.
    slot = pair_perm.argsort(dim=-1, stable=True)  # (B, D, N): slot of chain c in block b
    pair_start = 2 * (N * torch.arange(D, device=dev)[None, :, None] + slot)  # (B, D, N) by block
    pair_start = pair_start.flip(1)  # index k-1 for k = 1..D
    qc = query_perm  # (B, N)
    start_q = pair_start.gather(2, qc[:, None, :].expand(-1, D, -1)).transpose(1, 2)  # (B, N, D)
    s = torch.empty(B, N, 2 * D + 1, dtype=torch.long, device=dev)
    s[:, :, 0] = 2 * N * D + torch.arange(N, device=dev)
    s[:, :, 2::2] = start_q + 1  # s_{2k}: second token of pair k
    s[:, :, 1::2] = start_q  # s_{2k+1}: first token of pair k + 1 (holds x_k)
    return Meta(chain=chain, chain_pos=chain_pos, role=role, pair=pair, query_chain=qc, paths=s)


def make_batch(
    cfg: VectorTaskConfig,
    index: torch.Tensor | range | list[int],
    split: str = "train",
    seeds: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> Batch:
    """The sequences ``index`` of ``split``: a pure function of ``(cfg.seed, split, index)``.

    Only the chain structure and the symbols are random; the same index always gives the same
    sequence, whatever the batch it is drawn in. ``seeds`` (one per index) replaces
    ``cfg.seed``, so one call draws every ensemble member's batch. ``device``: generate there
    (integer hashing is exact everywhere, so a GPU draws the CPU's sequences without a copy
    each step).
    """
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    idx = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
    n = cfg.n_train if split == "train" else cfg.n_val
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise UsageError(f"{split} indices must lie in [0, {n}), got [{int(idx.min())}, {int(idx.max())}]")
    idx = idx.to(device) if device is not None else idx
    N, D, K = cfg.chains, cfg.depth, cfg.dims
    B = idx.numel()
    keys = _keys(cfg.seed if seeds is None else seeds.reshape(-1).to(idx.device), SPLITS[split], idx)
    symbols = _normal(keys, 0, N * (D + 1) * K).float().view(B, N, D + 1, K)
    pair_perm = _permutations(keys, 1, D, N)
    query_perm = _permutations(keys, 2, 1, N)[:, 0]
    meta = layout(cfg, pair_perm, query_perm)

    rows = torch.arange(B, device=idx.device)[:, None]
    tokens = symbols[rows, meta.chain, meta.chain_pos]  # (B, T, K)
    pe = position_codes(cfg).to(idx.device).expand(B, -1, -1)
    inputs = torch.cat([tokens, pe], dim=-1)
    chain_syms = symbols[rows, meta.query_chain]  # (B, N, D+1, K)
    targets = chain_syms[:, :, 1:].flatten(2) if cfg.ic else chain_syms[:, :, D]
    return Batch(inputs=inputs, targets=targets, symbols=symbols, meta=meta)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of ``n`` training indices in ``epoch`` (seeded, reproducible)."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) & 0x7FFFFFFFFFFFFFFF)
    return torch.randperm(n, generator=g)


def batch_indices(n: int, batch_size: int, seed: int, step: int, _cache: dict | None = None) -> torch.Tensor:
    """Indices of training batch ``step``: epochs of ``n // batch_size`` steps, reshuffled each epoch.

    ``_cache`` (a dict the caller owns) keeps the current epoch's permutation between calls.
    """
    if batch_size > n:
        raise UsageError(f"batch size {batch_size} exceeds the training set size {n}")
    per_epoch = n // batch_size
    epoch, i = divmod(step, per_epoch)
    if _cache is not None and _cache.get("epoch") == (seed, epoch, n):
        perm = _cache["perm"]
    else:
        perm = epoch_order(n, seed, epoch)
        if _cache is not None:
            _cache.update(epoch=(seed, epoch, n), perm=perm)
    return perm[i * batch_size : (i + 1) * batch_size]
