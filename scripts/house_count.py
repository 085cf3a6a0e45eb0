"""The house's shape, counted as issue 78 counts it, for a tree (default: this checkout's
``dglx_dist/``): lines and lines of code (an ``ast`` count: without docstrings, comments and
blank lines), modules over 400 lines, modules importing ``dgl`` outside ``dglx_dist/dgl/`` and
``dglx_dist/bench/``, the block-form switch words outside the door, ``if``/``elif`` lines on
the words ``is_typed|ntype|etype|untyped``, ``Typed*``/``Plain*`` classes and import circles
(imports under ``TYPE_CHECKING`` and inside functions counted). Prints one JSON line, then a
markdown table; ``--before DIR`` puts another tree's counts beside (``git archive REV | tar
-x -C DIR`` makes one).

    python scripts/house_count.py --before /tmp/before/dglx_dist
"""
from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

DGL_IMPORT = re.compile(r"^\s*(import|from) dgl([. ]|$)", re.M)
SWITCHES = re.compile(r"package_blocks|block_for|reads_package_blocks|_of_dgl")
TYPED_BRANCH = re.compile(r"^\s*(if|elif)\b.*\b(is_typed|ntype|etype|untyped)\b", re.M)
TWIN = re.compile(r"(Typed|Plain)[A-Z]")


def _module(root: Path, path: Path) -> str:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _doc_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value,
                                                                           str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _imports(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> set[str]:
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                name = ".".join(base[:len(base) - node.level + 1] + ([name] if name else []))
            found.update(f"{name}.{a.name}" if f"{name}.{a.name}" in modules else name
                         for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {f for f in found if f in modules and f != module and not module.startswith(f + ".")}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = counter[0]
                    counter[0] += 1
                    stack.append(dep)
                    on.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                elif dep in on:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while (member := stack.pop()) != node:
                    on.discard(member)
                    comp.append(member)
                on.discard(node)
                if comp:
                    out.append(sorted(comp + [node]))
    return out


def count(root: Path) -> dict:
    files = sorted(root.rglob("*.py"))
    modules = {_module(root, p): p for p in files}
    lines = code = 0
    long, dgl, switches, branches, twins, graph = [], [], 0, 0, [], {}
    for name, path in modules.items():
        text = path.read_text()
        tree = ast.parse(text)
        docs = _doc_lines(tree)
        n = len(text.splitlines())
        lines += n
        code += sum(1 for i, line in enumerate(text.splitlines(), 1)
                    if line.strip() and not line.strip().startswith("#") and i not in docs)
        long += [name] if n > 400 else []
        inside = {"dgl", "bench"} & set(name.split(".")[1:2])
        dgl += [name] if DGL_IMPORT.search(text) and not inside else []
        switches += 0 if "dgl" in name.split(".")[1:2] else len(SWITCHES.findall(text))
        branches += len(TYPED_BRANCH.findall(text))
        twins += [f"{name}.{c.name}" for c in ast.walk(tree)
                  if isinstance(c, ast.ClassDef) and TWIN.match(c.name)]
        graph[name] = _imports(tree, name, path.name == "__init__.py", set(modules))
    return {"lines": lines, "code_lines": code, "modules": len(files),
            "modules_over_400": len(long), "dgl_outside_door": dgl,
            "switch_words": switches, "typed_branches": branches, "typed_plain_classes": twins,
            "circles": _circles(graph)}


def _cell(value) -> str:
    return str(len(value)) if isinstance(value, list) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).parents[1] / "dglx_dist"))
    parser.add_argument("--before", help="another tree's dglx_dist/ to put beside")
    args = parser.parse_args()
    now = count(Path(args.root))
    before = count(Path(args.before)) if args.before else None
    print(json.dumps({"now": now, "before": before}))
    print("\n| count | " + ("before | " if before else "") + "now |")
    print("|---|" + ("---|" if before else "") + "---|")
    for key in now:
        print(f"| {key} | " + (f"{_cell(before[key])} | " if before else "") + f"{_cell(now[key])} |")


if __name__ == "__main__":
    main()
