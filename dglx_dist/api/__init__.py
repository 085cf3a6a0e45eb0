"""The drop-in API: DGL's names and signatures over the distributed strategies.

A DGL script keeps its model, loop, optimizer, loss and evaluation; it changes the lines that
build the graph, the loader and the model::

    g = dglx_dist.distribute(g, strategy="distdgl")          # after its own transforms
    train_ids = dglx_dist.node_split(g.ndata["train_mask"], g)
    loader = dglx_dist.DataLoader(g, train_ids, NeighborSampler([10, 25]), batch_size=1000,
                                  shuffle=True)
    model = dglx_dist.parallelize(model, g)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for input_nodes, output_nodes, blocks in loader:
        x, y = g.ndata["feat"][input_nodes], g.ndata["label"][output_nodes]
        loss = F.cross_entropy(model(blocks, x), y)
        opt.zero_grad(); loss.backward(); opt.step()

None of it needs DGL: ``NeighborSampler`` and ``MultiLayerFullNeighborSampler`` are the
package's (DGL's names and arguments), and the model's blocks are DGL's where DGL is
installed, the package's otherwise (``dglx_dist.nn``'s convs take either). DGL's
``as_edge_prediction_sampler`` and ``negative_sampler`` are exported from DGL, where it is
installed, on first use.
"""
from dglx_dist.api.graph import DistGraph, NodeDataView, distribute
from dglx_dist.api.inference import export_parquet, inference
from dglx_dist.api.loader import DataLoader, DistEdgeDataLoader, DistNodeDataLoader
from dglx_dist.api.samplers import MultiLayerFullNeighborSampler, NeighborSampler, sampler_fanouts
from dglx_dist.api.metrics import accuracy, all_reduce, ranking_metrics
from dglx_dist.api.parallel import DistModel, parallelize
from dglx_dist.api.split import edge_split, node_split
from dglx_dist.api.tensor import DistTensor
from dglx_dist.errors import MissingDependencyError

__all__ = ["DistGraph", "NodeDataView", "distribute", "node_split", "edge_split", "DataLoader",
           "DistNodeDataLoader", "DistEdgeDataLoader", "sampler_fanouts", "parallelize",
           "DistModel", "accuracy", "ranking_metrics", "all_reduce", "inference",
           "export_parquet", "DistTensor", "NeighborSampler", "MultiLayerFullNeighborSampler",
           "as_edge_prediction_sampler", "negative_sampler"]

_FROM_DGL = ("as_edge_prediction_sampler", "negative_sampler")  # dgl.dataloading's, as they are


def __getattr__(name: str):
    if name not in _FROM_DGL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from dgl import dataloading  # noqa: PLC0415
    except ImportError:
        raise MissingDependencyError(f"dglx_dist.{name} is DGL's (dgl.dataloading.{name}), and "
                                     f"DGL is not installed: pip install dglx-dist[dgl]") from None
    value = getattr(dataloading, name)
    globals()[name] = value
    return value
