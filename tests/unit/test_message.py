"""The torch messages of graphcore/message.py against DGL's ``dgl.ops`` of the same names, on
DGL's blocks and on the package's: values and gradients."""
import dgl
import pytest
import torch

from dglx_dist.graphcore import message
from dglx_dist.graphcore.block import Block
from dglx_dist.dgl.blocks import to_dgl_block


def _blocks(seed):
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.arange(7)
    src = torch.randint(0, 20, (40,), generator=gen)
    dst = torch.randint(0, 6, (40,), generator=gen)  # node 6 has no in-edge
    ours = Block.untyped(dst_nodes, src, dst, torch.arange(40), 20)
    return ours, to_dgl_block(ours)


@pytest.mark.parametrize("op", ["copy_u_sum", "u_mul_e_sum", "copy_u_max", "u_mul_e_max"])
@pytest.mark.parametrize("seed", range(3))
def test_messages_are_dgls(op, seed):
    ours, theirs = _blocks(seed)
    gen = torch.Generator().manual_seed(seed + 10)
    h = torch.randn(ours.num_src_nodes(), 3, generator=gen, requires_grad=True)
    w = torch.rand(ours.num_edges(), 1, generator=gen) + 0.5
    args = (w,) if op.startswith("u_mul") else ()
    ref = getattr(dgl.ops, op)(theirs, h, *args)
    (g_ref,) = torch.autograd.grad(ref.masked_fill(ref.isinf(), 0).sum(), h)
    for block in (ours, theirs):
        got = getattr(message, op)(block, h, *args)
        assert torch.allclose(got, ref, atol=1e-6)
        (g,) = torch.autograd.grad(got.masked_fill(got.isinf(), 0).sum(), h)
        assert torch.allclose(g, g_ref, atol=1e-6)


def test_degrees_are_dgls():
    ours, theirs = _blocks(0)
    for block in (ours, theirs):
        assert torch.equal(message.in_degrees(block), theirs.in_degrees())
        assert torch.equal(message.out_degrees(block), theirs.out_degrees())
