"""Distributed neighbor sampling over partitions, in torch, into the package's own blocks
(DGL's at the edge); the training-set split. Nothing here imports DGL at import."""
from dglx_dist.graphcore.block import Block
from dglx_dist.sampling.blocks import id_dtype, pack_block, unpack_block
from dglx_dist.sampling.in_edges import InEdges, draw_in_edges
from dglx_dist.sampling.local import LocalSampler, whole_edge_weights, whole_graph
from dglx_dist.sampling.options import UNIFORM, SampleOptions, PartEdgeWeights
from dglx_dist.sampling.sampler import PartitionSampler
from dglx_dist.sampling.split import even_chunk, owner_balanced_chunks

__all__ = ["LocalSampler", "PartitionSampler", "whole_graph", "SampleOptions", "UNIFORM",
           "PartEdgeWeights", "whole_edge_weights", "id_dtype", "Block", "InEdges",
           "draw_in_edges",
           "pack_block", "unpack_block", "even_chunk", "owner_balanced_chunks"]
