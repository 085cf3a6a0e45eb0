"""The graph a user's own DGL sampler draws from: DGL's sampling methods over the partitions.

A ``dgl.dataloading.BlockSampler`` subclass builds its blocks from the graph it is handed,
``sample_blocks(g, seed_nodes, exclude_eids)``, through the graph's methods
(``g.sample_neighbors``, ``g.in_subgraph``, ``g.in_edges`` ...) and ``dgl.to_block``, as
DGL's user guide teaches; DGL's ``ShaDowKHopSampler`` draws the same way and returns the
subgraph its draws induce (``g.subgraph``). Given such a sampler, the loader hands it a
:class:`SamplingGraph`, which answers those methods over the partitions through the
strategy's sampler, with DGL's signatures and meanings:

* every call that reads the structure is collective (each node's in-edges are drawn by the
  member that stores them), so every rank's sampler makes the same calls in the same order,
  as the loader's steps are (a sampler whose calls depend on the rank's own seeds beyond
  their values, e.g. skipping a call when it has none, would wait for its peers);
* node ids are the user's (those of the graph given to ``distribute``), in the seeds it is
  handed and in what it gets back; each returned graph spans every node and carries
  ``edata[dgl.EID]``, the user's edge ids. (The loader turns the blocks it returns into the
  partitioned ids every loader's blocks carry, once they are checked to chain.)
* a method or attribute it does not serve raises ``NotSupportedError`` naming it and the
  ones it serves (DGL's functions that need a local graph, ``dgl.in_subgraph(g, ...)``,
  reach for its internals and are refused that way too: call the method instead).

Degrees are read from the graph's KVStore (each node's, with its owner: no other rank takes
part); out-edges are gathered from every part (each stores the in-edges of its own nodes).
"""
from __future__ import annotations

import dataclasses
from typing import Protocol

import dgl
import torch

from dglx_dist.api.ndata import as_node_ids
from dglx_dist.errors import InvalidValueError, NotSupportedError, UnknownNameError
from dglx_dist.sampling.in_edges import InEdges, draw_in_edges
from dglx_dist.sampling.options import SampleOptions
from dglx_dist.sampling.sampler import BlockSampler

__all__ = ["SamplingGraph", "UserSampler", "GraphIds", "SERVED"]

SERVED = ("sample_neighbors", "sample_labors", "in_subgraph", "subgraph", "in_edges",
          "out_edges", "in_degrees", "out_degrees", "find_edges", "num_nodes", "num_edges")


