"""The package's ``NeighborSampler`` and ``MultiLayerFullNeighborSampler``: DGL's constructor
and attributes without DGL, read by the loader as DGL's own are; what needs DGL (a sampler of
out-edges, DGL's link-prediction helpers) is refused in one line where DGL cannot be
imported."""
import subprocess
import sys
import textwrap
from pathlib import Path

import dgl
import pytest
import torch

import dglx_dist
from dglx_dist.api.link import as_edge_prediction_sampler
from dglx_dist.api.negative_sampler import Uniform
from dglx_dist.api.samplers import (MultiLayerFullNeighborSampler, NeighborSampler,
                                    sampler_fanouts, user_sampler)
from dglx_dist.errors import InvalidTypeError, InvalidValueError
from tests.unit.test_import_boundary import _BLOCK

ROOT = Path(__file__).resolve().parents[2]

ARGS = [(([10, 25],), {}),
        (([5, -1],), {"edge_dir": "out", "prob": "w", "replace": True}),
        (([3],), {"mask": "m", "prefetch_node_feats": ["feat"], "prefetch_labels": ["label"],
                  "prefetch_edge_feats": ["w"], "output_device": "cpu", "fused": False})]


@pytest.mark.parametrize("args,kwargs", ARGS)
def test_the_attributes_are_dgls(args, kwargs):
    ours = NeighborSampler(*args, **kwargs)
    theirs = dgl.dataloading.NeighborSampler(*args, **kwargs)
    for name in ("fanouts", "edge_dir", "prob", "replace", "fused", "prefetch_node_feats",
                 "prefetch_labels", "prefetch_edge_feats", "output_device"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert sampler_fanouts(ours) == sampler_fanouts(theirs) == tuple(args[0])


def test_full_neighbours_and_the_public_names():
    full = MultiLayerFullNeighborSampler(3, prefetch_labels=["label"])
    assert full.fanouts == [-1, -1, -1] and full.prefetch_labels == ["label"]
    assert sampler_fanouts(full) == (-1, -1, -1)
    assert dglx_dist.NeighborSampler is NeighborSampler  # the package's, DGL installed or not
    assert dglx_dist.MultiLayerFullNeighborSampler is MultiLayerFullNeighborSampler
    assert dglx_dist.as_edge_prediction_sampler is as_edge_prediction_sampler
    assert dglx_dist.negative_sampler.Uniform is Uniform


def test_bad_arguments_are_named():
    with pytest.raises(InvalidValueError, match="prob='w' and mask='m'; expected one"):
        NeighborSampler([2], prob="w", mask="m")
    with pytest.raises(InvalidValueError, match="edge_dir='both'; expected 'in' or 'out'"):
        NeighborSampler([2], edge_dir="both")
    with pytest.raises(InvalidTypeError, match="sampler list is not supported; use "
                                               "dglx_dist.NeighborSampler"):
        sampler_fanouts([2, 2])


def test_with_dgl_it_draws_on_a_dgl_graph_as_dgls():
    """``sample`` (DGL's, through ``to_dgl``), so DGL's ``as_edge_prediction_sampler`` wraps
    it; in-edges draw through the strategy (no user sampler)."""
    g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    inputs, outputs, blocks = MultiLayerFullNeighborSampler(2).sample(g, torch.tensor([0]))
    want = dgl.dataloading.MultiLayerFullNeighborSampler(2).sample(g, torch.tensor([0]))
    assert inputs.tolist() == want[0].tolist() and len(blocks) == 2
    assert dgl.dataloading.as_edge_prediction_sampler(NeighborSampler([2])).sampler is not None
    assert user_sampler(None, NeighborSampler([2])) is None


def test_without_dgl_what_needs_it_is_refused_in_one_line():
    code = textwrap.dedent("""
        import dglx_dist
        from dglx_dist.api.samplers import NeighborSampler, user_sampler
        from dglx_dist.errors import NotSupportedError
        from dglx_dist.strategies.steps import Blocks, node_blocks
        import torch

        try:
            user_sampler(None, NeighborSampler([2], edge_dir="out"))
        except NotSupportedError as e:
            print(e)
        assert dglx_dist.as_edge_prediction_sampler.__module__ == "dglx_dist.api.link"
        Blocks(node_blocks(torch.tensor([1, 2]), torch.tensor([2]), 2))
        assert "dgl" not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", _BLOCK + code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == [
        "DataLoader: sampler NeighborSampler(edge_dir='out') draws through DGL, which is not "
        "installed: pip install dglx-dist[dgl] (in-edges draw without it)"]
