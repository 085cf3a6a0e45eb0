"""dglx_dist.nn.GATConv and graphcore/message.py's edge_softmax against DGL's: the same parameters
(state_dicts load strictly both ways), the same outputs, attention and gradients (of the input,
the edge weights and every parameter) on the same random blocks, and our refusals."""
import dgl
import pytest
import torch

from dglx_dist.graphcore.message import edge_softmax
from dglx_dist.errors import DglxError, InvalidTypeError, InvalidValueError
from dglx_dist.nn import GATConv
from dglx_dist.graphcore.block import Block
from dglx_dist.dgl.blocks import to_dgl_block

NUM_DST, NUM_NODES, NUM_EDGES = 30, 80, 300


def _graphs(seed, full=False):
    """Our block and DGL's form of it: 30 destinations among 80 nodes, 5 of them without an
    in-edge; ``full``: every node a destination, and DGL's form a plain graph."""
    gen = torch.Generator().manual_seed(seed)
    num_dst = NUM_NODES if full else NUM_DST
    src = torch.randint(0, NUM_NODES, (NUM_EDGES,), generator=gen)
    dst = torch.randint(0, num_dst - 5, (NUM_EDGES,), generator=gen)
    ours = Block.untyped(torch.arange(num_dst), src, dst, torch.arange(NUM_EDGES), NUM_NODES)
    if not full:
        return ours, to_dgl_block(ours)
    assert ours.num_src_nodes() == ours.num_dst_nodes() == NUM_NODES
    return ours, dgl.graph(tuple(ours.edges()), num_nodes=NUM_NODES)


# (constructor arguments, forward options); in_feats 12 = 4 heads x 3: residual is the identity
CASES = [
    (dict(in_feats=8, num_heads=1), {}),
    (dict(in_feats=8, num_heads=4), {}),
    (dict(in_feats=8, num_heads=4, residual=True), {}),
    (dict(in_feats=8, num_heads=4, residual=True, bias=False), {}),
    (dict(in_feats=12, num_heads=4, residual=True), {}),
    (dict(in_feats=12, num_heads=4, residual=True, bias=False), {}),
    (dict(in_feats=3, num_heads=1, residual=True), {}),
    (dict(in_feats=8, num_heads=4, bias=False), {}),
    (dict(in_feats=(8, 5), num_heads=4), {"pair": True}),
    (dict(in_feats=(8, 12), num_heads=4, residual=True), {"pair": True}),
    (dict(in_feats=(8, 5), num_heads=2, residual=True, bias=False), {"pair": True}),
    (dict(in_feats=8, num_heads=4), {"pair": True}),  # one fc for both ends
    (dict(in_feats=8, num_heads=4, residual=True), {"edge_weight": True}),
    (dict(in_feats=8, num_heads=4, negative_slope=0.01), {"get_attention": True}),
    (dict(in_feats=8, num_heads=1, negative_slope=0.5, activation=torch.nn.functional.elu),
     {"get_attention": True, "edge_weight": True}),
    (dict(in_feats=8, num_heads=4, residual=True), {"full": True, "get_attention": True}),
    (dict(in_feats=8, num_heads=4, residual=True), {"prefix": True, "get_attention": True}),
]


def _pair(kwargs, **more):
    """DGL's conv and ours with DGL's parameters (loaded strictly both ways)."""
    kwargs = dict(out_feats=3, allow_zero_in_degree=True, **kwargs, **more)
    theirs = dgl.nn.GATConv(**kwargs)
    torch.manual_seed(123)  # other parameters than DGL's until loaded
    ours = GATConv(**kwargs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    back = dgl.nn.GATConv(**kwargs)
    back.load_state_dict(ours.state_dict(), strict=True)
    for name, value in theirs.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    return theirs, ours


def _inputs(ours_graph, kwargs, opts, gen):
    in_src, in_dst = kwargs["in_feats"] if isinstance(kwargs["in_feats"], tuple) else \
        (kwargs["in_feats"],) * 2
    prefix = (2,) if opts.get("prefix") else ()
    x = torch.randn(ours_graph.num_src_nodes(), *prefix, in_src, generator=gen)
    feat = (x, torch.randn(ours_graph.num_dst_nodes(), *prefix, in_dst, generator=gen)) \
        if opts.get("pair") else (x,)
    weight = torch.rand(ours_graph.num_edges(), generator=gen) + 0.5 \
        if opts.get("edge_weight") else None
    return [t.requires_grad_() for t in feat], None if weight is None else weight.requires_grad_()


def _run(conv, graph, feat, weight, get_attention, gen_seed):
    out = conv(graph, feat[0] if len(feat) == 1 else tuple(feat), edge_weight=weight,
               get_attention=get_attention)
    outs = out if get_attention else (out,)
    gen = torch.Generator().manual_seed(gen_seed)
    loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs)
    leaves = [*feat, *([weight] if weight is not None else []), *conv.parameters()]
    return outs, torch.autograd.grad(loss, leaves)


def _case_id(case):
    kwargs, opts = case
    text = ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in kwargs.items())
    return text + "".join(f",{name}" for name in opts)


