"""``--convs``: the reference models' convs from the package (``dglx_dist.nn``) or from DGL
(``dgl.nn``); without DGL, asking for DGL's says so in one line; which blocks the package's
own loops hand each."""
import subprocess
import sys
import textwrap

import pytest

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
def test_a_model_of_the_packages_convs_reads_the_package_blocks(name):
    """The Trainer, the link task and ``inference`` hand a model of ``dglx_dist.nn`` convs
    the package's blocks where DGL is installed too (no step made into DGL's), and a model
    with a ``dgl.nn`` conv, or any module of DGL's, DGL's blocks."""
    import dgl

    from dglx_dist.convs import reads_package_blocks

    assert reads_package_blocks(MODELS[name](4, 4, 2, 2, convs="dglx"))
    assert not reads_package_blocks(MODELS[name](4, 4, 2, 2, convs="dgl"))
    mixed = MODELS[name](4, 4, 2, 2, convs="dglx")
    mixed.norm = dgl.nn.EdgeWeightNorm()
    assert not reads_package_blocks(mixed)


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
