"""The names of node and edge types, as DGL has them: an edge type is canonical, the triple
``(source type, relation, destination type)``, and a graph without types is the one-type case
whose node type is ``_N`` and edge type ``("_N", "_E", "_N")`` (DGL's ``dgl.to_homogeneous``
names)."""

__all__ = ["Etype", "ONE_NTYPE", "ONE_ETYPE"]

Etype = tuple[str, str, str]
ONE_NTYPE, ONE_ETYPE = "_N", ("_N", "_E", "_N")
