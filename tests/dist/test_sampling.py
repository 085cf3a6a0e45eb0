"""Distributed sampling over partitions vs single-process DGL on the same graph."""
import dgl
import numpy as np
import pytest
import torch

from dglx_dist.data import builtin_path, read_dataset
from dglx_dist.partition import PartitionDir
from dglx_dist.sampling import PartitionSampler
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist


def _sample(session, pdir_path, fanouts, seeds_per_rank):
    pdir = PartitionDir(pdir_path)
    part = pdir.load_part(session.server_id)
    sampler = PartitionSampler(part, pdir.book, session.cross, session.server_id,
                               pdir.edge_book())
    # seeds: global ids spread over every server, different on each rank
    rng = np.random.default_rng(session.rank)
    seeds = torch.from_numpy(np.sort(rng.choice(pdir.num_nodes, seeds_per_rank, replace=False)))
    before = session.counter.snapshot()
    blocks = sampler.draw_blocks(seeds, fanouts)
    after = session.counter.snapshot()
    out = []
    for b in blocks:
        src, dst = b.edges()
        src_g = b.srcdata[dgl.NID][src].numpy()
        dst_g = b.dstdata[dgl.NID][dst].numpy()
        out.append({"dst_nodes": pdir.to_original(b.dstdata[dgl.NID].numpy()).tolist(),
                    "src_nodes": pdir.to_original(b.srcdata[dgl.NID].numpy()).tolist(),
                    "edges": np.stack([pdir.to_original(src_g), pdir.to_original(dst_g)],
                                      1).tolist(),
                    "dst_in_order": bool((dst[1:] >= dst[:-1]).all())})
    return {"blocks": out, "inter": after["recv_inter"] - before["recv_inter"]}


@pytest.mark.parametrize("world, env", [(2, {"DGLX_VIRTUAL_SERVERS": "2"}),
                                        (4, {"DGLX_VIRTUAL_SERVERS": "2"})],
                         ids=["2x1", "2x2"])
def test_full_neighborhood_blocks_match_dgl(tmp_path, cora_parts, world, env):
    res = run_workers(_sample, world, tmp_path, str(cora_parts), [-1, -1], 40, env=env)
    ds = read_dataset(builtin_path("cora"))
    g = dgl.graph((torch.from_numpy(ds.src), torch.from_numpy(ds.dst)), num_nodes=ds.num_nodes)
    for r, out in res.items():
        dst_nodes = out["blocks"][-1]["dst_nodes"]
        for block in reversed(out["blocks"]):
            assert block["dst_nodes"] == dst_nodes
            src, dst = g.in_edges(torch.tensor(dst_nodes))
            expected = sorted(zip(src.tolist(), dst.tolist()))
            assert sorted(map(tuple, block["edges"])) == expected
            # DGL's convention: destination nodes first among the sources
            assert block["src_nodes"][:len(dst_nodes)] == dst_nodes
            # the edges grouped by destination in the destinations' order, wherever each is
            # owned (the sums group them without a sort)
            assert block["dst_in_order"]
            dst_nodes = block["src_nodes"]
        assert out["inter"] > 0  # remote nodes were sampled by the other server


def test_fanout_limits_sampled_in_edges(tmp_path, cora_parts):
    res = run_workers(_sample, 2, tmp_path, str(cora_parts), [3, 2], 30,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    ds = read_dataset(builtin_path("cora"))
    real = set(zip(ds.src.tolist(), ds.dst.tolist()))
    indeg = np.bincount(ds.dst, minlength=ds.num_nodes)
    for out in res.values():
        for block, fanout in zip(out["blocks"], [3, 2]):
            edges = [tuple(e) for e in block["edges"]]
            assert set(edges) <= real
            per_dst = np.bincount([d for _, d in edges], minlength=ds.num_nodes)
            for v in block["dst_nodes"]:
                assert per_dst[v] == min(fanout, indeg[v])
