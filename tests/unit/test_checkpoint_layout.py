"""The files a training checkpoint holds (dglx_dist.checkpoint.layout), without processes: rank
files and embedding shards are named, round-trip into the rows in place, and a shard of another
tensor is refused."""
import pytest
import torch

from dglx_dist.checkpoint.layout import embedding_shards, encode_shards, rank_file, restore_shards
from dglx_dist.errors import CheckpointError
from dglx_dist.kvstore import DistEmbedding, LocalKVStore, RowPolicy, SparseAdam
from dglx_dist.partition.book import RangeBook

N, D = 9, 3


def _embeddings():
    store = LocalKVStore()
    policy = RowPolicy(RangeBook([0, 4, N]))
    embs = [DistEmbedding(store, "a", N, D, policy, init=lambda s, d: torch.rand(s, dtype=d)),
            DistEmbedding(store, "b", N, D, policy)]
    SparseAdam(embs[:1], lr=0.1)  # its state tensors are "a/..." and travel with "a"
    return embs


def test_rank_file_names():
    assert rank_file(0) == "rank-00000.pt" and rank_file(12) == "rank-00012.pt"


def test_shards_are_named_per_embedding_tensor_and_part_and_restore_in_place():
    embs = _embeddings()
    shards = list(embedding_shards(embs))
    assert [s.file for s in shards][:2] == ["emb0-0-part00000.pt", "emb0-0-part00001.pt"]
    assert {s.name for s in shards} == {"a", "a/adam_m", "a/adam_v", "a/adam_step", "b"}
    assert all(s.file.startswith("emb1-0-") for s in shards if s.name == "b")
    blobs = encode_shards(embs)
    saved = {s.file: s.rows.clone() for s in shards}
    for s in shards:
        s.rows.add_(1)
    restore_shards(embs, blobs.__getitem__)
    assert all(torch.equal(s.rows, saved[s.file]) for s in embedding_shards(embs))


def test_a_shard_of_another_tensor_is_refused():
    embs = _embeddings()
    blobs = encode_shards(embs)
    first, second = sorted(blobs)[:2]
    blobs[first], blobs[second] = blobs[second], blobs[first]
    with pytest.raises(CheckpointError, match="expected 'a' part 0"):
        restore_shards(embs, blobs.__getitem__)
