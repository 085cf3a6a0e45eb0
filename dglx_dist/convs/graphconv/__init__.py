"""``dgl.nn.GraphConv``: its adapter (:mod:`.adapter`), its degree normalisation
(:mod:`.norm`), its dorylus stages for ``norm="both"``, the paper's GCN (:mod:`.dorylus`), and
their numpy tensor tasks (:mod:`.ops`).

Imports nothing, so that :mod:`.ops` loads without torch or DGL (see :mod:`dglx_dist.convs`).
"""
