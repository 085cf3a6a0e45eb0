"""The edges of the synthetic graph: a degree-corrected stochastic block model (DC-SBM) over
the communities (labels), sampled in fixed RNG chunks so the output depends only on the
config (:mod:`dglx_dist.data.synthetic`, whose module docstring has the model); and what both
generators do alike (:mod:`dglx_dist.data.mag` too): config checks, draws by weight within a
group (:class:`Picker`), class centroids, splits."""
from __future__ import annotations

import enum
import logging
import math
import numbers
from typing import Any

import numpy as np

from dglx_dist.cli_flags import check_fields
from dglx_dist.errors import InvalidValueError
from dglx_dist.registry import Bounds

__all__ = ["Stream", "EDGE_CHUNK", "CENTROID_DISTANCE", "edges", "rng", "centroids",
           "split_masks", "check_numbers", "Picker"]

log = logging.getLogger("dglx_dist.data.synthetic")


def check_numbers(config: Any, integers: tuple[str, ...],
                  bounds: dict[str, Bounds] | None = None) -> None:
    """A generator config's ``__post_init__``: the ``integers`` fields are integers, every
    number is stored as a plain int or float (JSON-friendly: numpy's too), and each is in
    its ``bounds`` (a field's own, :func:`~dglx_dist.cli_flags.check_fields`, or here).

    Raises:
        InvalidValueError: naming the flag, its value and what is expected."""
    for name, value in vars(config).items():
        flag, field = f"--{name.replace('_', '-')}", f"({type(config).__name__}.{name})"
        if name in integers and (isinstance(value, bool) or
                                 not isinstance(value, numbers.Integral)):
            raise InvalidValueError(f"{flag} {value!r}: expected an integer {field}")
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if number:
            object.__setattr__(config, name, int(value) if name in integers else float(value))
        limit = (bounds or {}).get(name)
        if limit is not None and not (number and limit.holds(value)):
            raise InvalidValueError(f"{flag} {value!r}: expected "
                                    f"{limit.describe('a finite number')} {field}")
    check_fields(config)


class Stream(enum.IntEnum):
    """The purposes of the generator's independent RNG streams (their values are part of the
    output: changing one changes every graph)."""

    LABELS, SPLIT, THETA, CENTROIDS, FEATURES, EDGES, SUBSET, SHUFFLE, EDGE_FEAT = range(9)


EDGE_CHUNK = 1 << 20  # candidate edges per edge RNG chunk
_MAX_ROUNDS = 12


def rng(config, *key: int) -> np.random.Generator:
    """The generator for one purpose (and chunk): independent of every other draw."""
    return np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=key))


CENTROID_DISTANCE = 3.0
"""Typical distance between two class centroids, in units of unit-variance noise."""


def centroids(rng: np.random.Generator, num_classes: int, feat_dim: int) -> np.ndarray:
    """The ``(num_classes, feat_dim)`` float32 class centroids, about
    :data:`CENTROID_DISTANCE` apart."""
    scale = CENTROID_DISTANCE / math.sqrt(2 * feat_dim)
    return (rng.standard_normal((num_classes, feat_dim)) * scale).astype(np.float32)


def split_masks(rng: np.random.Generator, n: int, sizes: list[int]) -> list[np.ndarray]:
    """Disjoint random masks over ``n`` nodes, of ``sizes`` nodes each (train, val, test)."""
    perm, bounds = rng.permutation(n), np.cumsum([0, *sizes])
    masks = [np.zeros(n, dtype=bool) for _ in sizes]
    for mask, lo, hi in zip(masks, bounds[:-1], bounds[1:]):
        mask[perm[lo:hi]] = True
    return masks


def _theta(config) -> np.ndarray:
    """Degree propensities: capped Pareto with density ~ x**-degree_exponent, or all ones."""
    n, gamma = config.num_nodes, config.degree_exponent
    if gamma == 0:
        return np.ones(n)
    u = rng(config, Stream.THETA).random(n)
    theta = (1.0 - u) ** (-1.0 / (gamma - 1.0))
    mean_degree = max(config.num_edges / n, 1.0)
    ratio = max(1.0, min(math.sqrt(n / mean_degree), (n - 1) / mean_degree))
    for _ in range(4):  # cap relative to the capped mean (converges quickly)
        np.minimum(theta, ratio * theta.mean(), out=theta)
    return theta


