"""Checkpoint and resume on real ranks: a run resumed from a checkpoint continues with the
losses and weights of the uninterrupted run (every strategy, dropout on), sparse embeddings'
shards come back, and a rank failing mid-save leaves the previous checkpoint loadable."""
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dglx_dist.checkpoint import Checkpointing, list_checkpoints
from dglx_dist.checkpoint import files as ckfiles
from dglx_dist.data import builtin_path, read_dataset, write_dataset
from dglx_dist.errors import CheckpointError
from dglx_dist.kvstore import DistEmbedding, DistKVStore, RowPolicy, SparseAdam
from dglx_dist.models import MODELS
from dglx_dist.partition import PartitionDir
from dglx_dist.partition.book import RangeBook
from dglx_dist.prepare import ensure_partitions
from dglx_dist.strategies import STRATEGIES
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist
EPOCHS, SAVED = 4, 2
CASES = {"distdgl": ("sage", {"fanouts": (5, 10), "batch_size": 64}),
         "p3": ("sage", {"fanouts": (5, 10), "batch_size": 64, "pipeline": True}),
         # 4 co-batches: drawn from the strategy's seed, the same ones after a restart
         "granndis": ("sage", {"co_batches": 4}),
         "dorylus": ("gcn", {"mode": "sync", "intervals": 2})}


def _seed_everything():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


def _trainer(session, name, cache, checkpoint=None, data=None, embeddings=()):
    model_kind, options = CASES[name]
    strategy = STRATEGIES.build(name, **options)
    pdir = PartitionDir(ensure_partitions(data or builtin_path("cora"), strategy, session,
                                          cache))
    _seed_everything()
    model = MODELS[model_kind](pdir.feat_dim, 16, pdir.num_classes, 2, dropout=0.5,
                               row_normalize=True)
    return Trainer(model, pdir, strategy, session=session, progress=False, lr=0.01,
                   checkpoint=checkpoint, embeddings=embeddings)


