"""LABOR's draw in torch (sampling/labor.py) against DGL's ``sample_labors``: the same law
(each edge's chance, and LABOR's sharing of a source's variate between destinations), with
and without weights, with excluded edges; and the variates' properties."""
import dgl
import dgl.backend as F
import pytest
import torch

from dglx_dist.sampling.in_edges import InEdges
from dglx_dist.sampling.labor import draw_labor, variates

TRIALS = 1500
# seeds spread over the whole range: PCG's first draws for nearby seeds are alike
SEEDS = torch.randint(0, 2**62, (TRIALS,), generator=torch.Generator().manual_seed(0)).tolist()


def _graph(seed=0, nodes=120, edges=1500):
    """Edges sorted by destination: DGL 2.1's ``sample_labors`` reads a weight by the edge's
    position among the in-edges (its CSC), not by its id, so only on a graph whose edge ids
    are in that order are its weighted draws the edges' own (on another graph, its weights
    land on other edges; ours are read by edge id)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = (torch.rand(edges, generator=gen) ** 2 * nodes).long()  # skewed in-degrees
    weight = torch.rand(edges, generator=gen) + 0.05
    order = torch.argsort(dst, stable=True)
    return src[order], dst[order], weight[order], nodes


def _frequencies(draw, edges: int) -> torch.Tensor:
    taken = torch.zeros(edges)
    for trial in range(TRIALS):
        taken[draw(trial)] += 1
    return taken / TRIALS


def _ours(src, dst, n, seeds, fanout, weight=None, exclude=None):
    structure = InEdges.of(src, dst, n)

    def draw(trial):
        _, pos = draw_labor(structure, seeds, fanout, (SEEDS[trial] + 1,), 0.0, weight,
                            exclude)
        return structure.eid[pos]
    return draw


def _dgl(src, dst, n, seeds, fanout, weight=None, exclude=None):
    g = dgl.graph((src, dst), num_nodes=n)
    if weight is not None:
        g.edata["w"] = weight

    def draw(trial):
        frontier = dgl.sampling.sample_labors(
            g, seeds, fanout, prob=None if weight is None else "w",
            random_seed=F.zerocopy_to_dgl_ndarray(torch.tensor([SEEDS[trial]])),
            exclude_edges=exclude,
            copy_ndata=False)[0]
        return frontier.edata[dgl.EID]
    return draw


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "prob"])
@pytest.mark.parametrize("excluded", [False, True], ids=["", "exclude"])
def test_each_edges_chance_is_dgls(weighted, excluded):
    src, dst, weight, n = _graph()
    seeds = torch.arange(0, n, 3)
    w = weight if weighted else None
    exclude = torch.arange(0, src.numel(), 5) if excluded else None
    ours = _frequencies(_ours(src, dst, n, seeds, 4, w, exclude), src.numel())
    theirs = _frequencies(_dgl(src, dst, n, seeds, 4, w, exclude), src.numel())
    assert float((ours - theirs).abs().max()) < 0.075  # ~4.5 sigma of two estimates
    if exclude is not None:
        assert float(ours[exclude].max()) == 0.0
    if not weighted and exclude is None:  # k / d, as the paper says
        deg = torch.bincount(dst, minlength=n).double()
        mine = torch.isin(dst, seeds)
        chance = (4 / deg[dst]).clamp(max=1)[mine]
        assert float((ours[mine] - chance).abs().max()) < 0.06


def test_a_source_is_taken_alike_by_every_destination():
    """One variate per source: two destinations that share a source take it together as
    often as the rarer of them takes it (independent draws would take it together less)."""
    n = 40
    src = torch.cat([torch.zeros(2, dtype=torch.long), torch.arange(1, 21), torch.arange(21, 31)])
    dst = torch.cat([torch.tensor([38, 39]), torch.full((20,), 38), torch.full((10,), 39)])
    structure = InEdges.of(src, dst, n)
    both = 0
    for trial in range(TRIALS):
        row, pos = draw_labor(structure, torch.tensor([38, 39]), 3, (SEEDS[trial],))
        taken = set(zip(row.tolist(), structure.src[pos].tolist()))
        both += (0, 0) in taken and (1, 0) in taken
    rarer = 3 / 21  # node 38 has 21 in-edges, node 39 11
    assert abs(both / TRIALS - rarer) < 0.03


def test_variates_are_uniform_and_a_function_of_seed_and_node():
    ids = torch.arange(200_000)
    r = variates(ids, (5,))
    assert 0 < float(r.min()) and float(r.max()) < 1
    assert abs(float(r.mean()) - 0.5) < 0.005 and abs(float(r.var()) - 1 / 12) < 0.002
    assert torch.equal(variates(ids[::7], (5,)), r[::7])
    assert not torch.equal(variates(ids, (6,)), r)
    close, far = variates(ids, (5, 6), 0.1), variates(ids, (5, 6), 0.9)
    assert abs(float(close.mean()) - 0.5) < 0.005  # still uniform
    assert float(torch.corrcoef(torch.stack([close, r]))[0, 1]) > \
        float(torch.corrcoef(torch.stack([far, r]))[0, 1])
