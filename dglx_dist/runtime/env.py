"""The launch environment: the only module that reads torchrun / SLURM environment variables.

Sources, tried in order: **torchrun** (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``: one torchrun node is
one server), **SLURM** ``srun`` (what it reads: docs/launching.md, "SLURM"; no SSH anywhere),
else a single process (rank 0 of 1). dglx_dist's own ``DGLX_*`` variables, checked by
:class:`DistEnv`, are in docs/launching.md ("Environment variables"), besides
``DGLX_HOST_RANKS`` (:attr:`DistEnv.host_ranks`; ``dglx emulate`` sets it).
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import socket
import sys
from typing import Mapping

from dglx_dist.errors import DglxError
from dglx_dist.runtime.allocator import MALLOC_MODES

__all__ = ["DistEnv", "read_env", "expand_nodelist", "EnvError", "free_local_port",
           "launch_position", "launched", "torchrun"]

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 1e6  # seconds (11 days): beyond it, torch's timeouts overflow
DEFAULT_PORT = 29500


class EnvError(DglxError, RuntimeError):
    """The launch environment is inconsistent or incomplete."""


@dataclasses.dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job.

    Attributes:
        rank / world_size: global rank and number of processes.
        local_rank / local_world_size: index and count on this machine.
        node_rank / num_nodes: this machine's index and the machine count.
        master_addr / master_port: the rendezvous address (for ``env://`` initialisation).
        virtual_servers: virtual servers per machine (1: a machine is one server).
        timeout: seconds any collective may wait.
        backend: "gloo", "nccl" or None (choose by device).
        device: "auto", "cpu", "cuda", "cuda:N" or None (auto; :mod:`dglx_dist.runtime.device`).
        launcher: "torchrun", "slurm" or "single".
        malloc: the C allocator setting (:mod:`dglx_dist.runtime.allocator`).
        host_ranks: the ranks sharing this machine's memory when more than this node's
            (``DGLX_HOST_RANKS``); None: this node's (see :attr:`ranks_on_host`).
        restart_count: how often the launcher restarted the job's workers (torchrun's elastic
            ``--max-restarts``, SLURM's requeue); > 0 means a restarted run.
        error_file: where torchrun's failure summary reads this rank's error
            (``TORCHELASTIC_ERROR_FILE``; see :mod:`dglx_dist.runtime.failure`).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    virtual_servers: int = 1
    timeout: float = DEFAULT_TIMEOUT
    backend: str | None = None
    device: str | None = None
    launcher: str = "single"
    malloc: str = "keep"
    host_ranks: int | None = None
    restart_count: int = 0
    error_file: str | None = None

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise EnvError(f"rank {self.rank} is outside [0, world_size={self.world_size})")
        if not 0 <= self.local_rank < self.local_world_size:
            raise EnvError(f"local rank {self.local_rank} is outside "
                           f"[0, local_world_size={self.local_world_size})")
        if self.local_world_size * self.num_nodes != self.world_size:
            raise EnvError(f"{self.num_nodes} nodes x {self.local_world_size} local ranks != "
                           f"world_size {self.world_size}; dglx_dist needs the same number of "
                           f"processes on every node")
        if self.virtual_servers < 1 or self.local_world_size % self.virtual_servers:
            raise EnvError(f"DGLX_VIRTUAL_SERVERS={self.virtual_servers} must divide the "
                           f"{self.local_world_size} ranks of a machine")
        if not 0 < self.master_port < 65536:
            raise EnvError(f"MASTER_PORT={self.master_port}; expected a TCP port in [1, 65535]")
        if not 0 < self.timeout <= MAX_TIMEOUT:  # NaN fails this too
            raise EnvError(f"DGLX_TIMEOUT={self.timeout}; expected seconds > 0 and at most "
                           f"{MAX_TIMEOUT:g}")
        if self.backend not in (None, "gloo", "nccl"):
            raise EnvError(f"DGLX_BACKEND={self.backend!r}; expected 'gloo' or 'nccl'")
        if self.device is not None and not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise EnvError(f"DGLX_DEVICE={self.device!r}; expected 'auto', 'cpu', 'cuda' or "
                           f"'cuda:N'")
        if self.malloc not in MALLOC_MODES:
            raise EnvError(f"DGLX_MALLOC={self.malloc!r}; expected one of {list(MALLOC_MODES)}")
        if self.host_ranks is not None and not (
                self.local_world_size <= self.host_ranks <= self.world_size):
            raise EnvError(f"DGLX_HOST_RANKS={self.host_ranks}; expected the ranks on this "
                           f"machine, from this node's {self.local_world_size} to the job's "
                           f"{self.world_size}")

    @property
    def ranks_on_host(self) -> int:
        """The ranks sharing this machine's memory (``DGLX_HOST_RANKS``, else this node's)."""
        return self.local_world_size if self.host_ranks is None else self.host_ranks

    @property
    def num_servers(self) -> int:
        return self.num_nodes * self.virtual_servers

    @property
    def ranks_per_server(self) -> int:
        return self.local_world_size // self.virtual_servers


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None:
        if default is None:
            raise EnvError(f"environment variable {key} is not set")
        return default
    try:
        return int(raw.split("(")[0])  # SLURM writes counts like "4(x2)"
    except ValueError:
        raise EnvError(f"environment variable {key}={raw!r}; expected an integer") from None


def expand_nodelist(nodelist: str) -> list[str]:
    """Expands a SLURM node list such as ``gpu[01-03,07],login1`` into host names."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{i:0{width}d}")
    return hosts


