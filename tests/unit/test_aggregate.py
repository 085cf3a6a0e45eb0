"""graphcore/aggregate.py's fused sums (what graphcore/message.py sums with on the package's blocks):
the same sums and gradients as a row per edge added with index_add, float32 as DGL's kernels
where DGL is installed (bit for bit without per-edge weights), and the layout kept on the block (built once, dropped
by a move)."""
import pytest
import torch

from dglx_dist.graphcore import message
from dglx_dist.graphcore.block import Block

NODES, DSTS, EDGES = 400, 120, 3000


def _block(seed=0, edges=EDGES):
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.randperm(NODES, generator=gen)[:DSTS]
    src = torch.randint(NODES, (edges,), generator=gen)
    dst = dst_nodes[torch.randint(DSTS - 4, (edges,), generator=gen)]  # 4 without in-edges
    return Block.untyped(dst_nodes, src, dst, torch.arange(edges), num_nodes=NODES)


def _rows(n, *shape, seed=1, scale=30.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, *shape, generator=gen) * scale).requires_grad_()


def _by_index_add(block, h, weight):
    src, dst = (x.long() for x in block.edges())
    msg = h.index_select(0, src)
    msg = msg if weight is None else msg * weight
    return msg.new_zeros((block.num_dst_nodes(), *h.shape[1:])).index_add(0, dst, msg)


def _with_grads(fn, leaves, seed=5):
    out = fn()
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    grads = torch.autograd.grad(out, [x for x in leaves if x is not None], up)
    return [out.detach(), *grads]


CASES = {  # name: (row shape, weight shape or None)
    "copy_u": ((16,), None),
    "u_mul_e": ((16,), (1,)),
    "heads": ((4, 6), (4, 1)),
    "prefix_heads": ((2, 3, 5), (2, 3, 1)),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sums_equal_index_add(case, dtype):
    block = _block()
    shape, wshape = CASES[case]
    h = _rows(NODES, *shape).to(dtype).detach().requires_grad_()
    w = None if wshape is None else \
        (_rows(EDGES, *wshape, seed=2, scale=1.0).detach() + 0.5).to(dtype).requires_grad_()
    got = _with_grads(lambda: message.u_mul_e_sum(block, h, w), [h, w])
    ref = _with_grads(lambda: _by_index_add(block, h, w), [h, w])
    tol = dict(atol=1e-3, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=0)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_edge_sum_degrees_and_the_kept_layout():
    block = _block(seed=3)
    rows = _rows(EDGES, 7)
    got = _with_grads(lambda: message.copy_e_sum(block, rows), [rows])
    dst = block.edges()[1].long()
    ref = _with_grads(lambda: rows.new_zeros(DSTS, 7).index_add(0, dst, rows), [rows])
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-6)
    assert len(block.layout) == 1  # built once, kept on the block
    layout = block.layout[0]
    assert torch.equal(message.in_degrees(block), torch.bincount(dst, minlength=DSTS))
    assert torch.equal(message.out_degrees(block),
                       torch.bincount(block.edges()[0].long(), minlength=block.num_src_nodes()))
    assert block.layout[0] is layout and block.local_var().layout[0] is layout
    assert not block.to("meta").layout  # a copy elsewhere builds its own


def test_sources_are_grouped_only_for_a_backward():
    """A sum whose rows need no gradient (a first layer's features, evaluation) leaves the
    grouping by source unsorted; the first backward sorts it, once."""
    block = _block(seed=4)
    message.u_mul_e_sum(block, _rows(NODES, 5).detach(), None)
    layout = block.layout[0]
    assert "_by_source" not in vars(layout)
    message.u_mul_e_sum(block, _rows(NODES, 5), None).sum().backward()
    src = block.edges()[0].long()
    assert torch.equal(layout.rorder, torch.argsort(src, stable=True))
    assert layout._by_source is vars(layout)["_by_source"]


@pytest.mark.parametrize("groups", [1, 300, 1 << 16, (1 << 16) + 1])  # 16-bit radix or torch
@pytest.mark.parametrize("in_order", [False, True])
def test_group_by_is_a_stable_sort_and_its_offsets(groups, in_order):
    from dglx_dist.graphcore.block import group_by

    key = torch.randint(0, groups, (5000,), generator=torch.Generator().manual_seed(groups))
    key = key.sort().values if in_order else key
    for k in (key, key.int()):
        order, offsets = group_by(k, groups)
        assert (order is None) == bool((key[1:] >= key[:-1]).all())  # nothing to move
        if order is not None:
            assert torch.equal(order.long(), torch.argsort(key, stable=True))
        assert offsets[0] == 0
        assert torch.equal(offsets.diff(), torch.bincount(key, minlength=groups))


def test_no_edges_gives_zeros():
    block = _block(edges=0)
    h = _rows(block.num_src_nodes(), 3)
    for w in (None, torch.ones(0, 1)):
        out = message.u_mul_e_sum(block, h, w)
        assert out.shape == (DSTS, 3) and not out.any()
        out.sum().backward()


if torch.cuda.is_available():  # defined where CUDA exists (the GPU checklist runs this file)
    @pytest.mark.parametrize("case", CASES)
    def test_sums_on_cuda_equal_the_hosts(case):
        block, shape, wshape = _block(), *CASES[case]
        h = _rows(NODES, *shape, scale=1.0)
        w = None if wshape is None else _rows(EDGES, *wshape, seed=2, scale=1.0)
        host = _with_grads(lambda: message.u_mul_e_sum(block, h, w), [h, w])
        hc, wc = (None if x is None else x.detach().cuda().requires_grad_() for x in (h, w))
        dev = _with_grads(lambda: message.u_mul_e_sum(block.to("cuda"), hc, wc), [hc, wc])
        for a, b in zip(dev, host, strict=True):
            torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-5)


@pytest.mark.dgl
@pytest.mark.parametrize("case", CASES)
def test_float32_sums_are_dgls(case):
    """Bit for bit without per-edge weights (the fused gather-sum adds in DGL's order); with
    them, MKL's CSR product adds in an order that depends on the CPU (bit for bit on an AVX2
    CPU, a few ulps apart on an AVX-512 one), so within float32 rounding there."""
    import dgl  # noqa: PLC0415 - marked: only where DGL is installed

    from dglx_dist.dgl.blocks import to_dgl_block  # noqa: PLC0415

    block = _block(seed=4)
    graph = to_dgl_block(block)
    shape, wshape = CASES[case]
    h = _rows(block.num_src_nodes(), *shape)
    w = None if wshape is None else \
        (_rows(EDGES, *wshape, seed=2, scale=1.0).detach() + 0.5).requires_grad_()
    got = _with_grads(lambda: message.u_mul_e_sum(block, h, w), [h])
    ref = _with_grads(lambda: dgl.ops.copy_u_sum(graph, h) if w is None else
                      dgl.ops.u_mul_e_sum(graph, h, w), [h])
    for a, b in zip(got, ref, strict=True):
        if w is None:
            assert torch.equal(a, b), (a - b).abs().max()
        else:  # values up to ~1e3: a dropped or doubled edge is off by far more
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-6)
    edge_rows = _rows(EDGES, 5)
    assert torch.equal(message.copy_e_sum(block, edge_rows), dgl.ops.copy_e_sum(graph, edge_rows))
