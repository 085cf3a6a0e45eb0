"""``--convs``: the reference models' convs from the package (``dglx_dist.nn``) or from DGL
(``dgl.nn``); without DGL, asking for DGL's says so in one line; a model of DGL's convs gets
DGL's blocks at its edge."""
import subprocess
import sys
import textwrap

import pytest
import torch

from dglx_dist.models import MODELS
from tests.unit.test_import_boundary import _BLOCK, ROOT


@pytest.mark.dgl
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("convs,module", [("dglx", "dglx_dist.nn"), ("dgl", "dgl.nn")])
def test_the_models_take_their_convs_from_the_library_named(name, convs, module):
    model = MODELS[name](4, 4, 2, 2, convs=convs)
    found = {type(m).__module__.split(".")[0] + ".nn" for m in model.modules()
             if type(m).__name__ in ("GraphConv", "SAGEConv", "GATConv")}
    assert found == {module}


@pytest.mark.dgl
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_of_dgl_convs_gets_dgls_blocks_at_its_edge(name):
    """Every model gets the package's blocks; one with a ``dgl.nn`` conv is wrapped once at
    its edge (``at_the_edge``, DGL's door) so that it gets DGL's, and gives what it gives on
    DGL's blocks; a model of ``dglx_dist.nn`` convs is left as it is."""
    import dgl

    from dglx_dist.convs import at_the_edge
    from dglx_dist.dgl.blocks import to_dgl_block

    ours = MODELS[name](4, 4, 2, 2, convs="dglx")
    at_the_edge(ours)
    assert not ours._forward_pre_hooks
    theirs = MODELS[name](4, 4, 2, 2, convs="dgl").eval()
    blocks, x = _two_blocks(), torch.randn(6, 4)
    want = theirs([to_dgl_block(b) for b in blocks], x)
    at_the_edge(theirs)
    at_the_edge(theirs)  # once: a second call adds no hook
    assert len(theirs._forward_pre_hooks) == 1
    torch.testing.assert_close(theirs(blocks, x), want)
    assert isinstance(to_dgl_block(blocks[0]), dgl.DGLGraph)


def _two_blocks() -> list:
    """Two chained blocks (every destination with a self edge: GAT takes no node without
    in-edges) over 6 input nodes."""
    from dglx_dist.graphcore.block import Block

    last = Block.untyped(torch.tensor([0, 1]), torch.tensor([0, 1, 2, 3, 2]),
                         torch.tensor([0, 1, 0, 1, 1]), torch.arange(5))
    mid = last.src_nodes
    first = Block.untyped(mid, torch.cat([mid, torch.tensor([4, 5, 4])]),
                          torch.cat([mid, torch.tensor([0, 3, 2])]), torch.arange(7))
    assert first.num_src_nodes() == 6
    return [first, last]


def test_dgl_convs_without_dgl_say_to_install_the_extra():
    code = _BLOCK + textwrap.dedent("""
        from dglx_dist.errors import MissingDependencyError
        from dglx_dist.models import GCN
        GCN(4, 4, 2)  # the package's: no DGL needed
        try:
            GCN(4, 4, 2, convs="dgl")
        except MissingDependencyError as exc:
            print(exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip() == (
        "--convs dgl (dgl.nn's convs) needs DGL, which is not installed: pip install "
        "dglx-dist[dgl] (or leave --convs out: the package's own, dglx_dist.nn)"), proc.stderr
