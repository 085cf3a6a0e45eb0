"""``SAGEConv``'s folder (its layout: :mod:`dglx_dist.convs`; dorylus: the mean
aggregator); imports nothing, so that :mod:`.ops` loads without torch or DGL."""
