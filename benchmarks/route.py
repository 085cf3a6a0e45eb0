"""The package's modules one mini-batch runs through: docs/architecture.md's route count
(issue 33). Under torchrun, from the repository root, 2 ranks as 2 virtual servers::

    DGLX_VIRTUAL_SERVERS=2 torchrun --nproc-per-node 2 -m benchmarks.route --strategy distdgl

Each rank trains GraphSAGE on Cora as examples/sage_minibatch.py does (the model from
``dglx_dist.models``, left out of the count as a user's own); after ``--warmup`` steps it
records every ``dglx_dist`` module whose code runs, in any of its threads (the
store's serving thread answering the other rank included), from fetching one batch to the
optimizer's step. Rank 0 prints one JSON object (the modules, their count) and a markdown
table.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading

__all__ = ["main"]
_USERS = "dglx_dist.models"  # the model stands in for the user's own: not the package's route


class _Modules:
    """A profile function that notes the module of every call it sees: in the main thread
    while ``main``, in the others while ``others``."""

    def __init__(self) -> None:
        self.main, self.others, self.seen = False, False, set()
        self._main = threading.get_ident()

    def __call__(self, frame, event: str, arg) -> None:
        if event != "call":
            return
        if self.main if threading.get_ident() == self._main else self.others:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("dglx_dist") and not name.startswith(_USERS):
                self.seen.add(name)


def _step(model, g, batch, opt) -> None:
    import torch.nn.functional as F

    input_nodes, output_nodes, blocks = batch
    loss = F.cross_entropy(model(blocks, g.ndata["feat"][input_nodes]),
                           g.ndata["label"][output_nodes])
    opt.zero_grad()
    loss.backward()
    opt.step()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", default="distdgl")
    p.add_argument("--warmup", type=int, default=2, help="steps before the traced one")
    args = p.parse_args(argv)
    trace = _Modules()
    threading.setprofile(trace)  # the threads the package starts from here on
    sys.setprofile(trace)

    import torch

    import dglx_dist
    from dglx_dist.data import CoraGraphDataset
    from dglx_dist.models import SAGE
    from dglx_dist.report import markdown_table

    data = CoraGraphDataset()
    g = dglx_dist.distribute(data[0], strategy=args.strategy)
    train_ids = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    loader = dglx_dist.DataLoader(g, train_ids, dglx_dist.NeighborSampler([10, 10]),
                                  batch_size=16, shuffle=True)

    model = dglx_dist.parallelize(SAGE(g.ndata["feat"].shape[1], 16, data.num_classes), g)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batches = iter(loader)
    for _ in range(args.warmup):
        _step(model, g, next(batches), opt)
    trace.main = trace.others = True
    _step(model, g, next(batches), opt)
    trace.main = False
    dglx_dist.all_reduce([0])  # the peer's pulls of the traced step are answered by now
    trace.others = False
    sys.setprofile(None)
    threading.setprofile(None)
    if g.rank() == 0:
        mods = sorted(trace.seen)
        print(json.dumps({"strategy": args.strategy, "modules": len(mods), "names": mods}))
        print(markdown_table([{"module": m} for m in mods]))


if __name__ == "__main__":
    main()
