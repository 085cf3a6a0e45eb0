"""The house rules on shape (shared/DESIGN.md), checked on every .py file under dglx_dist/
(and benchmarks/, the research tooling moved out of it) so that a new offender fails here:
no function over 60 lines; a module holds one concept and is as long as that concept needs
(~400 lines is the hint to look for a second concept inside it, not a count to split a class
by; 600 is where this test asks for the seam: docs/architecture.md, "Module sizes"); modules
import one way (no circle, not even through a deferred import or an annotation's, and no folder
imports one drawn above it); no object is matched by its identity."""
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
    """The modules (None: all; else those of ``modules``) ``path`` imports: at the top, inside
    functions and under ``if TYPE_CHECKING:`` (an annotation's import ties modules too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in
                         (modules or ()) else node.module for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
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
    through an import deferred into a function or one under ``TYPE_CHECKING``."""
    graph = {name: {d for d in deps - {name} if not name.startswith(d + ".")}  # a package's
             for name, deps in _module_graph().items()}  # own __init__ runs before its modules
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


# The folders (and top-level modules) of dglx_dist/ from the bottom up: the rows of
# docs/architecture.md's table, each entry after those of its row it may import, then those off
# the main line; "__init__" is the package's public names (the Trainer is the last they name).
FOLDERS = ("errors", "memory", "report", "registry", "cli_flags", "graphcore", "data",
           "partition", "runtime", "kvstore", "sampling", "nn", "function", "convs", "models",
           "offload", "strategies", "config", "planner", "cache", "prepare", "api", "checkpoint", "inputs",
           "console", "trainer", "__init__", "tasks",
           "dgl", "run", "cluster", "demo", "testing", "bench", "cli", "__main__")
# DGL's door sits on top, but each of its modules serves the layer that calls it (inside the
# function that needs DGL): one may be imported from below when it imports nothing above that.
DOOR = "dgl"


def _module_graph() -> dict[str, set[str]]:
    """Each module of dglx_dist/ -> the package modules it imports (:func:`_imports`)."""
    files = sorted((ROOT / "dglx_dist").rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _folder(module: str) -> str:
    return (module.split(".") + ["__init__"])[1]


def test_no_folder_imports_one_drawn_above_it():
    """docs/architecture.md, "The packages, left to right": a module imports only from its own
    folder and those before it in :data:`FOLDERS` (at the top, deferred or under TYPE_CHECKING)."""
    graph = _module_graph()
    unplaced = {_folder(m) for m in graph} - set(FOLDERS)
    assert not unplaced, f"place these in FOLDERS (and docs/architecture.md): {sorted(unplaced)}"

    def climbs(name: str, dep: str) -> bool:
        return FOLDERS.index(_folder(dep)) > FOLDERS.index(_folder(name))

    found = [f"{name} -> {dep}" for name in sorted(graph) for dep in sorted(graph[name])
             if climbs(name, dep) and not (_folder(dep) == DOOR and
                                           not any(climbs(name, d) for d in graph[dep]))]
    assert not found, "imports that climb (move the code down, or pass it in):\n" + \
        "\n".join(found)


def test_no_object_is_matched_by_identity():
    """Rows and parameters are matched by their values or their memory, never by ``id()`` of
    the object a caller happens to pass (issue 58)."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in _package_files()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "id"]
    assert not found, "id() calls:\n" + "\n".join(found)
