"""Shared fixtures. Every test is checked for leaked environment variables and child processes."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test plug-ins (tests/plugins/dglx_test_plugins): their dist-info registers one plug-in
# per extension point, found through entry points here and in every process the tests start.
_PLUGINS = str(Path(__file__).resolve().parent / "plugins")
sys.path.insert(0, _PLUGINS)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_PLUGINS, os.environ.get("PYTHONPATH")) if p)

# torchrun's agent looks at its workers every --monitor-interval seconds: 5 in torch 2.2, so
# each job the tests start would end 2.5 s after its ranks on average, and 0.1 in newer torch,
# which stops a failed job's survivors 0.1 s after the first rank ended (the race a survivor's
# line naming its peer must win: runtime.session.exit_on_sigterm). The tests take newer
# torch's value; its ``PET_`` variable sets the default for every torchrun started below (the
# CLI's tests', the examples'). A command line that passes --monitor-interval still decides:
# the package's own launches pass 0.1 (runtime.env.torchrun: demo, bench, emulate),
# benchmarks/chaos.py 0.5.
os.environ.setdefault("PET_MONITOR_INTERVAL", "0.1")

# The plan's cache of unit costs (``$XDG_CACHE_HOME/dglx_dist/units.json``): written by
# `dglx plan --measure` and `dglx commcheck` across servers, read by every plan. The tests'
# processes keep theirs in a directory of this session, never the user's (a test's emulated
# or loaded link would otherwise become the link rate of the user's next plans); the
# directory goes when the process that made it ends.
_CACHE_HOME = tempfile.mkdtemp(prefix="dglx-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
atexit.register(shutil.rmtree, _CACHE_HOME, ignore_errors=True)

import pytest  # noqa: E402

from dglx_dist.data import builtin_path, read_dataset  # noqa: E402
from dglx_dist.testing import tiny_dataset  # noqa: E402
from dglx_dist.testing.procs import live_children  # noqa: E402


# Set by the process's first import of torch._dynamo (newer torch: the first optimizer built),
# whichever test that happens in; torch's own one-time setting, not a test's leak. Likewise
# the first `import dgl` where the test extra's ogb is installed: DGL's dgl.data imports ogb,
# which sets OUTDATED_IGNORE, and scikit-learn (ogb's), which sets KMP_DUPLICATE_LIB_OK.
_NOT_LEAKS = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "OUTDATED_IGNORE",
              "KMP_DUPLICATE_LIB_OK"}


@pytest.fixture(autouse=True)
def _no_leaks():
    env_before = {k: v for k, v in os.environ.items() if k not in _NOT_LEAKS}
    yield
    env_after = {k: v for k, v in os.environ.items() if k not in _NOT_LEAKS}
    leaked = {k for k in set(env_after) ^ set(env_before)}
    leaked |= {k for k in env_before if k in env_after and env_after[k] != env_before[k]}
    assert not leaked, f"test leaked environment variables: {sorted(leaked)}"
    deadline = time.monotonic() + 5
    while (children := live_children()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not children, f"test left child processes behind: {[c.pid for c in children]}"


@pytest.fixture(scope="session")
def cora():
    return read_dataset(builtin_path("cora"))


@pytest.fixture
def tiny():
    return tiny_dataset()


# The files whose tests take longest, first (measured on the 2-core machine, longest first):
# `make test` runs the suite on two workers (pytest-xdist, a whole file to a worker), and a
# long file started last (an examples fixture alone is minutes of launches) would leave one
# worker idle for its length; the short files after these fill the tail on both workers.
_LONGEST = ("e2e/test_train.py", "e2e/test_examples.py", "dist/test_dorylus.py",
            "e2e/test_examples_distdgl.py", "e2e/test_launch.py", "dist/test_dropin.py",
            "e2e/test_bench.py", "e2e/test_cli.py", "dist/test_granndis.py",
            "unit/test_owned.py", "dist/test_nn_strategies.py", "dist/test_user_samplers.py",
            "e2e/test_elastic.py", "e2e/test_checkpoint_jobs.py", "dist/test_hetero_link.py",
            "unit/test_graph.py")


def pytest_configure(config):
    # pytest-xdist 3.7 and later hand out a --dist loadfile run's files by their number of
    # tests, most first (--loadscope-reorder, on by default), which undid the order below:
    # the long end-to-end files have few tests each and ran late (test_bench's 3 minutes
    # began after 25 of a 32-minute run). The files go in the order below instead.
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(_LONGEST) if path.endswith(name)),
                    len(_LONGEST))
    items.sort(key=rank)  # stable: a file's tests keep their order
