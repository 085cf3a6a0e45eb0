"""How a ``dglx`` process ends (:func:`dglx_dist.cli.run`): a launcher's rank leaves without
the interpreter's finalization, but only after what a normal exit would have done first."""
import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path
    from dglx_dist.cli import run

    out = Path(sys.argv[1])
    atexit.register(lambda: print("atexit ran", flush=False))
    def later():
        time.sleep(0.5)
        out.write_text("thread done")
    threading.Thread(target=later).start()
    sys.stdout.write("buffered, not flushed\\n")
    sys.argv = ["dglx", "plan", "--data", "cora", "--servers", "2"]
    run()
""")


@pytest.mark.parametrize("launched", [True, False])
def test_a_command_ends_with_its_threads_atexit_handlers_and_output(tmp_path, launched):
    """Under a launcher (RANK set) and without one: the plan printed, the script's non-daemon
    thread finished, its atexit handler ran, buffered output flushed, exit status 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    if launched:
        env.update(RANK="0", WORLD_SIZE="1")
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "plan: strategy" in r.stdout and "buffered, not flushed" in r.stdout
    assert r.stdout.rstrip().endswith("atexit ran"), r.stdout[-500:]
    assert (tmp_path / "out").read_text() == "thread done"
