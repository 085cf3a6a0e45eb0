"""The held-out pairs the link task ranks (``dglx_dist.tasks.link.heldout``): every system
compared ranks the same pairs against the same negatives, and ``eval_pairs`` ranks a seeded
subset of them."""
import torch

from dglx_dist.config import TaskConfig
from dglx_dist.tasks.link import eval_negatives, heldout

N = 1000  # nodes
U, V = torch.arange(200) * 3, torch.arange(200) * 3 + 1


def test_every_pair_by_default_with_the_negatives_of_the_seed():
    u, v, neg, nodes = heldout((U, V), TaskConfig(), N, seed=7)
    assert torch.equal(u, U) and torch.equal(v, V)
    assert torch.equal(neg, eval_negatives(200, N, 100, 7)) and neg.shape == (200, 100)
    assert torch.equal(nodes, torch.unique(torch.cat([U, V, neg.reshape(-1)])))


def test_eval_pairs_ranks_a_seeded_subset_of_whole_pairs():
    task = TaskConfig(eval_pairs=30)
    u, v, neg, nodes = heldout((U, V), task, N, seed=7)
    assert u.numel() == v.numel() == 30 and neg.shape == (30, 100)
    assert torch.equal(v, u + 1) and bool((u % 3 == 0).all())  # pairs kept whole
    assert torch.equal(u, u.sort().values) and u.unique().numel() == 30  # in order, no repeat
    again = heldout((U, V), task, N, seed=7)
    assert all(torch.equal(a, b) for a, b in zip((u, v, neg, nodes), again))
    assert not torch.equal(heldout((U, V), task, N, seed=8)[0], u)  # the seed chooses
    # the embeddings read: the pairs' ends and their negatives, nothing else
    assert set(nodes.tolist()) == set(u.tolist()) | set(v.tolist()) | set(neg.flatten().tolist())
    everything = heldout((U, V), TaskConfig(eval_pairs=500), N, seed=7)
    assert torch.equal(everything[0], U) and everything[2].shape == (200, 100)
