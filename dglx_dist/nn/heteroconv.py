"""DGL's ``HeteroGraphConv`` in torch: a module per relation of a typed block, each run on
that relation's one-type block, and their results aggregated per destination type.

It walks the relations as DGL does on DGL's block of the same structure
(:func:`~dglx_dist.dgl.blocks.to_dgl_block`): only the edge types that block keeps
(those with edges), in the sorted order of their canonical triples (``dgl.create_block``
sorts them), which is the order ``"stack"`` stacks in. On DGL's graphs it walks theirs.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from dglx_dist.errors import UnknownNameError, InvalidValueError

__all__ = ["HeteroGraphConv", "aggregate_fn"]

_REDUCE = {"sum": torch.sum, "mean": torch.mean,
           "max": lambda x, dim: torch.max(x, dim=dim).values,
           "min": lambda x, dim: torch.min(x, dim=dim).values}


def aggregate_fn(name: str) -> Callable[[list, str], torch.Tensor]:
    """DGL's aggregate named ``name`` over a destination type's results (a list, in the
    order of the relations, and the type's name): ``"sum"``, ``"mean"``, ``"max"`` and
    ``"min"`` elementwise; ``"stack"`` along a new dimension 1."""
    if name == "stack":
        return lambda outs, _ntype: torch.stack(outs, dim=1)
    if name not in _REDUCE:
        raise InvalidValueError(f"HeteroGraphConv: aggregate {name!r}; expected one of "
                                f"{[*_REDUCE, 'stack']} or a callable")
    reduce = _REDUCE[name]
    return lambda outs, _ntype: reduce(torch.stack(outs, dim=0), dim=0)


class HeteroGraphConv(nn.Module):
    """A module per relation (DGL's ``dgl.nn.HeteroGraphConv``).

    Args:
        mods: relation -> module, a relation named by its edge type's name or its canonical
            triple (a triple is looked up first); each module is called as
            ``mod(relation_block, (src_rows, dst_rows), *args, **kwargs)`` and is kept under
            ``mods[str(key)]`` (DGL's ``state_dict`` names). A module with
            ``set_allow_zero_in_degree`` is allowed destinations without in-edges.
        aggregate: how the results that reach one destination type are combined:
            ``"sum"``, ``"mean"``, ``"max"``, ``"min"``, ``"stack"`` or a callable
            ``f(results, dst_type)``.
    """

    def __init__(self, mods: dict, aggregate="sum"):
        super().__init__()
        self.mod_dict = mods
        self.mods = nn.ModuleDict({str(k): v for k, v in mods.items()})
        for mod in self.mods.values():
            allow = getattr(mod, "set_allow_zero_in_degree", None)
            if callable(allow):
                allow(True)
        self.agg_fn = aggregate_fn(aggregate) if isinstance(aggregate, str) else aggregate

    def _get_module(self, etype: tuple[str, str, str]) -> nn.Module:
        mod = self.mod_dict.get(etype, self.mod_dict.get(etype[1]))
        if mod is None:
            raise UnknownNameError(f"HeteroGraphConv: no module for relation {etype!r}; "
                                   f"expected one under it or its name (have "
                                   f"{list(self.mod_dict)})")
        return mod

    def forward(self, g, inputs, mod_args: dict | None = None,
                mod_kwargs: dict | None = None) -> dict[str, torch.Tensor]:
        """Each destination type's aggregated result on block ``g`` (the package's or DGL's)
        from ``inputs`` (node type -> source rows, the destinations' rows their first rows;
        or a pair of such dicts, source rows and destination rows). ``mod_args`` /
        ``mod_kwargs``: a relation's extra arguments, keyed by the edge type's NAME. A
        relation whose source or destination type has no rows is skipped; a destination
        type no relation reaches is not in the result."""
        mod_args, mod_kwargs = mod_args or {}, mod_kwargs or {}
        src_in, dst_in = _sides(g, inputs)
        outputs: dict[str, list] = {}
        for (stype, name, dtype), view in _relations(g):
            outputs.setdefault(dtype, [])
            if stype not in src_in or dtype not in dst_in:
                continue
            out = self._get_module((stype, name, dtype))(
                view, (src_in[stype], dst_in[dtype]), *mod_args.get(name, ()),
                **mod_kwargs.get(name, {}))
            outputs[dtype].append(out)
        return {ntype: self.agg_fn(outs, ntype) for ntype, outs in sorted(outputs.items())
                if outs}


def _sides(g, inputs) -> tuple[dict, dict]:
    """The source rows and destination rows per node type: a pair as given, else the
    destinations' rows cut from the sources' (a block), or the same rows (DGL's graph)."""
    if isinstance(inputs, tuple):
        return inputs
    if not getattr(g, "is_block", True):
        return inputs, inputs
    return inputs, {ntype: rows[:g.num_dst_nodes(ntype)] for ntype, rows in inputs.items()}


def _relations(g) -> list:
    """``g``'s relations (canonical triple, its one-type block) in the order DGL's block of
    it has them."""
    if hasattr(g, "relation_types"):  # the package's block
        kept = sorted(g.canonical_etypes[i] for i in g.relation_types())
        return [(etype, g.relation(etype)) for etype in kept]
    return [(etype, g[etype]) for etype in g.canonical_etypes]
