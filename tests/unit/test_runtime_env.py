import subprocess
import sys

import pytest

from dglx_dist.runtime.env import DistEnv, EnvError, expand_nodelist, read_env
from dglx_dist.runtime.topology import Topology


def test_torchrun_two_nodes_with_virtual_servers():
    env = read_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                    "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234",
                    "DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "7.5"})
    assert (env.rank, env.node_rank, env.num_nodes, env.launcher) == (5, 1, 2, "torchrun")
    assert (env.num_servers, env.ranks_per_server, env.timeout) == (4, 2, 7.5)
    assert (env.master_addr, env.master_port) == ("10.0.0.1", 1234)
    topo = Topology(env.num_servers, env.ranks_per_server)
    assert topo.server_of(5) == 2 and topo.local_rank_of(5) == 1


def test_slurm_environment():
    env = read_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
                    "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2",
                    "SLURM_STEP_NODELIST": "gpu[07-08]", "DGLX_MASTER_PORT": "29600"})
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert (env.node_rank, env.master_addr, env.master_port, env.launcher) == \
        (1, "gpu07", 29600, "slurm")


def test_single_process_default():
    env = read_env({})
    assert (env.rank, env.world_size, env.launcher, env.backend) == (0, 1, "single", None)


@pytest.mark.parametrize("nodelist, hosts", [
    ("node1", ["node1"]),
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("a[1-2],login,b[9]", ["a1", "a2", "login", "b9"]),
])
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("environ, message", [
    ({"RANK": "4", "WORLD_SIZE": "4"}, r"rank 4 is outside \[0, world_size=4\)"),
    ({"RANK": "0", "WORLD_SIZE": "x"}, r"WORLD_SIZE='x'; expected an integer"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "DGLX_VIRTUAL_SERVERS": "3"},
     r"DGLX_VIRTUAL_SERVERS=3 must divide the 4 ranks"),
    ({"DGLX_TIMEOUT": "-1"}, r"DGLX_TIMEOUT=-1.0; expected seconds > 0"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "99999"},  # urllib's raw ValueError
     r"MASTER_PORT=99999; expected a TCP port in \[1, 65535\]"),  # (hostile re-pass, 77)
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "0"}, r"MASTER_PORT=0; expected"),
    ({"DGLX_BACKEND": "mpi"}, r"DGLX_BACKEND='mpi'; expected 'gloo' or 'nccl'"),
    ({"DGLX_MALLOC": "jemalloc"}, r"DGLX_MALLOC='jemalloc'; expected one of \['keep', 'system'\]"),
    ({"RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"}, r"same number of processes"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "DGLX_HOST_RANKS": "3"},
     r"DGLX_HOST_RANKS=3; expected the ranks on this machine, from this node's 1 to the job's 2"),
])
def test_bad_environment_is_named(environ, message):
    with pytest.raises(EnvError, match=message):
        read_env(environ)


def test_host_ranks_count_the_nodes_sharing_a_machine():
    """Two launcher nodes of one rank on one machine (``dglx emulate``): the memory check
    counts both ranks, not the node's one."""
    node = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1"}
    assert read_env(node).ranks_on_host == 1
    assert read_env(node | {"DGLX_HOST_RANKS": "2"}).ranks_on_host == 2


def test_topology_groups():
    topo = Topology(3, 2)
    assert topo.world_size == 6
    assert topo.server_ranks(1) == [2, 3]
    assert topo.cross_ranks(1) == [1, 3, 5]
    assert topo.same_server(2, 3) and not topo.same_server(1, 2)
    with pytest.raises(IndexError):
        topo.server_of(6)
    with pytest.raises(ValueError):
        Topology(0, 2)
    # the groups of a kind, as every rank makes them (a twin's, a sampler process's)
    assert topo.family([1, 3, 5]) == [[0, 2, 4], [1, 3, 5]]
    assert topo.family([2, 3]) == [[0, 1], [2, 3], [4, 5]]
    assert topo.family(range(6)) == [list(range(6))]
    assert Topology(1, 2).family([0, 1]) == [[0, 1]]  # the world first where it is a server
    with pytest.raises(ValueError, match=r"ranks \[0, 3\] are neither"):
        topo.family([0, 3])


def test_distenv_is_frozen():
    with pytest.raises(Exception):
        DistEnv().rank = 3


_FAULTS = """
import resource, sys
import torch
from dglx_dist.runtime.allocator import configure_malloc
changed = configure_malloc(sys.argv[1])
def step():
    x = torch.empty(16 * 2**20)  # 64 MiB, above glibc's largest mmap threshold
    x.fill_(1.0)
    return float(x[-1])
# warm-up: the heap grows to what a step needs (up to 4 steps when little else has been
# allocated, e.g. no DGL imported; 3 used to do when importing dglx_dist pulled DGL in; a
# fresh clone's CI once still took a fresh 64 MiB after 6, so 10)
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(changed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.parametrize("mode", ["keep", "system"])
def test_malloc_keep_reuses_freed_memory(mode):
    """With ``keep``, once the heap has grown to what a step needs, a 64 MiB tensor allocated
    again after being freed lands on pages the process already has (few page faults); with
    glibc's defaults each one is fresh mmap memory (a fault per 4 KiB page: thousands)."""
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                         text=True, check=True).stdout.split()
    changed, faults = out[0] == "True", int(out[1])
    pages = 5 * 64 * 2**20 // 4096
    if mode == "keep":
        assert changed and faults < pages // 20, faults
    else:
        assert not changed and faults > pages // 2, faults


_TRIM = """
import ctypes, sys
from dglx_dist.runtime.allocator import release_free_memory
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
malloc, free = ctypes.CDLL(None).malloc, ctypes.CDLL(None).free
malloc.restype, malloc.argtypes, free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (ctypes.c_void_p,)
blocks = [malloc(64 * 1024) for _ in range(4096)]  # 256 MiB of heap, below the mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 64 * 1024)
for b in blocks[:-1]:  # the last block pins the heap's top: free() alone cannot shrink it
    free(b)
before = rss()
release_free_memory()
print(before, rss())
"""


def test_release_free_memory_returns_the_heap():
    """What a launcher freed after partitioning stays resident in glibc's heap (a live block
    above it keeps the top from shrinking); releasing hands those pages back. (pyarrow's pool
    is released by the same call; it is pyarrow's own ``release_unused``.)"""
    out = subprocess.run([sys.executable, "-c", _TRIM], capture_output=True, text=True,
                         check=True).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before - after > 200 * 2**20, (before, after)


@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_that_never_meet_are_one_line_not_torchs_traceback(rank):
    """A WORLD_SIZE larger than the ranks started: rank 0's store waits for clients that never
    come, rank 1 connects to nobody (hostile re-pass of issue 77: torch's DistStoreError or
    DistNetworkError with its traceback); each rank names itself, the address and why."""
    from dglx_dist.runtime.env import free_local_port
    from dglx_dist.runtime.session import init

    env = read_env({"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(free_local_port()), "DGLX_TIMEOUT": "1"})
    with pytest.raises(EnvError, match=rf"rank {rank} of 2: the ranks did not meet at "
                                       rf"127.0.0.1:{env.master_port} \(.*(joined|timed out)"):
        init(env=env, backend="gloo", device="cpu")
