"""KVStore without processes: policies, LocalKVStore semantics, validation, sparse optimizers."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dglx_dist.kvstore import (ColumnPolicy, DistEmbedding, LocalKVStore, RowPolicy, SparseAdagrad,
                               SparseAdam)
from dglx_dist.kvstore.ops import combine_duplicates
from dglx_dist.kvstore.shm import SharedFile, from_bytes, to_bytes
from dglx_dist.partition.book import FeatureSlices, HashBook, RangeBook

N, D = 23, 4
FULL = torch.arange(N * D, dtype=torch.float32).view(N, D)
POLICIES = {"range": lambda: RowPolicy(RangeBook([0, 5, 5, 14, N])),
            "hash": lambda: RowPolicy(HashBook(N, 3, seed=7)),
            "columns": lambda: ColumnPolicy(FeatureSlices([0, 1, 1, 4]), N)}


def _part_data(policy, full):
    cols = lambda p: (policy.slices.slice(p),) if policy.splits_columns else ()  # noqa: E731
    return {p: full[policy.part_ids(p)][(slice(None), *cols(p))].clone()
            for p in range(policy.num_parts)}


def _store(kind="range", full=FULL, name="x"):
    store, policy = LocalKVStore(), POLICIES[kind]()
    store.init_data(name, policy, _part_data(policy, full))
    return store


# -- policies -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["range", "hash"])
def test_row_policy_maps_every_row_once(kind):
    policy = POLICIES[kind]()
    ids = torch.arange(N)
    owner, local = policy.part_of(ids), policy.to_local(ids)
    for p in range(policy.num_parts):
        rows = policy.part_ids(p)
        assert policy.part_rows(p) == rows.numel()
        assert policy.part_shape(p, (D,)) == (rows.numel(), D)
        assert torch.equal(owner[rows], torch.full_like(rows, p))
        assert torch.equal(local[rows], torch.arange(rows.numel()))
    pieces = policy.split(torch.tensor([9, 3, 9, 20, 0]))
    assert [q.part for q in pieces] == sorted({q.part for q in pieces})
    covered = torch.cat([q.pos for q in pieces]).sort().values
    assert covered.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("book, ids", [
    (RangeBook([0, N]), [9, 3, 9, 20, 0]),               # one part: the whole request
    (RangeBook([0, 5, 5, 14, N]), [7, 6, 13, 6]),        # every id in one part of several
    (RangeBook([0, 5, 5, 14, N]), [7, 1, 20, 6, 1]),     # several parts
    (HashBook(N, 3, seed=7), list(range(N))[::-1])])
def test_row_pieces_agree_with_the_book(book, ids):
    """Each piece's rows are the request's ids of that part, in request order, at their
    local indices, whichever shortcut split took."""
    policy, ids = RowPolicy(book), torch.tensor(ids)
    owner, local = policy.part_of(ids), policy.to_local(ids)
    pieces = policy.split(ids)
    assert [q.part for q in pieces] == sorted(set(owner.tolist()))
    for q in pieces:
        want = (owner == q.part).nonzero().squeeze(1)
        assert torch.equal(q.pos, want) and torch.equal(q.local, local[want])


def test_column_policy():
    policy = POLICIES["columns"]()
    assert policy.num_parts == 3 and policy.splits_columns
    assert [policy.part_shape(p, (D,)) for p in range(3)] == [(N, 1), (N, 0), (N, 3)]
    pieces = policy.split(torch.tensor([4, 4, 1]))
    assert [(q.part, q.cols) for q in pieces] == [(0, slice(0, 1)), (2, slice(1, 4))]
    assert torch.equal(policy.to_local(torch.tensor([4, 1])), torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="trailing shape starting with 4; got \\(5,\\)"):
        policy.part_shape(0, (5,))
    with pytest.raises(ValueError, match="no single part"):
        policy.part_of(torch.tensor([1]))


# -- pull / push against numpy --------------------------------------------------------------
ids_lists = st.lists(st.integers(0, N - 1), min_size=0, max_size=30)


@settings(max_examples=40, deadline=None)
@given(ids=ids_lists, kind=st.sampled_from(sorted(POLICIES)))
def test_pull_rows_in_request_order(ids, kind):
    got = _store(kind).pull("x", torch.tensor(ids, dtype=torch.int64))
    assert got.shape == (len(ids), D)
    np.testing.assert_array_equal(got.numpy(), FULL.numpy()[np.array(ids, dtype=np.int64)])


@pytest.mark.parametrize("kind", sorted(POLICIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_pull_writes_rows_of_any_dtype(kind, dtype):
    """Scattered pieces (hash) go through numpy's scatter, or index_copy_ for bfloat16."""
    full = FULL.to(dtype)
    ids = torch.tensor([9, 3, 9, 20, 0, 22, 3])
    got = _store(kind, full).pull("x", ids)
    assert got.dtype == dtype and torch.equal(got, full[ids])


