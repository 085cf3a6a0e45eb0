"""``GATConv``'s folder (its layout: :mod:`dglx_dist.convs`), plus :mod:`.projection`;
imports nothing, so that :mod:`.ops` loads without torch or DGL."""
