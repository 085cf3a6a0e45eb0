"""Several pulls and pushes in one exchange (``start_pull_many`` / ``push_many``) on real gloo
process groups, checked against LocalKVStore doing them one by one: every row goes where it
belongs, whatever mix of names, widths, dtypes and policies a rank asks for, and ranks may
ask for different names and numbers of them in the same step."""
import pytest
import torch

from dglx_dist.kvstore import ColumnPolicy, DistKVStore, LocalKVStore, RowPolicy
from dglx_dist.kvstore.shards import pack_messages, unpack_messages
from dglx_dist.partition.book import FeatureSlices, HashBook, RangeBook
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
N = 40
VIRTUAL_2x2 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}


def _tensors(parts_server: int, parts_rank: int):
    """(name, policy, full tensor): rows by server, rows by rank, columns, int64, 1-D."""
    bounds = torch.linspace(0, N, parts_server + 1).round().long().tolist()
    by_server, by_rank = RowPolicy(RangeBook(bounds)), RowPolicy(HashBook(N, parts_rank, seed=3))
    g = torch.Generator().manual_seed(0)
    return [("a", by_server, torch.randn((N, 3), generator=g)),
            ("b", by_rank, torch.randn((N, 7), generator=g)),
            ("c", ColumnPolicy(FeatureSlices.even(6, parts_server), N),
             torch.randn((N, 6), generator=g)),
            ("d", by_server, torch.arange(N, dtype=torch.int64) * 11),
            ("e", by_rank, torch.randn((N,), generator=g))]


def _register(store, session=None):
    for name, policy, full in _tensors(*_parts(session)):
        cols = lambda p: ((policy.slices.slice(p),) if policy.splits_columns else ())  # noqa
        parts = range(policy.num_parts) if session is None else [
            p for p, s in enumerate(store.part_servers(policy)) if s == session.server_id]
        store.init_data(name, policy, {p: full[policy.part_ids(p)][(slice(None), *cols(p))]
                                       .clone() for p in parts},
                        trailing_shape=tuple(full.shape[1:]), dtype=full.dtype)


def _parts(session):
    return (2, 4) if session is None else (session.topology.num_servers, session.world_size)


def _asks(step: int, rank: int) -> list[tuple[str, torch.Tensor]]:
    """A rank's pulls of a step: some of the names (none for rank 3 at step 0), ids with
    duplicates."""
    g = torch.Generator().manual_seed(100 * step + rank)
    names = [n for n in "abcde" if torch.rand(1, generator=g) < 0.7]
    if step == 0 and rank == 3:
        names = []
    return [(n, torch.randint(0, N, (int(torch.randint(0, 15, (1,), generator=g)),),
                              generator=g)) for n in names]


def _pushes(step: int, rank: int, shapes) -> list[tuple]:
    """A rank's pushes of a step: "add" to a, b, c, e (ids overlapping between ranks),
    "assign" to d on ids only this rank writes."""
    g = torch.Generator().manual_seed(7 + 100 * step + rank)
    out = []
    for name in "abce":
        if torch.rand(1, generator=g) < 0.75:
            ids = torch.randint(0, N, (int(torch.randint(1, 12, (1,), generator=g)),),
                                generator=g)
            out.append((name, ids, torch.randn((ids.numel(), *shapes[name]), generator=g),
                        "add"))
    ids = torch.arange(rank, N, 4)[:3 + step]
    out.append(("d", ids, ids * 100 + step, "assign"))
    return out


def _close(got, want):
    """Equal dtype and shape, values equal up to float rounding (sums grouped otherwise)."""
    return (got.dtype == want.dtype and got.shape == want.shape
            and bool(torch.allclose(got.double(), want.double(), rtol=1e-6, atol=1e-5)))


def _many(session):
    store, ref = DistKVStore(session), LocalKVStore()
    _register(store, session)
    _register(ref)
    shapes = {n: tuple(t.shape[1:]) for n, _, t in _tensors(2, 4)}
    wrong = []
    for step in range(3):
        got = store.start_pull_many(_asks(step, session.rank)).wait()
        for (name, ids), rows in zip(_asks(step, session.rank), got):
            if not _close(rows, ref.pull(name, ids)):
                wrong.append(f"pull {name} step {step}")
        store.push_many(_pushes(step, session.rank, shapes))
        for r in range(session.world_size):  # the reference: each rank's pushes in turn
            for name, ids, values, op in _pushes(step, r, shapes):
                ref.push(name, ids, values, op)
    everything = torch.arange(N)
    for name in "abcde":
        if not _close(store.pull(name, everything), ref.pull(name, everything)):
            wrong.append(f"rows of {name}")
    try:
        store.push_many([("a", everything[:1], torch.ones(1, 3), "add")] * 2)
        refused = "not refused"
    except ValueError as exc:
        refused = str(exc)
    store.close()
    return {"wrong": wrong, "refused": refused}


def test_many_pulls_and_pushes_match_one_by_one(tmp_path):
    res = run_workers(_many, 4, tmp_path, env=VIRTUAL_2x2)
    for r, out in res.items():
        assert out["wrong"] == [], (r, out["wrong"])
        assert "each name at most once" in out["refused"], out["refused"]


def test_packed_push_messages_round_trip():
    messages = [(torch.tensor([3, 1, 5, 9]), torch.arange(8, dtype=torch.uint8)),
                (torch.tensor([0, 2]), torch.zeros(0, dtype=torch.uint8)),
                (torch.tensor([1, 0, 4]), torch.arange(5, dtype=torch.uint8))]
    buf = pack_messages(messages)
    back = unpack_messages(torch.cat([torch.zeros(3, dtype=torch.uint8), buf])[3:])  # unaligned
    assert len(back) == 3
    for (head, data), (h, d) in zip(messages, back):
        assert torch.equal(head, h) and torch.equal(data, d)
    assert unpack_messages(pack_messages([])) == []
