"""Dorylus's graph server: one rank's partition, its ghost buffers and its graph tasks: Gather
(GA, ``Â[rows, :] @ H`` over the in-edges, columns its own nodes then its *ghosts*), Scatter
(SC, an interval's rows to the peers that have them as ghosts) and their backward (∇GA over
the out-edges, columns then *reverse ghosts*; ∇SC). Built once at setup with collectives; the
pipeline's messages are point-to-point, one per (peer, interval, layer, direction), with sizes
both sides know. docs/strategies/dorylus.md, "What it does".
"""
from __future__ import annotations

import dataclasses

import torch

from dglx_dist.convs.dorylus_base import csr
from dglx_dist.graphcore.norm import degree_factor, norm_powers
from dglx_dist.errors import ProtocolError
from dglx_dist.runtime.comm import Comm

__all__ = ["GraphServer", "Route"]


@dataclasses.dataclass(frozen=True)
class Route:
    """Rows one interval sends to (or receives from) one peer.

    Attributes:
        peer: member index of the peer.
        interval: the sender's interval.
        rows: on the sender, local rows to send; on the receiver, buffer rows to fill.
    """

    peer: int
    interval: int
    rows: torch.Tensor


def _routes(by_peer: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> list[Route]:
    """One route per (peer, interval) from each peer's (rows, interval of each row)."""
    out = []
    for peer, (rows, interval) in sorted(by_peer.items()):
        for i in torch.unique(interval).tolist():
            out.append(Route(peer, i, rows[interval == i]))
    return out


class GraphServer:
    """One rank's partition for Dorylus (see the module docstring).

    Args:
        comm: the job's ranks (member index = part).
        core: sorted global ids this rank owns.
        src / dst: in-edges of the owned nodes, as global ids.
        owner: part of any global id.
        num_nodes: nodes in the whole graph.
        intervals: vertex intervals to cut the owned nodes into.
    """

    def __init__(self, comm: Comm, core: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                 owner, num_nodes: int, intervals: int):
        self.comm, self.core, self.n, self.num_nodes = comm, core, core.numel(), num_nodes
        out_deg = torch.bincount(src, minlength=num_nodes).to(torch.float64)
        comm.all_reduce(out_deg)  # every node's out-degree in the whole graph
        in_deg = torch.bincount(torch.searchsorted(core, dst), minlength=self.n).double()
        p_src, p_dst = norm_powers("both")  # GraphConv's normalisation, the paper's GCN
        val = (degree_factor(out_deg[src], p_src) *
               degree_factor(in_deg[torch.searchsorted(core, dst)], p_dst)).float()
        self.bounds = torch.linspace(0, self.n, intervals + 1).round().long()
        self.num_intervals = intervals
        me = comm.group_rank
        src_owner = torch.as_tensor(owner(src.numpy())).long()
        dst_row = torch.searchsorted(core, dst)
        local = src_owner == me
        # forward columns: own nodes, then ghosts sorted by (owner, id)
        ghost_ids = torch.unique(src[~local])
        ghost_owner = torch.as_tensor(owner(ghost_ids.numpy())).long()
        order = torch.argsort(ghost_owner * num_nodes + ghost_ids)
        self.ghost_ids, self.ghost_owner = ghost_ids[order], ghost_owner[order]
        col = torch.empty_like(src)
        col[local] = torch.searchsorted(core, src[local])
        col[~local] = self.n + self._index_of(self.ghost_ids, ghost_owner, num_nodes,
                                              src[~local], src_owner[~local])
        self.num_ghosts = self.ghost_ids.numel()
        self.a_in = csr(dst_row, col, val, (self.n, self.n + self.num_ghosts))
        # the in-edges one by one (a_in merges repeated edges), for per-edge layers (GAT)
        self.in_edges = (dst_row, col, src, src_owner)
        self._setup_forward_routes()
        self._setup_backward(src, dst_row, src_owner, local, val, num_nodes)

    @staticmethod
    def _index_of(sorted_ids, sorted_owner, num_nodes, ids, owners) -> torch.Tensor:
        return torch.searchsorted(sorted_owner * num_nodes + sorted_ids, owners * num_nodes + ids)

    def interval_of(self, rows: torch.Tensor) -> torch.Tensor:
        """The interval of each local row."""
        return torch.searchsorted(self.bounds, rows, right=True) - 1

    def rows(self, i: int) -> slice:
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))

    # -- setup ---------------------------------------------------------------------------------
    def _setup_forward_routes(self) -> None:
        """Ghost requests go to their owners; owners answer with each ghost's interval."""
        size = self.comm.size
        asks = [self.ghost_ids[self.ghost_owner == p] for p in range(size)]
        asked = self.comm.all_to_all_v(asks)  # what each peer needs from me (its ghost order)
        send, answers = {}, []
        for p, ids in enumerate(asked):
            rows = torch.searchsorted(self.core, ids)
            if ids.numel() and not torch.equal(self.core[rows.clamp(max=self.n - 1)], ids):
                raise ProtocolError(f"rank {self.comm.global_rank}: peer {p} asked for nodes it "
                                    f"does not own here (partition book mismatch)")
            answers.append(self.interval_of(rows))
            if ids.numel():
                send[p] = (rows, answers[-1])
        got = self.comm.all_to_all_v(answers)
        recv = {}
        for p in range(size):
            if got[p].numel():
                slots = self.n + torch.nonzero(self.ghost_owner == p).squeeze(1)
                recv[p] = (slots, got[p])
        self.fwd_send, self.fwd_recv = _routes(send), _routes(recv)

    def _setup_backward(self, src, dst_row, src_owner, local, val, num_nodes: int) -> None:
        """Out-edges of my nodes: local ones from my in-edges, remote ones from the peers that
        own their destinations (which also tell each destination's interval)."""
        size, me = self.comm.size, self.comm.group_rank
        dst_g, dst_iv = self.core[dst_row], self.interval_of(dst_row)
        cross = [(~local) & (src_owner == p) for p in range(size)]
        got_src = self.comm.all_to_all_v([src[c] for c in cross])
        got_dst = self.comm.all_to_all_v([dst_g[c] for c in cross])
        got_val = self.comm.all_to_all_v([val[c] for c in cross])
        got_iv = self.comm.all_to_all_v([dst_iv[c] for c in cross])
        # reverse ghosts: remote destinations sorted by (owner, id)
        r_ids = torch.cat(got_dst)
        r_owner = torch.cat([torch.full((t.numel(),), p, dtype=torch.int64)
                             for p, t in enumerate(got_dst)])
        key = torch.unique(r_owner * num_nodes + r_ids)
        self.rghost_owner, self.rghost_ids = key // num_nodes, key % num_nodes
        self.num_rghosts = key.numel()
        rcol = self.n + torch.searchsorted(key, r_owner * num_nodes + r_ids)
        lrow = torch.searchsorted(self.core, src[local])
        rows = torch.cat([lrow, torch.searchsorted(self.core, torch.cat(got_src))])
        cols = torch.cat([dst_row[local], rcol])
        vals = torch.cat([val[local], torch.cat(got_val)])
        self.a_out = csr(rows, cols, vals, (self.n, self.n + self.num_rghosts))
        key_iv = torch.empty(key.numel(), dtype=torch.int64)  # the interval of each on its owner
        key_iv[rcol - self.n] = torch.cat(got_iv)
        recv = {}
        for p in range(size):
            mask = self.rghost_owner == p
            if mask.any():
                recv[p] = (self.n + torch.nonzero(mask).squeeze(1), key_iv[mask])
        send = {}
        for p in range(size):
            if p != me and cross[p].any():
                rows_p = torch.unique(dst_row[cross[p]])  # sorted by row = by global id
                send[p] = (rows_p, self.interval_of(rows_p))
        self.bwd_send, self.bwd_recv = _routes(send), _routes(recv)

    # -- graph tasks ---------------------------------------------------------------------------
    def gather(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """GA of interval ``i``: ``Â[rows] @ h`` (``h``: own rows then ghost rows)."""
        return self.rows_mm(self.a_in, i, h)

    def gather_back(self, i: int, g: torch.Tensor) -> torch.Tensor:
        """∇GA of interval ``i``: ``Âᵀ[rows] @ g`` (``g``: own rows then reverse ghosts)."""
        return self.rows_mm(self.a_out, i, g)

    def rows_mm(self, a: torch.Tensor, i: int, h: torch.Tensor) -> torch.Tensor:
        """``a[rows of interval i] @ h`` for a CSR matrix ``a`` with a row per own node."""
        r = self.rows(i)
        crow = a.crow_indices()
        lo, hi = int(crow[r.start]), int(crow[r.stop])
        part = torch.sparse_csr_tensor(crow[r.start:r.stop + 1] - lo, a.col_indices()[lo:hi],
                                       a.values()[lo:hi], (r.stop - r.start, a.shape[1]))
        return torch.sparse.mm(part, h)
