import math

import numpy as np
import pytest
from conftest import is_figure

from stackedheads import theory
from stackedheads.errors import UsageError


def test_paper_bound_is_ceil_log3_2d():
    for d in range(1, 500):
        assert theory.paper_bound(d) == math.ceil(round(math.log(2 * d, 3), 12))
    # Powers of three are where float log3 is fragile: 2D = 9 gives exactly 2 layers.
    assert theory.paper_bound(9) == 3 and theory.paper_bound(4) == 2


@pytest.mark.parametrize("causal", [False, True])
def test_simulated_minimum_never_below_paper_bound(causal):
    for d in range(1, 201):
        m = theory.min_layers(d, causal=causal)
        assert m is not None and m >= theory.paper_bound(d), d


def test_small_cases_by_hand():
    # D=1 is the induction problem: the query reaches x_0's first occurrence (sharing x_0) in
    # layer 1, which holds p_1 but not yet x_1; layer 2 brings x_1 (Olsson et al.'s two heads).
    assert theory.min_layers(1) == 2 and theory.min_layers(1, causal=True) == 2
    # D=2, no mask: after layer 1, s_3 holds [e_1..e_4] and the query [e_0, e_1]; layer 2 joins.
    assert theory.min_layers(2) == 2
    # D=2, causal: s_3 (pair 2's first token) comes before s_2, so it can never fetch from later
    # positions; x_2 only reaches the query through s_2 -> s_4, one layer later.
    assert theory.min_layers(2, causal=True) == 3
    # D=3 causal: 3 layers, the paper's "possible to use only 3" heads for transformers A-C.
    assert theory.min_layers(3, causal=True) == 3


def test_lemma3_growth_is_tight_in_the_interior():
    # Interior positions grow to exactly 3^t + 1 pieces (Lemma 3's bound, reached without a mask).
    d = 60
    hist = theory.simulate_chain(d, layers=3)
    for t in range(4):
        lengths = hist[t, :, 1] - hist[t, :, 0] + 1
        assert lengths.max() == 3**t + 1
        assert lengths[2 * d // 2] == 3**t + 1


def test_intervals_are_contiguous_and_monotone():
    hist = theory.simulate_chain(7, layers=5, causal=True)
    assert np.all(hist[1:, :, 0] <= hist[:-1, :, 0]) and np.all(hist[1:, :, 1] >= hist[:-1, :, 1])


def test_causal_per_position_non_decreasing_and_ends_at_min_layers():
    for d in range(1, 40):
        per = theory.min_layers_per_position(d, causal=True)
        assert len(per) == d and all(p is not None for p in per)
        assert per == sorted(per)
        assert per[-1] == theory.min_layers(d, causal=True)


def test_set_simulation_agrees_with_interval_simulation():
    # Two independent implementations of Assumptions 1-2 must agree on single chains.
    for d in range(1, 25):
        facts, target = theory.chain_facts(d)
        assert theory.min_layers_facts(facts, target) == theory.min_layers(d)
        assert theory.min_layers_facts(facts, target, causal=True) == theory.min_layers(d, causal=True)


def test_conditional_retrieval_structures():
    for make in (theory.functions_facts, theory.relatives_facts):
        facts, target = make(4)
        free = theory.min_layers_facts(facts, target)
        causal = theory.min_layers_facts(facts, target, causal=True)
        assert free is not None and causal is not None and causal >= free >= 1


def test_unreachable_target_gives_none():
    # The query shares nothing with the fact that holds the target.
    assert theory.min_layers_facts([("a", "b"), ("c",)], "b") is None


def test_bad_input():
    with pytest.raises(UsageError):
        theory.min_layers(0)
    with pytest.raises(UsageError):
        theory.theory_table(0)
    with pytest.raises(UsageError):
        theory.min_layers_facts([("a",)], "zzz")


def test_plot_writes_png_and_svg(tmp_path):
    paths = theory.plot_theory(theory.theory_table(5), tmp_path)
    assert sorted(p.rsplit(".", 1)[1] for p in paths) == ["png", "svg"]
    assert all(is_figure(tmp_path / p.rsplit("/", 1)[1]) for p in paths)


def test_a_full_disk_never_leaves_an_empty_figure(tmp_path, monkeypatch):
    """A full disk leaves no 0-byte theory.png/.svg: figures are written atomically."""
    import errno

    from matplotlib.figure import Figure

    rows = theory.theory_table(4)
    theory.save_table(rows, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("theory.*")}

    def full_disk(self, fname, *args, **kwargs):  # matplotlib opens the file, writes, the disk fills
        if hasattr(fname, "write"):
            fname.write(b"<svg")
        else:
            with open(fname, "wb") as f:
                f.write(b"<svg")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(OSError):
        theory.save_table(rows, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.glob("theory.*")} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
