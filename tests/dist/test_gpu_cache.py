"""DGL's ``gpu_cache`` (issue 79, item 2): rows of the nodes with the most out-edges kept
on the steps' device, the others pulled and merged there. Two real ranks under distdgl on
Cora: every step's feature rows and labels are the graph's rows of its nodes, with the cache
as without it, while fewer rows are pulled; after the ranks write a row of a kept name, the
steps read the new row. A GPU's loader takes
``gpu_cache`` itself; on the CPU the loader refuses it (as DGL's), so the test puts the
same prefetch, with the cache on the host, behind a loader of the CPU."""
import dataclasses

import pytest
import torch

import dglx_dist
from dglx_dist.api.prefetch import Prefetch
from dglx_dist.data import CoraGraphDataset
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KEPT = {"feat": 600, "label": 300}


def _loader(g, ids, sampler, kept: bool):
    if not kept:
        return dglx_dist.DataLoader(g, ids, sampler, batch_size=64, device=DEVICE)
    if DEVICE == "cuda":
        return dglx_dist.DataLoader(g, ids, sampler, batch_size=64, device=DEVICE,
                                    gpu_cache={"node": KEPT})
    loader = dglx_dist.DataLoader(g, ids, sampler, batch_size=64)
    loader.prefetch = Prefetch(g, sampler, dataclasses.replace(loader.delivery,
                                                               gpu_cache=KEPT))
    return loader


def _epoch(g, loader, feat: torch.Tensor, label: torch.Tensor) -> dict:
    """An epoch's steps: whether each one's rows are ``feat``'s and ``label``'s (the
    graph's rows, known here: a read through ``g.ndata`` in the loop would be pulled with the
    step's own pulls, docs/porting.md), and the rows pulled by name."""
    store = type(g.store)  # the class: a GPU's loader pulls on a worker thread's copy
    pulled, start = {"feat": 0, "label": 0}, store.start_pull_many

    def counted(self, pulls, *a, **kw):
        for name, ids in pulls:
            pulled[name] += ids.numel()
        return start(self, pulls, *a, **kw)

    store.start_pull_many = counted
    same, devices = [], set()
    loader.set_epoch(0)  # the same steps every time
    try:
        for input_nodes, output_nodes, blocks in loader:
            x, y = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
            devices.add((x.device.type, y.device.type))
            same.append(torch.equal(x.cpu(), feat[input_nodes]) and
                        torch.equal(y.cpu(), label[output_nodes]))
    finally:
        store.start_pull_many = start
    return {"same": same, "pulled": pulled, "devices": sorted(devices)}


def _cached(session, cache):
    cora = CoraGraphDataset()[0]
    g = dglx_dist.distribute(cora, "distdgl", cache_dir=cache, session=session)
    feat, label = cora.ndata["feat"].clone(), cora.ndata["label"]
    try:
        ids = dglx_dist.node_split(g.ndata["train_mask"], g)
        sampler = dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"],
                                            prefetch_labels=["label"])
        out = {"plain": _epoch(g, _loader(g, ids, sampler, False), feat, label)}
        kept = _loader(g, ids, sampler, True)
        out["kept"] = _epoch(g, kept, feat, label)
        hub = torch.argmax(g.out_degrees()).reshape(1)  # a kept row, written on every rank
        feat[hub] = 7.0
        g.ndata["feat"][hub] = feat[hub]
        g.barrier()
        out["written"] = _epoch(g, kept, feat, label)
        return out
    finally:
        g.close()


def test_kept_rows_give_the_stores_rows_and_fewer_are_pulled(tmp_path):
    got = run_workers(_cached, 2, tmp_path / "run", str(tmp_path / "cache"), timeout=300,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for rank, out in got.items():
        for run in ("plain", "kept", "written"):
            assert out[run]["same"] and all(out[run]["same"]), (rank, run)
            assert [tuple(d) for d in out[run]["devices"]] == [(DEVICE, DEVICE)], (rank, run)
        plain, kept, written = (out[run]["pulled"] for run in ("plain", "kept", "written"))
        # the kept rows (of Cora's 2,708 nodes, those of most out-edges) are not pulled
        assert kept["feat"] < 0.8 * plain["feat"] and kept["label"] < plain["label"], out
        # after a write of a kept name its rows are all pulled again (the other's stay kept)
        assert written == {"feat": plain["feat"], "label": kept["label"]}, out
