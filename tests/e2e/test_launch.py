"""Real torchrun launches: one node with virtual servers, and a genuine two-node launch."""
import json
import os
import subprocess
import sys

import psutil
import pytest

from dglx_dist.runtime.env import free_local_port

from dglx_dist.testing.procs import live_children

pytestmark = pytest.mark.e2e


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "60"})
    env.update(extra)
    return env


def _torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", *map(str, args), "-m", "dglx_dist",
            "commcheck", "--backend", "gloo"]


def _listening(port):
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def _report(stdout):
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_single_node_with_virtual_servers():
    port = free_local_port()
    r = subprocess.run(_torchrun("--nproc-per-node", 4, "--master-port", port),
                       env=_env(DGLX_VIRTUAL_SERVERS="2"), capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = _report(r.stdout)
    assert rep["exchange_ok"] and (rep["servers"], rep["ranks_per_server"]) == (2, 2)
    # rank 0 sends 16 bytes to each peer, plus its all_reduce share; one peer is intra-server
    assert rep["bytes"][0]["sent_intra"] == 16 + 2 and rep["bytes"][0]["sent_inter"] == 32 + 4
    assert not _listening(port)


def test_two_node_launch_on_one_machine():
    port = free_local_port()
    procs = [subprocess.Popen(_torchrun("--nnodes", 2, "--node-rank", n, "--nproc-per-node", 2,
                                        "--rdzv-backend", "c10d", "--rdzv-id", "e2e",
                                        "--rdzv-endpoint", f"127.0.0.1:{port}"),
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    rep = _report(outs[0][0] + outs[1][0])
    assert rep["exchange_ok"] and rep["world_size"] == 4 and rep["servers"] == 2
    assert not _listening(port)
    assert not live_children()


def test_slurm_style_launch_without_torchrun():
    """Processes started the way srun starts them: SLURM variables only, no torchrun, no SSH."""
    port = free_local_port()
    procs = []
    for rank in range(2):
        env = _env(SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID=str(rank),
                   SLURM_NODEID="0", SLURM_JOB_NUM_NODES="1", SLURM_STEP_NODELIST="localhost",
                   DGLX_MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-m", "dglx_dist", "commcheck",
                                       "--backend", "gloo"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    rep = _report(outs[0][0])
    assert rep["launcher"] == "slurm" and rep["exchange_ok"] and rep["world_size"] == 2
    assert not _listening(port)


def test_failed_run_leaves_nothing_behind():
    port = free_local_port()
    r = subprocess.run(_torchrun("--nproc-per-node", 3, "--master-port", port) + ["--fail-rank",
                                                                                   "1"],
                       env=_env(DGLX_TIMEOUT="20"), capture_output=True, text=True, timeout=180)
    assert r.returncode != 0
    assert "rank 1: failing on purpose" in r.stderr
    assert not _listening(port)
    assert not live_children()


def test_ranks_exit_when_their_launcher_is_killed(tmp_path, strategy="dorylus"):
    """SIGKILL of torchrun's agent mid-training: its ranks and dorylus's executor workers
    notice within seconds and exit, instead of running on with no parent."""
    import signal
    import time

    port = free_local_port()
    metrics = tmp_path / "metrics.jsonl"
    agent = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(port), "-m", "dglx_dist", "train", "--strategy", strategy,
         "--model", "gcn", "--epochs", "100000", "--eval-every", "1", "--no-progress",
         "--metrics-file", str(metrics), "--cache-dir", str(tmp_path / "cache")],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and metrics.read_text().strip()):
            assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
            time.sleep(0.2)
        started = psutil.Process(agent.pid).children(recursive=True)
        assert len(started) >= 2
        agent.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        gone, alive = psutil.wait_procs(started, timeout=15)
        seconds = time.monotonic() - t0
    finally:
        if agent.poll() is None:
            agent.kill()
    for p in alive:
        p.kill()
    assert not alive, [p.cmdline()[:4] for p in alive]
    assert seconds < 10, seconds
    assert "its launcher" in agent.stderr.read()
