"""Importing DGL's partitions in GraphBolt's format (``fused_csc_sampling_graph.pt``, issue
37): the same partition directory as from DGL's classic ``graph.dgl``, homogeneous and typed;
what GraphBolt leaves out derived, or refused in one line; nothing in the file is run."""
import json
import shutil
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from dglx_dist.cli import main
from dglx_dist.data import to_dgl
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition import import_dgl_partitions
from dglx_dist.partition.io import MANIFEST
from tests.unit.test_dgl_import_hetero import hetero_graph
from tests.unit.test_no_unpickling import HostilePickle

pytestmark = pytest.mark.dgl


def _graphbolt_only(classic: Path, out: Path, **convert) -> Path:
    """A copy of DGL's classic partitions converted by DGL's ``dgl_partition_to_graphbolt``,
    then without the ``graph.dgl`` files, as later DGL releases write them."""
    shutil.copytree(classic.parent, out)
    js = out / classic.name
    dgl.distributed.dgl_partition_to_graphbolt(str(js), **convert)
    meta = json.loads(js.read_text())
    for p in range(meta["num_parts"]):
        (out / meta[f"part-{p}"].pop("part_graph")).unlink()
    js.write_text(json.dumps(meta))
    return js


@pytest.fixture(scope="module")
def classic(cora, tmp_path_factory):
    """name -> DGL's classic partition JSON: Cora by METIS (edge and node data beside), and a
    heterograph at random."""
    root = tmp_path_factory.mktemp("classic")
    g = to_dgl(cora)
    g.edata["w"] = torch.arange(g.num_edges(), dtype=torch.float32)
    g.ndata["year"] = torch.arange(g.num_nodes())
    dgl.distributed.partition_graph(g, "cora", 2, str(root / "cora"), part_method="metis",
                                    balance_edges=True)
    dgl.distributed.partition_graph(hetero_graph(), "het", 2, str(root / "het"),
                                    part_method="random")
    return {"cora": root / "cora" / "cora.json", "het": root / "het" / "het.json"}


def _files(out: Path) -> dict[str, bytes]:
    """Every file of an imported directory by relative path; the manifest without the
    provenance of its source (the JSON's path and hash differ), and not the record of what
    was written, which holds the manifest's hash."""
    found = {str(f.relative_to(out)): f.read_bytes() for f in sorted(out.rglob("*"))
             if f.is_file() and f.name not in (MANIFEST, ".dglx-written.json")}
    manifest = json.loads((out / MANIFEST).read_text())
    manifest.pop("dataset")
    return {**found, MANIFEST: json.dumps(manifest, sort_keys=True).encode()}


@pytest.mark.parametrize("name, convert", [
    ("cora", {"store_eids": True}),  # inner nodes derived from node_map
    ("cora", {"store_eids": True, "store_inner_node": True}),
    ("het", {"store_eids": True}),  # node types derived from node_map
])
def test_graphbolt_parts_import_as_the_classic_ones(classic, tmp_path, name, convert):
    gb = _graphbolt_only(classic[name], tmp_path / "gb", **convert)
    ours = import_dgl_partitions(gb, tmp_path / "from-gb")
    want = import_dgl_partitions(classic[name], tmp_path / "from-dgl")
    assert _files(ours) == _files(want)
    assert "fused_csc_sampling_graph.pt" in json.loads(gb.read_text())["part-0"][
        "part_graph_graphbolt"]


