"""`dglx rdzvcheck HOST:PORT`: a free port, a real torch.distributed store, and a port held
by something else (a listener that never answers, on which torchrun would hang)."""
import datetime
import socket

import torch.distributed as dist

from dglx_dist.cli import main
from dglx_dist.runtime.env import free_local_port


def test_free_port_and_store_pass(capsys):
    port = free_local_port()
    assert main(["rdzvcheck", f"127.0.0.1:{port}", "--timeout", "2"]) == 0
    assert "free" in capsys.readouterr().out
    store = dist.TCPStore("127.0.0.1", port, None, True,  # noqa: F841  (kept open)
                          timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
    assert main(["rdzvcheck", f"127.0.0.1:{port}", "--timeout", "2"]) == 0
    assert "a torch.distributed store answers" in capsys.readouterr().out


def test_a_port_held_by_something_else_is_named(caplog):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["rdzvcheck", f"127.0.0.1:{port}", "--timeout", "1"]) == 2
    assert "is not a torch.distributed store" in caplog.text and "pid" in caplog.text
    assert main(["rdzvcheck", "nonsense"]) == 2
    assert "expected HOST:PORT" in caplog.text
