"""The package's own block against DGL's ``to_block``: the same numbering of the source
nodes, the same edges, typed and untyped; and its moves between devices."""
import dgl
import pytest
import torch

from dglx_dist.sampling.block import Block


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
    ours = Block.untyped(dst_nodes, src, dst, eid, num_nodes).to_dgl()
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
    ours = Block.typed([frontier[t] for t in ntypes], torch.cat(srcs), torch.cat(dsts),
                       torch.cat(kinds), torch.cat(eids), ntypes, etypes).to_dgl()
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
