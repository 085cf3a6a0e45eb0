"""Print what `make test-core` installs besides the package: setup.py's CORE_REQUIRES and
TEST_REQUIRES, one per line (read from setup.py's text, so nothing is installed or run)."""
import ast
import sys
from pathlib import Path

NAMES = ("CORE_REQUIRES", "TEST_REQUIRES")


def main() -> int:
    tree = ast.parse((Path(__file__).resolve().parents[1] / "setup.py").read_text())
    found = {t.id: ast.literal_eval(node.value) for node in tree.body
             if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name) and t.id in NAMES}
    missing = [n for n in NAMES if n not in found]
    if missing:
        sys.exit(f"setup.py defines no {missing} (a list of requirement strings)")
    print("\n".join(r for n in NAMES for r in found[n]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
