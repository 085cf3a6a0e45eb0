"""Nothing in the package, its scripts or benchmarks unpickles data from disk or the network
(issue 8): every call that could is found by walking the syntax trees, so a new one fails this
test."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_UNPICKLERS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
               ("cPickle", "load"), ("cPickle", "loads"), ("dill", "load"), ("dill", "loads"),
               ("marshal", "load"), ("marshal", "loads"), ("joblib", "load"),
               ("pandas", "read_pickle"), ("pd", "read_pickle")}


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def unpickling_calls(source: str) -> list[tuple[int, str]]:
    """(line, call) for every call in ``source`` that may unpickle."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        base = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        name = f"{base}.{node.func.attr}"
        if (base, node.func.attr) in _UNPICKLERS:
            found.append((node.lineno, name))
        elif (base, node.func.attr) == ("torch", "load") and \
                _keyword(node, "weights_only") is not True:
            found.append((node.lineno, name + " without weights_only=True"))
        elif node.func.attr == "load" and base in ("np", "numpy") and \
                _keyword(node, "allow_pickle") is True:
            found.append((node.lineno, name + "(allow_pickle=True)"))
    return found


def test_the_checker_finds_each_kind():
    bad = ("import pickle, torch, numpy as np\n"
           "pickle.loads(b)\ntorch.load(f)\ntorch.load(f, weights_only=False)\n"
           "np.load(f, allow_pickle=True)\n")
    ok = "torch.load(f, weights_only=True)\nnp.load(f)\njson.loads(s)\n"
    assert [line for line, _ in unpickling_calls(bad)] == [2, 3, 4, 5]
    assert unpickling_calls(ok) == []


@pytest.mark.parametrize("tree", ["dglx_dist", "scripts", "benchmarks", "examples"])
def test_nothing_is_unpickled(tree):
    files = sorted((ROOT / tree).rglob("*.py"))
    assert files, f"no Python files under {tree}"
    found = [f"{path.relative_to(ROOT)}:{line}: {call}" for path in files
             for line, call in unpickling_calls(path.read_text())]
    assert not found, "calls that may unpickle data:\n" + "\n".join(found)