@settings(max_examples=40, deadline=None)
@given(ids=ids_lists, kind=st.sampled_from(sorted(POLICIES)), op=st.sampled_from(["assign", "add"]),
       seed=st.integers(0, 2**16))
def test_push_matches_numpy(ids, kind, op, seed):
    store = _store(kind)
    ids_np = np.array(ids, dtype=np.int64)
    values = np.random.default_rng(seed).normal(size=(len(ids), D)).astype(np.float32)
    store.push("x", torch.from_numpy(ids_np), torch.from_numpy(values), op=op)
    want = FULL.numpy().copy()
    if op == "add":
        np.add.at(want, ids_np, values)
    else:
        for i, row in zip(ids_np, values):  # sequential: the last occurrence wins
            want[i] = row
    # the store sums a row's duplicates before adding them, numpy adds one at a time: float32
    # rounding differs by a few ulps, and relative error is large where a row cancels to ~0
    np.testing.assert_allclose(store.pull("x", torch.arange(N)).numpy(), want, rtol=1e-5,
                               atol=1e-5)


def test_pull_push_one_dim_and_int_tensors():
    store, policy = LocalKVStore(), POLICIES["hash"]()
    label = torch.arange(N) * 3
    store.init_data("label", policy, _part_data(policy, label))
    assert store.dtype("label") == torch.int64 and store.shape("label") == (N,)
    store.push("label", torch.tensor([2, 2, 5]), torch.tensor([1, 10, 100]), op="add")
    assert store.pull("label", torch.tensor([5, 2])).tolist() == [115, 17]


def test_user_op_sees_presummed_values_and_state():
    store = _store()
    store.init_data("x/count", store.policy("x"), trailing_shape=(), dtype=torch.int64)
    seen = []

    def scale_and_count(rows, values, local, state):
        seen.append((state["name"], state["part"], local.tolist(), values.tolist()))
        state["tensors"]["x/count"][local] += 1
        return rows * values

    store.register_op("scale", scale_and_count)
    store.push("x", torch.tensor([6, 1, 6]), torch.tensor([[2.0] * D, [3.0] * D, [5.0] * D]),
               op="scale")
    assert store.pull("x", torch.tensor([1, 6])).tolist() == [(FULL[1] * 3).tolist(),
                                                              (FULL[6] * 7).tolist()]
    assert store.pull("x/count", torch.tensor([1, 6, 7])).tolist() == [1, 1, 0]
    assert seen == [("x", 0, [1], [[3.0] * D]), ("x", 2, [1], [[7.0] * D])]


def test_combine_duplicates_rules():
    ids, vals = torch.tensor([3, 1, 3, 3]), torch.tensor([1.0, 2.0, 4.0, 8.0])
    assert [t.tolist() for t in combine_duplicates(ids, vals, "sum")] == [[1, 3], [2.0, 13.0]]
    assert [t.tolist() for t in combine_duplicates(ids, vals, "last")] == [[1, 3], [2.0, 8.0]]


