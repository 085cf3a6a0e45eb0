"""``dgl.nn.GATConv``: its adapter (:mod:`.adapter`), what keeps it from one shared projection
(:mod:`.projection`), its dorylus stages (:mod:`.dorylus`) and their numpy tensor tasks
(:mod:`.ops`).

Imports nothing, so that :mod:`.ops` loads without torch or DGL (see :mod:`dglx_dist.convs`).
"""