class Picker:
    """Draws items proportional to their weight, from one group or from all: items sorted by
    group share one cumulative-weight array in which a group is a contiguous interval, and a
    uniform number inside that interval maps back to an item (``np.searchsorted``). Group
    ``num_groups`` (and any empty group) stands for every item."""

    def __init__(self, group: np.ndarray, weight: np.ndarray, num_groups: int):
        self.order = np.argsort(group, kind="stable")
        self.cum = np.cumsum(weight[self.order])
        counts = np.bincount(group, minlength=num_groups)
        end = np.append(np.cumsum(counts), group.size)
        start = np.append(end[:-1] - counts, 0)
        empty = start == end
        self.start, self.end = np.where(empty, 0, start), np.where(empty, group.size, end)
        self.lo = np.where(self.start > 0, self.cum[self.start - 1], 0.0)
        self.hi = self.cum[self.end - 1]
        self.all = num_groups

    def draw(self, rng: np.random.Generator, groups: np.ndarray, focus: float) -> np.ndarray:
        """One item per entry of ``groups``: from that group with probability ``focus``, else
        from all items."""
        groups = np.where(rng.random(groups.size) < focus, groups, self.all)
        lo, hi = self.lo[groups], self.hi[groups]
        u = lo + rng.random(groups.size) * (hi - lo)
        pos = np.searchsorted(self.cum, u, "right")
        return self.order[np.clip(pos, self.start[groups], self.end[groups] - 1)]


class _Sampler(Picker):
    """Draws candidate undirected pairs from the DC-SBM as sorted unique int64 keys: the
    nodes are the items, weighted by ``theta``, grouped by community (none is empty)."""

    def __init__(self, config, label: np.ndarray):
        super().__init__(label, _theta(config), config.num_classes)
        self.config, self.n = config, config.num_nodes
        self.comm = label[self.order]
        self.total = float(self.cum[-1])

    def keys(self, inside: bool, rnd: int, count: int) -> np.ndarray:
        """``count`` intra- (or inter-) community candidates of round ``rnd``, in chunks."""
        parts = [self._chunk(inside, rnd, c, min(EDGE_CHUNK, count - c * EDGE_CHUNK))
                 for c in range(-(-count // EDGE_CHUNK))]
        return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def _chunk(self, inside: bool, rnd: int, chunk: int, size: int) -> np.ndarray:
        gen, last = rng(self.config, Stream.EDGES, int(inside), rnd, chunk), self.n - 1
        u = gen.random(size) * self.total
        s_pos = np.minimum(np.searchsorted(self.cum, u, "right"), last)
        c = self.comm[s_pos]
        lo, mass = self.lo[c], self.hi[c] - self.lo[c]
        x = gen.random(size)
        if inside:  # proportional to theta inside the community's mass interval
            x = lo + x * mass
        else:  # proportional to theta over the rest: skip over the community's interval
            x *= self.total - mass
            x += (x >= lo) * mass
        d_pos = np.minimum(np.searchsorted(self.cum, x, "right"), last)
        if inside:
            d_pos = np.clip(d_pos, self.start[c], self.end[c] - 1)
        src, dst = self.order[s_pos], self.order[d_pos]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        return np.minimum(src, dst) * self.n + np.maximum(src, dst)


def edges(config, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both directions of ``num_edges // 2`` distinct undirected pairs, in shuffled order."""
    target = config.num_edges // 2
    if target == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sampler = _Sampler(config, label)
    n_in = int(round(config.homophily * target))
    keys = np.concatenate([_distinct_pairs(sampler, True, n_in),
                           _distinct_pairs(sampler, False, target - n_in)])
    if keys.size < target:
        log.warning("synthetic graph: only %d distinct undirected pairs of the %d requested "
                    "(dense request); writing %d directed edges", keys.size, target, 2 * keys.size)
    both = np.concatenate(np.divmod(keys, config.num_nodes))  # [a, b]: reverse is a roll by m
    m = keys.size
    del keys
    perm = np.arange(2 * m, dtype=np.int32 if 2 * m < 2**31 else np.int64)
    rng(config, Stream.SHUFFLE).shuffle(perm)
    src = both[perm]
    perm += m
    perm[perm >= 2 * m] -= 2 * m
    return src, both[perm]


def _distinct_pairs(sampler: _Sampler, inside: bool, target: int) -> np.ndarray:
    """``target`` distinct pair keys (fewer if the model cannot give that many), topping up the
    deficit left by self loops and repeats round by round and trimming any surplus at random."""
    keys, drawn = np.empty(0, np.int64), 0
    for rnd in range(_MAX_ROUNDS):
        deficit = target - keys.size
        if deficit <= 0:
            break
        rate = max(keys.size / drawn if drawn else 1.0, 0.05)
        count = min(int(deficit / rate * 1.05) + 64, 4 * deficit + 1024)
        keys = np.union1d(keys, sampler.keys(inside, rnd, count))
        drawn += count
        log.debug("%s-community round %d: drew %d, %d of %d distinct pairs",
                  "intra" if inside else "inter", rnd, count, keys.size, target)
    if keys.size > target:
        keys = keys[rng(sampler.config, Stream.SUBSET, int(inside)).permutation(keys.size)[:target]]
    return keys
