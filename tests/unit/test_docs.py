"""The docs' generated parts match the code."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_options_tables_are_current():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for page, (key, names) in gen.PAGES.items():
        text = (ROOT / page).read_text()
        table = gen.registries()[key].options_markdown(names)
        assert gen.render(text, key, table) == text, \
            f"{page} is out of date: run python scripts/gen_docs.py"
