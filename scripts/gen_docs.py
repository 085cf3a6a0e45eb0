"""Regenerates the options tables in docs/ from the registered plug-ins' Config metadata.

Each table sits between ``<!-- options:REGISTRY:begin -->`` and ``<!-- options:REGISTRY:end -->``
markers; tests/unit/test_docs.py fails when a table is out of date.

    python scripts/gen_docs.py          # rewrite the tables
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# page -> (registry, names whose options it lists; None: every one the package ships)
PAGES = {"docs/partitioners.md": ("partitioners", None),
         "docs/strategies/distdgl.md": ("strategies", ["distdgl"]),
         "docs/strategies/p3.md": ("strategies", ["p3"]),
         "docs/strategies/granndis.md": ("strategies", ["granndis", "fullgraph"]),
         "docs/strategies/dorylus.md": ("strategies", ["dorylus"])}


def registries():
    from dglx_dist.partition import PARTITIONERS
    from dglx_dist.strategies import STRATEGIES
    return {"partitioners": PARTITIONERS, "strategies": STRATEGIES}


def table(key: str, names: list[str] | None) -> str:
    """The options table of ``names`` in registry ``key``; None: the package's own plug-ins
    (a plug-in installed from elsewhere, e.g. the tests', documents itself)."""
    reg = registries()[key]
    if names is None:
        names = [n for n in reg.names() if reg.get(n).__module__.startswith("dglx_dist.")]
    return reg.options_markdown(names)


def render(text: str, key: str, table: str) -> str:
    pattern = re.compile(rf"(<!-- options:{key}:begin -->\n).*?(<!-- options:{key}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no options:{key} markers found")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)


def main() -> int:
    for page, (key, names) in PAGES.items():
        path = ROOT / page
        path.write_text(render(path.read_text(), key, table(key, names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
