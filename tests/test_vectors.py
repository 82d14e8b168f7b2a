import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stackedheads.errors import UsageError
from stackedheads.tasks.vectors import (
    FIRST,
    QUERY,
    SECOND,
    VectorTaskConfig,
    batch_indices,
    make_batch,
    positional_encoding,
)

configs = st.builds(
    VectorTaskConfig,
    chains=st.integers(1, 6),
    depth=st.integers(1, 7),
    dims=st.sampled_from([2, 4, 6]),
    ic=st.booleans(),
    n_train=st.just(1000),
    seed=st.integers(0, 2**40),
)


@settings(max_examples=40, deadline=None)
@given(cfg=configs, start=st.integers(0, 990))
def test_every_query_chain_is_recoverable_from_metadata(cfg, start):
    N, D, K = cfg.chains, cfg.depth, cfg.dims
    b = make_batch(cfg, range(start, start + 3))
    B, T = 3, cfg.seq_len
    assert b.inputs.shape == (B, T, 2 * K) and T == N * (2 * D + 1)
    assert b.targets.shape == (B, N, D * K if cfg.ic else K)
    for i in range(B):
        m = b.meta
        # Layout: D blocks of N pairs, deepest step first, then N queries.
        for blk in range(D):
            seg = slice(2 * N * blk, 2 * N * (blk + 1))
            assert set(m.pair[i, seg].tolist()) == {D - blk}
            assert sorted(m.chain[i, seg][::2].tolist()) == list(range(N))
        assert m.role[i, -N:].eq(QUERY).all() and m.role[i, : 2 * N * D : 2].eq(FIRST).all()
        assert m.role[i, 1 : 2 * N * D : 2].eq(SECOND).all()
        assert sorted(m.query_chain[i].tolist()) == list(range(N))
        for q in range(N):
            c = int(m.query_chain[i, q])
            path = m.paths[i, q].tolist()
            assert path[0] == T - N + q
            # Follow the chain from the query by matching vectors only (an independent solver):
            # the token equal to x_k in first position of a pair leads to its second token.
            x = b.inputs[i, path[0], :K]
            found = []
            for k in range(1, D + 1):
                firsts = [p for p in range(2 * N * D) if m.role[i, p] == FIRST and torch.equal(b.inputs[i, p, :K], x)]
                assert len(firsts) == 1
                assert firsts[0] == path[2 * k - 1]
                x = b.inputs[i, firsts[0] + 1, :K]
                assert firsts[0] + 1 == path[2 * k]
                found.append(x)
            assert torch.equal(b.symbols[i, c, 1:].flatten(), torch.cat(found))
            want = torch.cat(found) if cfg.ic else found[-1]
            assert torch.equal(b.targets[i, q], want)
            for s_i, p in enumerate(path):
                assert m.chain[i, p] == c and m.chain_pos[i, p] == s_i // 2


def test_deterministic_and_independent_of_batch_composition():
    cfg = VectorTaskConfig(depth=4, seed=7)
    a = make_batch(cfg, [3, 10, 11])
    b = make_batch(cfg, [11, 999, 3])
    assert torch.equal(a.inputs[0], b.inputs[2]) and torch.equal(a.inputs[2], b.inputs[0])
    assert torch.equal(a.targets[2], b.targets[0])
    # Same bytes in a fresh call, different with another seed, split or index.
    assert make_batch(cfg, [10]).inputs.numpy().tobytes() == a.inputs[1:2].numpy().tobytes()
    other_seed = make_batch(VectorTaskConfig(depth=4, seed=8), [10])
    assert not torch.equal(other_seed.inputs, a.inputs[1:2])
    assert not torch.equal(make_batch(cfg, [10], split="val").inputs, a.inputs[1:2])
    assert not torch.equal(a.inputs[0], a.inputs[1])


