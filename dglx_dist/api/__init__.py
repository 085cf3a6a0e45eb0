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
installed, the package's otherwise (``dglx_dist.nn``'s convs take either), as are the
pair graphs of ``as_edge_prediction_sampler`` (the package's, with its ``negative_sampler``).
"""
from dglx_dist.api import negative_sampler
from dglx_dist.api.graph import DistGraph, NodeDataView, distribute
from dglx_dist.api.inference import export_parquet, inference
from dglx_dist.api.link import as_edge_prediction_sampler
from dglx_dist.api.loader import DataLoader, DistEdgeDataLoader, DistNodeDataLoader
from dglx_dist.api.samplers import MultiLayerFullNeighborSampler, NeighborSampler, sampler_fanouts
from dglx_dist.api.metrics import accuracy, all_reduce, ranking_metrics
from dglx_dist.api.parallel import DistModel, parallelize
from dglx_dist.api.split import edge_split, node_split
from dglx_dist.api.tensor import DistTensor

__all__ = ["DistGraph", "NodeDataView", "distribute", "node_split", "edge_split", "DataLoader",
           "DistNodeDataLoader", "DistEdgeDataLoader", "sampler_fanouts", "parallelize",
           "DistModel", "accuracy", "ranking_metrics", "all_reduce", "inference",
           "export_parquet", "DistTensor", "NeighborSampler", "MultiLayerFullNeighborSampler",
           "as_edge_prediction_sampler", "negative_sampler"]
