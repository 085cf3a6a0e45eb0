"""Link prediction's pieces written in torch against DGL's: the package's graph, as a pair
graph, reads as DGL's graph of the same pairs (edges, counts, types, rows, ``apply_edges``), the edge
functions of ``dglx_dist.function`` give what ``dgl.function``'s built-ins give (on either
graph), the negative samplers draw what DGL's draw, and bad arguments are one clear line."""
import dgl
import dgl.function as dfn
import pytest
import torch

import dglx_dist
import dglx_dist.function as fn
from dglx_dist.api.link import EdgePredictionSampler, as_edge_prediction_sampler, \
    is_edge_sampler
from dglx_dist.graphcore.construct import heterograph
from dglx_dist.data import to_dgl, user_graph
from dglx_dist.graphcore.heterograph import Graph
from dglx_dist.errors import InvalidTypeError, InvalidValueError, UnknownNameError

NTYPES = ("author", "paper")
ETYPES = (("author", "writes", "paper"), ("paper", "cites", "paper"),
          ("paper", "written-by", "author"))
SIZES = {"author": 7, "paper": 11}


def _untyped(seed=0, nodes=9, edges=20) -> Graph:
    gen = torch.Generator().manual_seed(seed)
    src, dst = (torch.randint(0, nodes, (edges,), generator=gen) for _ in range(2))
    pair = dglx_dist.graph((src, dst), num_nodes=nodes)
    pair.ndata[dgl.NID] = torch.arange(nodes) * 10
    pair.edata[dgl.EID] = torch.arange(edges) + 100
    return pair


def _typed(seed=0) -> Graph:
    gen = torch.Generator().manual_seed(seed)
    edges = {et: (torch.randint(0, SIZES[et[0]], (5 + i,), generator=gen),
                  torch.randint(0, SIZES[et[2]], (5 + i,), generator=gen))
             for i, et in enumerate(ETYPES) if i != 1}
    edges[ETYPES[1]] = (torch.zeros(0, dtype=torch.int64),) * 2  # no "cites" pairs
    pair = heterograph(edges, num_nodes_dict=SIZES)
    pair.ndata[dgl.NID] = {t: torch.arange(n) + 1000 * i
                           for i, (t, n) in enumerate(SIZES.items())}
    return pair


def test_an_untyped_pair_graph_reads_as_dgls():
    ours = _untyped()
    ref = to_dgl(ours)
    assert isinstance(ref, dgl.DGLGraph) and ref.canonical_etypes == ours.canonical_etypes
    for form in ("uv", "all", "eid"):
        got, want = ours.edges(form=form), ref.edges(form=form)
        assert [t.tolist() for t in got] == [t.tolist() for t in want] if form != "eid" \
            else got.tolist() == want.tolist()
    assert (ours.num_nodes(), ours.num_edges()) == (ref.num_nodes(), ref.num_edges()) == (9, 20)
    assert ours.ntypes == ref.ntypes and ours.etypes == ref.etypes
    assert torch.equal(ours.ndata[dgl.NID], ref.ndata[dgl.NID])
    assert torch.equal(ours.edata[dgl.EID], ref.edata[dgl.EID])
    assert torch.equal(user_graph(ours).edata[dgl.EID], ref.edata[dgl.EID])
    from dglx_dist.dgl.blocks import dgl_batch  # what DGL's loaders hand a DGL script

    assert torch.equal(dgl_batch((ours,))[0].edata[dgl.EID], ref.edata[dgl.EID])


def test_a_typed_pair_graph_reads_as_dgls():
    ours = _typed()
    ref = to_dgl(ours)
    assert ours.canonical_etypes == ref.canonical_etypes
    assert ours.etypes == ref.etypes and ours.ntypes == ref.ntypes
    for et in ETYPES:
        assert [t.tolist() for t in ours.edges(etype=et)] == \
            [t.tolist() for t in ref.edges(etype=et)]
        assert ours.edges(etype=et[1])[0].tolist() == ref.edges(etype=et[1])[0].tolist()
        assert ours.num_edges(et) == ref.num_edges(et)
    for t in NTYPES:
        assert ours.num_nodes(t) == ref.num_nodes(t)
        assert torch.equal(ours.nodes[t].data[dgl.NID], ref.nodes[t].data[dgl.NID])
    assert ours.num_nodes() == ref.num_nodes() and ours.num_edges() == ref.num_edges()
    with pytest.raises(InvalidValueError, match="the graph has edge types .*; name one"):
        ours.edges()
    with pytest.raises(UnknownNameError, match="node type 'venue'"):
        ours.num_nodes("venue")


@pytest.mark.parametrize("shapes", [((), ()), ((4,), (4,)), ((2, 4), (2, 4)), ((4,), (2, 4)),
                                    ((2, 1), (3,))], ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "dot"])
def test_edge_functions_give_dgls_builtins(op, shapes):
    pair = _untyped()
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(9, *shapes[0], generator=gen)
    k = torch.rand(9, *shapes[1], generator=gen) + 0.5
    if op == "dot" and shapes[0][-1:] != shapes[1][-1:]:  # refused, as DGL refuses it
        pair.ndata["h"], pair.ndata["k"] = h, k
        with pytest.raises(InvalidValueError, match=r"u_dot_v: the rows 'h' have shape "
                                                    r"\(2, 1\) and 'k' \(1, 3\); expected"):
            pair.apply_edges(fn.u_dot_v("h", "k", "out"))
        return
    ref = to_dgl(pair)
    ref.ndata["h"], ref.ndata["k"] = h, k
    ref.apply_edges(getattr(dfn, f"u_{op}_v")("h", "k", "out"))
    want = ref.edata["out"]
    with pair.local_scope():
        pair.ndata["h"], pair.ndata["k"] = h, k
        pair.apply_edges(getattr(fn, f"u_{op}_v")("h", "k", "out"))
        got = pair.edata["out"]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    assert "out" not in pair.edata and "h" not in pair.ndata  # the scope's rows are undone
    ref.apply_edges(getattr(fn, f"u_{op}_v")("h", "k", "udf"))  # ours on DGL's graph
    torch.testing.assert_close(ref.edata["udf"], want)


