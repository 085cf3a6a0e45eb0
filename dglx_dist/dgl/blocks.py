"""The package's blocks as DGL's: :func:`to_dgl_block`, the one path from the package's
:class:`~dglx_dist.graphcore.block.Block` to DGL's ``DGLBlock``, and :func:`dgl_batch`, a
loader's batch with its blocks and pair graphs made DGL's (what DGL's loaders in
:mod:`dglx_dist.dgl` hand a DGL script). The package's loops never call them: a model made of
``dgl.nn`` modules gets DGL's blocks at its own edge (:mod:`~dglx_dist.dgl.models`).
"""
from __future__ import annotations

import functools

import dgl
import torch
from dgl.frame import Frame
from dgl.heterograph import DGLBlock

from dglx_dist.dgl.conversion import to_dgl
from dglx_dist.graphcore.block import PLAN, UNTYPED, Block
from dglx_dist.graphcore.heterograph import Graph
from dglx_dist.strategies.steps import Blocks

__all__ = ["to_dgl_block", "dgl_blocks", "dgl_batch"]


def to_dgl_block(block: Block):
    """DGL's block of the same structure, with the rows on ``block`` (``srcdata`` /
    ``dstdata[dgl.NID]`` the ids, ``edata[dgl.EID]`` the edges' ids) and its ``plan`` (the
    attribute ``PLAN``). With types, only the edge types with edges are kept (every type when
    none has one, or with ``all_etypes``). The structure is made once per block and kept on
    it (``block.forms``, shared by its local copies); each call is a copy with rows of its
    own."""
    if "dgl" not in block.forms:
        block.forms["dgl"] = _structure(block)
    if block.untyped_form:
        out = _with_rows(block.forms["dgl"], [block.frame(s, 0) for s in ("src", "dst", "edge")],
                         (block.src_nodes.numel(), block.num_dst[0], block.src.numel()))
    else:
        out = block.forms["dgl"].local_var()
        for t, name in enumerate(block.ntypes):
            out.srcnodes[name].data.update(block.frame("src", t))
            out.dstnodes[name].data.update(block.frame("dst", t))
        for etype in out.canonical_etypes:
            out.edges[etype].data.update(block.frame("edge", block.etype_index(etype)))
    if block.plan is not None:
        setattr(out, PLAN, block.plan)
    return out


def dgl_blocks(blocks: list) -> Blocks:
    """A step's blocks as DGL's (the package's converted with their rows, DGL's as they
    are), with the step's state."""
    state = getattr(blocks, "state", None)
    return Blocks([to_dgl_block(b) if isinstance(b, Block) else b for b in blocks], state)


def dgl_batch(batch: tuple) -> tuple:
    """A loader's batch as DGL's loaders yield it: its blocks DGL's (:func:`dgl_blocks`), its
    pair graphs DGL's graphs; ids, and a subgraph step's DGL graph, as they are."""
    return tuple(dgl_blocks(x) if isinstance(x, Blocks) else
                 to_dgl(x) if isinstance(x, Graph) else x for x in batch)


def _structure(block: Block):
    """DGL's graph index (one type) or DGL's empty block (with types) of ``block``."""
    if block.untyped_form:
        return _untyped_index(block.src, block.dst, block.src_nodes.numel(), block.num_dst[0])
    counts = torch.bincount(block.etype, minlength=len(block.canonical_etypes)).tolist()
    cut = list(zip(*(torch.split(x, counts) for x in (block.src, block.dst))))
    return dgl.create_block({block.canonical_etypes[i]: cut[i] for i in block.relation_types()},
                            num_src_nodes=dict(zip(block.ntypes, block.num_src)),
                            num_dst_nodes=dict(zip(block.ntypes, block.num_dst)),
                            device=block.device)


def _untyped_index(src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int):
    """DGL's graph index of a block of one node and edge type (``_N``, ``_E``) with edges
    ``src -> dst``, as ``dgl.create_block`` builds it less its checks and its general case
    (which take it 4-8x as long): the package's numbering has put every end below its
    count. These are DGL 2.1's own internals (what its ``create_block`` calls); a DGL
    without them gets its public call's."""
    try:
        from dgl import graph_index, heterograph_index
    except ImportError:
        return dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)._graph
    relation = heterograph_index.create_unitgraph_from_coo(2, num_src, num_dst, src, dst,
                                                           ["coo", "csr", "csc"])
    return heterograph_index.create_heterograph_from_relations(
        _metagraph(graph_index), [relation], None)  # the node counts: the relation's


@functools.cache
def _metagraph(graph_index):
    """DGL's metagraph of a block of one type (``_N`` -> ``_N``), immutable: made once."""
    return graph_index.from_coo(2, [0], [1], True)


def _with_rows(index, rows: list[dict], counts: tuple[int, int, int]):
    """DGL's block of one type on the graph ``index`` with source, destination and edge rows
    ``rows`` (``counts`` of each) as its frames (as ``to_block``; its views take 3-4x)."""
    frames = [Frame(row, n) for row, n in zip(rows, counts)]
    return DGLBlock(index, (list(UNTYPED[0]), list(UNTYPED[0])), [UNTYPED[1][0][1]],
                    frames[:2], frames[2:])
