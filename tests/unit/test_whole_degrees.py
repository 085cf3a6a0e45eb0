"""DGL's DistDGL row of dglx bench scores a GCN as on the whole graph: on full-neighbour
blocks, its hooks rescale the sources to their out-degrees in the whole graph."""
import dgl
import torch

from dglx_dist.bench.dgl_distdgl_nodes import whole_degree_hooks
from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN, SAGE


def _blocks_logits(model, g, nodes, fanouts=()):
    sampler = dgl.dataloading.NeighborSampler(list(fanouts)) if fanouts else \
        dgl.dataloading.MultiLayerFullNeighborSampler(2)
    hooks = whole_degree_hooks(g, model, list(fanouts))
    with torch.no_grad():
        _, _, blocks = sampler.sample_blocks(g, nodes)
        out = model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]])
    for hook in hooks:
        hook.remove()
    return out, len(hooks)


def test_full_blocks_give_the_whole_graph_logits_with_the_hooks():
    g = to_dgl(read_dataset(builtin_path("cora")))
    torch.manual_seed(0)
    model = GCN(g.ndata["feat"].shape[1], 16, 7, 2, dropout=0.0).eval()
    nodes = torch.arange(0, 2708, 37)  # a batch far smaller than the graph
    with torch.no_grad():
        whole = model([g, g], g.ndata["feat"])[nodes]
    scaled, hooks = _blocks_logits(model, g, nodes)
    assert hooks == 2
    torch.testing.assert_close(scaled, whole, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # without them, DGL's blocks normalise within the block
        _, _, blocks = dgl.dataloading.MultiLayerFullNeighborSampler(2).sample_blocks(g, nodes)
        plain = model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]])
    assert (plain - whole).abs().max() > 1e-2
    assert not model.layers[0]._forward_pre_hooks  # removed


def test_sampled_layers_and_convs_without_source_degrees_are_left_alone():
    g = to_dgl(read_dataset(builtin_path("cora")))
    torch.manual_seed(0)
    gcn = GCN(g.ndata["feat"].shape[1], 16, 7, 2, dropout=0.0).eval()
    assert _blocks_logits(gcn, g, torch.arange(5), fanouts=(-1, 3))[1] == 1  # layer 1 only
    sage = SAGE(g.ndata["feat"].shape[1], 16, 7, 2, dropout=0.0).eval()
    hooks = whole_degree_hooks(g, sage, [])
    assert len(hooks) == 2  # hooked, but SAGEConv scales nothing
    for hook in hooks:
        hook.remove()
    nodes = torch.arange(0, 2708, 37)
    with torch.no_grad():
        whole = sage([g, g], g.ndata["feat"])[nodes]
    torch.testing.assert_close(_blocks_logits(sage, g, nodes)[0], whole, rtol=1e-4, atol=1e-5)
