"""How results are written out: GitHub-markdown tables (the CLI, ``dglx partitioners``, the
docs' options tables, the benchmark scripts) and one-line JSON records (the Trainer's metrics
file)."""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Sequence

__all__ = ["json_record", "markdown_table"]


def json_record(record: dict[str, Any]) -> str:
    """``record`` as one line of valid JSON: a NaN or infinite number becomes null, and the
    keys so replaced are listed under ``"nonfinite"``."""
    bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        record = {**{k: None if k in bad else v for k, v in record.items()}, "nonfinite": bad}
    return json.dumps(record, allow_nan=False)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return " ".join(_cell(x) for x in v)
    return str(v)


def markdown_table(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub-markdown table of ``rows`` (dicts); columns default to the first row's keys."""
    rows = list(rows)
    if not rows:
        return ""
    cols = list(columns) if columns is not None else list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
