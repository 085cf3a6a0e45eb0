"""The package's own block against DGL's ``to_block``: the same numbering of the source
nodes, the same edges, typed and untyped; and its moves between devices."""
import dgl
import pytest
import torch

from dglx_dist.graphcore.block import Block
from dglx_dist.dgl.blocks import to_dgl_block


def _edges(seed, nodes=40, edges=120):
    gen = torch.Generator().manual_seed(seed)
    dst_nodes = torch.randperm(nodes, generator=gen)[:10]
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = dst_nodes[torch.randint(0, 10, (edges,), generator=gen)]
    return dst_nodes, src, dst


def _edge_set(block, etype=None):
    s, d, e = block.edges(form="all", etype=etype)
    sid = block.srcnodes[etype[0] if etype else "_N"].data[dgl.NID] if etype else \
        block.srcdata[dgl.NID]
    did = block.dstnodes[etype[2]].data[dgl.NID] if etype else block.dstdata[dgl.NID]
    eid = block.edges[etype].data[dgl.EID] if etype else block.edata[dgl.EID]
    return sorted(zip(sid[s].tolist(), did[d].tolist(), eid[e].tolist()))


@pytest.mark.parametrize("num_nodes", [None, 40], ids=["by-unique", "by-table"])
@pytest.mark.parametrize("seed", range(5))
def test_an_untyped_block_numbers_its_nodes_as_to_block_does(seed, num_nodes):
    dst_nodes, src, dst = _edges(seed)
    eid = torch.arange(src.numel()) * 3
    ours = to_dgl_block(Block.untyped(dst_nodes, src, dst, eid, num_nodes))
    frontier = dgl.graph((src, dst), num_nodes=40)
    frontier.edata["w"] = eid
    ref = dgl.to_block(frontier, dst_nodes)
    assert ours.srcdata[dgl.NID].tolist() == ref.srcdata[dgl.NID].tolist()
    assert ours.dstdata[dgl.NID].tolist() == dst_nodes.tolist()
    ref.edata[dgl.EID] = ref.edata["w"]
    assert _edge_set(ours) == _edge_set(ref)


@pytest.mark.parametrize("seed", range(3))
def test_a_typed_block_numbers_each_types_nodes_as_to_block_does(seed):
    gen = torch.Generator().manual_seed(seed)
    ntypes = ("author", "paper")
    etypes = (("author", "writes", "paper"), ("paper", "cites", "paper"),
              ("paper", "written-by", "author"))
    sizes = {"author": 15, "paper": 25}
    frontier = {"author": torch.randperm(15, generator=gen)[:4],
                "paper": torch.randperm(25, generator=gen)[:6]}
    parts, srcs, dsts, kinds, eids = {}, [], [], [], []
    for e, (st, _, dt) in enumerate(etypes):
        n = 30
        s = torch.randint(0, sizes[st], (n,), generator=gen)
        d = frontier[dt][torch.randint(0, frontier[dt].numel(), (n,), generator=gen)]
        parts[etypes[e]] = (s, d)
        srcs.append(s), dsts.append(d), kinds.append(torch.full((n,), e)), \
            eids.append(torch.arange(n) + 100 * e)
    ours = to_dgl_block(Block.typed([frontier[t] for t in ntypes], torch.cat(srcs),
                                    torch.cat(dsts), torch.cat(kinds), torch.cat(eids), ntypes,
                                    etypes))
    graph = dgl.heterograph(parts, num_nodes_dict=sizes)
    for e, key in enumerate(etypes):
        graph.edges[key].data["w"] = eids[e]
    ref = dgl.to_block(graph, dst_nodes=frontier)
    for t in ntypes:
        assert ours.srcnodes[t].data[dgl.NID].tolist() == ref.srcnodes[t].data[dgl.NID].tolist()
        assert ours.dstnodes[t].data[dgl.NID].tolist() == frontier[t].tolist()
    for key in etypes:
        ref.edges[key].data[dgl.EID] = ref.edges[key].data["w"]
        assert _edge_set(ours, key) == _edge_set(ref, key)


def test_a_block_moves_and_pins_as_a_whole():
    dst_nodes, src, dst = _edges(0)
    block = Block.untyped(dst_nodes, src, dst, torch.arange(src.numel()))
    moved = block.to("cpu", non_blocking=True)
    assert moved.num_src == block.num_src and bool((moved.src == block.src).all())
    if torch.cuda.is_available():
        assert block.pin_memory().src.is_pinned()