def _params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def _resume_run(session, name, tmp):
    """Uninterrupted EPOCHS epochs; then SAVED epochs with checkpoints, a new trainer (other
    initial weights and RNG state) resumed from them, and the rest."""
    cache = f"{tmp}/parts"
    full = _trainer(session, name, cache)
    full_history = [r["loss"] for r in full.fit(EPOCHS, eval_every=0)]
    full_params = _params(full)
    full.close()

    first = _trainer(session, name, cache, Checkpointing(f"{tmp}/ckpt", every=1, keep=1))
    first.fit(SAVED, eval_every=0)
    first.close()

    torch.manual_seed(1234)  # the resumed trainer starts from other weights and RNG state
    second = _trainer(session, name, cache, Checkpointing(f"{tmp}/ckpt", every=1, keep=1))
    for p in second.model.parameters():
        torch.nn.init.normal_(p.data)
    torch.manual_seed(99)
    resumed = second.resume_or_start(resume=True)
    assert (second.epoch, resumed) == (SAVED, True)
    history = [r["loss"] for r in second.fit(EPOCHS, eval_every=0)]
    params = _params(second)
    kept = [e for e, _ in list_checkpoints(f"{tmp}/ckpt")]
    second.close()
    return {"full": full_history, "resumed": history, "kept": kept,
            "max_param_diff": max(float((params[k] - full_params[k]).abs().max())
                                  for k in full_params)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_resumed_run_matches_uninterrupted(name, tmp_path):
    res = run_workers(_resume_run, 2, tmp_path, name, str(tmp_path), timeout=240,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for r in (0, 1):
        got = res[r]
        assert len(got["resumed"]) == EPOCHS  # the restored history plus the new epochs
        assert got["resumed"] == got["full"], name
        assert got["max_param_diff"] == 0.0, name
        assert got["kept"] == [EPOCHS]  # keep=1: older checkpoints removed


def _embeddings(session, tmp, fail_rank):
    store = DistKVStore(session, seed=3)
    policy = RowPolicy(RangeBook([0, 20, 40]))
    emb = DistEmbedding(store, "emb", 40, 4, policy, init=lambda shape, dtype: torch.randn(shape))
    opt = SparseAdam([emb], lr=0.1)
    ids = torch.tensor([1, 5, 5, 21, 38]) + session.rank
    for _ in range(3):
        emb(ids).pow(2).sum().backward()
        opt.step()
    _seed_everything()
    trainer = _trainer(session, "distdgl", f"{tmp}/parts", embeddings=[emb])
    trainer.save(f"{tmp}/ckpt")
    saved = {n: store.pull(n, torch.arange(40)).clone() for n in store.names()
             if n.startswith("emb")}
    mine = sorted(store.checkpoint_parts("emb"))
    for _ in range(2):  # train on: the resumed rows must be the saved ones, not these
        emb(ids).pow(2).sum().backward()
        opt.step()
    trainer.epoch = 1  # a second checkpoint whose save fails on one rank
    original = ckfiles.write_file
    if session.rank == fail_rank:
        ckfiles.write_file = lambda *a: (_ for _ in ()).throw(OSError(28, "No space left"))
    try:
        trainer.save(f"{tmp}/ckpt")
        failure = ""
    except CheckpointError as exc:
        failure = str(exc)
    finally:
        ckfiles.write_file = original
    assert trainer.resume(f"{tmp}/ckpt")
    session.world.barrier()
    back = {n: store.pull(n, torch.arange(40)) for n in saved}
    trainer.close()
    return {"failure": failure, "mine": mine, "epoch": trainer.epoch,
            "equal": all(torch.equal(saved[n], back[n]) for n in saved), "names": sorted(saved),
            "leftovers": sorted(p.name for p in Path(f"{tmp}/ckpt").iterdir())}


def test_embedding_shards_and_failed_save(tmp_path):
    res = run_workers(_embeddings, 2, tmp_path, str(tmp_path), 1, timeout=180)
    assert res[0]["names"] == ["emb", "emb/adam_m", "emb/adam_step", "emb/adam_v"]
    assert res[0]["mine"] == [0] and res[1]["mine"] == [1]  # each part saved by one rank
    for r in (0, 1):
        assert "rank 1" in res[r]["failure"] and "No space left" in res[r]["failure"]
        assert res[r]["equal"] and res[r]["epoch"] == 0  # the epoch-0 checkpoint came back
        assert res[r]["leftovers"] == ["epoch-000000"]  # no staging directory left behind


def _resume_refusals(session, tmp):
    """--resume with no usable checkpoint is an error on every rank; a checkpoint whose rank
    files were swapped (manifest consistent) is refused by the rank that reads the other's."""
    import json
    import shutil

    cache, ckpt = f"{tmp}/parts", Path(f"{tmp}/ckpt")
    out = {}
    for case in ("missing", "damaged", "swapped"):
        trainer = _trainer(session, "distdgl", cache, Checkpointing(str(ckpt), every=1))
        try:
            trainer.resume_or_start(resume=True)
            out[case] = None
        except CheckpointError as exc:
            out[case] = str(exc)
        session.world.barrier()  # every rank has read the directory before it changes
        if case == "missing":
            trainer.fit(1, eval_every=0)  # writes epoch-000001
            session.world.barrier()
            if session.is_main:  # damage its only checkpoint
                (ckpt / "epoch-000001" / "rank-00001.pt").write_bytes(b"junk")
        elif case == "damaged" and session.is_main:  # a fresh checkpoint, files swapped
            shutil.rmtree(ckpt)
        if case == "damaged":
            session.world.barrier()
            trainer.fit(1, eval_every=0)
            session.world.barrier()
            if session.is_main:
                path = ckpt / "epoch-000001"
                manifest = json.loads((path / "manifest.json").read_text())
                a, b = path / "rank-00000.pt", path / "rank-00001.pt"
                a.rename(path / "tmp")
                b.rename(a)
                (path / "tmp").rename(b)
                files = manifest["files"]
                files["rank-00000.pt"], files["rank-00001.pt"] = \
                    files["rank-00001.pt"], files["rank-00000.pt"]
                (path / "manifest.json").write_text(json.dumps(manifest))
        session.world.barrier()
        trainer.close()
    if session.is_main:  # the same shape, one feature changed: another dataset
        ds = read_dataset(builtin_path("cora"))
        ds.feat[0, 0] += 1.0
        write_dataset(ds, f"{tmp}/other")
    session.world.barrier()
    trainer = _trainer(session, "distdgl", cache, Checkpointing(str(ckpt)), f"{tmp}/other")
    try:
        trainer.resume_or_start(resume=True)
    except CheckpointError as exc:
        out["other data"] = str(exc)
    trainer.close()
    return out


def test_resume_refuses_what_it_cannot_use(tmp_path):
    res = run_workers(_resume_refusals, 2, tmp_path / "run", str(tmp_path), timeout=180)
    for r in (0, 1):
        assert "no usable checkpoint" in res[r]["missing"] and "does not exist" in \
            res[r]["missing"], res[r]
        assert "every checkpoint is damaged" in res[r]["damaged"] and "rank-00001.pt" in \
            res[r]["damaged"], res[r]
        assert "failed on ranks [0, 1]" in res[r]["swapped"], res[r]
    assert "written by rank 1; this is rank 0" in res[0]["swapped"]
    for r in (0, 1):  # issue 40, case 6: checkpoints record their data
        assert "was written with data=" in res[r]["other data"] and \
            "another dataset or partitioning" in res[r]["other data"], res[r]
