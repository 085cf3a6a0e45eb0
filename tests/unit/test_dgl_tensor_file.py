"""DGL's tensor files (``node_feat.dgl``, ``edge_feat.dgl``) read without DGL (issue 61, 2b):
the same tensors as DGL's ``load_tensors``; a file cut anywhere, or not DGL's, refused in one
line naming the file and the sizes, where DGL's reader died with SIGSEGV (cuts inside the
headers) or carried its C++ backtrace (2h). The bad files are tried in a child process, so
that a crash fails the test instead of killing pytest."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dgl
import pytest
import torch
from dgl.data.utils import load_tensors, save_tensors

from dglx_dist.data import to_dgl
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition.dgl_tensors import read_tensor_file

pytestmark = pytest.mark.dgl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def parts(cora, tmp_path_factory):
    """DGL's partition_graph output for Cora in two parts: its JSON."""
    out = tmp_path_factory.mktemp("dgl")
    g = to_dgl(cora)
    g.edata["w"] = torch.arange(g.num_edges(), dtype=torch.float32)
    dgl.distributed.partition_graph(g, "cora", 2, str(out), part_method="random")
    return out / "cora.json"


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_reader_gives_what_dgl_saved(parts, tmp_path):
    """Every dtype DGL writes (bool comes back as uint8, as from DGL), any rank, no rows, a
    0-d tensor (DGL 2.1's own reader returns garbage for it), names outside ASCII, no tensors."""
    saved = {"b": torch.tensor([True, False]), "f16": torch.tensor([1.5, -2], dtype=torch.half),
             "_N/feat": torch.randn(3, 4), "bf": torch.randn(5).bfloat16(),
             "c": torch.randn(3, dtype=torch.complex64), "c2": torch.randn(2, dtype=torch.cdouble),
             "none": torch.zeros(0, 7), "i8": torch.arange(-3, 3, dtype=torch.int8),
             "i16": torch.arange(4, dtype=torch.int16).reshape(2, 2),
             "i32": torch.arange(3, dtype=torch.int32), "i64": torch.arange(3),
             "f64": torch.randn(2, 3, 1, dtype=torch.float64), "ünï": torch.ones(1),
             "scalar": torch.tensor(5.0)}
    save_tensors(str(tmp_path / "all.dgl"), saved)
    got = read_tensor_file(tmp_path / "all.dgl")
    assert sorted(got) == sorted(saved)
    for name, t in saved.items():
        want = t.to(torch.uint8) if t.dtype == torch.bool else t
        assert got[name].dtype == want.dtype and torch.equal(got[name], want), name
    save_tensors(str(tmp_path / "empty.dgl"), {})
    assert read_tensor_file(tmp_path / "empty.dgl") == {}
    for file in sorted(parts.parent.glob("part*/*_feat.dgl")):
        ours, dgls = read_tensor_file(file), load_tensors(str(file))
        assert sorted(ours) == sorted(dgls), file
        assert all(ours[k].dtype == dgls[k].dtype and torch.equal(ours[k], dgls[k])
                   for k in ours), file


def test_the_reader_needs_no_dgl(parts):
    """The format is read where DGL cannot be imported (current torch, GPU machines)."""
    proc = _child("""
        import sys
        sys.modules["dgl"] = None  # import dgl raises
        from dglx_dist.partition.dgl_tensors import read_tensor_file
        t = read_tensor_file(sys.argv[1])
        print(sorted(t), tuple(t["_N/feat"].shape))
        """, str(parts.parent / "part0" / "node_feat.dgl"))
    assert proc.returncode == 0, proc.stderr
    assert "'_N/feat'" in proc.stdout and ", 1433)" in proc.stdout


# Each case: the file (of part 0) and how it is spoiled: cut to N bytes (negative: N bytes
# short of the whole), its bytes replaced, or written twice (None). DGL 2.1's load_tensors dies
# with SIGSEGV on the cuts at 30 B, 35 B, 100 B, 2 kB and 100 kB, refuses 0 B, 8 B, 50 B and
# the foreign files with its 1.2 kB C++ backtrace, and reads the file one byte short with
# zeros. The graph.dgl cases still go through DGL's load_graphs (no backtrace in the line).


def _cut(size: int | None, what: str) -> str:
    """The refusal of a node_feat.dgl of ``size`` bytes (None: any) cut inside ``what``."""
    found = r"[\d,]+" if size is None else f"{size:,}"
    return (rf"node_feat.dgl: {found} bytes, but its headers declare at least [\d,]+ \({what}"
            r".*\): the file is truncated; copy the partition again")


