"""Negative samplers by DGL's names and signatures (``dgl.dataloading.negative_sampler``),
written in torch: ``dglx_dist.negative_sampler.Uniform(k)`` and ``GlobalUniform(k)``.

A negative sampler is called as DGL's are, ``sampler(g, eids)`` with the batch's edge ids
(a dict of edge type -> per-type ids on a graph with types), and returns the negative pairs
``(src, dst)`` (a dict of edge type -> pairs on a graph with types). The edge loader calls it
on the :class:`~dglx_dist.api.DistGraph` (``g.find_edges``, ``g.num_nodes``,
``g.global_uniform_negative_sampling``); DGL's own classes keep working there too.
"""
from __future__ import annotations

import abc
import dataclasses
import operator
from collections.abc import Mapping

import torch

from dglx_dist.errors import InvalidValueError

__all__ = ["PerSourceUniform", "Uniform", "GlobalUniform"]

Etype = tuple[str, str, str]


def _check_k(k, name: str) -> None:
    try:  # an integer of any kind, not True nor 2.5
        whole = operator.index(k) if not isinstance(k, bool) else 0
    except TypeError:
        whole = 0
    if whole < 1:
        raise InvalidValueError(f"negative_sampler.{name}(k={k!r}): k is the number of "
                                "negatives per edge; expected an integer >= 1")


class _ByEdgeType(abc.ABC):
    """DGL's call of a negative sampler: the batch's ids by edge type in, pairs out in the
    same form (one type's pairs where the ids were one tensor)."""

    def __call__(self, g, eids):
        if isinstance(eids, Mapping):
            return {g.to_canonical_etype(key): self._generate(g, ids, g.to_canonical_etype(key))
                    for key, ids in eids.items()}
        if len(g.canonical_etypes) != 1:
            raise InvalidValueError(f"negative_sampler.{type(self).__name__}: the graph has "
                                    f"{len(g.canonical_etypes)} edge types; pass the edge ids "
                                    "as a dict {edge type: ids}")
        return self._generate(g, eids, g.canonical_etypes[0])

    @abc.abstractmethod
    def _generate(self, g, eids: torch.Tensor, etype: Etype):
        """The negative pairs ``(src, dst)`` of the edges ``eids`` of type ``etype``."""


@dataclasses.dataclass(frozen=True)
class PerSourceUniform(_ByEdgeType):
    """``k`` negatives per edge ``(u, v)`` of type ``(s, e, d)``: ``(u, v')`` with each
    ``v'`` drawn uniformly from all nodes of type ``d`` (torch's global generator), the
    ``k`` pairs of an edge together, edges in batch order."""

    k: int

    def __post_init__(self):
        _check_k(self.k, "Uniform")

    def _generate(self, g, eids: torch.Tensor, etype: Etype):
        eids = torch.as_tensor(eids)
        src, _ = g.find_edges(eids, etype=etype)
        dst = torch.randint(0, g.num_nodes(etype[2]), (eids.numel() * self.k,),
                            dtype=eids.dtype, device=eids.device)
        return src.repeat_interleave(self.k), dst


Uniform = PerSourceUniform
"""DGL's short name of :class:`PerSourceUniform`."""


@dataclasses.dataclass(frozen=True)
class GlobalUniform(_ByEdgeType):
    """At most ``k`` negatives per edge of type ``(s, e, d)``: pairs ``(u', v')`` drawn
    uniformly from all nodes of types ``s`` and ``d`` that are not edges of the graph (nor
    self-loops with ``exclude_self_loops``; distinct unless ``replace``): the graph's
    ``global_uniform_negative_sampling`` (collective on a DistGraph: every rank draws at
    the same step, as the loader's steps are)."""

    k: int
    exclude_self_loops: bool = True
    replace: bool = False

    def __post_init__(self):
        _check_k(self.k, "GlobalUniform")

    def _generate(self, g, eids: torch.Tensor, etype: Etype):
        return g.global_uniform_negative_sampling(len(eids) * self.k, self.exclude_self_loops,
                                                  self.replace, etype)