class GraphIds(Protocol):
    """What :class:`SamplingGraph` asks of the distributed graph (a
    :class:`~dglx_dist.api.DistGraph` gives all of it)."""

    def num_nodes(self) -> int: ...

    def num_edges(self) -> int: ...

    def part_ids(self, ids: torch.Tensor) -> torch.Tensor: ...

    def node_ids(self, part_ids: torch.Tensor) -> torch.Tensor: ...

    def find_edges(self, eids, etype=None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def in_degrees(self, v=None, etype=None): ...

    def out_degrees(self, u=None, etype=None): ...

    @property
    def edata(self): ...  # its names (``keys``), ``part_ids`` / ``ids`` of edges


class SamplingGraph:
    """DGL's sampling methods over the distributed graph, in the user's node ids.

    Args:
        sampler: the strategy's sampler (collective where it exchanges).
        graph: the distributed graph: its sizes and edge data names, its ``part_ids`` /
            ``node_ids`` (user ids <-> partitioned ids the sampler speaks), and the reads it
            serves itself, in user ids (``find_edges``, ``in_degrees``, ``out_degrees``).
        what: the user's sampler, as errors name it.
    """

    is_block = False
    device = torch.device("cpu")
    idtype = torch.int64
    ntypes = ["_N"]
    etypes = ["_E"]
    canonical_etypes = [("_N", "_E", "_N")]

    def __init__(self, sampler: BlockSampler, graph: GraphIds, what: str):
        self._sampler, self._ids, self._what = sampler, graph, what

    def num_nodes(self, ntype=None) -> int:
        return self._ids.num_nodes()

    def num_edges(self, etype=None) -> int:
        return self._ids.num_edges()

    number_of_nodes, number_of_edges = num_nodes, num_edges

    def sample_neighbors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                         exclude_edges=None, replace: bool = False, output_device=None,
                         **kwargs) -> dgl.DGLGraph:
        """DGL's ``sample_neighbors``: up to ``fanout`` in-edges (``edge_dir="out"``:
        out-edges) of each seed (-1: all), drawn as ``prob`` (an edge data name: weights or a
        boolean mask) and ``replace`` say; a graph over every node with the drawn edges
        (collective). In-edges are drawn by their owners; out-edges are gathered from every
        part, all of each seed's, and drawn here by DGL's own sampler."""
        where = f"{self._what}: g.sample_neighbors"
        seeds, k = self._draw_args(where, seed_nodes, fanout, edge_dir, prob, ("in", "out"))
        if edge_dir == "out":
            return self._frontier(self._out_draw(seeds, k, prob, exclude_edges, bool(replace)))
        return self._frontier(self._edges(self._sampler.sample_layer, seeds, k,
                                          self._routed(exclude_edges),
                                          SampleOptions(prob, bool(replace))))

    def sample_labors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                      importance_sampling: int = 0, random_seed=None,
                      seed2_contribution: float = 0, output_device=None, exclude_edges=None,
                      **kwargs) -> tuple[dgl.DGLGraph, list[torch.Tensor]]:
        """DGL's ``sample_labors`` (LABOR, what ``LaborSampler`` calls) without importance
        sampling: each source node rolls one variate from ``random_seed`` (rank 0's, on
        every rank; drawn there when None), so the draws are those of one process over the
        same seeds (collective). Returns the graph of drawn edges and no importances (DGL's
        answer for ``importance_sampling=0``)."""
        where = f"{self._what}: g.sample_labors"
        if importance_sampling:
            raise NotSupportedError(f"{where}(importance_sampling={importance_sampling}): "
                                    "its iterations weigh each batch's seeds together, across "
                                    "the parts; expected importance_sampling=0")
        seeds, k = self._draw_args(where, seed_nodes, fanout, edge_dir, prob, ("in",))
        skip = self._routed(exclude_edges)
        seed = torch.randint(2**62, (1,)) if random_seed is None else \
            torch.as_tensor(random_seed.asnumpy() if hasattr(random_seed, "asnumpy")
                            else random_seed, dtype=torch.int64).reshape(-1)
        options = SampleOptions(prob, labor=tuple(self._sampler.agree(seed).tolist()),
                                seed2=float(seed2_contribution))
        frontier = self._frontier(self._edges(self._sampler.sample_layer, seeds, k, skip,
                                              options))
        return frontier, [torch.zeros(0)]

    def _draw_args(self, where: str, seed_nodes, fanout, edge_dir, prob,
                   directions: tuple[str, ...]) -> tuple[torch.Tensor, int]:
        """The seeds (unique) and fanout of a draw, its options checked first (every rank
        refuses the same call before any exchange)."""
        if edge_dir not in directions:
            raise NotSupportedError(f"{where}(edge_dir={edge_dir!r}): expected "
                                    f"{' or '.join(map(repr, directions))}")
        if isinstance(fanout, dict) or isinstance(seed_nodes, dict):
            raise NotSupportedError(f"{where}: per-type seeds or fanouts need a graph with "
                                    "types; this one has none")
        if prob is not None and prob not in (names := self._ids.edata.keys()):
            raise UnknownNameError(f"{where}(prob={prob!r}): not edge data of this graph; "
                                   f"it has {sorted(names)}")
        k = -1 if fanout is None or int(fanout) < 0 else int(fanout)
        return self._nodes(seed_nodes, where), k

    def _routed(self, exclude_edges):
        """The user's edge ids ``exclude_edges`` routed to the members storing them
        (collective; None: none)."""
        if exclude_edges is None:
            return None
        eids = torch.as_tensor(exclude_edges, dtype=torch.int64).reshape(-1)
        return self._sampler.exclusions(self._ids.edata.part_ids(eids))

    def _out_draw(self, seeds: torch.Tensor, k: int, prob, exclude_edges,
                  replace: bool) -> tuple[torch.Tensor, ...]:
        """Up to ``k`` out-edges of each seed: every out-edge of the seeds but
        ``exclude_edges``, gathered from every part (collective), then drawn among them by
        the package's draw (:func:`~dglx_dist.sampling.draw_in_edges` over them grouped by
        source, with ``prob``'s rows read from the store)."""
        src, dst, eid = self._edges(self._sampler.out_edges, seeds)
        if exclude_edges is not None:
            keep = ~torch.isin(eid, torch.as_tensor(exclude_edges,
                                                    dtype=torch.int64).reshape(-1))
            src, dst, eid = src[keep], dst[keep], eid[keep]
        nodes, local = torch.unique(torch.cat([seeds, src, dst]), return_inverse=True)
        n, m = seeds.numel(), src.numel()
        by_source = InEdges.of(local[n + m:], local[n:n + m], nodes.numel())
        weights = None if prob is None else self._ids.edata[prob][eid]
        _, pos = draw_in_edges(by_source, local[:n], k, replace, weights)
        picked = by_source.eid.index_select(0, pos)
        return src[picked], dst[picked], eid[picked]

    def in_subgraph(self, nodes, relabel_nodes: bool = False, **kwargs) -> dgl.DGLGraph:
        """DGL's ``in_subgraph``: every in-edge of ``nodes``, over every node (collective)."""
        if relabel_nodes:
            raise NotSupportedError(f"{self._what}: g.in_subgraph(relabel_nodes=True) is not "
                                    "supported; expected relabel_nodes=False")
        seeds = self._nodes(nodes, f"{self._what}: g.in_subgraph")
        return self._frontier(self._edges(self._sampler.sample_layer, seeds, -1))

    def subgraph(self, nodes, relabel_nodes: bool = True, store_ids: bool = True,
                 output_device=None, **kwargs) -> dgl.DGLGraph:
        """DGL's ``subgraph`` (node-induced, what ``ShaDowKHopSampler`` calls): the edges
        whose ends are both in ``nodes``, in edge id order, over ``nodes`` in their order
        with ``ndata[dgl.NID]`` (``relabel_nodes=False``: over every node), and
        ``edata[dgl.EID]`` (collective)."""
        where = f"{self._what}: g.subgraph"
        if isinstance(nodes, dict):
            raise NotSupportedError(f"{where}: per-type nodes need a graph with types; this "
                                    "one has none")
        ids = as_node_ids(nodes, self._ids.num_nodes(), where)
        if torch.unique(ids).numel() != ids.numel():
            raise InvalidValueError(f"{where}: the nodes repeat; expected each node once")
        src, dst, eid = self._edges(self._sampler.sample_layer, torch.unique(ids), -1)
        inside = torch.isin(src, ids)
        order = torch.argsort(eid[inside])
        src, dst, eid = src[inside][order], dst[inside][order], eid[inside][order]
        if not relabel_nodes:
            sub = dgl.graph((src, dst), num_nodes=self._ids.num_nodes())
        else:  # each end's position in ``nodes``
            sort = torch.sort(ids)
            local = (sort.indices[torch.searchsorted(sort.values, src)],
                     sort.indices[torch.searchsorted(sort.values, dst)])
            sub = dgl.graph(local, num_nodes=ids.numel())
            sub.ndata[dgl.NID] = ids
        sub.edata[dgl.EID] = eid
        return sub

    def in_edges(self, v, form: str = "uv", etype=None):
        """DGL's ``in_edges``: the in-edges of ``v`` as ``(u, v)``, their ids (``"eid"``) or
        all three (``"all"``), ids in the user's graph (collective)."""
        where = f"{self._what}: g.in_edges"
        return _form(self._edges(self._sampler.sample_layer, self._nodes(v, where), -1), form,
                     where)

    def out_edges(self, u, form: str = "uv", etype=None):
        """DGL's ``out_edges`` of ``u``, as :meth:`in_edges` (collective: every part's)."""
        where = f"{self._what}: g.out_edges"
        return _form(self._edges(self._sampler.out_edges, self._nodes(u, where)), form, where)

    def in_degrees(self, v=None, etype=None):
        """DGL's ``in_degrees`` of ``v`` (every node's when None; an int for one id), read
        by this rank alone."""
        return self._ids.in_degrees(v)

    def out_degrees(self, u=None, etype=None):
        """DGL's ``out_degrees`` of ``u``, as :meth:`in_degrees`."""
        return self._ids.out_degrees(u)

    def find_edges(self, eid, etype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """DGL's ``find_edges``: the endpoints of the user's edge ids ``eid``."""
        return self._ids.find_edges(torch.as_tensor(eid, dtype=torch.int64))

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotSupportedError(f"{self._what} asked the distributed graph for {name!r}, "
                                f"which it does not serve to samplers; it serves "
                                f"{', '.join(SERVED)} (call DGL's methods on g, not DGL's "
                                "functions that need a local graph)")

    def _nodes(self, nodes, where: str) -> torch.Tensor:
        """``nodes`` as unique int64 ids (each node's edges are drawn once)."""
        return torch.unique(as_node_ids(nodes, self._ids.num_nodes(), where))

    def _edges(self, fn, nodes: torch.Tensor, *args) -> tuple[torch.Tensor, ...]:
        """``fn`` (a sampler's method) of user ids ``nodes``: its ``(src, dst, eid)`` with
        the ends in user ids."""
        src, dst, eid = fn(self._ids.part_ids(nodes), *args)
        return self._ids.node_ids(src), self._ids.node_ids(dst), eid

    def _frontier(self, edges) -> dgl.DGLGraph:
        src, dst, eid = edges
        frontier = dgl.graph((src, dst), num_nodes=self._ids.num_nodes())
        frontier.edata[dgl.EID] = eid
        return frontier


def _form(edges: tuple[torch.Tensor, ...], form: str, where: str):
    """DGL's ``form`` of ``(src, dst, eid)``: ``"uv"``, ``"eid"`` or ``"all"``."""
    if form not in ("uv", "eid", "all"):
        raise InvalidValueError(f"{where}(form={form!r}); expected 'uv', 'eid' or 'all'")
    src, dst, eid = edges
    return {"uv": (src, dst), "eid": eid, "all": (src, dst, eid)}[form]


@dataclasses.dataclass(frozen=True, eq=False)
class UserSampler:
    """A DGL sampler run over a :class:`SamplingGraph` of the strategy's sampler: a
    ``BlockSampler`` of the user's own or DGL's (``LaborSampler``), whose ``sample_blocks``
    gives blocks, checked to chain (each block's destinations the next one's sources, the
    last one's the seeds); or another ``dgl.dataloading.Sampler`` whose ``sample`` gives one
    subgraph (DGL's ``ShaDowKHopSampler``: the subgraph its draws induce), checked to carry
    its nodes' ids and to be drawn for the seeds.

    Attributes:
        sampler: the DGL sampler.
        graph: the distributed graph (:class:`GraphIds`).
    """

    sampler: object
    graph: GraphIds

    @property
    def what(self) -> str:
        return f"DataLoader: sampler {type(self.sampler).__name__}"

    def seed(self, value: int) -> None:
        """Seeds DGL's random numbers, which the sampler draws with."""
        dgl.seed(value)

    def draw(self, base: BlockSampler, seeds: torch.Tensor,
             exclude: torch.Tensor | None = None) -> list[dgl.DGLGraph] | dgl.DGLGraph:
        """The blocks (or the subgraph) the sampler draws for partitioned ids ``seeds`` but
        the partitioned edge ids ``exclude`` (its ``exclude_eids``, in the user's ids), their
        ``dgl.NID`` in partitioned ids (collective)."""
        seeds = self.graph.node_ids(seeds)
        skip = None if exclude is None else self.graph.edata.ids(exclude)
        graph = SamplingGraph(base, self.graph, self.what)
        if isinstance(self.sampler, dgl.dataloading.BlockSampler):
            out, call = self.sampler.sample_blocks(graph, seeds, exclude_eids=skip), \
                "sample_blocks"
        else:
            out, call = self.sampler.sample(graph, seeds, exclude_eids=skip), "sample"
        drawn = out[2] if isinstance(out, tuple) and len(out) == 3 else None
        if isinstance(drawn, dgl.DGLGraph) and not drawn.is_block:
            self._check_subgraph(drawn, out[1], seeds)
            drawn.ndata[dgl.NID] = self.graph.part_ids(drawn.ndata[dgl.NID])
            return drawn
        if not isinstance(drawn, list):
            raise InvalidValueError(f"{self.what}.{call} returned {type(out).__name__}; "
                                    "expected (input_nodes, output_nodes, blocks), as DGL's "
                                    "BlockSampler does, or (input_nodes, output_nodes, "
                                    "subgraph), as its ShaDowKHopSampler does")
        self._check_chain(drawn, seeds)
        for block in drawn:
            for data in (block.srcdata, block.dstdata):
                data[dgl.NID] = self.graph.part_ids(data[dgl.NID])
        return drawn

    def _check_subgraph(self, sub: dgl.DGLGraph, outputs, seeds: torch.Tensor) -> None:
        if dgl.NID not in sub.ndata:
            raise InvalidValueError(f"{self.what}: its subgraph has no ndata[dgl.NID] (make it "
                                    "with g.subgraph(nodes))")
        outputs = torch.as_tensor(outputs)
        if outputs.numel() != seeds.numel() or not bool((outputs == seeds).all()):
            raise InvalidValueError(f"{self.what}: the output nodes of its subgraph are not "
                                    "the seeds it was given")

    def _check_chain(self, blocks: list, seeds: torch.Tensor) -> None:
        want, where = seeds, "the seeds"
        for i in reversed(range(len(blocks))):
            block = blocks[i]
            if not getattr(block, "is_block", False) or dgl.NID not in block.dstdata:
                raise InvalidValueError(f"{self.what}: blocks[{i}] is not a block with "
                                        "dstdata[dgl.NID] (make it with dgl.to_block)")
            dst = block.dstdata[dgl.NID]
            if dst.numel() != want.numel() or not bool((dst == want).all()):
                raise InvalidValueError(f"{self.what}: the blocks do not chain: blocks[{i}]'s "
                                        f"destination nodes are not {where}")
            want, where = block.srcdata[dgl.NID], f"blocks[{i}]'s source nodes"
