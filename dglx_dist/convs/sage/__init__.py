"""``dgl.nn.SAGEConv``: its adapter (:mod:`.adapter`), its dorylus stages for the mean
aggregator (:mod:`.dorylus`) and their numpy tensor tasks (:mod:`.ops`).

Imports nothing, so that :mod:`.ops` loads without torch or DGL (see :mod:`dglx_dist.convs`).
"""