def _common(env: Mapping[str, str]) -> dict:
    timeout = env.get("DGLX_TIMEOUT")
    try:
        timeout_s = float(timeout) if timeout is not None else DEFAULT_TIMEOUT
    except ValueError:
        raise EnvError(f"DGLX_TIMEOUT={timeout!r}; expected seconds") from None
    return {"virtual_servers": _int(env, "DGLX_VIRTUAL_SERVERS", 1), "timeout": timeout_s,
            "backend": env.get("DGLX_BACKEND") or None, "device": env.get("DGLX_DEVICE") or None,
            "malloc": env.get("DGLX_MALLOC") or "keep",
            "host_ranks": _int(env, "DGLX_HOST_RANKS") if env.get("DGLX_HOST_RANKS") else None}


def _from_torchrun(env: Mapping[str, str]) -> DistEnv:
    world = _int(env, "WORLD_SIZE")
    local_world = _int(env, "LOCAL_WORLD_SIZE", world)
    return DistEnv(rank=_int(env, "RANK"), world_size=world, local_rank=_int(env, "LOCAL_RANK", 0),
                   local_world_size=local_world, node_rank=_int(env, "GROUP_RANK", 0),
                   num_nodes=world // max(local_world, 1), master_addr=env.get("MASTER_ADDR",
                   "127.0.0.1"), master_port=_int(env, "MASTER_PORT", DEFAULT_PORT),
                   launcher="torchrun", restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
                   error_file=env.get("TORCHELASTIC_ERROR_FILE") or None, **_common(env))


def _from_slurm(env: Mapping[str, str]) -> DistEnv:
    world = _int(env, "SLURM_NTASKS")
    nodes = _int(env, "SLURM_JOB_NUM_NODES", _int(env, "SLURM_NNODES", 1))
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
    port = _int(env, "DGLX_MASTER_PORT", _int(env, "MASTER_PORT", DEFAULT_PORT))
    return DistEnv(rank=_int(env, "SLURM_PROCID"), world_size=world,
                   local_rank=_int(env, "SLURM_LOCALID", 0), local_world_size=world // nodes,
                   node_rank=_int(env, "SLURM_NODEID", 0), num_nodes=nodes,
                   master_addr=env.get("MASTER_ADDR") or expand_nodelist(nodelist)[0],
                   master_port=port, launcher="slurm",
                   restart_count=_int(env, "SLURM_RESTART_COUNT", 0), **_common(env))


# each launcher's rank and world-size variables, and how its environment is read
_LAUNCHERS = (("RANK", "WORLD_SIZE", _from_torchrun), ("SLURM_PROCID", "SLURM_NTASKS", _from_slurm))


def read_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Reads the launch environment (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    for rank_key, world_key, read in _LAUNCHERS:
        if rank_key in env and world_key in env:
            return read(env)
    return DistEnv(launcher="single", **_common(env))


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher (torchrun, Slurm) started this process as one of a job's ranks."""
    env = os.environ if environ is None else environ
    return any(rank_key in env for rank_key, _, _ in _LAUNCHERS)


def launch_position(environ: Mapping[str, str] | None = None) -> tuple[int, int, str | None]:
    """``(rank, world_size, error_file)`` as the launcher set them, read without checking the
    rest (a failure report needs them also when the environment itself is what failed);
    ``error_file`` is torchrun's ``TORCHELASTIC_ERROR_FILE``. ``(0, 1, None)`` without one."""
    env = os.environ if environ is None else environ
    for rank_key, world_key, _ in _LAUNCHERS:
        try:
            rank, world = int(env[rank_key]), int(env[world_key].split("(")[0])
        except (KeyError, ValueError):
            continue
        return rank, world, env.get("TORCHELASTIC_ERROR_FILE") or None
    return 0, 1, None


# Below Linux's ephemeral range (32768-60999) and macOS's (49152-65535): a port the kernel
# hands to an outgoing connection (gloo opens many) is never one of these, so one found
# free stays free until a launch binds it, unless another launch picks the same one
LOCAL_PORTS = range(20000, 32768)


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a local launch's rendezvous: a random one
    of :data:`LOCAL_PORTS` (the kernel's own pick, an ephemeral port, may be taken by an
    outgoing connection of another job before the launch binds it)."""
    for port in random.Random().sample(LOCAL_PORTS, 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # nearly all of them taken: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> list[str]:
    """``python -m torch.distributed.run ARGS`` for a job the package starts itself (the demo,
    ``dglx bench``'s runs, ``dglx emulate``'s nodes): its agent looks at its ranks every 0.1 s,
    newer torch's default (torch 2.2's is 5 s: a 60-epoch Cora ``dglx train`` took 6.1 s
    instead of 4.6 s, its ranks done). A failed job's survivors, stopped 0.1 s after the
    first rank ended, still name it first (``runtime.session.exit_on_sigterm``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--monitor-interval", "0.1", *args]
