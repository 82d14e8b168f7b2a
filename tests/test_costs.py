"""What a step costs: FLOPs and bytes per operator family as the step executes them
(``costs.OpTally``), and the roofline against a machine's peak and bandwidth."""

import pytest
import torch

from stackedheads.costs import OTHER_FAMILY, OpTally, matmul_flops, op_family, roofline


def test_tally_counts_matmul_flops_and_bytes_moved():
    a, b = torch.randn(3, 8, 16), torch.randn(3, 16, 5)
    x = torch.randn(64, 32)
    with OpTally() as tally:
        torch.bmm(a, b)
        x.t()  # a view: nothing moves
        x + x  # reads 2, writes 1
    mm, other = tally.rows["matmuls"], tally.rows[OTHER_FAMILY]
    assert mm["flops"] == 2 * 3 * 8 * 16 * 5 and mm["calls"] == 1
    assert mm["bytes"] == 4 * (a.numel() + b.numel() + 3 * 8 * 5)
    assert other["bytes"] == 3 * x.numel() * 4 and other["flops"] == 0
    assert other["calls"] == 2 and all(r["seconds"] >= 0 for r in tally.rows.values())


def test_tally_sees_the_backward_and_an_expanded_tensor_by_its_storage():
    w = torch.randn(4, 6, requires_grad=True)
    shared = torch.randn(1, 6).expand(100, 6)  # 6 floats in memory, 600 in the view
    with OpTally() as tally:
        (shared @ w.t()).sum().backward()
    assert tally.rows["matmuls"]["calls"] >= 2  # the forward's product and the weight's gradient
    assert tally.rows["matmuls"]["flops"] >= 2 * (2 * 100 * 6 * 4)
    halved = tally.scaled(0.5)
    assert halved["matmuls"]["flops"] == tally.rows["matmuls"]["flops"] / 2


@pytest.mark.parametrize("name,family", [("aten.bmm.default", "matmuls"), ("aten.baddbmm.default", "matmuls"),
                                         ("aten.native_layer_norm_backward.default", "LayerNorm"),
                                         ("aten._softmax.default", "attention (softmax, mask)"),
                                         ("aten._to_copy.default", "casts (float32 <-> bfloat16)"),
                                         ("aten._fused_adamw_.default", "optimizer"),
                                         ("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention (softmax, mask)"), ("aten.add_.Tensor", OTHER_FAMILY)])
def test_op_family(name, family):
    assert op_family(name) == family


def test_matmul_flops_of_other_ops_is_zero():
    assert matmul_flops("aten.add.Tensor", [(3, 4), (3, 4)]) == 0
    assert matmul_flops("aten.addmm.default", [(5,), (2, 3), (3, 5)]) == 2 * 2 * 3 * 5


def test_roofline_names_the_bound_and_the_distance_to_it():
    rows = {"matmuls": {"calls": 1, "seconds": 2.0, "flops": 100.0, "bytes": 10.0},
            "LayerNorm": {"calls": 1, "seconds": 1.0, "flops": 0.0, "bytes": 40.0}}
    roof = roofline(rows, peak_flops=100.0, bandwidth=20.0)
    assert roof["matmuls"]["bound"] == "compute" and roof["matmuls"]["floor_s"] == 1.0
    assert roof["matmuls"]["of_floor"] == 0.5
    assert roof["LayerNorm"]["bound"] == "memory" and roof["LayerNorm"]["floor_s"] == 2.0
    assert roof["step"]["floor_s"] == 3.0 and roof["step"]["seconds"] == 3.0 and roof["step"]["bound"] == "memory"