@pytest.mark.parametrize("kwargs,opts", CASES, ids=[_case_id(c) for c in CASES])
def test_gatconv_is_dgls(kwargs, opts):
    ours_graph, dgl_graph = _graphs(len(str(kwargs)), full=opts.get("full", False))
    theirs, ours = _pair(kwargs)
    feat, weight = _inputs(ours_graph, kwargs, opts, torch.Generator().manual_seed(7))
    get_attention = opts.get("get_attention", False)
    ref_out, ref_grads = _run(theirs, dgl_graph, feat, weight, get_attention, 9)
    got_out, got_grads = _run(ours, ours_graph, feat, weight, get_attention, 9)
    for ref, got in zip(ref_out + ref_grads, got_out + got_grads, strict=True):
        assert ref.shape == got.shape
        assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()
    if ours.res_fc is None and "activation" not in kwargs:  # no in-edge: the bias alone
        lonely = torch.arange(ours_graph.num_dst_nodes() - 5, ours_graph.num_dst_nodes())
        bias = 0 if ours.bias is None else ours.bias.view(-1, 3)
        assert torch.allclose(got_out[0][lonely], torch.zeros_like(got_out[0][lonely]) + bias)


@pytest.mark.parametrize("shape", [(), (4, 1), (2, 3)])
def test_edge_softmax_is_dgls(shape):
    ours, theirs = _graphs(3)
    gen = torch.Generator().manual_seed(4)
    logits = (torch.randn(NUM_EDGES, *shape, generator=gen) * 300).requires_grad_()  # exp: inf
    up = torch.randn(NUM_EDGES, *shape, generator=gen)
    ref = dgl.nn.functional.edge_softmax(theirs, logits)
    (ref_grad,) = torch.autograd.grad((ref * up).sum(), logits)
    for graph in (ours, theirs):  # ours; DGL's own on DGL's block
        got = edge_softmax(graph, logits)
        (grad,) = torch.autograd.grad((got * up).sum(), logits)
        assert torch.isfinite(got).all() and torch.allclose(got, ref, atol=1e-5)
        assert torch.allclose(grad, ref_grad, atol=1e-5)
    sums = torch.zeros(NUM_DST, *shape).index_add(0, ours.edges()[1], got.detach())
    assert torch.allclose(sums[:NUM_DST - 5], torch.ones(()), atol=1e-5)


def test_the_same_seed_makes_dgls_parameters():
    for kwargs in (dict(in_feats=8, residual=True), dict(in_feats=(8, 5), residual=True)):
        torch.manual_seed(0)
        theirs = dgl.nn.GATConv(out_feats=3, num_heads=4, **kwargs).state_dict()
        torch.manual_seed(0)
        ours = GATConv(out_feats=3, num_heads=4, **kwargs).state_dict()
        assert list(ours) == list(theirs)
        assert all(torch.equal(ours[name], theirs[name]) for name in theirs)


def test_dropout_draws_in_training_and_not_in_eval():
    ours_graph, dgl_graph = _graphs(5)
    theirs, ours = _pair(dict(in_feats=8, num_heads=4), feat_drop=0.5, attn_drop=0.5)
    x = torch.randn(ours_graph.num_src_nodes(), 8)
    plain = GATConv(8, 3, 4, allow_zero_in_degree=True)
    plain.load_state_dict(ours.state_dict())
    assert not torch.allclose(ours(ours_graph, x), plain(ours_graph, x))
    ours.eval()
    theirs.eval()
    assert torch.equal(ours(ours_graph, x), plain(ours_graph, x))
    assert torch.allclose(ours(ours_graph, x), theirs(dgl_graph, x), atol=1e-5)


def test_refusals():
    ours_graph, dgl_graph = _graphs(6)
    x = torch.randn(ours_graph.num_src_nodes(), 8)
    with pytest.raises(dgl.DGLError):  # DGL refuses the same graph
        dgl.nn.GATConv(8, 3, 2)(dgl_graph, x)
    conv = GATConv(8, 3, 2)
    with pytest.raises(InvalidValueError, match="allow_zero_in_degree=True") as info:
        conv(ours_graph, x)
    assert isinstance(info.value, DglxError) and "5 destination" in str(info.value)
    conv.set_allow_zero_in_degree(True)
    with pytest.raises(InvalidValueError, match=r"edge_weight of shape \(300, 1\)"):
        conv(ours_graph, x, edge_weight=torch.ones(NUM_EDGES, 1))
    with pytest.raises(InvalidTypeError, match="pair"):
        GATConv((8, 4), 3, 2, allow_zero_in_degree=True)(ours_graph, x)


@pytest.mark.parametrize("full", [False, True])
def test_gatconv_runs_on_dgls_graphs_too(full):
    """On DGL's block (or graph) the messages are DGL's kernels: the same output."""
    ours_graph, dgl_graph = _graphs(8, full=full)
    _, ours = _pair(dict(in_feats=8, num_heads=4, residual=True))
    x = torch.randn(ours_graph.num_src_nodes(), 8)
    weight = torch.rand(NUM_EDGES) + 0.5
    for got, ref in zip(ours(dgl_graph, x, weight, get_attention=True),
                        ours(ours_graph, x, weight, get_attention=True), strict=True):
        assert torch.allclose(got, ref, atol=1e-5)
