"""DGL's side of ``dglx bench --task link`` leaves a batch's edges and their reverses out of
its blocks, as DGL defines ``exclude="reverse_id"`` (``dgl.dataloading.find_exclude_eids``):
DGL 2.1's ``DistGraph.sample_neighbors`` takes ``exclude_edges`` and ignores it, so DGL's own
``NeighborSampler`` in a ``DistEdgeDataLoader`` kept them (issue 77, item 5: the bench's DGL
row trained with the batch's edges in its messages, ours without).

The check runs in a child process on a DGL DistGraph in standalone mode (one partition, no
servers): on full neighbourhoods the blocks of
:func:`~dglx_dist.bench.dgl_distdgl_link.excluding_sampler` are, edge for edge, those of
DGL's single-machine sampler with the exclusion; on sampled ones they hold no excluded edge.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("dgl")

CHILD = textwrap.dedent("""
    import json, os, sys
    import torch, dgl
    from dgl.dataloading.base import find_exclude_eids
    from dglx_dist.bench.dgl_distdgl_link import excluding_sampler

    tmp = sys.argv[1]
    torch.manual_seed(0)
    n, e = 300, 1500
    src, dst = torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    g = dgl.graph((torch.cat([src, dst]), torch.cat([dst, src])), num_nodes=n)
    reverse = torch.cat([torch.arange(e) + e, torch.arange(e)])
    orig_nid, orig_eid = dgl.distributed.partition_graph(
        g, "t", 1, tmp, part_method="random", return_mapping=True)
    new_nid, new_eid = torch.argsort(orig_nid), torch.argsort(orig_eid)
    rev = new_eid[reverse[orig_eid]]  # in DGL's ids, as partition_link writes it
    s, d = g.find_edges(orig_eid)
    local = dgl.graph((new_nid[s], new_nid[d]), num_nodes=n)  # the same graph in DGL's ids
    dgl.distributed.initialize(None)
    dist = dgl.distributed.DistGraph("t", part_config=os.path.join(tmp, "t.json"))
    seeds = torch.arange(0, 2 * e, 37)

    def negatives(graph, eids):  # fixed: the same nodes on both graphs
        return graph.find_edges(eids)[0], (eids * 7 + 3) % n

    def blocks(graph_sampler):
        loader = dgl.dataloading.DistEdgeDataLoader(
            dist, seeds, graph_sampler, exclude="reverse_id", reverse_eids=rev,
            negative_sampler=negatives, batch_size=seeds.numel())
        _, _, _, got = next(iter(loader))
        return [sorted(b.edata[dgl.EID].tolist()) for b in got]

    single = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler([-1, -1]), exclude="reverse_id", reverse_eids=rev,
        negative_sampler=negatives)
    _, _, _, want = single.sample(local, seeds)
    excluded = set(find_exclude_eids(local, seeds, "reverse_id", rev).tolist())
    print(json.dumps({
        "excluded": sorted(excluded),
        "single": [sorted(b.edata[dgl.EID].tolist()) for b in want],
        "ours_full": blocks(excluding_sampler([-1, -1])),
        "ours_sampled": blocks(excluding_sampler([3, 3])),
        "dgls_own_full": blocks(dgl.dataloading.NeighborSampler([-1, -1])),
    }))
""")


@pytest.fixture(scope="module")
def got(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dgl-exclude")
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "DGL_DIST_MODE": "standalone"}
    out = subprocess.run([sys.executable, str(script), str(tmp / "parts")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dgls_own_sampler_on_a_distgraph_keeps_the_batch_edges(got):
    """What the bench's DGL row did before: DGL 2.1 ignores the exclusion on a DistGraph."""
    kept = [set(layer) & set(got["excluded"]) for layer in got["dgls_own_full"]]
    assert all(kept), "DGL 2.1 now excludes on a DistGraph: the workaround can go"


def test_the_dgl_rows_blocks_are_dgls_single_machine_blocks_with_the_exclusion(got):
    assert got["ours_full"] == got["single"]
    for own, ours in zip(got["dgls_own_full"], got["ours_full"]):
        assert set(own) - set(ours) == set(own) & set(got["excluded"])  # exactly those left out


def test_sampled_blocks_hold_no_excluded_edge(got):
    assert all(layer for layer in got["ours_sampled"])
    assert not any(set(layer) & set(got["excluded"]) for layer in got["ours_sampled"])
