"""The layers that need no DGL import without it (docs/install.md, "The DGL-free core").

The checks run in fresh interpreters in which ``import dgl`` (and ``dgl.*``) raises
ImportError, as on a machine without DGL (the core modules, the public names and the control
share one: :data:`_CHECKS`). A core module may still reach DGL's door
(``dglx_dist/dgl/``) inside a function (``to_dgl``, DGL's METIS on request), never at import.
"""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dglx_dist.testing.nodgl import NO_DGL

ROOT = Path(__file__).resolve().parents[2]

# Packages imported with every module under them (but those of DGL_MODULES), and single modules.
CORE_PACKAGES = ["dglx_dist.data", "dglx_dist.partition", "dglx_dist.runtime",
                 "dglx_dist.kvstore", "dglx_dist.checkpoint", "dglx_dist.offload",
                 "dglx_dist.sampling", "dglx_dist.strategies", "dglx_dist.convs",
                 "dglx_dist.nn", "dglx_dist.api", "dglx_dist.models", "dglx_dist.planner"]
CORE_MODULES = ["dglx_dist", "dglx_dist.errors", "dglx_dist.registry", "dglx_dist.cli_flags",
                "dglx_dist.config", "dglx_dist.memory", "dglx_dist.trainer",
                "dglx_dist.function", "dglx_dist.tasks.link",
                "dglx_dist.report", "dglx_dist.testing", "tests.doubles.invoke_api"]
# The numpy tensor tasks in the conv folders (and the packages above them): a worker process
# and the Lambda zip import them without torch or DGL (test_tensor_tasks_import_alone).
CONV_FOLDERS = ["dglx_dist.convs.gat", "dglx_dist.convs.graphconv", "dglx_dist.convs.sage"]
TASK_MODULES = ["dglx_dist.convs", "dglx_dist.convs.ops_base",
                *CONV_FOLDERS, *[f"{folder}.ops" for folder in CONV_FOLDERS],
                "dglx_dist.offload.tensor_fn.handler", "dglx_dist.offload.tensor_fn.worker"]
# What needs DGL at import (DGL's door, dglx_dist/dgl/); the control below checks that the
# block really bites.
DGL_MODULES = ["dglx_dist.dgl.samplers", "dglx_dist.dgl.conversion",
               "dglx_dist.dgl.graph_files", "dglx_dist.dgl.metis", "dglx_dist.dgl.blocks",
               "dglx_dist.dgl.models", "dglx_dist.dgl.graphs"]

_BLOCK = NO_DGL


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


