"""Setup that does not depend on which drop-in call comes first: granndis's co-batches are the
same whether ``parallelize`` or the ``DataLoader`` comes first (or a clear error names both
calls), and ranks that build their loaders in different orders get an error naming the two
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
    else:  # the full-graph form first: one co-batch, which a later 20-row loader contradicts
        model = dglx_dist.parallelize(model, g)
        g.local_nodes()
        loader = _loader(g, 20)
    steps = []
    for input_nodes, output_nodes, blocks in loader:
        steps.append(sorted(output_nodes.tolist()))
        model(blocks, g.ndata["feat"][input_nodes]).sum().backward()
    return steps


def test_granndis_cobatches_do_not_depend_on_the_call_order(tmp_path, cache):
    first = run_workers(_cobatches, 2, tmp_path / "a", cache, "model first")
    second = run_workers(_cobatches, 2, tmp_path / "b", cache, "loader first")
    # DGL's k-way METIS, which clusters a rank's nodes into co-batches, does not give the
    # same clusters twice (not even in one process), so the co-batches are compared by count
    # and by the nodes they cover
    for r in range(2):
        assert len(first[r]) == len(second[r]) > 1, (r, first[r], second[r])
        assert sorted(sum(first[r], [])) == sorted(sum(second[r], [])), r
    with pytest.raises(WorkerError) as info:
        run_workers(_cobatches, 2, tmp_path / "c", cache, "full graph first", timeout=120)
    text = str(info.value)
    assert "granndis with co_batches=-1 built one co-batch for the full-graph form " \
           "(g.local_nodes())" in text, text
    assert "a DataLoader(batch_size=20) makes 4 batches per rank: build this DataLoader " \
           "before that call, or pass co_batches=4" in text, text
