"""The package's own draw of in-edges (torch) against DGL's ``sample_neighbors``: the same
edges where the draw is determined, the same distribution where it is not. The tests that
need no DGL also run in the DGL-free virtualenv (``make test-core``)."""
import pytest
import torch

from dglx_dist.sampling.in_edges import InEdges, draw_in_edges

DRAWS = 4000


def _graph(seed=0, nodes=12, edges=90, etypes=1):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = torch.randint(0, nodes, (edges,), generator=gen)
    etype = torch.randint(0, etypes, (edges,), generator=gen)
    return src, dst, etype


def _drawn(edges, nodes, fanouts, **kw):
    row, pos = draw_in_edges(edges, nodes, fanouts, **kw)
    return row, edges.src.index_select(0, pos), edges.eid.index_select(0, pos)


@pytest.mark.dgl
def test_every_in_edge_when_the_fanout_takes_all():
    import dgl

    src, dst, _ = _graph()
    edges = InEdges.of(src, dst, 12)
    nodes = torch.tensor([3, 0, 7, 11])
    g = dgl.graph((src, dst), num_nodes=12)
    for fanout in (-1, 100):
        row, u, eid = _drawn(edges, nodes, fanout)
        assert bool((row[1:] >= row[:-1]).all())  # grouped by node, in the nodes' order
        got = sorted(zip(u.tolist(), nodes[row].tolist(), eid.tolist()))
        ref_u, ref_v, ref_e = g.in_edges(nodes, form="all")
        assert got == sorted(zip(ref_u.tolist(), ref_v.tolist(), ref_e.tolist()))


@pytest.mark.parametrize("replace", [False, True])
def test_a_fanout_draws_min_of_it_and_the_degree(replace):
    """Degrees around the fanout, and hubs far above it (drawn by rejection)."""
    src, dst, _ = _graph(1, nodes=30, edges=200)
    src, dst = torch.cat([src, torch.arange(600) % 30]), torch.cat([dst, torch.arange(600) % 3])
    edges = InEdges.of(src, dst, 30)
    nodes = torch.arange(30)
    deg = torch.bincount(dst, minlength=30)
    row, _, eid = _drawn(edges, nodes, 4, replace=replace)
    count = torch.bincount(row, minlength=30)
    want = torch.where(deg > 0, torch.full_like(deg, 4), deg) if replace else deg.clamp(max=4)
    assert count.tolist() == want.tolist()
    assert bool((dst[eid] == nodes[row]).all())
    if not replace:
        assert eid.unique().numel() == eid.numel()


def test_excluded_and_masked_edges_are_never_drawn():
    src, dst, _ = _graph(2, nodes=10, edges=120)
    edges = InEdges.of(src, dst, 10)
    mask = torch.rand(120, generator=torch.Generator().manual_seed(0)) > 0.4
    exclude = torch.arange(0, 120, 3)
    for replace in (False, True):
        for _ in range(20):
            _, _, eid = _drawn(edges, torch.arange(10), 3, replace=replace, weights=mask,
                               exclude=exclude)
            assert bool(mask[eid].all())
            assert not bool(torch.isin(eid, exclude).any())
    allowed = mask.clone()
    allowed[exclude] = False
    row, _, _ = _drawn(edges, torch.arange(10), 3, weights=mask, exclude=exclude)
    assert torch.bincount(row, minlength=10).tolist() == \
        torch.bincount(dst[allowed], minlength=10).clamp(max=3).tolist()


