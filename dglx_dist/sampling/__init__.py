"""Distributed neighbor sampling over partitions -> DGL blocks; training-set split."""
from dglx_dist.sampling.blocks import id_dtype, make_block, pack_block, unpack_block
from dglx_dist.sampling.local import LocalSampler, whole_edge_weights, whole_graph
from dglx_dist.sampling.options import UNIFORM, SampleOptions, part_edge_weights
from dglx_dist.sampling.sampler import PartitionSampler
from dglx_dist.sampling.split import even_chunk, owner_balanced_chunks

__all__ = ["LocalSampler", "PartitionSampler", "whole_graph", "SampleOptions", "UNIFORM",
           "part_edge_weights", "whole_edge_weights", "id_dtype", "make_block",
           "pack_block", "unpack_block", "even_chunk", "owner_balanced_chunks"]
