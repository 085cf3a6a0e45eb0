import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dglx_dist.partition.book import (FeatureSlices, HashBook, RangeBook, book_from_json,
                                      hash_ids)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=8))
def test_range_book_matches_brute_force(sizes):
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    book = RangeBook(offsets)
    n = int(offsets[-1])
    ids = np.arange(n)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    assert np.array_equal(book.owner(ids), owner)
    for p in range(len(sizes)):
        core = book.core_ids(p)
        assert np.array_equal(book.to_local(core), np.arange(core.size))
    assert book_from_json(book.to_json()).to_json() == book.to_json()


@settings(max_examples=30)
@given(st.integers(1, 500), st.integers(1, 7), st.integers(0, 2**63 - 1))
def test_hash_book_partitions_every_id_once(n, k, seed):
    book = HashBook(n, k, seed)
    ids = np.arange(n)
    owner = book.owner(ids)
    assert owner.min() >= 0 and owner.max() < k
    cores = [book.core_ids(p) for p in range(k)]
    assert np.array_equal(np.sort(np.concatenate(cores)), ids)
    for p, core in enumerate(cores):
        assert np.all(owner[core] == p)
        assert np.array_equal(book.to_local(core), np.arange(core.size))
    # computable on the fly: a fresh book with the same seed agrees, no table needed
    assert np.array_equal(HashBook(n, k, seed).owner(ids[::-1]), owner[::-1])


@pytest.mark.parametrize("n, k", [(1, 1), (50, 1), (101, 3), (300, 7)])
def test_hash_book_local_ids_are_ranks_among_the_owners_ids(n, k, monkeypatch):
    """An id's local id is its rank among its owner's ids, for ids of every part in any
    order, through the table the book makes on its first lookup (made here in blocks of 7
    ids, so that a part's ids cross blocks), and for a torch request in torch."""
    import dglx_dist.partition.book as book_module

    monkeypatch.setattr(book_module, "_BLOCK", 7)
    book = HashBook(n, k, 11)
    ids = np.random.default_rng(n).integers(0, n, 3 * n)
    owner = book.owner(ids)
    want = [int(np.sum(book.owner(np.arange(i)) == o)) for i, o in zip(ids, owner)]
    got = book.to_local(torch.from_numpy(ids))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert got.tolist() == want
    assert book.to_local(ids).tolist() == want  # the table made once, read again


def test_hash_is_balanced_and_seeded():
    ids = np.arange(100_000)
    counts = np.bincount(HashBook(100_000, 8, 1).owner(ids), minlength=8)
    assert counts.max() / counts.mean() < 1.03
    assert not np.array_equal(hash_ids(ids, 1), hash_ids(ids, 2))


def test_book_accepts_torch_and_checks_range():
    book = RangeBook([0, 3, 5])
    out = book.owner(torch.tensor([0, 3, 4]))
    assert isinstance(out, torch.Tensor) and out.tolist() == [0, 1, 1]
    with pytest.raises(IndexError, match=r"node id 5 is outside \[0, 5\)"):
        book.owner(np.array([5]))
    with pytest.raises(IndexError, match="part 2"):
        book.core_ids(2)


@given(st.integers(1, 300), st.integers(1, 16))
def test_feature_slices_cover_columns_once(feat_dim, parts):
    if parts > feat_dim:
        with pytest.raises(ValueError, match="cannot split"):
            FeatureSlices.even(feat_dim, parts)
        return
    fs = FeatureSlices.even(feat_dim, parts)
    cols = np.concatenate([np.arange(feat_dim)[fs.slice(p)] for p in range(parts)])
    assert np.array_equal(cols, np.arange(feat_dim))
    widths = np.diff(fs.bounds)
    assert widths.max() - widths.min() <= 1


def test_book_from_json_rejects_unknown():
    with pytest.raises(ValueError, match="unknown node book kind 'grid'"):
        book_from_json({"kind": "grid"})
    with pytest.raises(ValueError, match="missing or has a bad field"):
        book_from_json({"kind": "hash", "seed": 1})
