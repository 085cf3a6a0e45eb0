"""Reference layer-wise models built from dgl.nn, for tests, benchmarks and the CLI.

:data:`MODELS` builds one by name: ``MODELS[name](in_feats, hidden, num_classes, num_layers,
dropout=..., row_normalize=...)``.
"""
from dglx_dist.models.gat import GAT
from dglx_dist.models.gcn import GCN, ResGCN
from dglx_dist.models.sage import SAGE

__all__ = ["SAGE", "GCN", "GAT", "ResGCN", "MODELS"]

MODELS = {"sage": SAGE, "gcn": GCN, "gat": GAT, "resgcn": ResGCN}