def _typed_block(seed=0):
    gen = torch.Generator().manual_seed(seed)
    ntypes = ("author", "paper")
    etypes = (("author", "writes", "paper"), ("paper", "cites", "paper"))
    dst = [torch.tensor([3, 1]), torch.tensor([0, 4, 2])]
    src = torch.randint(0, 6, (12,), generator=gen)
    kind = torch.tensor([0] * 5 + [1] * 7)
    to = torch.cat([dst[1][torch.randint(0, 3, (5,), generator=gen)],
                    dst[1][torch.randint(0, 3, (7,), generator=gen)]])
    return Block.typed(dst, src, to, kind, torch.arange(12) + 50, ntypes, etypes)


def test_rows_are_read_and_set_as_on_dgls_block():
    """srcdata / dstdata / edata, srcnodes[t].data, edges[etype].data, edges() and the
    counts answer as on the DGL block it becomes, and rows set on it go onto that block."""
    dst_nodes, src, dst = _edges(1)
    ours = Block.untyped(dst_nodes, src, dst, torch.arange(src.numel()) * 2)
    ours.srcdata["x"] = torch.arange(ours.num_src_nodes()).float()
    ours.dstnodes["_N"].data["y"] = dst_nodes * 10
    ours.edges["_E"].data["w"] = torch.ones(ours.num_edges())
    ref = to_dgl_block(ours)
    assert ours.num_src_nodes() == ref.num_src_nodes()
    assert ours.num_dst_nodes() == ref.number_of_dst_nodes() == dst_nodes.numel()
    for name in ("x", dgl.NID):
        assert torch.equal(ref.srcdata[name], ours.srcdata[name])
    assert torch.equal(ref.dstdata["y"], dst_nodes * 10)
    assert torch.equal(ref.edata["w"], ours.edata["w"])
    assert torch.equal(ref.edata[dgl.EID], ours.edata[dgl.EID])
    for mine, theirs in zip(ours.edges(form="all"), ref.edges(form="all")):
        assert torch.equal(mine, theirs)
    assert sorted(ours.srcdata.keys()) == sorted(ref.srcdata.keys())


def test_a_typed_blocks_rows_are_by_type_as_on_dgls_block():
    ours = _typed_block()
    ref = to_dgl_block(ours)
    assert ours.srcdata[dgl.NID].keys() == ref.srcdata[dgl.NID].keys()
    for t in ours.ntypes:
        assert torch.equal(ours.srcdata[dgl.NID][t], ref.srcdata[dgl.NID][t])
        assert ours.num_src_nodes(t) == ref.num_src_nodes(t)
    ours.srcdata["h"] = {"paper": torch.ones(ours.num_src_nodes("paper"), 2)}
    assert list(ours.srcdata["h"]) == ["paper"]  # only the types that have it
    with pytest.raises(TypeError):
        ours.srcdata["h"] = torch.ones(3)
    for etype in ours.canonical_etypes:
        assert torch.equal(ours.edges[etype].data[dgl.EID], ref.edges[etype].data[dgl.EID])
        assert torch.equal(ours.edges[etype[1]].data[dgl.EID], ref.edges[etype].data[dgl.EID])
        for mine, theirs in zip(ours.edges(etype=etype), ref.edges(etype=etype)):
            assert torch.equal(mine, theirs)
    assert torch.equal(to_dgl_block(ours).srcnodes["paper"].data["h"], torch.ones(
        ours.num_src_nodes("paper"), 2))


def test_a_local_copy_keeps_its_rows_to_itself():
    """local_var(), as DGL's: the rows shared, rows set later its own."""
    dst_nodes, src, dst = _edges(2)
    block = Block.untyped(dst_nodes, src, dst, torch.arange(src.numel()))
    block.srcdata["a"] = torch.zeros(block.num_src_nodes())
    mine = block.local_var()
    mine.srcdata["b"] = torch.ones(block.num_src_nodes())
    assert "a" in mine.srcdata and "b" not in block.srcdata


def test_rows_move_with_the_block():
    dst_nodes, src, dst = _edges(3)
    block = Block.untyped(dst_nodes, src, dst, torch.arange(src.numel()))
    block.srcdata["x"] = torch.randn(block.num_src_nodes(), 3)
    block.srcdata["kept"] = "not a tensor"
    assert block.to("cpu") is block  # where it is already, as DGL's
    moved = block.to("meta")  # a device every machine has
    assert moved.srcdata["x"].device.type == "meta" and moved.srcdata["x"].shape == (
        block.num_src_nodes(), 3)
    assert moved.srcdata["kept"] == "not a tensor"
    moved.srcdata["y"] = torch.zeros(1)
    assert "y" not in block.srcdata


def test_a_block_of_named_nodes_without_edges():
    """A block whose destinations are not its first sources (Dorylus's steps)."""
    block = Block.nodes_only(torch.tensor([5, 6, 7]), torch.tensor([7, 5]))
    ref = to_dgl_block(block)
    assert ref.num_edges() == 0 and ref.dstdata[dgl.NID].tolist() == [7, 5]
    assert ref.srcdata[dgl.NID].tolist() == [5, 6, 7]
