"""The house rules on size (shared/DESIGN.md): no module of the package over 400 lines, no
function over 60, checked on every .py file under dglx_dist/ (and benchmarks/, the research
tooling moved out of it) so that a new offender fails here."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 400
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
    assert not found, (f"modules over {MAX_MODULE_LINES} lines (split them into cohesive "
                       "modules):\n" + "\n".join(found))


def test_no_function_is_too_long():
    found = [f"{path.relative_to(ROOT)}:{line}: {name} is {n} lines"
             for path in _package_files()
             for line, name, n in long_functions(path.read_text())]
    assert not found, (f"functions over {MAX_FUNCTION_LINES} lines (split them into helpers):\n"
                       + "\n".join(found))
