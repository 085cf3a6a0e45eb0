"""The package's graph, one vocabulary in torch: the graph with DGL's reading surface
(:mod:`.heterograph`) and DGL's constructors (:mod:`.construct`), rows by type
(:mod:`.frames`), the block a layer runs on (:mod:`.block`) and the per-type ids of a
partitioning as blocks speak them (:mod:`.ids`), the names of types (:mod:`.types`), and the
ops on a block's edges (:mod:`.message` by ``dgl.ops``' names, the fused sums of
:mod:`.aggregate`, GraphConv's degree normalisation :mod:`.norm`). A graph without types is
the one-type case (DGL's ``_N`` / ``_E``). The constructors are :mod:`.construct`'s
(``dglx_dist.data.graph``, ``dglx_dist.dgl.graph``). Nothing here imports DGL, and importing
the package imports none of its modules: the names below load on first use (PEP 562), so a conv
folder's numpy tasks can read :mod:`.norm` without torch."""
import importlib as _importlib

_HOMES = {"Graph": "heterograph",
          "Block": "block", "TypeIds": "ids", "Etype": "types", "ONE_NTYPE": "types",
          "ONE_ETYPE": "types", "NID": "frames", "DataView": "frames"}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
