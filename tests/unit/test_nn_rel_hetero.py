"""``dglx_dist.nn``'s RelGraphConv, TypedLinear and HeteroGraphConv against ``dgl.nn``'s: a
``state_dict`` of one loads into the other (strict), and on the same blocks (the package's
and its ``to_dgl``) they give the same outputs and gradients (input and every parameter)."""
import dgl
import dgl.nn as dglnn
import pytest
import torch
from torch import nn

from dglx_dist.graphcore.message import copy_u_sum
from dglx_dist.errors import InvalidValueError, UnknownNameError
from dglx_dist.nn import HeteroGraphConv, RelGraphConv, TypedLinear
from dglx_dist.graphcore.block import Block
from dglx_dist.dgl.blocks import to_dgl_block

ATOL = 1e-5
NTYPES = ["user", "item", "tag"]
# "item" is reached by two relations, "tagged" has no edges (DGL's block drops it, and with
# it the only relation to "tag")
ETYPES = [("user", "follows", "user"), ("user", "buys", "item"), ("tag", "labels", "item"),
          ("item", "tagged", "tag")]
EDGES = [14, 18, 9, 0]


def _one_type_block(seed, num_dst=7, num_edges=40, nodes=25):
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.randperm(nodes, generator=gen)[:num_dst]
    src = torch.randint(0, nodes, (num_edges,), generator=gen)
    dst = dst_nodes[torch.randint(0, num_dst - 1, (num_edges,), generator=gen)]  # one alone
    return Block.untyped(dst_nodes, src, dst, torch.arange(num_edges)), gen


def _typed_block(seed, nodes=12):
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = [torch.randperm(nodes, generator=gen)[:n] for n in (4, 5, 2)]
    src, dst = [], []
    for (stype, _, dtype), count in zip(ETYPES, EDGES):
        src.append(torch.randint(0, nodes, (count,), generator=gen))
        ends = dst_nodes[NTYPES.index(dtype)]
        dst.append(ends[torch.randint(0, ends.numel(), (count,), generator=gen)])
    etype = torch.repeat_interleave(torch.arange(len(ETYPES)), torch.tensor(EDGES))
    eid = torch.cat([torch.arange(c) for c in EDGES])
    return Block.typed(dst_nodes, torch.cat(src), torch.cat(dst), etype, eid, NTYPES, ETYPES)


def _randomized(module, seed):
    """``module`` with every parameter drawn at random (so zeros and ones are not compared)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return module


def _swap_weights(ours, theirs):
    """Each loads the other's state_dict, strict: the same names and shapes both ways."""
    theirs.load_state_dict(_randomized(ours, 1).state_dict(), strict=True)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def _run(module, block, inputs: dict, *args, **kwargs):
    """The output and the gradients of the inputs and of each parameter by name."""
    inputs = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    feed = inputs["x"] if list(inputs) == ["x"] else inputs
    out = module(block, feed, *args, **kwargs)
    outs = out if isinstance(out, dict) else {"x": out}
    gen = torch.Generator().manual_seed(9)
    loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for _, o in sorted(outs.items()))
    module.zero_grad()
    loss.backward()
    grads = {f"input:{k}": v.grad for k, v in inputs.items()}
    grads.update({n: p.grad for n, p in module.named_parameters()})
    return outs, grads


def _assert_same(ours, theirs):
    assert ours.keys() == theirs.keys()
    for key in ours:
        if theirs[key] is None:
            assert ours[key] is None or not ours[key].any(), key
            continue
        assert ours[key].shape == theirs[key].shape, key
        torch.testing.assert_close(ours[key], theirs[key], atol=ATOL, rtol=1e-5, msg=key)


# -- RelGraphConv ---------------------------------------------------------------------------
@pytest.mark.parametrize("regularizer,num_bases",
                         [(None, None), ("basis", 2), ("basis", None), ("bdd", 3)])
