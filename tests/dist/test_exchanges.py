"""The differentiable exchanges of runtime.autograd on real gloo groups, forward and backward.

The strategies (P3, GraNNDis) test them through DGL models; these need no DGL, so they also run
in `make test-core` (newest torch and numpy).
"""
import pytest
import torch

from dglx_dist.runtime.autograd import halo_exchange, reduce_to_owners
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
VIRTUAL_2x2 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}
# the ranks' device, set explicitly; where CUDA exists (the GPU check of `make test-core`) the
# ranks also share the GPU over gloo, their exchanges going through host memory
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _owner_sums(session, cross):
    """Rank r's partial for owner j is a_r * (j + 1), a_r filled with r + 1; owner j's loss is
    (j + 1) * sum(output)."""
    comm_cross = session.cross if cross else None
    owners = session.world_size if cross else session.server.size
    me = session.rank if cross else session.server.group_rank
    members = session.world.members if cross else session.server.members
    a = torch.full((2, 3), float(session.rank + 1), device=session.device, requires_grad=True)
    out = reduce_to_owners(session.server, comm_cross,
                           [[a * (j + 1)] for j in range(owners)])[0]
    (out.sum() * (me + 1)).backward()
    return {"out": out.detach().tolist(), "grad": a.grad.tolist(),
            "total": sum(r + 1 for r in members), "owners": owners, "me": me,
            "devices": [str(out.device), str(a.grad.device)]}


def _halo(session):
    """Rank r sends row (j % 3) of its h to every other rank j; h's rows are 10 r + i."""
    r, w = session.rank, session.world_size
    h = (torch.arange(3, dtype=torch.float32, device=session.device)[:, None] + 10 * r)
    h.requires_grad_()
    send_idx = [torch.tensor([] if j == r else [j % 3], dtype=torch.long) for j in range(w)]
    out = halo_exchange(session.world, h, send_idx, [0 if j == r else 1 for j in range(w)])
    out.sum().backward()
    return {"out": out.detach().flatten().tolist(), "grad": h.grad.flatten().tolist(),
            "devices": [str(out.device), str(h.grad.device)]}


def _exchanges(session):
    return {"cross": _owner_sums(session, True), "server": _owner_sums(session, False),
            "halo": _halo(session), "device": str(session.device)}


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_to_owners_and_halo_exchange_forward_and_backward(tmp_path, device):
    res = run_workers(_exchanges, 4, tmp_path, env={**VIRTUAL_2x2, "DGLX_DEVICE": device})
    for r, out in res.items():
        assert out["device"].split(":")[0] == device
        for case in ("cross", "server", "halo"):  # results and gradients where the inputs are
            assert out[case]["devices"] == [out["device"]] * 2, (r, case)
        for case in ("cross", "server"):
            got = out[case]
            # sum over the group's ranks q of (q + 1) * (me + 1)
            assert got["out"] == [[got["total"] * (got["me"] + 1)] * 3] * 2, (r, case)
            # d/da_r of sum over owners j of (j + 1) * (j + 1) * sum(a_r)
            squares = sum((j + 1) ** 2 for j in range(got["owners"]))
            assert got["grad"] == [[float(squares)] * 3] * 2, (r, case)
        others = [j for j in range(4) if j != r]
        assert out["halo"]["out"] == [10 * r + i for i in range(3)] + \
            [10 * j + r % 3 for j in others], r
        assert out["halo"]["grad"] == [1 + sum(j % 3 == i for j in others) for i in range(3)], r