def test_init_zeros_and_seeded_callable():
    policy = POLICIES["hash"]()
    stores = [LocalKVStore(seed=s) for s in (1, 1, 2)]
    before = torch.random.get_rng_state()
    for store in stores:
        store.init_data("z", policy, trailing_shape=(2,))
        store.init_data("r", policy, trailing_shape=(2,),
                        init=lambda shape, dtype: torch.randn(shape, dtype=dtype))
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's RNG is untouched
    everything = torch.arange(N)
    assert not stores[0].pull("z", everything).any()
    a, b, c = (s.pull("r", everything) for s in stores)
    assert torch.equal(a, b) and not torch.equal(a, c)


# -- validation -----------------------------------------------------------------------------
@pytest.mark.parametrize("ids,message", [
    (torch.tensor([1.0]), "1-D torch.int64 tensor; got torch.float32"),
    (torch.tensor([[1]]), "1-D torch.int64 tensor; got torch.int64 tensor of shape \\(1, 1\\)"),
    ([1, 2], "1-D torch.int64 tensor; got list"),
    (torch.tensor([0, -1]), "id -1 at position 1 is outside \\[0, 23\\)"),
    (torch.tensor([N]), "id 23 at position 0 is outside \\[0, 23\\)"),
])
def test_bad_ids(ids, message):
    store = _store()
    with pytest.raises(ValueError, match=f"pull 'x': ids must be a |pull 'x': {message}"):
        store.pull("x", ids)
    with pytest.raises(ValueError, match=message):
        store.push("x", ids, torch.zeros(1, D))


def test_unknown_names_and_ops_list_the_known_ones():
    store = _store()
    with pytest.raises(KeyError, match=r"unknown tensor name 'y'; registered names: \['x'\]"):
        store.pull("y", torch.tensor([0]))
    with pytest.raises(KeyError, match=r"unknown push op 'mul'; registered ops: \['assign', "):
        store.push("x", torch.tensor([0]), torch.zeros(1, D), op="mul")
    with pytest.raises(KeyError, match="unknown tensor name"):
        store.shape("y")


@pytest.mark.parametrize("values,message", [
    (torch.zeros(2, D, dtype=torch.float64), "values are torch.float64 of shape \\(2, 4\\); "
                                             "expected torch.float32 of shape \\(2, 4\\)"),
    (torch.zeros(2, D + 1), "shape \\(2, 5\\); expected torch.float32 of shape \\(2, 4\\)"),
    (torch.zeros(3, D), "shape \\(3, 4\\); expected"),
    (np.zeros((2, D), np.float32), "values must be a torch.Tensor"),
])
def test_bad_push_values(values, message):
    with pytest.raises(ValueError, match=message):
        _store().push("x", torch.tensor([0, 1]), values)


def test_bad_registrations():
    store, policy = _store(), POLICIES["range"]()
    with pytest.raises(ValueError, match="already registered"):
        store.init_data("x", policy, trailing_shape=(D,))
    with pytest.raises(ValueError, match="give trailing_shape"):
        store.init_data("y", policy)
    with pytest.raises(ValueError, match=r"part_data\[1\] is torch.float32 of shape \(3, 4\); "
                                         r"expected torch.float32 of shape \(0, 4\)"):
        store.init_data("y", policy, {1: torch.zeros(3, D)}, trailing_shape=(D,))
    with pytest.raises(ValueError, match="part_data key 7 is not a part in \\[0, 4\\)"):
        store.init_data("y", policy, {7: torch.zeros(1, D)})
    with pytest.raises(KeyError, match="unknown init 'ones'"):
        store.init_data("y", policy, trailing_shape=(D,), init="ones")
    with pytest.raises(TypeError, match="policy must be a PartitionPolicy"):
        store.init_data("y", RangeBook([0, N]), trailing_shape=(D,))
    with pytest.raises(ValueError, match="trailing shape starting with 4"):
        store.init_data("y", POLICIES["columns"](), trailing_shape=(3,))
    with pytest.raises(ValueError, match="already registered"):
        store.register_op("add", lambda *a: a[0])
    with pytest.raises(ValueError, match="combine 'max'; expected one of \\['last', 'sum'\\]"):
        store.register_op("m", lambda *a: a[0], combine="max")
    assert store.names() == ["x"]  # nothing half-registered


