"""Reference layer-wise models built from :mod:`dglx_dist.nn` (dgl.nn's convs in torch: no DGL
needed), for tests, benchmarks and the CLI.

:data:`MODELS` builds one by name: ``MODELS[name](in_feats, hidden, num_classes, num_layers,
dropout=..., row_normalize=...)``. :class:`RGCN` (with :func:`node_inputs`) is the model
for graphs with node and edge types (``dglx bench`` on a typed graph); it is not in
:data:`MODELS`, whose models all take one feature tensor.
"""
from dglx_dist.models.gat import GAT
from dglx_dist.models.gcn import GCN, ResGCN
from dglx_dist.models.rgcn import RGCN, node_inputs
from dglx_dist.models.sage import SAGE

__all__ = ["SAGE", "GCN", "GAT", "ResGCN", "MODELS", "RGCN", "node_inputs"]

MODELS = {"sage": SAGE, "gcn": GCN, "gat": GAT, "resgcn": ResGCN}
