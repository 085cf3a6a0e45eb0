"""EAS's per-node cap on sampled in-edges (no processes)."""
import torch

from dglx_dist.strategies.granndis.eas import capped


def _edges():
    gen = torch.Generator().manual_seed(0)
    dst = torch.randint(0, 50, (2000,), generator=gen)
    src = torch.randperm(2000, generator=gen)  # distinct sources: edges are identifiable
    return src, dst


def test_capped_keeps_min_k_and_degree_distinct_edges_per_node():
    src, dst = _edges()
    for k in (1, 3, 40, 1000):
        s, d = capped(src, dst, k, torch.Generator().manual_seed(1))
        assert s.unique().numel() == s.numel()
        original = dict(zip(src.tolist(), dst.tolist()))
        assert all(original[a] == b for a, b in zip(s.tolist(), d.tolist()))
        want = torch.bincount(dst, minlength=50).clamp(max=k)
        assert torch.equal(torch.bincount(d, minlength=50), want), k


def test_capped_all_with_minus_one_and_reproducible_with_a_seed():
    src, dst = _edges()
    assert capped(src, dst, -1, torch.Generator())[0] is src
    a = capped(src, dst, 2, torch.Generator().manual_seed(5))
    b = capped(src, dst, 2, torch.Generator().manual_seed(5))
    c = capped(src, dst, 2, torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def test_capped_samples_uniformly():
    src = torch.arange(10)
    dst = torch.zeros(10, dtype=torch.int64)
    gen = torch.Generator().manual_seed(0)
    hits = torch.zeros(10)
    for _ in range(2000):
        hits[capped(src, dst, 3, gen)[0]] += 1
    assert hits.min() > 0.25 * 2000 and hits.max() < 0.35 * 2000  # 0.3 each
