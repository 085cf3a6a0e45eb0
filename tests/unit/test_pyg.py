"""PyG's convs on the package's blocks: ``block.edge_index`` and ``block.size`` as PyG's
bipartite convs take them (PyG's SAGEConv gives what ``dglx_dist.nn.SAGEConv`` gives with the
same weights), typed blocks per relation, and which strategies take a model of PyG's convs
(``graph_convs`` counts them; they have no adapter). The training run: examples/pyg_sage.py,
tests/e2e/test_pyg_example.py."""
import types

import pytest
import torch
import torch_geometric.nn as pyg_nn  # a test requirement (setup.py's TEST_REQUIRES)
from torch import nn

from dglx_dist.api.parallel import _check_convs
from dglx_dist.convs import adapter_for, graph_convs, is_foreign_conv
from dglx_dist.errors import InvalidValueError
from dglx_dist.nn import SAGEConv
from dglx_dist.graphcore.block import Block
from dglx_dist.strategies.abilities import Capabilities



def _block(seed: int = 0, nodes: int = 50, edges: int = 200) -> Block:
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.randperm(nodes, generator=gen)[:12]
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = dst_nodes[torch.randint(0, 12, (edges,), generator=gen)]
    return Block.untyped(dst_nodes, src, dst, torch.arange(edges), nodes)


def test_edge_index_and_size_are_the_blocks_edges():
    block = _block()
    src, dst = block.edges()
    assert block.edge_index.dtype == torch.int64
    assert block.edge_index.tolist() == [src.tolist(), dst.tolist()]
    assert block.size == (block.num_src_nodes(), block.num_dst_nodes())


@pytest.mark.parametrize("seed", range(3))
def test_pyg_sageconv_equals_ours_on_a_block(seed):
    block = _block(seed)
    x = torch.randn(block.num_src_nodes(), 6, generator=torch.Generator().manual_seed(seed))
    ours = SAGEConv(6, 4, "mean")
    theirs = pyg_nn.SAGEConv(6, 4, aggr="mean")  # lin_l: the neighbours (bias), lin_r: self
    with torch.no_grad():
        theirs.lin_l.weight.copy_(ours.fc_neigh.weight)
        theirs.lin_l.bias.copy_(ours.fc_self.bias)
        theirs.lin_r.weight.copy_(ours.fc_self.weight)
    x_dst = x[:block.num_dst_nodes()]
    got = theirs((x, x_dst), block.edge_index, size=block.size)
    torch.testing.assert_close(got, ours(block, x))


def test_a_typed_block_gives_edge_index_per_relation():
    dst_nodes = [torch.tensor([0, 1]), torch.tensor([0])]
    block = Block.typed(dst_nodes, torch.tensor([2, 0, 1]), torch.tensor([0, 1, 0]),
                        torch.tensor([0, 0, 1]), torch.arange(3), ("a", "b"),
                        [("a", "r", "a"), ("a", "s", "b")])
    with pytest.raises(InvalidValueError, match=r"block.relation\(etype\).edge_index"):
        block.edge_index  # noqa: B018 - the property raises
    rel = block.relation("s")
    assert rel.edge_index.shape == (2, 1) and rel.size == (rel.num_src_nodes(), 1)


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([pyg_nn.SAGEConv(4, 4), pyg_nn.SAGEConv(4, 2)])


def test_pyg_convs_count_as_convs_without_an_adapter():
    convs = graph_convs(_Model())
    assert [name for _, name in convs] == ["layers.0", "layers.1"]
    assert all(is_foreign_conv(conv) for conv, _ in convs)
    assert not is_foreign_conv(SAGEConv(4, 4, "mean"))
    with pytest.raises(InvalidValueError, match="torch_geometric"):
        adapter_for(convs[0][0])  # its class name is SAGEConv's, its adapter is not its


@pytest.mark.parametrize("runs", [True, False])
def test_strategies_that_take_a_model_as_it_is_take_pyg_convs(runs):
    strategy = types.SimpleNamespace(capabilities=Capabilities(foreign_convs=runs),
                                     registered_name="p3")
    if runs:
        assert len(_check_convs(_Model(), strategy)) == 2
    else:
        with pytest.raises(InvalidValueError, match="expected distdgl for PyG's convs"):
            _check_convs(_Model(), strategy)