def test_op_returning_wrong_shape_is_named():
    store = _store()
    store.register_op("bad", lambda rows, values, local, state: rows[:, :1])
    with pytest.raises(RuntimeError, match="op 'bad' returned shape"):
        store.push("x", torch.tensor([0]), torch.zeros(1, D), op="bad")


# -- sparse embeddings and optimizers -------------------------------------------------------
BATCHES = [torch.tensor([1, 4, 4, 9]), torch.tensor([4, 2, 1]), torch.tensor([9, 9, 0, 4])]


def _weights(ids, step):
    return torch.linspace(-1, 1, ids.numel() * D).view(-1, D) * (step + 1)


def _sparse_run(make_opt, batches, kind="hash"):
    store = LocalKVStore(seed=3)
    init = lambda shape, dtype: torch.randn(shape, dtype=dtype)  # noqa: E731
    emb = DistEmbedding(store, "emb", N, D, POLICIES[kind](), init=init)
    start = store.pull("emb", torch.arange(N))
    opt = make_opt([emb])
    history = []
    for step, ids in enumerate(batches):
        opt.zero_grad()
        (emb(ids) * _weights(ids, step)).square().sum().backward()
        opt.step()
        history.append(store.pull("emb", torch.arange(N)))
    return start, history


def _dense_run(make_opt, start, batches):
    weight = torch.nn.Parameter(start.clone())
    opt = make_opt([weight])
    history = []
    for step, ids in enumerate(batches):
        opt.zero_grad()
        (weight[ids] * _weights(ids, step)).square().sum().backward()
        opt.step()
        history.append(weight.detach().clone())
    return history


def test_sparse_adagrad_matches_dense_adagrad():
    """A zero gradient leaves a dense Adagrad row unchanged too, so every step matches."""
    start, sparse = _sparse_run(lambda e: SparseAdagrad(e, lr=0.2, eps=1e-10), BATCHES)
    dense = _dense_run(lambda p: torch.optim.Adagrad(p, lr=0.2, eps=1e-10), start, BATCHES)
    for s, d in zip(sparse, dense):
        torch.testing.assert_close(s, d)
    assert torch.equal(sparse[-1][[3, 5]], start[[3, 5]])  # never touched


def test_sparse_adam_is_lazy_adam():
    """First step: equal to dense Adam. Rows touched in every step: equal at every step. A row
    skipped in a step stays put (dense Adam moves it through its momentum)."""
    adam = lambda e: SparseAdam(e, lr=0.1, betas=(0.8, 0.9), eps=1e-8)  # noqa: E731
    dense_adam = lambda p: torch.optim.Adam(p, lr=0.1, betas=(0.8, 0.9), eps=1e-8)  # noqa: E731
    start, sparse = _sparse_run(adam, BATCHES)
    dense = _dense_run(dense_adam, start, BATCHES)
    torch.testing.assert_close(sparse[0], dense[0])
    always = [4]  # the only row in every batch
    for s, d in zip(sparse, dense):
        torch.testing.assert_close(s[always], d[always])
    assert torch.equal(sparse[1][9], sparse[0][9])  # 9 is not in batch 1: lazy, unchanged
    assert not torch.allclose(dense[1][9], dense[0][9])  # dense momentum moves it
    assert torch.equal(sparse[-1][[3, 5]], start[[3, 5]])