@pytest.mark.parametrize("replace", [False, True])
def test_a_node_whose_every_in_edge_is_excluded_draws_none(replace):
    """The only group an exclusion touches loses all its candidates: it draws nothing, the
    others draw as without the exclusion (this raised an IndexError on the empty layout of
    the touched groups' candidates, under link prediction's exclude="reverse_id" with
    reverse ids that were not the graph's)."""
    src = torch.tensor([1, 2, 0, 0, 3, 1])
    dst = torch.tensor([0, 0, 1, 2, 2, 3])
    edges = InEdges.of(src, dst, 4)
    nodes = torch.tensor([0, 1, 2, 3])
    for seed in range(5):
        gen = lambda: torch.Generator().manual_seed(seed)  # noqa: E731
        row, pos = draw_in_edges(edges, nodes, 4, replace, exclude=torch.tensor([0, 1]),
                                 generator=gen())
        plain_row, plain_pos = draw_in_edges(edges, nodes, 4, replace, generator=gen())
        assert 0 not in row.tolist()  # node 0's in-edges are edges 0 and 1: none left
        kept = plain_row != 0
        assert row.tolist() == plain_row[kept].tolist()
        if not replace:  # every candidate drawn (degrees below the fanout): the same edges
            assert edges.eid[pos].tolist() == edges.eid[plain_pos[kept]].tolist()


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts,etypes", [(3, 1), (-1, 1), (40, 1), ([2, -1], 2)])
def test_excluding_lays_out_only_the_groups_it_touches_and_draws_the_same(
        replace, fanouts, etypes):
    """Exclusions alone lay out the candidates of the groups an excluded edge is in, not of
    every group: the draws are the very edges the layout of every candidate (an all-True
    mask beside the exclusions) gives from the same random numbers."""
    src, dst, etype = _graph(3, nodes=40, edges=600, etypes=etypes)
    edges = InEdges.of(src, dst, 40, etype if etypes > 1 else None, etypes)
    nodes = torch.tensor([5, 0, 39, 12, 7, 33, 21])
    exclude = torch.tensor([4, 4, 17, 250, 599, 300])  # a repeat; most groups untouched
    everything = torch.ones(600, dtype=torch.bool)
    for seed in range(10):
        draws = [draw_in_edges(edges, nodes, fanouts, replace, mask, exclude,
                               torch.Generator().manual_seed(seed))
                 for mask in (None, everything)]
        assert draws[0][0].tolist() == draws[1][0].tolist()
        assert draws[0][1].tolist() == draws[1][1].tolist()
        assert not bool(torch.isin(edges.eid[draws[0][1]], exclude).any())


def _frequencies(draw, num_edges):
    seen = torch.zeros(num_edges)
    for _ in range(DRAWS):
        seen += torch.bincount(draw(), minlength=num_edges)
    return seen / DRAWS


@pytest.mark.dgl
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("num_nodes,num_edges", [(6, 40), (2, 100)])
def test_each_edge_is_drawn_as_often_as_dgl_draws_it(replace, weighted, num_nodes, num_edges):
    """Per edge, how often it is drawn over 4000 draws, ours and DGL's, within five
    standard deviations of a count's spread (the same distribution); degrees near the
    fanout, and far above it (a uniform draw without replacement by rejection there)."""
    import dgl

    src, dst, _ = _graph(3, nodes=num_nodes, edges=num_edges)
    prob = torch.rand(num_edges, generator=torch.Generator().manual_seed(1)) ** 2 \
        if weighted else None
    edges = InEdges.of(src, dst, num_nodes)
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    if weighted:
        g.edata["p"] = prob
    nodes = torch.arange(num_nodes)
    torch.manual_seed(0)
    dgl.seed(0)
    ours = _frequencies(lambda: _drawn(edges, nodes, 3, replace=replace, weights=prob)[2],
                        num_edges)
    theirs = _frequencies(lambda: dgl.sampling.sample_neighbors(
        g, nodes, 3, prob="p" if weighted else None, replace=replace).edata[dgl.EID],
        num_edges)
    spread = ((ours + theirs).clamp(min=0.01) / DRAWS) ** 0.5 * (1 if not replace else 2)
    assert bool(((ours - theirs).abs() <= 5 * spread).all()), (ours - theirs).abs().max()


def test_each_edge_type_has_its_own_fanout():
    src, dst, etype = _graph(4, nodes=8, edges=150, etypes=3)
    edges = InEdges.of(src, dst, 8, etype, 3)
    nodes = torch.tensor([5, 1, 2])
    row, pos = draw_in_edges(edges, nodes, [2, 0, -1])
    kinds = edges.etype.index_select(0, pos)
    eid = edges.eid.index_select(0, pos)
    assert bool((etype[eid] == kinds).all())
    for i, v in enumerate(nodes.tolist()):
        mine = kinds[row == i]
        assert bool((mine[1:] >= mine[:-1]).all())  # by edge type within a node
        deg = [int(((dst == v) & (etype == e)).sum()) for e in range(3)]
        assert torch.bincount(mine, minlength=3).tolist() == [min(2, deg[0]), 0, deg[2]]


def test_the_draws_of_one_step_have_streams_of_their_own():
    """A step's seed gives every draw in it (each layer, each member's request) its own
    random numbers: the same nodes drawn under two streams differ, under one stream agree."""
    from dglx_dist.sampling.draws import Draws
    from dglx_dist.sampling.options import SampleOptions

    src, dst, _ = _graph(5, nodes=200, edges=8000)
    draws = Draws(InEdges.of(src, dst, 200))
    step = SampleOptions(seed=11)
    nodes = torch.arange(200)
    first, again, other = (draws(nodes, 5, o)[1] for o in (step.stream(0), step.stream(0),
                                                            step.stream(1)))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert SampleOptions().stream(3) == SampleOptions()  # no seed: torch's own generator


