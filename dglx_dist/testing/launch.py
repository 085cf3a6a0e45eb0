"""Run a function on N local processes joined in one gloo job, for multi-process tests.

``run_workers(fn, world_size, tmp_dir, *args)`` starts ``world_size`` processes (forked from a
forkserver that has torch, DGL and the package imported already); each sets a
clean environment (``GLOO_SOCKET_IFNAME=lo``, ``OMP_NUM_THREADS=1``, optional extras), starts a
session through a ``FileStore`` in ``tmp_dir`` (no ports to race for), calls
``fn(session, *args)`` and writes its JSON-able result (or its traceback) to a file. The parent
waits with a deadline, kills what is left, checks exit codes and re-raises a child's traceback.
Nothing is unpickled: results travel as JSON.
"""
from __future__ import annotations

import faulthandler
import json
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dglx_dist.errors import DglxError

__all__ = ["run_workers", "WorkerError", "forkserver_pid"]

# torch._dynamo: torch imports it when the first optimizer is built (about 1.5 s per rank)
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "dgl", "dglx_dist.trainer",
           "dglx_dist.strategies", "dglx_dist.partition", "dglx_dist.offload")


def forkserver_pid() -> int | None:
    """The pid of this interpreter's forkserver, if it started one (it lives until exit)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


class WorkerError(DglxError, AssertionError):
    """A worker failed; the message carries its traceback. ``results`` has what others returned."""

    def __init__(self, message: str, results: dict[int, Any], exitcodes: list[int | None]):
        super().__init__(message)
        self.results, self.exitcodes = results, exitcodes


def _child(fn: Callable, rank: int, world_size: int, tmp: str, args: tuple,
           env: Mapping[str, str], num_nodes: int, heartbeat: float, stack_after: float) -> None:
    os.environ.update({"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **env})
    out = Path(tmp) / f"result-{rank}.json"
    # if this rank is still running shortly before the parent's deadline, dump every
    # thread's stack so the parent can show where it hangs
    stacks = open(Path(tmp) / f"stacks-{rank}.txt", "w")
    faulthandler.dump_traceback_later(stack_after, exit=False, file=stacks)
    try:
        import torch
        torch.set_num_threads(1)
        import torch.distributed as dist

        from dglx_dist.runtime.device import choose_placement
        from dglx_dist.runtime.env import read_env
        from dglx_dist.runtime.session import Session

        local = world_size // num_nodes
        launch = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank % local,
                  "LOCAL_WORLD_SIZE": local, "GROUP_RANK": rank // local}
        denv = read_env({**{k: str(v) for k, v in launch.items()},
                         **{k: v for k, v in os.environ.items() if k.startswith("DGLX_")}})
        store = dist.FileStore(str(Path(tmp) / "store"), world_size)
        # the device set explicitly (the CPU over gloo unless DGLX_DEVICE and DGLX_BACKEND say
        # otherwise), so that the tests run the device path as a GPU job does
        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        placement = choose_placement(rank, denv.local_rank, local, denv.backend or "gloo",
                                     denv.device or "cpu", cuda)
        with Session(denv, placement, store, heartbeat=heartbeat) as session:
            session.check_devices()
            result = fn(session, *args)
        out.write_text(json.dumps({"ok": result}))
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, then exit non-zero)
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()}))
        os._exit(1)


def _context() -> mp.context.BaseContext:
    """Forkserver with torch, DGL and the package imported once: each rank is forked from it
    instead of importing them again (about 3 s per process on the test machines). The
    children still get the caller's ``sys.path`` and main module, as with spawn."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def run_workers(fn: Callable, world_size: int, tmp_dir: str | os.PathLike, *args: Any,
                env: Mapping[str, str] | None = None, num_nodes: int = 1,
                timeout: float = 120.0, heartbeat: float = 0.25,
                expect_failure: Sequence[int] = ()) -> dict[int, Any]:
    """Runs ``fn(session, *args)`` on ``world_size`` ranks; returns {rank: result}.

    Args:
        fn: a module-level function (the children import it by name).
        world_size: number of processes.
        tmp_dir: a fresh directory for the store and results.
        env: extra environment variables for the children (e.g. ``DGLX_VIRTUAL_SERVERS``).
        num_nodes: torchrun-style nodes the ranks are spread over (each a server).
        timeout: seconds before every child still running is killed and the call fails.
        expect_failure: ranks allowed to fail; the others must succeed.

    Raises:
        WorkerError: a rank not in ``expect_failure`` failed, or the deadline passed.
    """
    tmp = Path(tmp_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    ctx = _context()
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, str(tmp), args, dict(env or {}),
                                              num_nodes, heartbeat, 0.75 * timeout))
             # (not daemons, as torchrun's ranks are not: a rank may start a loader's sampler
             # processes; every rank is joined or killed below)
             for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive() and r not in expect_failure]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    results, errors = {}, []
    for r in range(world_size):
        file = tmp / f"result-{r}.json"
        data = json.loads(file.read_text()) if file.is_file() else {}
        if "ok" in data:
            results[r] = data["ok"]
        elif r not in expect_failure:
            why = data.get("traceback") or f"exit code {procs[r].exitcode}, no result written"
            errors.append(f"--- rank {r} ---\n{why}")
        else:
            results[r] = {"error": data.get("error"), "exitcode": procs[r].exitcode}
    exitcodes = [p.exitcode for p in procs]
    if hung:
        dumps = "".join(f"\n--- stacks of rank {r} shortly before the deadline ---\n"
                        + (tmp / f"stacks-{r}.txt").read_text() for r in hung
                        if (tmp / f"stacks-{r}.txt").is_file())
        errors.insert(0, f"ranks {hung} still running after {timeout}s (killed){dumps}")
    if errors:
        raise WorkerError("\n".join(errors), results, exitcodes)
    return results