def test_sparse_adam_state_is_per_row():
    store = LocalKVStore()
    emb = DistEmbedding(store, "e", N, D, POLICIES["range"]())
    opt = SparseAdam([emb], lr=0.01)
    for ids in BATCHES:
        emb(ids).sum().backward()
        opt.step()
    steps = store.pull("e/adam_step", torch.tensor([0, 1, 2, 3, 4, 9]))
    assert steps.tolist() == [1, 2, 1, 0, 3, 2]
    assert store.names() == ["e", "e/adam_m", "e/adam_v", "e/adam_step"]


def test_embedding_trace_and_zero_grad():
    store = LocalKVStore()
    emb = DistEmbedding(store, "e", N, D, POLICIES["range"]())
    opt = SparseAdagrad([emb], lr=1.0)
    with torch.no_grad():
        emb(torch.tensor([1]))  # not recorded
    emb(torch.tensor([2])).sum().backward()
    opt.zero_grad()  # drops the gradient of row 2
    out = emb(torch.tensor([3]))
    assert out.requires_grad and out.is_leaf
    out.sum().backward()
    opt.step()
    moved = (store.pull("e", torch.arange(N)) != 0).any(1).nonzero().flatten().tolist()
    assert moved == [3]
    opt.step()  # nothing recorded: an empty push
    assert (store.pull("e", torch.arange(N)) != 0).any(1).sum() == 1


def test_embedding_errors():
    store = LocalKVStore()
    with pytest.raises(ValueError, match="num_embeddings=5 but the policy covers 23 rows"):
        DistEmbedding(store, "e", 5, D, POLICIES["range"]())
    emb = DistEmbedding(store, "c", N, D, POLICIES["columns"]())
    with pytest.raises(ValueError, match="SparseAdam keeps a per-row step count"):
        SparseAdam([emb])
    SparseAdagrad([emb], lr=0.1)  # state with the embedding's row shape works column-wise
    assert "c/adagrad_sum" in store.names()


# -- raw bytes and shared memory ------------------------------------------------------------
def test_bytes_round_trip_and_misaligned_views():
    rows = torch.randn(3, 2, dtype=torch.float64)
    buf = torch.cat([torch.zeros(3, dtype=torch.uint8), to_bytes(rows)])[3:]
    assert buf.storage_offset() % 8
    assert torch.equal(from_bytes(buf, (3, 2), torch.float64), rows)
    with pytest.raises(RuntimeError, match="received 48 bytes; expected 40"):
        from_bytes(buf, (5,), torch.float64)


def test_shared_files_map_the_same_memory_and_grow_in_place(tmp_path):
    path = tmp_path / "part"
    made = SharedFile(path, create=True)
    created = made.grow(0, (2, 3), torch.int32)
    created.copy_(torch.arange(6, dtype=torch.int32).view(2, 3))
    other = SharedFile(path, create=False)
    mapped = other.map((2, 3), torch.int32)
    path.unlink()  # mappings (and the open files) outlive the name
    created[1, 2] = 42
    assert mapped.tolist() == [[0, 1, 2], [3, 4, 42]]
    grown = made.grow(2 * 3 * 4, (4, 3), torch.int32)  # two rows more, the first two kept
    grown[2:] = 7
    assert other.map((4, 3), torch.int32).tolist() == [[0, 1, 2], [3, 4, 42]] + [[7] * 3] * 2
    assert mapped.tolist() == [[0, 1, 2], [3, 4, 42]]  # an older, shorter mapping still reads
    with pytest.raises(RuntimeError, match="has 48 bytes; expected 24"):
        other.map((2, 3), torch.int32)
    with pytest.raises(FileExistsError):
        SharedFile(tmp_path / "again", create=True) and SharedFile(tmp_path / "again", True)
    for file in (made, other):
        file.close()