CASES = {
    "empty": ("node_feat.dgl", 0, _cut(0, "the file magic")),
    "cut in the count": ("node_feat.dgl", 8, _cut(8, "the number of tensors")),
    "cut in a name length": ("node_feat.dgl", 30, _cut(30, "the name length of tensor 1")),
    "cut in a name": ("node_feat.dgl", 35, _cut(35, "the name of tensor 1 of 5")),
    "cut in an array header": ("node_feat.dgl", 50, _cut(50, "the header of tensor 1")),
    "cut at 100 B": ("node_feat.dgl", 100, _cut(100, "the data of tensor 1 of 5")),
    "cut at 2 kB": ("node_feat.dgl", 2000, _cut(2000, "the data of tensor")),
    "cut in the features": ("node_feat.dgl", 100_000, _cut(100_000, "the data of tensor")),
    "one byte short": ("node_feat.dgl", -1, _cut(None, "the data of tensor 5 of 5")),
    "text": ("node_feat.dgl", b"feat,label\n1.0,3\n" * 4,
             r"node_feat.dgl: not a DGL tensor file: it starts with 0x[0-9a-f]{16}; expected "
             r"DGL's tensor file magic 0xdd5a9fbe3fa2443f \(a file DGL's save_tensors writes"),
    "random": ("node_feat.dgl", bytes(range(256)) * 20, r"node_feat.dgl: not a DGL tensor file"),
    "two files in one": ("node_feat.dgl", None, r"node_feat.dgl: ([\d,]+) bytes, but its headers "
                         r"declare ([\d,]+) \(its 5 tensors end there\); expected the file to "
                         r"end after its last tensor"),
    "edge data cut": ("edge_feat.dgl", 40, r"edge_feat.dgl: 40 bytes, but its headers declare "
                      r"at least [\d,]+ \(the name of tensor 1 of 1"),
    "graph as text": ("graph.dgl", b"not a graph\n" * 3, r"graph.dgl: not a DGL graph file "
                      r"\(it starts with 0x[0-9a-f]{16}\); expected DGL's graph file magic"),
    "graph cut in its index": ("graph.dgl", 50, r"graph.dgl: not a readable DGL graph file "
                               r"\(Check failed: .*\); expected the graph.dgl partition_graph"),
}

# The child: for each case, a copy of the partitions with the case's file spoiled, imported
# with `dglx partition --from-dgl` (cli.main in this process: one interpreter start for all);
# per case one JSON line: the exit status, the lines logged, the directories left beside OUT.
# Each case's name goes to stderr first, so that a crash names the case that crashed.
_CHILD = """
    import io, json, logging, shutil, sys
    from contextlib import redirect_stderr
    from pathlib import Path
    from dglx_dist.cli import main

    js, root = Path(sys.argv[1]), Path(sys.argv[2])
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.basicConfig(level=logging.INFO, handlers=[handler])  # main's basicConfig: no-op
    for name, (file, spoil) in json.loads(sys.argv[3]).items():
        print(name, file=sys.stderr, flush=True)
        case = root / name.replace(" ", "_")
        shutil.copytree(js.parent, case / "dgl")
        target = case / "dgl" / "part0" / file
        data = target.read_bytes()
        if isinstance(spoil, str):
            target.write_bytes(bytes.fromhex(spoil))
        elif spoil is None:
            target.write_bytes(data + data)
        else:
            target.write_bytes(data[:spoil] if spoil >= 0 else data[:len(data) + spoil])
        log.seek(0), log.truncate()
        with redirect_stderr(io.StringIO()):  # tqdm's bars
            rc = main(["partition", "--from-dgl", str(case / "dgl" / js.name),
                       str(case / "out")])
        left = sorted(p.name for p in case.iterdir() if p.name != "dgl")
        print(json.dumps({"name": name, "rc": rc, "log": log.getvalue(), "left": left}),
              flush=True)
    """


def test_spoiled_files_are_refused_in_one_line_and_nothing_is_left(parts, tmp_path):
    spoil = {name: (file, how.hex() if isinstance(how, bytes) else how)
             for name, (file, how, _) in CASES.items()}
    proc = _child(_CHILD, str(parts), str(tmp_path), json.dumps(spoil))
    assert proc.returncode == 0, (f"the child died ({proc.returncode}) on the case it named "
                                  f"last:\n{proc.stderr[-3000:]}")
    results = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert sorted(results) == sorted(CASES)
    for name, (_, _, message) in CASES.items():
        r = results[name]
        errors = [line for line in r["log"].splitlines() if "ERROR" in line]
        assert r["rc"] == 2 and len(errors) == 1, (name, r)
        assert r["left"] == [], (name, r["left"])  # no OUT, no .out.tmp-*
        line = errors[0]
        assert "Stack trace" not in line and "[bt]" not in line and len(line) < 500, (name, line)
        assert re.search(message, line), (name, line)


def test_a_declared_size_the_file_lacks_is_refused_before_allocating(tmp_path):
    """A header that declares 2**40 elements is refused by the file's size, not by memory."""
    file = tmp_path / "big.dgl"
    save_tensors(str(file), {"x": torch.zeros(4, dtype=torch.int64)})
    data = bytearray(file.read_bytes())
    shape_at = 24 + 8 + 1 + 8 + 8 + 8 + 4 + 4  # file header, name, array header up to shape
    data[shape_at:shape_at + 16] = (2**40).to_bytes(8, "little") + (2**43).to_bytes(8, "little")
    file.write_bytes(bytes(data))
    refusal = (r"big.dgl: 113 bytes, but its headers declare at least 8,796,093,022,289 \(the "
               r"data of tensor 1 of 1, 'x': int64 \(1099511627776,\), 8,796,093,022,208 bytes")
    with pytest.raises(PartitionFormatError, match=refusal):
        read_tensor_file(file)
    data[shape_at + 8:shape_at + 16] = (5).to_bytes(8, "little")
    file.write_bytes(bytes(data))
    with pytest.raises(PartitionFormatError, match=r"'x': shape \(1099511627776,\) of 64-bit "
                                                   r"elements, 5 bytes; expected sizes >= 0"):
        read_tensor_file(file)
