"""The edge data of DGL's ``partition_graph`` output (``edge_feat.dgl``, ``SRC:REL:DST/NAME``)
as edge-data columns (:mod:`dglx_dist.data.edge_data`), and its node data other than features,
labels and masks (``node_feat.dgl``, ``NTYPE/NAME``) the same way over the part's core nodes:
zeros for the types without a name; docs/partition_format.md's import tables say the rules.
Refusals are :class:`~dglx_dist.errors.PartitionFormatError` s naming the file and key.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dglx_dist.data.edge_data import edge_data_spec
from dglx_dist.errors import PartitionFormatError

__all__ = ["DataImport"]

_ERR = PartitionFormatError


class DataImport:
    """Reads each part's ``edge_feat.dgl`` into edge-data columns, or the other node data of
    its ``node_feat.dgl`` (``kind`` "node"; see the module docstring).

    Args:
        etypes: the edge types as DGL's keys spell them (``SRC:REL:DST``), in type order (the
            node types for node data).
        config: DGL's partition JSON, for messages.
        kind: "edge" or "node".
    """

    def __init__(self, etypes: list[str], config: Path, kind: str = "edge"):
        self.etypes, self.config, self.kind = etypes, config, kind
        self.kinds: dict[str, tuple[str, tuple[int, ...]]] = {}  # name -> (dtype, row shape)
        self.first: tuple[dict[str, list[int]], Path] | None = None  # part 0's names

    def part(self, file: Path, tensors: dict[str, torch.Tensor], etype: np.ndarray,
             rows: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
        """The part's columns: ``etype[j]`` / ``rows[j]``: edge ``j``'s type and its row among
        its type's in the file; ``counts[t]``: the part's edges of type ``t``."""
        by_name: dict[str, dict[int, np.ndarray]] = {}
        for key, t in tensors.items():
            name_etype, sep, name = key.rpartition("/")
            if not sep or name_etype not in self.etypes:
                k = self.kind
                raise _ERR(f"{file}: key {key!r}: {name_etype!r} is not one of the {k} types "
                           f"{self.etypes} of field '{k[0]}types' of {self.config}; expected "
                           f"keys {'SRC:REL:DST' if k == 'edge' else 'NTYPE'}/NAME")
            i = self.etypes.index(name_etype)
            by_name.setdefault(name, {})[i] = self._checked(file, key, name, t, int(counts[i]))
        self._same_names(file, {n: sorted(v) for n, v in sorted(by_name.items())})
        out = {}
        for name, per_type in by_name.items():
            dtype, shape = self.kinds[name]
            column = np.zeros((etype.size, *shape), dtype=np.dtype(dtype))
            for i, values in per_type.items():
                sel = etype == i
                column[sel] = values[rows[sel]]
            out[name] = column
        return out

    def _checked(self, file: Path, key: str, name: str, t: torch.Tensor, n: int) -> np.ndarray:
        if t.shape[:1] != (n,) or t.dim() not in (1, 2) or t.is_complex():
            raise _ERR(f"{file}: {key!r} has shape {tuple(t.shape)} and dtype {t.dtype}; "
                       f"expected {n} rows (the part's {self.kind}s of that type), one number "
                       f"or one vector each")
        values = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
        kind = (str(values.dtype), tuple(values.shape[1:]))
        want = self.kinds.setdefault(name, kind)
        if kind != want:
            raise _ERR(f"{file}: {key!r} is {kind[0]}{list(kind[1])}; {self.kind} data "
                       f"{name!r} is {want[0]}{list(want[1])} elsewhere; expected one dtype "
                       f"and row shape per name")
        return values

    def _same_names(self, file: Path, names: dict[str, list[int]]) -> None:
        if self.first is None:
            self.first = (names, file)
        elif names != self.first[0]:
            raise _ERR(f"{file}: {self.kind} data {self._describe(names)}; {self.first[1]} "
                       f"has {self._describe(self.first[0])}; expected every part to have the "
                       f"same {self.kind} data per {self.kind} type")

    def _describe(self, names: dict[str, list[int]]) -> dict[str, list[str]]:
        return {n: [self.etypes[i] for i in v] for n, v in names.items()}

    def edge_data(self) -> dict[str, tuple[int, ...]]:
        """Per name, the edge types that have it (once every part has been read)."""
        return {} if self.first is None else {n: tuple(v) for n, v in self.first[0].items()}

    def spec(self) -> dict:
        """The manifest's ``edge_data`` field (:func:`~dglx_dist.data.edge_data.edge_data_spec`)."""
        return edge_data_spec({n: np.zeros((0, *shape), np.dtype(dtype))
                               for n, (dtype, shape) in self.kinds.items()})
