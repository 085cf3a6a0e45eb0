"""The layer protocol: column-split adapters reproduce the convs, dgl.nn's on DGL's blocks and
dglx_dist.nn's on either kind."""
import copy
import re

import dgl
import dgl.nn as dglnn
import pytest
import torch
from torch import nn

import dglx_dist.nn as dglx_nn
from dglx_dist.convs import LAYERS, adapter_for, first_conv
from dglx_dist.models import SAGE
from dglx_dist.graphcore.block import Block

CONVS = {  # each built from a conv library: dgl.nn, or dglx_dist.nn (the same classes in torch)
    "sage-mean-shrink": lambda lib: lib.SAGEConv(12, 5, "mean"),
    "sage-mean-grow": lambda lib: lib.SAGEConv(12, 30, "mean", activation=torch.relu),
    "sage-gcn": lambda lib: lib.SAGEConv(12, 5, "gcn"),
    "sage-pool": lambda lib: lib.SAGEConv(12, 5, "pool", norm=nn.LayerNorm(5)),
    "graphconv-both": lambda lib: lib.GraphConv(12, 5, allow_zero_in_degree=True),
    "graphconv-left-grow": lambda lib: lib.GraphConv(12, 30, norm="left",
                                                     allow_zero_in_degree=True),
    "graphconv-right": lambda lib: lib.GraphConv(12, 5, norm="right", allow_zero_in_degree=True),
    "gat": lambda lib: lib.GATConv(12, 4, 3, allow_zero_in_degree=True, activation=torch.tanh),
}


def _block():
    """20 seeds of a random graph; the last one has no in-edges (the zero-degree case)."""
    dgl.seed(0)
    g = dgl.rand_graph(50, 300)
    g = dgl.remove_edges(g, g.in_edges(19, form="eid"))
    seeds = torch.arange(20)
    return dgl.to_block(dgl.in_subgraph(g, seeds), seeds)


def _package_block(block) -> Block:
    """The package's block of DGL's ``block`` (what a strategy's step gives where DGL is
    absent)."""
    src, dst = block.edges()
    ids = block.srcdata[dgl.NID]
    return Block(ids, torch.zeros_like(ids), (block.num_dst_nodes(),), src.long(), dst.long(),
                 block.edata[dgl.EID].long(), torch.zeros_like(src.long()))


def _check_column_split(conv, block=None):
    """The adapter's partials over three column slices sum to ``conv``'s output (on
    ``block``, DGL's by default)."""
    for pname, p in conv.named_parameters():
        if "bias" in pname:
            nn.init.normal_(p)
    block = _block() if block is None else block
    x = torch.randn(block.num_src_nodes(), 12)
    want = conv(block, x)
    adapter = adapter_for(conv)
    adapter.check_column_split(conv)
    lins = adapter.input_linears(conv)
    full = [conv.get_parameter(lin.path).detach().clone() for lin in lins]
    rest = copy.deepcopy(conv)
    adapter.strip(rest)
    assert not any(n.endswith(tuple(lin.path for lin in lins)) for n, _ in
                   rest.named_parameters())
    slices = [slice(0, 5), torch.tensor([5, 7, 9, 11]), torch.tensor([6, 8, 10])]
    parts = [adapter.partial(rest, [lin.columns(w, c) for lin, w in zip(lins, full)], block,
                             x[:, c]) for c in slices]
    totals = [sum(p[i] for p in parts) for i in range(len(parts[0]))]
    torch.testing.assert_close(adapter.finish(rest, block, totals), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CONVS))
def test_partials_over_column_slices_sum_to_the_stock_conv(name):
    torch.manual_seed(1)
    _check_column_split(CONVS[name](dglnn))


@pytest.mark.parametrize("name", sorted(CONVS))
def test_dglx_nn_convs_split_on_the_packages_blocks_as_dgl_nn_convs_on_dgls(name):
    """Where DGL is absent a strategy's step gives the package's blocks, and the model is of
    ``dglx_dist.nn``'s convs: their adapters split them there, and the layer gives what
    dgl.nn's conv of the same parameters gives on DGL's block."""
    torch.manual_seed(1)
    ours, stock = CONVS[name](dglx_nn), CONVS[name](dglnn)
    _check_column_split(ours, _package_block(_block()))
    stock.load_state_dict(ours.state_dict())
    x = torch.randn(_block().num_src_nodes(), 12)
    torch.testing.assert_close(ours(_package_block(_block()), x), stock(_block(), x),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LAYERS.names())
def test_every_registered_adapter_splits_its_example(name):
    """The contract of the layer protocol, for every adapter (entry-point plug-ins too)."""
    torch.manual_seed(2)
    conv = LAYERS.build(name).example(12, 5)
    assert any(c.__name__ == name for c in type(conv).__mro__), type(conv)
    _check_column_split(conv)
    if type(conv).__module__.startswith("dglx_dist.nn"):  # (a plug-in's may need DGL's block)
        _check_column_split(copy.deepcopy(conv), _package_block(_block()))


@pytest.mark.parametrize("conv,message", [
    (dglnn.SAGEConv(4, 3, "lstm"), "aggregator 'lstm' cannot be split"),
    (dglnn.GATConv(4, 3, 2, residual=True), "residual=True"),
    (dglnn.GATConv((4, 5), 3, 2), "two projections"),
    (dglnn.GraphConv(4, 3, weight=False), "weight=False"),
])
def test_layers_that_cannot_be_split_say_what_is_needed(conv, message):
    with pytest.raises(ValueError, match=message):
        adapter_for(conv).check_column_split(conv)


def test_unknown_first_layers_list_the_supported_ones():
    assert {"GATConv", "GraphConv", "SAGEConv"} <= set(LAYERS.names())
    with pytest.raises(ValueError, match="no layer adapter for TAGConv; supported first layers: "
                                         + re.escape(", ".join(LAYERS.names()))):
        adapter_for(dglnn.TAGConv(4, 4))
    with pytest.raises(ValueError, match="has no dgl.nn conv layer"):
        first_conv(nn.Sequential(nn.Linear(3, 3)))
    conv, name = first_conv(SAGE(8, 4, 2))  # the reference models' convs are dglx_dist.nn's
    assert name == "layers.0" and isinstance(conv, dglx_nn.SAGEConv)


def test_every_tensor_task_belongs_to_one_conv():
    """The adapters hold the tensor tasks of their dorylus kinds as objects: together, every
    task a worker runs (the same objects), each once."""
    from dglx_dist.offload.tensor_fn.ops import OPS

    claimed = [(task, op) for name in LAYERS.names() if LAYERS.get(name).dorylus is not None
               for task, op in LAYERS.get(name).dorylus.tasks.items()]
    assert sorted(task for task, _ in claimed) == sorted(OPS)
    assert all(OPS[task] is op for task, op in claimed)
