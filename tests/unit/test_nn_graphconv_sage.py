"""dglx_dist.nn's GraphConv and SAGEConv against dgl.nn's (issue 59): on random blocks (the
package's Block and DGL's door's to_dgl_block of it), with one state_dict loaded both ways (strict), the outputs
and the gradients of the inputs and of every parameter agree (atol 1e-5); the refusals raise
the package's errors."""
import pytest
import torch

dgl = pytest.importorskip("dgl")
from dgl import nn as dglnn  # noqa: E402

from dglx_dist import nn as ours  # noqa: E402
from dglx_dist.errors import DglxError, InvalidValueError, NotSupportedError  # noqa: E402
from dglx_dist.graphcore.block import Block  # noqa: E402
from dglx_dist.dgl.blocks import to_dgl_block  # noqa: E402
from dglx_dist.nn.graphconv import map_first  # noqa: E402

NODES, DSTS, EDGES, LONELY = 150, 50, 300, 6


def _block(seed: int = 0, self_loops: bool = False, full: bool = False, edges: int = EDGES):
    """A random block on NODES nodes: DSTS destinations (every node where ``full``), the last
    LONELY of them without in-edges (unless ``self_loops`` gives each one)."""
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.arange(NODES) if full else torch.randperm(NODES, generator=gen)[:DSTS]
    src = torch.randint(NODES, (edges,), generator=gen)
    dst = dst_nodes[torch.randint(dst_nodes.numel() - LONELY, (edges,), generator=gen)]
    if self_loops:
        src, dst = torch.cat([src, dst_nodes]), torch.cat([dst, dst_nodes])
    return Block.untyped(dst_nodes, src, dst, torch.arange(src.numel()), num_nodes=NODES)


def _dgl_form(block: Block, full: bool):
    """DGL's block of ``block``; where it is the full graph, a DGL graph (src == dst nodes)."""
    if full:
        src, dst = block.edges()
        return dgl.graph((src, dst), num_nodes=block.num_src_nodes())
    return to_dgl_block(block)


def _leaves(values: dict, dtype) -> dict:
    return {k: tuple(t.to(dtype).requires_grad_() for t in v) if isinstance(v, tuple)
            else v.to(dtype).requires_grad_() for k, v in values.items()}


def _flat(values: dict) -> list:
    return [t for v in values.values() for t in (v if isinstance(v, tuple) else (v,))]


def _compare(theirs, mine, block, graph, inputs: dict, dtype=torch.float64, grads=True):
    """Load ``theirs``' state_dict into ``mine`` and back (strict); run both on ``inputs``
    (``feat`` and forward's keyword tensors) and compare outputs and (``grads``) gradients
    (in float32 within 1e-4: the convs may sum and map in another order than DGL's, as
    ``map_first`` has them do, and a LayerNorm over a few columns magnifies the rounding)."""
    mine.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(mine.state_dict(), strict=True)
    theirs.to(dtype), mine.to(dtype)
    results = []
    for module, g in ((theirs, graph), (mine, block)):
        given = _leaves(inputs, dtype)
        out = module(g, given["feat"], **{k: v for k, v in given.items() if k != "feat"})
        params = dict(module.named_parameters())
        results.append((out, sorted(params), torch.autograd.grad(
            out, _flat(given) + list(params.values()),
            torch.ones_like(out).cumsum(-1) / out.shape[-1], allow_unused=True)))
    (out_a, names_a, grads_a), (out_b, names_b, grads_b) = results
    assert names_a == names_b
    tol = {"atol": 1e-5, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out_b, out_a, **tol)
    for a, b in zip(grads_a, grads_b) if grads else ():
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, **tol)


def _feat(block, width, seed=1):
    return torch.randn(block.num_src_nodes(), width, generator=torch.Generator().manual_seed(seed))


def _edge_weight(block, seed=2):
    return torch.rand(block.num_edges(), generator=torch.Generator().manual_seed(seed)) + 0.5