def test_apply_edges_on_a_typed_pair_graph_by_type_and_on_every_type():
    ours, h = _typed(1), {t: torch.randn(n, 3) for t, n in SIZES.items()}
    ref = to_dgl(ours)
    ours.ndata["h"], ref.ndata["h"] = h, h
    ours.apply_edges(fn.u_dot_v("h", "h", "s"), etype="writes")
    ref.apply_edges(dfn.u_dot_v("h", "h", "s"), etype="writes")
    torch.testing.assert_close(ours.edges["writes"].data["s"], ref.edges["writes"].data["s"])
    ours.apply_edges(lambda edges: {"t": (edges.src["h"] - edges.dst["h"]).abs().sum(1)})
    for et in ETYPES:
        s, d = ref.edges(etype=et)
        want = (h[et[0]][s] - h[et[2]][d]).abs().sum(1)
        torch.testing.assert_close(ours.edges[et].data["t"], want)
    assert set(ours.edata["t"]) == set(ETYPES)
    local = ours.local_var()
    local.ndata["x"] = {"author": torch.zeros(7)}
    assert "x" not in ours.ndata and "x" in local.ndata


def test_a_pair_graph_moves_with_its_rows():
    pair = _untyped()
    pair.ndata["h"] = torch.randn(9, 2)
    assert pair.to("cpu") is pair
    moved = pair.to("meta")
    assert moved.edges()[0].device.type == "meta" and moved.ndata["h"].device.type == "meta"
    assert pair.ndata["h"].device.type == "cpu"


def test_bad_edge_functions_are_one_clear_error():
    pair = _untyped()
    with pytest.raises(InvalidTypeError, match=r"apply_edges: func is a str; expected a "
                                               r"function \(edges\)"):
        pair.apply_edges("u_dot_v")
    with pytest.raises(UnknownNameError, match=r"node type '_N' has no data 'h'; it has "
                                               r"\['_ID'\]"):
        pair.apply_edges(fn.u_dot_v("h", "h", "s"))
    with pytest.raises(InvalidTypeError, match="the function returned a Tensor; expected a "
                                               "dict"):
        pair.apply_edges(lambda edges: edges.edges()[0])


def _local_graph():
    g = dgl.heterograph({et: (torch.randint(0, SIZES[et[0]], (12,)),
                              torch.randint(0, SIZES[et[2]], (12,))) for et in ETYPES},
                        num_nodes_dict=SIZES)
    return g, {"writes": torch.tensor([0, 3, 5]), ("paper", "cites", "paper"): torch.arange(4)}


@pytest.mark.parametrize("name", ["Uniform", "GlobalUniform"])
def test_negative_samplers_draw_what_dgls_draw(name):
    torch.manual_seed(0)
    g, seeds = _local_graph()
    homo = dgl.graph((torch.randint(0, 30, (60,)), torch.randint(0, 30, (60,))), num_nodes=30)
    ours = getattr(dglx_dist.negative_sampler, name)(3)
    theirs = getattr(dgl.dataloading.negative_sampler, name)(3)
    cases = [(homo, torch.tensor([1, 4, 9]))] + ([(g, seeds)] if name == "Uniform" else [])
    for graph, eids in cases:
        torch.manual_seed(5), dgl.seed(5)  # a local graph's GlobalUniform: DGL's generator
        got = ours(graph, eids)
        torch.manual_seed(5), dgl.seed(5)
        want = theirs(graph, eids)
        if isinstance(want, dict):
            assert got.keys() == want.keys()
            got, want = list(got.values()), list(want.values())
        else:
            got, want = [got], [want]
        for (gs, gd), (ws, wd) in zip(got, want):
            assert gs.tolist() == ws.tolist() and gd.tolist() == wd.tolist()


def test_bad_sampler_arguments_are_one_clear_error():
    full = dglx_dist.MultiLayerFullNeighborSampler(2)
    for bad in (0, 1.5, True):
        with pytest.raises(InvalidValueError, match=rf"negative_sampler.Uniform\(k={bad!r}\): "
                                                    r"k is the number of negatives per edge"):
            dglx_dist.negative_sampler.Uniform(bad)
    with pytest.raises(InvalidValueError, match="GlobalUniform"):
        dglx_dist.negative_sampler.GlobalUniform(-1)
    with pytest.raises(InvalidTypeError, match=r"prefetch_labels='w'; expected a list of edge "
                                               r"data names, such as \['w'\]"):
        as_edge_prediction_sampler(full, prefetch_labels="w")

    class NoExclusion:
        def sample(self, g, indices):
            return indices

    with pytest.raises(InvalidTypeError, match="NoExclusion.sample takes no edges to exclude"):
        as_edge_prediction_sampler(NoExclusion())


def test_the_package_and_dgl_edge_samplers_are_both_edge_samplers():
    full = dglx_dist.MultiLayerFullNeighborSampler(2)
    ours = dglx_dist.as_edge_prediction_sampler(full, exclude="self", prefetch_labels=["w"])
    assert isinstance(ours, EdgePredictionSampler) and ours.prefetch_labels == ("w",)
    assert is_edge_sampler(ours)
    assert is_edge_sampler(dgl.dataloading.as_edge_prediction_sampler(full))
    assert not is_edge_sampler(full)
