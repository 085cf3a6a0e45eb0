"""Tiny deterministic graphs for unit tests: a few communities, both edge directions."""
from __future__ import annotations

import numpy as np

from dglx_dist.data.dataset import GraphDataset

__all__ = ["tiny_dataset"]


def tiny_dataset(num_nodes: int = 60, avg_degree: int = 4, feat_dim: int = 8,
                 num_classes: int = 3, seed: int = 0, isolated: int = 2) -> GraphDataset:
    """A small community graph with masks; the last ``isolated`` nodes have no edges.

    Edges are mostly inside communities (label = community), listed in both directions,
    without self loops or duplicates; features are the class index plus noise.
    """
    rng = np.random.default_rng(seed)
    label = rng.integers(0, num_classes, num_nodes)
    connected = num_nodes - isolated
    m = connected * avg_degree // 2
    src = rng.integers(0, connected, m)
    same = rng.random(m) < 0.8
    pool = [np.nonzero(label[:connected] == c)[0] for c in range(num_classes)]
    dst = rng.integers(0, connected, m)
    for c in range(num_classes):
        sel = same & (label[src] == c)
        if pool[c].size:
            dst[sel] = rng.choice(pool[c], int(sel.sum()))
    keep = src != dst
    pairs = np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)], 1)[keep], axis=0)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]]).astype(np.int64)
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]]).astype(np.int64)
    order = rng.permutation(src.size)
    feat = (label[:, None] + 0.5 * rng.standard_normal((num_nodes, feat_dim))).astype(np.float32)
    split = rng.permutation(num_nodes)
    train, val, test = (np.zeros(num_nodes, bool) for _ in range(3))
    train[split[: num_nodes // 3]] = True
    val[split[num_nodes // 3: num_nodes // 2]] = True
    test[split[num_nodes // 2:]] = True
    return GraphDataset(src[order], dst[order], feat, label.astype(np.int64), train, val, test,
                        num_classes, {"name": "tiny", "seed": seed})
