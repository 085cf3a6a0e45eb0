"""Setup that does not depend on which drop-in call comes first: granndis's co-batches are the
same whether ``parallelize``, the full-graph form or the ``DataLoader`` comes first, and ranks that build their loaders in different orders get an error naming the two
loaders instead of waiting in mismatched collectives."""
import pytest
import torch

import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.models import GCN
from dglx_dist.testing import WorkerError, run_workers
from dglx_dist.testing.models import seeded_model

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def _loader(g, batch_size):
    return dglx_dist.DataLoader(g, g.ndata["train_mask"],
                                dglx_dist.MultiLayerFullNeighborSampler(2), batch_size=batch_size)


def _opposite_orders(session, cache):
    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache, session=session)
    sizes = (40, 30) if session.rank == 0 else (30, 40)
    return [len(_loader(g, size)) for size in sizes]


def test_loaders_built_in_opposite_orders_are_named(tmp_path, cache):
    with pytest.raises(WorkerError) as info:
        run_workers(_opposite_orders, 2, tmp_path / "run", cache, timeout=120)
    text = str(info.value)
    assert "ranks make different calls at the same point" in text, text
    assert "batch_size=40" in text and "batch_size=30" in text, text
    assert "build its loaders" in text and "timed out" not in text.lower(), text


def _cobatches(session, cache, order):
    g = dglx_dist.distribute(CoraGraphDataset()[0], "granndis", cache_dir=cache,
                             session=session)
    model = seeded_model(lambda: GCN(g.ndata["feat"].shape[1], 8, 7, 2, dropout=0.0))
    if order == "model first":
        model, loader = dglx_dist.parallelize(model, g), _loader(g, 20)
    elif order == "loader first":
        loader, model = _loader(g, 20), dglx_dist.parallelize(model, g)
    else:  # the full-graph form first: its one co-batch is its own, the loader gets 4
        model = dglx_dist.parallelize(model, g)
        g.local_nodes()
        loader = _loader(g, 20)
    steps = []
    for input_nodes, output_nodes, blocks in loader:
        steps.append(sorted(output_nodes.tolist()))
        model(blocks, g.ndata["feat"][input_nodes]).sum().backward()
    return steps


def test_granndis_cobatches_do_not_depend_on_the_call_order(tmp_path, cache):
    runs = [run_workers(_cobatches, 2, tmp_path / str(i), cache, order)
            for i, order in enumerate(("model first", "loader first", "full graph first"))]
    # DGL's k-way METIS, which clusters a rank's nodes into co-batches, does not give the
    # same clusters twice (not even in one process), so the co-batches are compared by count
    # and by the nodes they cover; 70 training nodes per rank in batches of 20: 4 steps
    for r in range(2):
        first = runs[0][r]
        assert len(first) == 4, (r, first)
        for other in runs[1:]:
            assert len(other[r]) == len(first), (r, first, other[r])
            assert sorted(sum(other[r], [])) == sorted(sum(first, [])), r