FILL_SMALL_TMPFS = """
import os, sys, torch
from pathlib import Path
from dglx_dist.kvstore.shm import SharedFile
path = Path(sys.argv[1]) / "part"
file = SharedFile(path, create=True)
rows = file.grow(0, (2**17,), torch.float32)  # 512 KiB fit in the 1 MiB tmpfs
rows.fill_(3.0)
try:
    file.grow(rows.nbytes, (2**20,), torch.float32)  # growing to 4 MiB does not
except OSError as exc:
    print("refused:", exc)
print("size:", os.path.getsize(path), "rows:", float(file.map((2**17,), torch.float32).sum()))
"""


def test_a_full_shm_is_an_error_not_sigbus(tmp_path):
    """A tmpfs too small for a part to grow (a container's 64 MB /dev/shm, here 1 MiB of a private
    mount): writing the mapping would kill the process with SIGBUS; the store refuses instead."""
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.insert(1, "--map-root-user")
    script = f'mount -t tmpfs -o size=1m tmpfs "$1" && exec {sys.executable} -c "$2" "$1"'
    r = subprocess.run([*unshare, "sh", "-c", script, "sh", str(tmp_path), FILL_SMALL_TMPFS],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "cannot hold 3.5 MiB of shared tensor in" in r.stdout, r.stdout
    assert "enlarge it (docker run --shm-size)" in r.stdout
    assert f"size: {2**19} rows: {3.0 * 2**17}" in r.stdout  # what was there is left as it was


# -- the distributed store's pieces, without processes --------------------------------------
def test_shards_place_parts_and_wait_for_entries():
    import threading

    from dglx_dist.errors import ProtocolError
    from dglx_dist.kvstore.entries import TensorEntry
    from dglx_dist.kvstore.shards import Shards
    from dglx_dist.runtime.topology import Topology

    shards = Shards(Topology(2, 2), rank=3, ops={})
    assert shards.server == 1 and len(shards) == 0
    assert shards.part_servers(RowPolicy(RangeBook([0, 9, N]))) == [0, 1]  # a part per server
    assert shards.part_servers(RowPolicy(HashBook(N, 4, seed=1))) == [0, 0, 1, 1]  # per rank
    with pytest.raises(ValueError, match="needs 2 parts .* or 4"):
        shards.part_servers(POLICIES["hash"]())
    with pytest.raises(ProtocolError, match="same order on every rank"):
        shards.entry_at(0, "rank 0")
    entry = TensorEntry("x", 0, POLICIES["range"](), (D,), torch.float32)
    threading.Timer(0.2, shards.add, (entry, [0, 0, 1, 1])).start()  # a late init_data
    assert shards.entry_at(0, "rank 0", wait=10.0) is entry and len(shards) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=30), min_size=1, max_size=3),
       st.lists(st.integers(1, 40), min_size=3, max_size=3), st.integers(0, 600))
def test_cache_takes_the_most_pulled_rows_that_fit(counts, widths, budget):
    """choose_rows is the longest run of rows, most pulled first (ties: name, then id), whose
    bytes (row plus its 8-byte id) fit the budget; a row nobody pulled never."""
    from dglx_dist.kvstore.cache import choose_rows
    from dglx_dist.kvstore.copies import ID_BYTES

    tensors = {2 * i: torch.tensor(c, dtype=torch.int32) for i, c in enumerate(counts)}
    row_bytes = {2 * i: widths[i] for i in range(len(counts))}
    got = choose_rows(tensors, row_bytes, budget)
    order = sorted((-n, name, row) for name, c in tensors.items()
                   for row, n in enumerate(c.tolist()) if n)
    want, used = {}, 0
    for _, name, row in order:
        used += row_bytes[name] + ID_BYTES
        if used > budget:
            break
        want.setdefault(name, []).append(row)
    assert {k: v.tolist() for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 19), max_size=12, unique=True), min_size=1,
                max_size=6),
       st.lists(st.integers(0, 19), max_size=20), st.integers(1, 15), st.booleans(),
       st.sampled_from([None, 7]))
