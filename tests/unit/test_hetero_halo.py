"""GraNNDis's graph conv (``HaloConv``) on a typed graph, on one process: it takes a
``HeteroGraphConv`` of either library (by class name) and refuses any other conv, and a relation
conv that normalises by its sources' out-degrees normalises by the degrees each edge carries
(``SOURCE_DEGREE``), on the package's heterogeneous block (what a model gets where DGL is
absent) as on DGL's of it."""
import dgl.nn as dglnn
import pytest
import torch

import dglx_dist.nn as dglx_nn
from dglx_dist.errors import NotSupportedError
from dglx_dist.graphcore.block import Block
from dglx_dist.dgl.blocks import to_dgl_block
from dglx_dist.strategies.granndis.cobatch import SOURCE_DEGREE
from dglx_dist.strategies.granndis.halo import HaloConv

NTYPES = ("author", "paper")
ETYPES = (("author", "writes", "paper"), ("paper", "cites", "paper"))


def _block() -> Block:
    """2 papers and 1 author as destinations; writes and cites edges, per-type ids."""
    src = torch.tensor([0, 1, 2, 1, 0, 3, 2])
    dst = torch.tensor([0, 0, 1, 1, 0, 1, 0])
    etype = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    return Block.typed([torch.tensor([0]), torch.tensor([0, 1])], src, dst, etype,
                       torch.arange(7), NTYPES, ETYPES)


def _convs(lib, norm):
    return lib.HeteroGraphConv({rel: lib.GraphConv(4, 3, norm=norm, allow_zero_in_degree=True)
                                for _, rel, _ in ETYPES})


def _halo(conv):
    """The wrapper as the strategy makes it, on blocks of the caller's own (no exchange)."""
    return HaloConv.of(conv, lambda block: None, None, NTYPES, ETYPES, "layers.0")


def _rows(block):
    torch.manual_seed(3)
    return {t: torch.randn(block.num_src_nodes(t), 4) for t in NTYPES}


def _by_hand(conv, block, x, degree):
    """Each relation's GraphConv with ``norm="both"`` by the sources' ``degree`` (per edge
    type, per source) and the block's in-degrees, summed per destination type."""
    out = {}
    for e, (st, rel, dt) in enumerate(ETYPES):
        src, dst = block.edges(etype=(st, rel, dt))
        mod = conv.mods[rel].conv
        msg = x[st][src] * degree[e][src].clamp(min=1).pow(-0.5).unsqueeze(1)
        total = torch.zeros(block.num_dst_nodes(dt), 4).index_add(0, dst, msg)
        deg_in = torch.bincount(dst, minlength=block.num_dst_nodes(dt)).clamp(min=1)
        rst = (total @ mod.weight) * deg_in.pow(-0.5).unsqueeze(1) + mod.bias
        out[dt] = out.get(dt, 0) + rst
    return out


def test_relation_convs_normalise_by_the_degrees_their_edges_carry_on_either_block():
    block = _block()
    # each type's sources' out-degrees in the whole graph (by source row)
    degree = [torch.tensor([5.0, 2.0, 7.0]), torch.tensor([4.0, 3.0, 9.0, 2.0])]
    for e, et in enumerate(ETYPES):
        src, _ = block.edges(etype=et)
        block.edges[et].data[SOURCE_DEGREE] = degree[e][src]
    torch.manual_seed(0)
    ours, stock, plain = _convs(dglx_nn, "both"), _convs(dglnn, "both"), _convs(dglx_nn, "both")
    stock.load_state_dict(ours.state_dict())
    plain.load_state_dict(ours.state_dict())  # (not wrapped: the block's own degrees)
    ours, stock = _halo(ours), _halo(stock)
    x = _rows(block)
    want = _by_hand(ours.conv, block, x, degree)
    for name, out in (("dglx_dist.nn, the package's block", ours(block, x)),
                      ("dglx_dist.nn, DGL's block", ours(to_dgl_block(block), x)),
                      ("dgl.nn, DGL's block", stock(to_dgl_block(block), x))):
        assert sorted(out) == ["paper"], name
        torch.testing.assert_close(out["paper"], want["paper"], rtol=1e-5, atol=1e-6,
                                   msg=name)
    assert not torch.allclose(plain(block, x)["paper"], want["paper"])


@pytest.mark.parametrize("lib", [dglx_nn, dglnn], ids=["dglx_dist.nn", "dgl.nn"])
def test_only_a_hetero_graph_conv_runs_on_a_typed_graph(lib):
    _halo(_convs(lib, "right"))
    with pytest.raises(NotSupportedError, match="layers.0 is a GraphConv; on a graph with node "
                                                "types every graph conv must be a "
                                                "HeteroGraphConv"):
        _halo(lib.GraphConv(4, 3))