def test_symbols_are_standard_normal_and_shuffles_uniform():
    cfg = VectorTaskConfig(depth=3, seed=1)
    b = make_batch(cfg, range(4000))
    x = b.symbols.flatten().double()
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01
    # Neighbouring indices must not be correlated (a weak hash would show it).
    s = b.symbols.flatten(1)
    corr = torch.corrcoef(torch.stack([s[:-1].flatten(), s[1:].flatten()]))[0, 1]
    assert abs(corr.item()) < 0.01
    # Each chain occupies each slot of the query block about equally often.
    counts = torch.bincount(b.meta.query_chain[:, 0], minlength=4).double() / 4000
    assert torch.all((counts - 0.25).abs() < 0.03)


def test_positional_encoding_is_sin_cos_pairs():
    pe = positional_encoding(10, 4, base=10000.0)
    assert pe.shape == (10, 4)
    assert torch.allclose(pe[:, 0] ** 2 + pe[:, 1] ** 2, torch.ones(10))
    assert torch.allclose(pe[3, 0], torch.sin(torch.tensor(3.0)))
    assert torch.allclose(pe[3, 2], torch.sin(torch.tensor(3.0 * 0.01)))


def test_epoch_order():
    cache: dict = {}
    epoch0 = torch.cat([batch_indices(100, 10, seed=0, step=s, _cache=cache) for s in range(10)])
    assert sorted(epoch0.tolist()) == list(range(100))
    epoch1 = torch.cat([batch_indices(100, 10, seed=0, step=s) for s in range(10, 20)])
    assert sorted(epoch1.tolist()) == list(range(100)) and not torch.equal(epoch0, epoch1)
    assert torch.equal(batch_indices(100, 10, 0, 13), batch_indices(100, 10, 0, 13, _cache=cache))


@pytest.mark.parametrize(
    "kwargs",
    [dict(depth=0), dict(chains=0), dict(dims=3), dict(dims=0), dict(n_train=0), dict(pe_base=1.0)],
)
def test_bad_config(kwargs):
    with pytest.raises(UsageError):
        VectorTaskConfig(**kwargs)


def test_bad_indices_and_split():
    cfg = VectorTaskConfig(n_train=10, n_val=5)
    with pytest.raises(UsageError):
        make_batch(cfg, [10])
    with pytest.raises(UsageError):
        make_batch(cfg, [5], split="val")
    with pytest.raises(UsageError):
        make_batch(cfg, [0], split="nope")
    with pytest.raises(UsageError):
        batch_indices(10, 11, 0, 0)


def test_config_json_round_trip():
    cfg = VectorTaskConfig(chains=3, depth=2, ic=False, seed=5)
    assert VectorTaskConfig.from_dict(cfg.to_dict()) == cfg


def test_member_batches_are_each_members_own_batches():
    """One call draws every member's batch: the same bytes as each member's task alone."""
    from dataclasses import replace

    from stackedheads import presets
    from stackedheads.training import member_batches

    cfg = presets.SMOKE.override(seeds=(3, 11, 5))
    caches = [{} for _ in cfg.seeds]
    got = member_batches(cfg, 7, caches)
    for e, seed in enumerate(cfg.seeds):
        task = replace(cfg.task, seed=seed)
        idx = batch_indices(task.n_train, cfg.batch_size, seed, 7)
        want = make_batch(task, idx, "train")
        assert got.inputs[e].numpy().tobytes() == want.inputs.numpy().tobytes()
        assert got.targets[e].numpy().tobytes() == want.targets.numpy().tobytes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_generation_matches_the_cpu():
    cfg = VectorTaskConfig(chains=4, depth=5, seed=3)
    cpu = make_batch(cfg, range(512), "train")
    gpu = make_batch(cfg, range(512), "train", device="cuda")
    assert torch.equal(gpu.meta.paths.cpu(), cpu.meta.paths)
    assert torch.equal(gpu.inputs.cpu(), cpu.inputs)  # integer hashing is exact; Box-Muller in float64