@pytest.mark.parametrize("way", ["steps", "stepwise", "doubling"])
def test_floyds_steps_at_once_take_what_floyds_loop_takes(monkeypatch, way):
    """Every draw of each step (``raw_i`` in ``[0, top_i]``) gives, drawn for all steps at
    once, the values Floyd's loop takes step by step, whichever way repeated draws are found
    (the host's by the rows' shape; a GPU's by doubling)."""
    import itertools

    from dglx_dist.sampling import choose

    monkeypatch.setattr(choose, "_way", lambda count, k: way)
    for count, k in ((6, 4), (7, 5), (9, 3), (5, 5), (8, 6)):
        tops = [count - k + i for i in range(k)]
        raws = torch.tensor(list(itertools.product(*[range(t + 1) for t in tops])))
        monkeypatch.setattr(choose, "_below", lambda bound, generator: raws.t())
        drawn = choose._floyd(torch.full((raws.shape[0],), count), k, None)
        for raw, got in zip(raws.tolist(), drawn.t().tolist()):
            taken = []
            for i, x in enumerate(raw):
                taken.append(tops[i] if x in taken else x)
            assert got == taken


def test_every_subset_of_a_uniform_draw_is_as_likely():
    """A node of degree 7 drawn 4 at a time, 70,000 times: each of its 35 subsets of edges
    within five standard deviations of 2,000 draws."""
    edges = InEdges.of(torch.arange(7), torch.zeros(7, dtype=torch.int64), 1)
    nodes = torch.zeros(70_000, dtype=torch.int64)  # one node asked for many times
    row, pos = draw_in_edges(edges, nodes, 4, generator=torch.Generator().manual_seed(3))
    subset = torch.zeros(nodes.numel(), dtype=torch.int64).index_add_(0, row, 1 << pos)
    seen = torch.bincount(subset, minlength=128)
    assert int((seen > 0).sum()) == 35
    assert bool(((seen[seen > 0] - 2000).abs() <= 5 * 2000 ** 0.5).all()), seen[seen > 0]


@pytest.mark.parametrize("degree,fanout,skew", [(14, 3, 1.0), (9, 2, 3.0), (20, 2, 6.0)])
def test_a_weighted_draw_takes_each_edge_as_successive_draws_do(degree, fanout, skew):
    """Each edge's chance to be among a weighted draw's, over 200,000 draws, within five
    standard deviations of its chance under successive draws in proportion to the weights
    of the edges not yet drawn (DGL's); degrees above the threshold's, and weights uneven
    enough that a threshold keeps fewer edges than the fanout."""
    import itertools

    weight = torch.rand(degree, generator=torch.Generator().manual_seed(degree),
                        dtype=torch.float64) ** skew + 1e-3
    chance = torch.zeros(degree, dtype=torch.float64)
    for order in itertools.permutations(range(degree), fanout):
        p, left = 1.0, float(weight.sum())
        for i in order:
            p, left = p * float(weight[i]) / left, left - float(weight[i])
        chance[list(order)] += p
    edges = InEdges.of(torch.arange(degree), torch.zeros(degree, dtype=torch.int64), 1)
    draws = 200_000
    _, pos = draw_in_edges(edges, torch.zeros(draws, dtype=torch.int64), fanout,
                           weights=weight.float(), generator=torch.Generator().manual_seed(5))
    seen = torch.bincount(edges.eid[pos], minlength=degree).double() / draws
    assert pos.numel() == draws * fanout
    assert bool(((seen - chance).abs() <= 5 * (chance * (1 - chance) / draws).sqrt()).all())


def test_a_weighted_draw_takes_each_edge_types_own_fanout():
    """With a fanout per edge type and weights (some 0), each node draws the smaller of its
    type's fanout and its edges of that type with weight above 0, once each."""
    src, dst, etype = _graph(6, nodes=8, edges=3000, etypes=3)
    weight = torch.rand(3000, generator=torch.Generator().manual_seed(6))
    weight[weight < 0.2] = 0
    edges = InEdges.of(src, dst, 8, etype, 3)
    nodes = torch.tensor([5, 1, 2, 7])
    for fanouts in ([2, 0, -1], [30, 5, 200], [40, 1, 7]):
        row, pos = draw_in_edges(edges, nodes, fanouts, weights=weight)
        eid, kinds = edges.eid.index_select(0, pos), edges.etype.index_select(0, pos)
        assert bool((weight[eid] > 0).all()) and eid.unique().numel() == eid.numel()
        assert bool((dst[eid] == nodes[row]).all())
        for i, v in enumerate(nodes.tolist()):
            deg = [int(((dst == v) & (etype == e) & (weight > 0)).sum()) for e in range(3)]
            want = [d if f < 0 else min(f, d) for f, d in zip(fanouts, deg)]
            assert torch.bincount(kinds[row == i], minlength=3).tolist() == want
