"""distdgl's seed mixing: every epoch a share of every rank's seeds is pooled and dealt back."""
import torch
from hypothesis import given, settings, strategies as st

from dglx_dist.strategies.distdgl import traded_seeds


def _ranks(sizes):
    start, out = 0, []
    for n in sizes:
        out.append(torch.arange(start, start + n))
        start += n
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=6), st.floats(0, 1), st.integers(0, 99))
def test_ranks_keep_their_counts_and_together_hold_every_seed(sizes, share, seed):
    everyone = _ranks(sizes)
    got = [traded_seeds(everyone, r, share, seed) for r in range(len(sizes))]
    assert [g.numel() for g in got] == sizes
    assert torch.equal(torch.cat(got).sort().values, torch.cat(everyone))
    for r, ids in enumerate(everyone):  # a rank keeps all but the share it gave
        kept = torch.isin(got[r], ids).sum()
        assert kept >= ids.numel() - round(share * ids.numel())


def test_no_share_keeps_the_split_and_a_whole_share_mixes_it():
    everyone = _ranks([500, 500, 500, 500])
    assert all(torch.equal(traded_seeds(everyone, r, 0.0, 1), everyone[r]) for r in range(4))
    mixed = traded_seeds(everyone, 0, 1.0, 1)
    own = int(torch.isin(mixed, everyone[0]).sum())
    assert 75 < own < 175  # about a quarter of rank 0's seeds are its own
    assert not torch.equal(mixed, traded_seeds(everyone, 0, 1.0, 2))  # each epoch anew
