"""Wrong input is refused (or warned about) instead of trained on (issue 40, cases 7-8):
row writes of another shape, values a cast would turn into inf, a fractional batch size,
more training edges than the graph has, row normalisation of signed features."""
import pytest
import torch

from dglx_dist.api.loader_call import checked_call as _checked
from dglx_dist.api.ndata import fit_rows
from dglx_dist.errors import InvalidValueError
from dglx_dist.data.normalize import row_normalized
from dglx_dist.config import TaskConfig
from dglx_dist.tasks.link import check_eval_pairs, heldout, train_edge_ids


def test_rows_must_have_the_rows_shape_or_broadcast_to_it():
    with pytest.raises(InvalidValueError, match=r"values of shape \(8, 10\) for 10 rows of "
                                                r"shape \(8,\); expected \(10, 8\)"):
        fit_rows(torch.ones(8, 10), (10, 8), torch.float32, "g.ndata['x']")
    with pytest.raises(InvalidValueError, match="for 3 rows"):
        fit_rows(torch.ones(4, 2), (3, 2), torch.float32, "g.ndata['x']")
    row = torch.arange(8.0)
    assert torch.equal(fit_rows(row, (10, 8), torch.float32, "x"), row.expand(10, 8))
    assert fit_rows(torch.ones(10, 8, dtype=torch.float64), (10, 8), torch.float32,
                    "x").dtype == torch.float32


def test_a_cast_that_overflows_is_refused():
    with pytest.raises(InvalidValueError, match=r"outside torch.float32's range \(largest "
                                                r"1e\+40\) would become inf"):
        fit_rows(torch.tensor([[1e40]], dtype=torch.float64), (1, 1), torch.float32, "t")
    inf = torch.tensor([[float("inf")]], dtype=torch.float64)  # inf stays inf: not a cast's
    assert torch.isinf(fit_rows(inf, (1, 1), torch.float32, "t")).all()


@pytest.mark.parametrize("size", [2.5, 0, True, "4"])
def test_batch_size_must_be_a_positive_integer(size):
    with pytest.raises(InvalidValueError, match="expected an integer >= 1"):
        _checked(None, None, size)


def test_more_training_edges_than_the_graph_has_are_refused():
    with pytest.raises(InvalidValueError, match=r"--train-edges 1000000000000: the training "
                                                r"graph's edge set has only 50;"):
        train_edge_ids(50, TaskConfig(train_edges=10**12), 0)
    assert train_edge_ids(50, TaskConfig(train_edges=50), 0).tolist() == list(range(50))
    assert len(train_edge_ids(50, TaskConfig(train_edges=7), 0)) == 7


def test_more_held_out_pairs_than_there_are_are_refused_as_training_edges_are():
    """Issue 61, case 2e: ``--eval-pairs 10**12`` ranked all 527 pairs and exited 0; a value
    between the two held-out sets' sizes ranks the smaller whole."""
    val, test = ((torch.arange(n), torch.arange(n) + 1) for n in (20, 30))
    with pytest.raises(InvalidValueError, match=r"--eval-pairs 1000000000000: the largest "
                                                r"held-out set has only 30;"):
        check_eval_pairs(TaskConfig(eval_pairs=10**12), val, test)
    with pytest.raises(InvalidValueError, match=r"--eval-pairs 31: the largest held-out set"):
        check_eval_pairs(TaskConfig(eval_pairs=31), val, test)
    for fine in (None, 7, 25, 30):
        check_eval_pairs(TaskConfig(eval_pairs=fine), val, test)
    assert heldout(val, TaskConfig(eval_pairs=25), 40, 0)[0].numel() == 20
    assert heldout(test, TaskConfig(eval_pairs=25), 40, 0)[0].numel() == 25


def test_row_normalising_signed_features_warns():
    with pytest.warns(UserWarning, match="features have negative values"):
        row_normalized(torch.tensor([[1.0, -1.0], [2.0, 2.0]]))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.allclose(row_normalized(torch.tensor([[1.0, 3.0]])),
                              torch.tensor([[0.25, 0.75]]))


def test_graphs_distribute_cannot_take_are_named():
    """An empty graph, with or without types: one line each (issue 40, case 11), where DGL's
    own errors came from the graph fingerprint before."""
    import dgl

    from dglx_dist.data.convert import check_convertible, from_dgl
    from dglx_dist.errors import DatasetFormatError

    empty = dgl.graph(([], []), num_nodes=0)
    empty.ndata["feat"] = torch.zeros(0, 4)
    with pytest.raises(DatasetFormatError, match="distribute: the graph has no nodes"):
        check_convertible(empty, "distribute")
    hetero = dgl.heterograph({("user", "buys", "item"): ([], [])})  # types, but no nodes
    with pytest.raises(DatasetFormatError, match=r"from_dgl: the graph has no nodes \(node "
                                                 r"types \['item', 'user'\]\)"):
        from_dgl(hetero)


def test_models_parallelize_cannot_wrap_are_named():
    """A bare dgl.nn (or dglx_dist.nn) conv as the model (issue 38, case 3: it was told it
    "has no dgl.nn graph conv"), and a model without convs."""
    import dgl.nn as dglnn

    import dglx_dist.nn as gnn
    from dglx_dist.api.parallel import _check_convs
    from dglx_dist.strategies import STRATEGIES

    strategy = STRATEGIES.build("distdgl")
    for conv in (dglnn.GraphConv(4, 2), gnn.GraphConv(4, 2)):
        with pytest.raises(InvalidValueError, match=r"the model is a bare GraphConv; expected "
                                                    r"a module that holds its dglx_dist.nn or "
                                                    r"dgl.nn convs"):
            _check_convs(conv, strategy)
    with pytest.raises(InvalidValueError, match="Linear has no graph conv"):
        _check_convs(torch.nn.Linear(4, 2), strategy)
