"""The house rules on shape (shared/DESIGN.md), checked on every .py file under dglx_dist/
(and benchmarks/, the research tooling moved out of it) so that a new offender fails here:
no function over 60 lines; a module holds one concept and is as long as that concept needs
(~400 lines is the hint to look for a second concept inside it, not a count to split a class
by; 600 is where this test asks for the seam: docs/architecture.md, "Module sizes"); modules
import one way (no circle, not even through a deferred import); no object is matched by its
identity."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600  # the ceiling; ~400 is the hint (module docstring)
MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str, int]]:
    """(line, name, lines) of every function or method in ``source`` longer than ``limit``
    lines (decorators not counted, nested functions checked on their own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append((node.lineno, node.name, length))
    return sorted(found)


def _package_files() -> list[Path]:
    files = sorted((ROOT / "dglx_dist").rglob("*.py"))
    assert files, "no Python files under dglx_dist"
    return files + sorted((ROOT / "benchmarks").rglob("*.py"))


def test_the_checker_counts_lines_of_each_kind():
    body = "".join(f"    x{i} = {i}\n" for i in range(3))
    source = (f"def short():\n{body}\n"
              f"async def long_one():\n{body * 2}\n"
              f"class C:\n    def method(self):\n" + (body * 2).replace("    ", "        "))
    assert long_functions(source, limit=4) == [(6, "long_one", 7), (15, "method", 7)]
    assert long_functions(source, limit=7) == []


def test_no_module_is_too_long():
    found = [f"{path.relative_to(ROOT)}: {n} lines" for path in _package_files()
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not found, (f"modules over {MAX_MODULE_LINES} lines (find the second concept each "
                       "holds and give it a module):\n" + "\n".join(found))


def test_no_function_is_too_long():
    found = [f"{path.relative_to(ROOT)}:{line}: {name} is {n} lines"
             for path in _package_files()
             for line, name, n in long_functions(path.read_text())]
    assert not found, (f"functions over {MAX_FUNCTION_LINES} lines (split them into helpers):\n"
                       + "\n".join(found))


def _imports(path: Path, modules: set[str] | None = None) -> set[str]:
    """The package modules (None: all modules) ``path`` imports when it runs: at the top and
    inside functions; an import under ``if TYPE_CHECKING:`` is for annotations only and never
    runs."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in
                         (modules or ()) else node.module for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found if modules is None else found & modules


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (module -> the modules it imports), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := walk(dep)):
                return found
        state[name] = 2
        path.pop()
        return []

    return next((found for name in sorted(graph) if name not in state
                 and (found := walk(name))), [])


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def test_no_module_imports_itself_through_others():
    """A package's modules import one way (shared/DESIGN.md): no circle among them, not even
    through an import deferred into a function (a circle hidden from import time only)."""
    files = [p for p in sorted((ROOT / "dglx_dist").rglob("*.py"))]
    modules = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, modules) - {_module_name(p)} for p in files}
    graph = {name: {d for d in deps if not name.startswith(d + ".")}  # a package's own
             for name, deps in graph.items()}  # __init__ runs before its modules
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_no_object_is_matched_by_identity():
    """Rows and parameters are matched by their values or their memory, never by ``id()`` of
    the object a caller happens to pass (issue 58)."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in _package_files()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "id"]
    assert not found, "id() calls:\n" + "\n".join(found)