def test_the_cli_imports_graphbolt_parts(classic, tmp_path, capsys):
    gb = _graphbolt_only(classic["cora"], tmp_path / "gb", store_eids=True)
    assert main(["partition", "--from-dgl", str(gb), str(tmp_path / "o")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_parts"] == 2 and summary["edge_cut"] > 0
    assert (tmp_path / "o" / MANIFEST).is_file()


def test_parts_without_edge_ids_are_refused_naming_the_conversion(classic, tmp_path):
    gb = _graphbolt_only(classic["cora"], tmp_path / "gb")  # DGL 2.1's default: no edge ids
    with pytest.raises(PartitionFormatError, match=r"fused_csc_sampling_graph.pt: "
                       r"edge_attributes \[\] lack '_ID' .*store_eids=True"):
        import_dgl_partitions(gb, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def _resaved(file: Path, edit) -> None:
    """``file``'s GraphBolt graph changed by ``edit`` (DGL's own classes, in the test)."""
    graph = torch.load(file, weights_only=False)
    edit(graph)
    torch.save(graph, file)


def _drop_type_per_edge(g):
    g.type_per_edge = None


BAD = {
    "hostile pickle": (lambda f, tmp: torch.save({"x": HostilePickle(tmp / "ran")}, f),
                       r"names \S+, which a GraphBolt part graph does not hold; .*nothing in "
                       r"the file was run"),
    "truncated": (lambda f, tmp: f.write_bytes(f.read_bytes()[:300]),
                  r"not a readable GraphBolt graph file"),
    "a tensor, not a graph": (lambda f, tmp: torch.save(torch.zeros(3), f),
                              r"holds Tensor, not a FusedCSCSamplingGraph"),
    "indptr of another length": (
        lambda f, tmp: _resaved(f, lambda g: setattr(g, "csc_indptr", g.csc_indptr[:-1])),
        r"indptr is \(\d+,\); expected a vector of \d+ integers"),
    "indices out of range": (
        lambda f, tmp: _resaved(f, lambda g: g.indices.__setitem__(0, 1 << 20)),
        r"indices holds node 1048576; expected local node ids in \[0, \d+\)"),
    "another part's graph": (
        lambda f, tmp: shutil.copy(f.parent.parent / "part1" / f.name, f),
        r"part0/fused_csc_sampling_graph.pt: its \d+ inner nodes .* do not have the ids"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_graphbolt_files_are_refused_in_one_line(classic, tmp_path, case):
    edit, message = BAD[case]
    gb = _graphbolt_only(classic["cora"], tmp_path / "gb", store_eids=True)
    edit(gb.parent / "part0" / "fused_csc_sampling_graph.pt", tmp_path)
    with pytest.raises(PartitionFormatError, match=message) as err:
        import_dgl_partitions(gb, tmp_path / "o")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "o").exists() and not (tmp_path / "ran").exists()


def test_a_heterographs_part_without_edge_types_is_refused(classic, tmp_path):
    gb = _graphbolt_only(classic["het"], tmp_path / "gb", store_eids=True)
    _resaved(gb.parent / "part1" / "fused_csc_sampling_graph.pt", _drop_type_per_edge)
    with pytest.raises(PartitionFormatError, match=r"part1/fused_csc_sampling_graph.pt: no "
                       r"edge types \(type_per_edge\); expected them .* \(5 edge types"):
        import_dgl_partitions(gb, tmp_path / "o")


def test_a_part_naming_no_graph_is_refused(classic, tmp_path):
    gb = _graphbolt_only(classic["cora"], tmp_path / "gb", store_eids=True)
    meta = json.loads(gb.read_text())
    meta["part-1"].pop("part_graph_graphbolt")
    gb.write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"field 'part-1' names no part graph; "
                       r"expected 'part_graph' \(graph.dgl\) or 'part_graph_graphbolt'"):
        import_dgl_partitions(gb, tmp_path / "o")


def test_where_both_are_named_the_one_on_disk_is_read(classic, tmp_path):
    """DGL 2.1's use_graphbolt=True names both; a user may have deleted graph.dgl since."""
    both = tmp_path / "both"
    shutil.copytree(classic["cora"].parent, both)
    js = both / classic["cora"].name
    dgl.distributed.dgl_partition_to_graphbolt(str(js), store_eids=True)
    (both / "part0" / "graph.dgl").unlink()
    ours = import_dgl_partitions(js, tmp_path / "o")
    assert _files(ours) == _files(import_dgl_partitions(classic["cora"], tmp_path / "want"))
    assert np.all([f.exists() for f in (both / "part1" / "graph.dgl",)])
