"""Nothing in the package, its scripts or benchmarks unpickles data from disk or the network
(issue 8): every call that could is found by walking the syntax trees, so a new one fails this
test. The one exception is a reader whose unpickler resolves only an allowlist of globals
(GraphBolt's part graphs are pickles): listed in RESTRICTED, and tested to run nothing."""
import ast
import pathlib
from pathlib import Path

import pytest
import torch

from dglx_dist.errors import PartitionFormatError

ROOT = Path(__file__).resolve().parents[2]
_UNPICKLERS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
               ("cPickle", "load"), ("cPickle", "loads"), ("dill", "load"), ("dill", "loads"),
               ("marshal", "load"), ("marshal", "loads"), ("joblib", "load"),
               ("pandas", "read_pickle"), ("pd", "read_pickle")}


# file -> why its torch.load may unpickle (and its Unpickler subclass exist): the unpickler it
# passes resolves only the globals its caller allows (test_the_restricted_reader_runs_nothing)
RESTRICTED = {"dglx_dist/data/torch_files.py": "GraphBolt's fused_csc_sampling_graph.pt and "
                                                "OGB's split files of numpy arrays"}


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def unpickling_calls(source: str, restricted: bool = False) -> list[tuple[int, str]]:
    """(line, call) for every call in ``source`` that may unpickle (with ``restricted``, a
    ``torch.load`` given a ``pickle_module`` is not counted)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and not restricted:  # an unpickler of its own
            found += [(node.lineno, f"class {node.name}(pickle.Unpickler)") for b in node.bases
                      if isinstance(b, ast.Attribute) and b.attr == "Unpickler"]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        base = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        name = f"{base}.{node.func.attr}"
        if (base, node.func.attr) in _UNPICKLERS:
            found.append((node.lineno, name))
        elif (base, node.func.attr) == ("torch", "load") and \
                _keyword(node, "weights_only") is not True and \
                not (restricted and any(kw.arg == "pickle_module" for kw in node.keywords)):
            found.append((node.lineno, name + " without weights_only=True"))
        elif node.func.attr == "load" and base in ("np", "numpy") and \
                _keyword(node, "allow_pickle") is True:
            found.append((node.lineno, name + "(allow_pickle=True)"))
    return sorted(found)


def test_the_checker_finds_each_kind():
    bad = ("import pickle, torch, numpy as np\n"
           "pickle.loads(b)\ntorch.load(f)\ntorch.load(f, weights_only=False)\n"
           "np.load(f, allow_pickle=True)\nclass U(pickle.Unpickler):\n    pass\n")
    ok = "torch.load(f, weights_only=True)\nnp.load(f)\njson.loads(s)\n"
    assert [line for line, _ in unpickling_calls(bad)] == [2, 3, 4, 5, 6]
    assert unpickling_calls(ok) == []


@pytest.mark.parametrize("tree", ["dglx_dist", "scripts", "benchmarks", "examples"])
def test_nothing_is_unpickled(tree):
    files = sorted((ROOT / tree).rglob("*.py"))
    assert files, f"no Python files under {tree}"
    found = [f"{path.relative_to(ROOT)}:{line}: {call}" for path in files
             for line, call in unpickling_calls(
                 path.read_text(), str(path.relative_to(ROOT)) in RESTRICTED)]
    assert not found, "calls that may unpickle data:\n" + "\n".join(found)


class HostilePickle:
    """Pickles as a call that creates a file: what a hostile file would hold."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


def test_the_restricted_reader_runs_nothing(tmp_path):
    from dglx_dist.partition.dgl_graphbolt import read_graphbolt

    assert RESTRICTED and all((ROOT / f).is_file() for f in RESTRICTED)
    torch.save({"x": HostilePickle(tmp_path / "ran")}, tmp_path / "g.pt")
    with pytest.raises(PartitionFormatError, match=r"names \S+, which a GraphBolt part graph "
                       r"does not hold; .*\(nothing in the file was run\)"):
        read_graphbolt(tmp_path / "g.pt", (0, 1))
    assert not (tmp_path / "ran").exists()
    torch.load(tmp_path / "g.pt", weights_only=False)  # the file does run code, unrestricted
    assert (tmp_path / "ran").exists()