@pytest.mark.parametrize("self_loop", [True, False], ids=["loop", "no-loop"])
@pytest.mark.parametrize("layer_norm", [False, True], ids=["-", "ln"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_relgraphconv_equals_dgls(regularizer, num_bases, self_loop, layer_norm, bias):
    block, gen = _one_type_block(8 * [None, "basis", "bdd"].index(regularizer) + 4 * self_loop
                                 + 2 * layer_norm + bias)
    rels = 4
    kwargs = dict(regularizer=regularizer, num_bases=num_bases, bias=bias,
                  activation=torch.tanh, self_loop=self_loop, dropout=0.0,
                  layer_norm=layer_norm)
    ours, theirs = RelGraphConv(6, 9, rels, **kwargs), dglnn.RelGraphConv(6, 9, rels, **kwargs)
    _swap_weights(ours, theirs)
    feat = {"x": torch.randn(block.num_src_nodes(), 6, generator=gen)}
    etypes = torch.randint(0, rels, (block.num_edges(),), generator=gen)
    norm = None if bias else torch.rand(block.num_edges(), 1, generator=gen)
    got = _run(ours, block, feat, etypes, norm)
    want = _run(theirs, to_dgl_block(block), feat, etypes, norm)
    for ours_part, theirs_part in zip(got, want):
        _assert_same(ours_part, theirs_part)


@pytest.mark.parametrize("regularizer", [None, "basis", "bdd"])
def test_relgraphconv_presorted_and_list_etypes(regularizer):
    block, gen = _one_type_block(3)
    ours = RelGraphConv(4, 6, 3, regularizer=regularizer, num_bases=2)
    theirs = dglnn.RelGraphConv(4, 6, 3, regularizer=regularizer, num_bases=2)
    _swap_weights(ours, theirs)
    feat = {"x": torch.randn(block.num_src_nodes(), 4, generator=gen)}
    etypes = torch.sort(torch.randint(0, 3, (block.num_edges(),), generator=gen)).values
    want = _run(theirs, to_dgl_block(block), feat, etypes, presorted=True)
    for got in (_run(ours, block, feat, etypes, presorted=True),
                _run(ours, block, feat, etypes.tolist())):
        for ours_part, theirs_part in zip(got, want):
            _assert_same(ours_part, theirs_part)


def test_typed_linear_equals_dgls_and_refuses_bad_arguments():
    x, types = torch.randn(30, 6), torch.randint(0, 5, (30,))
    for reg in (None, "basis", "bdd"):
        ours, theirs = TypedLinear(6, 4, 5, reg, 2), dglnn.TypedLinear(6, 4, 5, reg, 2)
        _swap_weights(ours, theirs)
        torch.testing.assert_close(ours(x, types), theirs(x, types), atol=ATOL, rtol=1e-5)
        assert ours(x[:0], types[:0]).shape == (0, 4)
    for args in [(6, 4, 5, "other", 2), (6, 4, 5, "basis", None), (6, 4, 5, "bdd", 4)]:
        with pytest.raises(InvalidValueError):
            TypedLinear(*args)
    with pytest.raises(InvalidValueError, match="type id"):
        TypedLinear(6, 4, 5)(x, types + 1)


# -- HeteroGraphConv ------------------------------------------------------------------------
class Probe(nn.Module):
    """A relation module that runs on either block: the sum of its sources' transformed rows
    (``copy_u_sum``: DGL's kernel on DGL's block, torch on the package's), scaled, plus the
    destinations' own rows transformed."""

    def __init__(self, width=5, out=3):
        super().__init__()
        self.src_lin, self.dst_lin = nn.Linear(width, out), nn.Linear(width, out, bias=False)

    def forward(self, g, feats, scale=1.0, *, shift=0.0):
        src, dst = feats
        return scale * copy_u_sum(g, self.src_lin(src)) + self.dst_lin(dst) + shift


def _mods():
    return {"follows": Probe(), ("user", "buys", "item"): Probe(), "labels": Probe(),
            "tagged": Probe()}


def _stack_by_name(outs, ntype):
    return torch.cat(outs, dim=1) * (2.0 if ntype == "item" else 1.0)


@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "min", "stack", _stack_by_name])
def test_heterographconv_equals_dgls(aggregate):
    block = _typed_block(5)
    dgl_block = to_dgl_block(block)
    assert ("item", "tagged", "tag") not in dgl_block.canonical_etypes
    ours = HeteroGraphConv(_mods(), aggregate)
    theirs = dglnn.HeteroGraphConv(_mods(), aggregate)
    _swap_weights(ours, theirs)
    gen = torch.Generator().manual_seed(2)
    feats = {t: torch.randn(block.num_src_nodes(t), 5, generator=gen) for t in NTYPES}
    extra = dict(mod_args={"follows": (0.5,), ("user", "buys", "item"): (9.0,)},
                 mod_kwargs={"buys": {"shift": 2.0}, "labels": {"scale": -1.5}})
    want = _run(theirs, dgl_block, feats, **extra)
    assert set(want[0]) == {"user", "item"}
    for graph in (block, dgl_block):  # on the package's block, and on DGL's
        got = _run(ours, graph, feats, **extra)
        for ours_part, theirs_part in zip(got, want):
            _assert_same(ours_part, theirs_part)


def test_heterographconv_pair_inputs_and_missing_types():
    block = _typed_block(6)
    ours, theirs = HeteroGraphConv(_mods(), "stack"), dglnn.HeteroGraphConv(_mods(), "stack")
    _swap_weights(ours, theirs)
    gen = torch.Generator().manual_seed(3)
    src = {t: torch.randn(block.num_src_nodes(t), 5, generator=gen) for t in ("user", "item")}
    dst = {t: torch.randn(block.num_dst_nodes(t), 5, generator=gen) for t in NTYPES}
    got, want = ours(block, (src, dst)), theirs(to_dgl_block(block), (src, dst))
    assert set(got) == set(want) == {"user", "item"}  # "labels" skipped: no "tag" sources
    _assert_same(got, want)


def test_heterographconv_refuses_what_it_cannot_run():
    with pytest.raises(InvalidValueError, match="aggregate"):
        HeteroGraphConv(_mods(), "prod")
    block = _typed_block(7)
    feats = {t: torch.randn(block.num_src_nodes(t), 5) for t in NTYPES}
    with pytest.raises(UnknownNameError, match="labels"):
        HeteroGraphConv({"follows": Probe(), "buys": Probe()})(block, feats)


def test_a_relation_is_dgls_relation_graph():
    block = _typed_block(8)
    dgl_block = to_dgl_block(block)
    for etype in dgl_block.canonical_etypes:
        rel, theirs = block.relation(etype), dgl_block[etype]
        assert (rel.num_src_nodes(), rel.num_dst_nodes(), rel.num_edges()) == \
            (theirs.num_src_nodes(), theirs.num_dst_nodes(), theirs.num_edges())
        for mine, want in zip(rel.edges(), theirs.edges()):
            assert torch.equal(mine, want.long())
        assert torch.equal(rel.srcdata[dgl.NID], theirs.srcdata[dgl.NID])
        assert torch.equal(rel.dstdata[dgl.NID], theirs.dstdata[dgl.NID])
        assert torch.equal(rel.edata[dgl.EID], theirs.edata[dgl.EID])
        assert torch.equal(to_dgl_block(rel).edges()[0], theirs.edges()[0])
    assert block.relation(("item", "tagged", "tag")).num_edges() == 0
