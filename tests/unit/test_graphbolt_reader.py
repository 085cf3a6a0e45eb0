"""GraphBolt's part graph file read without DGL (tests/fixtures/graphbolt: written by DGL 2.1
with the graph DGL's own graph.dgl holds beside it), under whichever torch runs the tests: the
DGL-free core's newest too."""
from pathlib import Path

import numpy as np

from dglx_dist.partition.dgl_graphbolt import read_graphbolt

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "graphbolt"


def test_the_part_graph_is_the_one_dgl_wrote():
    want = np.load(HERE / "expected.npz")
    inner_ids = want["gid"][want["inner"]]
    core = (int(inner_ids.min()), int(inner_ids.max()) + 1)
    assert core[1] - core[0] == inner_ids.size  # a part's inner ids are one range
    g = read_graphbolt(HERE / "fused_csc_sampling_graph.pt", core)
    assert g.num_nodes == want["gid"].size and np.array_equal(g.ndata["_ID"], want["gid"])
    assert np.array_equal(g.ndata["inner_node"], want["inner"])  # derived from the range
    ours = sorted(zip(g.edata["_ID"].tolist(), g.src.tolist(), g.dst.tolist()))
    dgls = sorted(zip(want["eid"].tolist(), want["src"].tolist(), want["dst"].tolist()))
    assert ours == dgls and len(ours) > 0
    assert np.all(np.diff(g.dst) >= 0)  # GraphBolt's CSC: edges by destination
