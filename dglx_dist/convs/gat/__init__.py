"""``GATConv``'s folder (its layout: :mod:`dglx_dist.convs`); imports nothing, so that
:mod:`.ops` loads without torch or DGL."""