# The three checks below in one interpreter where DGL is blocked (one start of torch and the
# package instead of three), in this order: the public names first, as in a fresh interpreter;
# then every core module; then the control, the modules that need DGL, which must still fail.
# Each step's outcome is one JSON line; a step that raises is recorded, and the next runs.
_CHECKS = """
    import json, traceback
    out = {}

    def step(name, fn):
        try:
            out[name] = {"ok": fn()}
        except BaseException as e:
            out[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}

    def public_names():
        import dglx_dist
        for name in ["read_dataset", "write_dataset", "PARTITIONERS", "partition_dataset",
                     "PartitionDir", "Registry", "init", "current_session", "Session",
                     "PeerError"]:
            getattr(dglx_dist, name)
        assert "dgl" not in sys.modules

    def core_modules():
        names = list(CORE_MODULES)
        for pkg in CORE_PACKAGES:
            mod = importlib.import_module(pkg)
            names.append(pkg)
            names += [info.name for info in pkgutil.walk_packages(mod.__path__, pkg + ".")]
        failed = []
        for name in (n for n in names if n not in DGL_MODULES):  # they need it
            try:
                importlib.import_module(name)
            except Exception as e:
                failed.append(f"{name}: {type(e).__name__}: {e}")
        assert "dgl" not in sys.modules
        return {"modules": len(names), "failed": failed}

    def bites(name):
        try:
            importlib.import_module(name)
        except ImportError as e:
            return f"{type(e).__name__}: {e}"
        return None

    step("public_names", public_names)
    step("core_modules", core_modules)
    for name in DGL_MODULES:
        step(name, lambda: bites(name))
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def blocked_imports() -> dict:
    """{check: {"ok": its result} or {"error", "traceback"}} of :data:`_CHECKS`."""
    proc = _run(f"CORE_MODULES = {CORE_MODULES + TASK_MODULES!r}\n"
                f"CORE_PACKAGES = {CORE_PACKAGES!r}\nDGL_MODULES = {DGL_MODULES!r}\n"
                + textwrap.dedent(_CHECKS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ok(check: dict):
    assert "ok" in check, check.get("traceback")
    return check["ok"]


def test_core_modules_import_without_dgl(blocked_imports):
    found = _ok(blocked_imports["core_modules"])
    assert not found["failed"], "core modules that need DGL at import:\n" + "\n".join(
        found["failed"])
    assert found["modules"] > 50  # the walk found the subpackages' modules


def test_public_names_of_the_core_resolve_without_dgl(blocked_imports):
    _ok(blocked_imports["public_names"])


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
def test_the_block_bites(blocked_imports, name):
    """Control: the modules that build on DGL fail to import under the same block: the
    block's own error, or the door's refusal (``require_dgl``) that finds DGL absent."""
    error = _ok(blocked_imports[name])
    assert error is not None and ("(blocked)" in error or (
        error.startswith("MissingDependencyError") and "is not installed" in error)), error


# What a block's form was chosen by before issue 78 put DGL at one door: outside the door these
# words name nothing (test_no_block_form_switch_outside_the_door).
SWITCHES = re.compile(r"package_blocks|block_for|reads_package_blocks|_of_dgl")

# Every module of the package that imports DGL when it runs (at the top or inside a function),
# and why. The list is exact: a new module that imports DGL fails the test below, and so does
# a module listed here that no longer does.
IMPORTS_DGL = {
    # DGL's door: DGL's API as users see it, and what converts to and from DGL's objects
    # (graphs, blocks, a model of dgl.nn's modules at its edge, the DistGraph's DGL graphs),
    # DGL's samplers for a user's BlockSampler, DGL's graph files, DGL's METIS
    **dict.fromkeys(["dglx_dist.dgl", "dglx_dist.dgl.distributed", "dglx_dist.dgl.run",
                     "dglx_dist.dgl.conversion", "dglx_dist.dgl.samplers",
                     "dglx_dist.dgl.graph_files", "dglx_dist.dgl.metis",
                     "dglx_dist.dgl.blocks", "dglx_dist.dgl.models", "dglx_dist.dgl.graphs"],
                    "the door"),
    # DGL's DistDGL, run beside ours by `dglx bench`
    **dict.fromkeys(["dglx_dist.bench.dgl_distdgl_link", "dglx_dist.bench.dgl_distdgl_nodes",
                     "dglx_dist.bench.dgl_distdgl_worker", "dglx_dist.bench.single"],
                    "the DGL baseline"),
    # research tooling outside the wheel
    **dict.fromkeys(["benchmarks.cache_policy", "benchmarks.costmodel.measure",
                     "benchmarks.eval_degrees", "benchmarks.link_collapse",
                     "benchmarks.sampling_speed", "benchmarks.sweeps.hetero_link"],
                    "benchmarks"),
}


def test_only_the_modules_listed_import_dgl():
    """From the modules' source (imports at the top, inside functions and under
    TYPE_CHECKING): the modules that import DGL are those of :data:`IMPORTS_DGL`."""
    from tests.unit.test_house_rules import _imports, _module_name, _package_files

    found = {_module_name(f) for f in _package_files()
             if any(n == "dgl" or n.startswith("dgl.") for n in _imports(f))}
    assert found - set(IMPORTS_DGL) == set(), "modules that import DGL but are not listed"
    assert set(IMPORTS_DGL) - found == set(), "listed modules that no longer import DGL"


def _outside_the_door() -> list[Path]:
    """The package's modules but DGL's door's (``dglx_dist/dgl/``) and ``bench/``'s DGL
    baseline (DGL's DistDGL, run beside ours)."""
    return [f for f in sorted((ROOT / "dglx_dist").rglob("*.py"))
            if f.relative_to(ROOT / "dglx_dist").parts[0] not in ("dgl", "bench")]


def test_dgl_is_imported_only_at_its_door():
    """Issue 78: outside ``dglx_dist/dgl/`` and ``bench/``'s DGL baseline, no module imports
    DGL (at the top, or inside a function)."""
    from tests.unit.test_house_rules import _imports, _module_name

    outside = [_module_name(f) for f in _outside_the_door()
               if any(n == "dgl" or n.startswith("dgl.") for n in _imports(f))]
    assert outside == [], \
        "modules that import DGL outside its door (dglx_dist/dgl/): move the import there"


def test_no_block_form_switch_outside_the_door():
    """Issue 78: the package's loops run the package's blocks, and DGL's door alone makes
    DGL's (for a DGL script's loader, and at the edge of a model of ``dgl.nn``'s modules):
    the switches that chose a block's form (:data:`SWITCHES`) are gone from the rest."""
    found = [f"{f.relative_to(ROOT)}:{n}" for f in _outside_the_door()
             for n, line in enumerate(f.read_text().splitlines(), 1) if SWITCHES.search(line)]
    assert found == [], "block-form switches outside DGL's door"


def test_torchs_checkpoint_library_is_imported_only_for_a_checkpoint():
    """What a rank of ``dglx train`` imports leaves torch.distributed.checkpoint out (about 0.6 s
    of CPU in every rank: sympy among it) until a checkpoint's part asks for ``Stateful``;
    ``abilities.Stateful`` is still torch's, and a strategy's state is still read through it."""
    proc = _run("""
        import dglx_dist.cli, dglx_dist.prepare, dglx_dist.trainer, dglx_dist.strategies
        import dglx_dist.checkpoint.manager
        from dglx_dist.strategies import STRATEGIES
        from dglx_dist.strategies.abilities import StrategyState
        assert "torch.distributed.checkpoint" not in sys.modules
        class Kept:
            def state_dict(self): return {"step": 3}
            def load_state_dict(self, state): pass
        assert StrategyState(Kept()).state_dict() == {"step": 3}
        assert StrategyState(object()).state_dict() == {}
        from dglx_dist.strategies import abilities
        from torch.distributed.checkpoint.stateful import Stateful
        assert abilities.Stateful is Stateful
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