@example([[0], [7], [1]], [7, 0, 1], 2, True, 7)  # 7 takes 0's slot, then 0 gives way
def test_copies_hold_the_rows_the_answers_brought(answers, wanted, capacity, wrap, slots):
    """Copies hold each row once, as its answer brought it, and give back the rows of any
    ids they hold, in order, into the tensor given. Without ``wrap`` they keep the first
    ``capacity`` rows and copy no more; with it the newest ``capacity`` rows, the oldest
    giving way. Found through fewer slots than rows (7 for 20: a direct-mapped table), a
    copy is found while it is kept and no copy made after it shares its slot: an id whose
    slot a later copy took is copied again when an answer brings it again, and a copy that
    gives way never takes a slot from the later copy that holds it now."""
    from types import SimpleNamespace

    from dglx_dist.kvstore.copies import Copies

    table = torch.arange(20 * 3, dtype=torch.float32).view(20, 3)
    entry = SimpleNamespace(trailing=(3,), dtype=torch.float32,
                            policy=SimpleNamespace(num_rows=20))
    copies, made = Copies.of(entry, capacity, wrap, slots), []  # every copy, in turn
    key = (lambda i: i) if slots is None else (lambda i: i % slots)

    def found(i: int) -> bool:  # the model: kept, and its slot's last copy
        kept = made[-capacity:] if wrap else made[:capacity]
        return i in kept and [k for k in made if key(k) == key(i)][-1] == i

    for ids in answers:
        gids = torch.tensor(ids, dtype=torch.int64)
        added = copies.add(gids, table.index_select(0, gids))
        new = [i for i in ids if not found(i)]
        new = new[-capacity:] if wrap else new[:max(0, capacity - len(made))]
        assert added == len(new)
        made += new
    ids = torch.tensor(list(dict.fromkeys(wanted)), dtype=torch.int64)  # distinct, in order
    have = copies.has(ids)
    assert have.tolist() == [found(i) for i in ids.tolist()]
    into = torch.full((int(have.sum()), 3), -1.0)  # e.g. the cache's shared tensor
    rows = copies.rows_of(ids[have], into)
    assert rows is into and torch.equal(rows, table.index_select(0, ids[have]))


def test_copies_of_a_name_of_many_rows_fit_the_budget():
    """At the default 64 MiB a name of 20M rows of 512 bytes (a slot per row would take
    80 MB) keeps copies: 8M slots and about 65,000 rows, nearly all of them found again
    (a few lose their slot to a later copy), each with its own row."""
    from types import SimpleNamespace

    from dglx_dist.kvstore.copies import Copies, capacity, table_size

    num_rows, budget, width = 20_000_000, 64 * 2**20, 128
    entry = SimpleNamespace(trailing=(width,), dtype=torch.float32, row_bytes=4 * width,
                            policy=SimpleNamespace(num_rows=num_rows))
    copies = Copies.within(entry, budget, wrap=True)
    assert copies.slots.numel() == table_size(budget, num_rows) == 2**23
    assert copies.ids.numel() == capacity(budget, num_rows, 4 * width) > 60_000
    assert copies.slots.nbytes + copies.ids.nbytes + copies.rows.nbytes <= budget
    gen = torch.Generator().manual_seed(0)
    gids = torch.randperm(num_rows, generator=gen)[:copies.ids.numel()]
    rows = torch.rand((gids.numel(), width), generator=gen)
    assert copies.add(gids, rows) == gids.numel()
    found = copies.has(gids)
    assert found.float().mean() > 0.99
    assert torch.equal(copies.rows_of(gids[found]), rows[found])
    other = torch.randperm(num_rows, generator=gen)[:1000]
    stray = copies.has(other) & ~torch.isin(other, gids)
    assert not bool(stray.any())  # an id never copied is never found
