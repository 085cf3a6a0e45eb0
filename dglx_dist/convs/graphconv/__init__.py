"""``GraphConv``'s folder (its layout: :mod:`dglx_dist.convs`; dorylus: ``norm="both"``);
imports nothing, so that :mod:`.ops` loads without torch or DGL."""