# -- GraphConv -----------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["both", "right", "none", "left"])
@pytest.mark.parametrize("weight", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("widths", [(12, 5), (5, 12)])
@pytest.mark.parametrize("weighted", [False, True])
def test_graphconv_equals_dgl(norm, weight, bias, widths, weighted):
    block = _block()
    args = dict(norm=norm, weight=weight, bias=bias, allow_zero_in_degree=True)
    inputs = {"feat": _feat(block, widths[0])}
    if not weight:  # the weight given to forward
        inputs["weight"] = torch.randn(*widths, generator=torch.Generator().manual_seed(3))
    if weighted:
        inputs["edge_weight"] = _edge_weight(block)
    theirs = dglnn.GraphConv(*widths, **args)
    if bias:  # DGL's bias starts at 0: a drawn one checks that it is added
        torch.nn.init.normal_(theirs.bias)
    _compare(theirs, ours.GraphConv(*widths, **args), block, to_dgl_block(block), inputs)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("pair", [False, True])
def test_graphconv_self_loops_pairs_full_graph_float32(full, pair):
    block = _block(seed=4, self_loops=True, full=full)
    feat = _feat(block, 7)
    inputs = {"feat": (feat, feat[:block.num_dst_nodes()] * 2) if pair else feat,
              "edge_weight": _edge_weight(block)}
    act = torch.tanh
    _compare(dglnn.GraphConv(7, 4, activation=act), ours.GraphConv(7, 4, activation=act), block,
             _dgl_form(block, full), inputs, dtype=torch.float32)


def test_graphconv_on_a_dgl_block():
    """Given DGL's block itself, ours computes through message.py's DGL kernels, alike."""
    block = _block(seed=5)
    graph = to_dgl_block(block)
    args = dict(norm="both", allow_zero_in_degree=True)
    _compare(dglnn.GraphConv(6, 3, **args), ours.GraphConv(6, 3, **args), graph, graph,
             {"feat": _feat(block, 6)})


def test_graphconv_refusals():
    block = _block()
    with pytest.raises(InvalidValueError, match="no in-edges.*add self loops.*"
                                                "allow_zero_in_degree=True"):
        ours.GraphConv(4, 3)(block, _feat(block, 4))
    with pytest.raises(InvalidValueError, match="norm='sym'; expected one of"):
        ours.GraphConv(4, 3, norm="sym")
    conv = ours.GraphConv(4, 3, allow_zero_in_degree=True)
    with pytest.raises(InvalidValueError, match="build it with weight=False"):
        conv(block, _feat(block, 4), weight=torch.zeros(4, 3))
    with pytest.raises(InvalidValueError, match="edge_weight has 3 rows; expected one per edge"):
        conv(block, _feat(block, 4), edge_weight=torch.ones(3))
    conv.set_allow_zero_in_degree(False)
    with pytest.raises(DglxError, match="allow_zero_in_degree"):
        conv(block, _feat(block, 4))


# -- SAGEConv ------------------------------------------------------------------------------------
@pytest.mark.parametrize("aggregator", ["mean", "gcn", "pool"])
@pytest.mark.parametrize("widths", [(12, 5), (5, 12)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_sageconv_equals_dgl(aggregator, widths, bias, weighted):
    block = _block(seed=6)
    inputs = {"feat": _feat(block, widths[0])}
    if weighted:
        inputs["edge_weight"] = _edge_weight(block) - 0.7  # some negative: pool's max sees them
    theirs = dglnn.SAGEConv(*widths, aggregator, bias=bias)
    if bias and aggregator == "gcn":
        torch.nn.init.normal_(theirs.bias)
    _compare(theirs, ours.SAGEConv(*widths, aggregator, bias=bias), block, to_dgl_block(block), inputs)


@pytest.mark.parametrize("conv", ["mean", "gcn", "graphconv"])
@pytest.mark.parametrize("full", [False, True])
def test_the_convs_map_before_or_after_the_sum_where_that_does_less_work(conv, full):
    """On a sampled block (three times as many sources as destinations) SAGEConv's
    ``fc_neigh`` and GraphConv's weight map the sums of the sources' rows; on the whole graph
    they map the rows first (as DGL always does where the map narrows them): either way the
    outputs and gradients are DGL's."""
    block = _block(seed=10, full=full, self_loops=True, edges=200)
    assert map_first(block, _feat(block, 12), 5) == full
    assert not map_first(block, _feat(block, 5), 12)  # a widening map never runs first
    assert map_first(block, torch.empty(NODES, 12, device="meta"), 5)  # off a CPU: DGL's
    pair = (dglnn.GraphConv(12, 5), ours.GraphConv(12, 5)) if conv == "graphconv" else \
        (dglnn.SAGEConv(12, 5, conv), ours.SAGEConv(12, 5, conv))
    _compare(*pair, block, _dgl_form(block, full), {"feat": _feat(block, 12)})


@pytest.mark.parametrize("aggregator", ["mean", "gcn", "pool"])
@pytest.mark.parametrize("full", [False, True])
def test_sageconv_pairs_norm_full_graph_float32(aggregator, full):
    block = _block(seed=7, full=full)
    widths = (6, 6) if aggregator == "gcn" else (6, 9)
    gen = torch.Generator().manual_seed(8)
    feat = (_feat(block, widths[0]), torch.randn(block.num_dst_nodes(), widths[1], generator=gen))
    modules = [cls(widths, 4, aggregator, feat_drop=0.3, activation=torch.relu,
                   norm=torch.nn.LayerNorm(4)).eval()  # eval: the dropout is off in both
               for cls in (dglnn.SAGEConv, ours.SAGEConv)]
    torch.nn.init.normal_(modules[0].norm.weight)
    # "gcn" with a pair on DGL's full graph (not a block) is DGL's quirk: its srcdata and
    # dstdata are one frame there, so the destinations' rows replace the sources' before the
    # sum (dgl/nn/pytorch/conv/sageconv.py:247); ours is DGL's on the block of that graph.
    graph = _dgl_form(block, full and aggregator != "gcn")
    _compare(*modules, block, graph, {"feat": feat}, dtype=torch.float32)


@pytest.mark.parametrize("aggregator", ["mean", "gcn", "pool"])
def test_sageconv_single_input_full_graph_and_no_edges(aggregator):
    for block, full in ((_block(seed=9, full=True), True), (_block(seed=9, edges=0), False)):
        # "pool" on a block without edges: DGL's max skips its kernel and leaves each
        # destination's argmax at source 0 (dgl/_sparse_ops.py:230-238), so its backward gives
        # source 0 every destination's gradient (dgl/backend/pytorch/sparse.py:225); the
        # output does not depend on fc_pool there, and ours gives it no gradient.
        _compare(dglnn.SAGEConv(10, 3, aggregator), ours.SAGEConv(10, 3, aggregator), block,
                 _dgl_form(block, full), {"feat": _feat(block, 10)},
                 grads=full or aggregator != "pool")
    conv = ours.SAGEConv(10, 3, "pool")
    conv(block, _feat(block, 10)).sum().backward()
    assert not conv.fc_pool.weight.grad.any()


def test_sageconv_on_a_dgl_block():
    block = _block(seed=10)
    graph = to_dgl_block(block)
    _compare(dglnn.SAGEConv(6, 3, "pool"), ours.SAGEConv(6, 3, "pool"), graph, graph,
             {"feat": _feat(block, 6), "edge_weight": _edge_weight(block)})


def test_sageconv_refusals():
    with pytest.raises(NotSupportedError, match="'lstm' is not implemented"):
        ours.SAGEConv(4, 3, "lstm")
    with pytest.raises(InvalidValueError, match="aggregator_type='max'; expected one of"):
        ours.SAGEConv(4, 3, "max")
    block = _block()
    conv = ours.SAGEConv((4, 5), 3, "gcn")
    with pytest.raises(InvalidValueError, match=r"\(4,\) wide .* \(5,\); expected the same"):
        conv(block, (_feat(block, 4), torch.zeros(block.num_dst_nodes(), 5)))
    assert "bias" not in ours.SAGEConv(4, 3, "gcn", bias=False).state_dict()



def test_reprs_and_parameter_order_match_dgl():
    for args in ((5, 3), (5, 3, "left", False, False, torch.relu)):
        assert repr(ours.GraphConv(*args)) == repr(dglnn.GraphConv(*args))
    for aggregator in ("mean", "gcn", "pool"):
        mine, theirs = (cls((5, 4), 3, aggregator, norm=torch.nn.LayerNorm(3))
                        for cls in (ours.SAGEConv, dglnn.SAGEConv))
        assert repr(mine) == repr(theirs)
        assert [n for n, _ in mine.named_parameters()] == \
            [n for n, _ in theirs.named_parameters()]


def test_the_convs_train_without_dgl():
    """In an interpreter where ``import dgl`` fails: a step of each conv on the package's
    block (forward, backward)."""
    from tests.unit.test_import_boundary import _run

    proc = _run("""
        import torch
        from dglx_dist.nn import GraphConv, SAGEConv
        from dglx_dist.graphcore.block import Block
        block = Block.untyped(torch.arange(4), torch.tensor([0, 5, 6, 2, 3]),
                              torch.tensor([0, 0, 1, 2, 3]), torch.arange(5))
        feat = torch.randn(block.num_src_nodes(), 3)
        for conv in (GraphConv(3, 2), SAGEConv(3, 2, "mean"), SAGEConv(3, 2, "gcn"),
                     SAGEConv(3, 2, "pool")):
            conv(block, feat, edge_weight=torch.rand(5)).sum().backward()
            assert all(p.grad is not None for p in conv.parameters())
        assert "dgl" not in sys.modules
    """)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("conv", ["sage", "graph", "gat", "rel"])
@pytest.mark.parametrize("form", ["package", "dgl"])
@pytest.mark.parametrize("extra", [2, -3])
def test_rows_of_another_count_than_the_blocks_sources_are_refused_in_one_line(conv, form,
                                                                               extra):
    """Issue 77, item 6: on either form of block, rows that do not match the block's sources
    are refused with the package's one-line error (DGL's conv raises its own DGLError there),
    never a kernel's check with a C++ stack or a broadcast error from torch."""
    block = _block(self_loops=True)
    graph = block if form == "package" else to_dgl_block(block)
    rows = torch.randn(block.num_src_nodes() + extra, 4)
    mine = {"sage": lambda: ours.SAGEConv(4, 3, "mean"), "graph": lambda: ours.GraphConv(4, 3),
            "gat": lambda: ours.GATConv(4, 3, 2), "rel": lambda: ours.RelGraphConv(4, 3, 2)}[conv]()
    args = (torch.zeros(block.num_edges(), dtype=torch.long),) if conv == "rel" else ()
    with pytest.raises(InvalidValueError) as refused:
        mine(graph, rows, *args)
    message = str(refused.value)
    assert message == (f"{type(mine).__name__}: the block has {block.num_src_nodes()} source "
                       f"nodes but the features have {rows.shape[0]} rows; expected one row "
                       f"per source node")
    theirs = {"sage": lambda: dglnn.SAGEConv(4, 3, "mean"), "graph": lambda: dglnn.GraphConv(4, 3),
              "gat": lambda: dglnn.GATConv(4, 3, 2), "rel": lambda: dglnn.RelGraphConv(4, 3, 2)}
    with pytest.raises(Exception):  # DGL refuses the same rows (a DGLError)
        theirs[conv]()(to_dgl_block(block), rows, *args)
