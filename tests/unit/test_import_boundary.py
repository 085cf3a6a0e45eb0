"""The layers that need no DGL import without it (docs/install.md, "The DGL-free core").

Each check runs in a fresh interpreter in which ``import dgl`` (and ``dgl.*``) raises
ImportError, as on a machine without DGL. A core module may still use DGL inside a function
(``to_dgl``, ``Partition.local_graph``, METIS with several constraints), never at import.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Packages imported with every module under them, and single modules.
CORE_PACKAGES = ["dglx_dist.data", "dglx_dist.partition", "dglx_dist.runtime",
                 "dglx_dist.kvstore", "dglx_dist.checkpoint", "dglx_dist.offload",
                 "dglx_dist.sampling"]
CORE_MODULES = ["dglx_dist", "dglx_dist.errors", "dglx_dist.registry", "dglx_dist.cli_flags",
                "dglx_dist.config", "dglx_dist.memory",
                "dglx_dist.report", "dglx_dist.testing", "tests.doubles.invoke_api"]
# The numpy tensor tasks in the conv folders (and the packages above them): a worker process
# and the Lambda zip import them without torch or DGL (test_tensor_tasks_import_alone).
CONV_FOLDERS = ["dglx_dist.convs.gat", "dglx_dist.convs.graphconv", "dglx_dist.convs.sage"]
TASK_MODULES = ["dglx_dist.convs", "dglx_dist.convs.ops_base",
                *CONV_FOLDERS, *[f"{folder}.ops" for folder in CONV_FOLDERS],
                "dglx_dist.offload.tensor_fn.handler", "dglx_dist.offload.tensor_fn.worker"]
# What needs DGL at import; the control below checks that the block really bites.
DGL_MODULES = ["dglx_dist.api", "dglx_dist.convs.base", "dglx_dist.convs.sage.adapter",
               "dglx_dist.models", "dglx_dist.strategies",
               "dglx_dist.trainer"]

_BLOCK = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    class NoDgl(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "dgl" or name.startswith("dgl."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)

    sys.meta_path.insert(0, NoDgl())
    for name in [m for m in sys.modules if m == "dgl" or m.startswith("dgl.")]:
        del sys.modules[name]
""")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_core_modules_import_without_dgl():
    proc = _run(f"""
        names = list({CORE_MODULES + TASK_MODULES!r})
        for pkg in {CORE_PACKAGES!r}:
            mod = importlib.import_module(pkg)
            names.append(pkg)
            names += [info.name for info in pkgutil.walk_packages(mod.__path__, pkg + ".")]
        failed = []
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as e:
                failed.append(f"{{name}}: {{type(e).__name__}}: {{e}}")
        assert "dgl" not in sys.modules
        print(len(names), "modules")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
    """)
    assert proc.returncode == 0, f"core modules that need DGL at import:\n{proc.stdout}{proc.stderr}"
    assert int(proc.stdout.split()[0]) > 50  # the walk found the subpackages' modules


def test_public_names_of_the_core_resolve_without_dgl():
    proc = _run("""
        import dglx_dist
        for name in ["read_dataset", "write_dataset", "PARTITIONERS", "partition_dataset",
                     "PartitionDir", "Registry", "init", "current_session", "Session",
                     "PeerError"]:
            getattr(dglx_dist, name)
        assert "dgl" not in sys.modules
    """)
    assert proc.returncode == 0, proc.stderr


def test_tensor_tasks_import_alone():
    """The conv folders' numpy tasks, their table and the worker: no torch, no DGL; and the
    table holds every folder's tasks."""
    proc = _run(f"""
        class NoTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)

        sys.meta_path.insert(0, NoTorch())
        for name in {TASK_MODULES!r}:
            importlib.import_module(name)
        from dglx_dist.offload.tensor_fn.ops import OPS, task_modules
        assert task_modules() == [f"{{f}}.ops" for f in {CONV_FOLDERS!r}], task_modules()
        assert {{"av", "gat_ae", "sage_av"}} <= set(OPS), sorted(OPS)
        assert "torch" not in sys.modules and "dgl" not in sys.modules
    """)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", DGL_MODULES)
def test_the_block_bites(name):
    """Control: the modules that build on DGL fail to import under the same block."""
    proc = _run(f"importlib.import_module({name!r})")
    assert proc.returncode != 0 and "(blocked)" in proc.stderr, proc.stderr
