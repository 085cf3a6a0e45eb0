"""How results are written out: GitHub-markdown tables (the CLI, ``dglx partitioners``, the
docs' options tables, the benchmark scripts), one-line JSON records (the Trainer's metrics
file) and the same records as ``key=value`` text (the log's lines with ``-v``)."""
from __future__ import annotations

import json
import math
import sys
from typing import Any, Iterable, Sequence

__all__ = ["json_record", "markdown_table", "key_values", "EPOCH_COLUMNS", "epoch_table",
           "result_line", "print_line"]

EPOCH_COLUMNS = ("epoch", "epoch_time", "steps", "loss", "bytes_sent_intra", "bytes_sent_inter",
                 "peak_mem_mb", "val_acc", "test_acc")
"""The columns of the summary table of a training run (``dglx train`` on a terminal, the
demo): the numbers that matter of each evaluated epoch."""


def json_record(record: dict[str, Any]) -> str:
    """``record`` as one line of valid JSON: a NaN or infinite number becomes null, and the
    keys so replaced are listed under ``"nonfinite"``."""
    bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        record = {**{k: None if k in bad else v for k, v in record.items()}, "nonfinite": bad}
    return json.dumps(record, allow_nan=False)


def print_line(text: str) -> None:
    """``text`` as a line on stdout, flushed: a command's result, a record a harness reads
    (logs go to stderr)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


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


def key_values(record: dict[str, Any]) -> str:
    """``record`` as one line of ``key=value`` text, the values as recorded (a nested dict's
    keys as ``outer.inner``, a list's items joined by commas, a string with spaces quoted):
    a metrics record in a log line."""
    parts = []
    for key, value in record.items():
        if isinstance(value, dict):
            parts += [f"{key}.{k}={_plain(v)}" for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            parts.append(f"{key}={','.join(_plain(v) for v in value)}")
        else:
            parts.append(f"{key}={_plain(value)}")
    return " ".join(parts)


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value if value and not any(c.isspace() for c in value) else json.dumps(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # not JSON (a path, say): its text
        return str(value)


def _measured(record: dict[str, Any]) -> list[str]:
    return [k for k in record if k.startswith(("val_", "test_"))]


def epoch_table(records: Iterable[dict[str, Any]],
                columns: Sequence[str] | None = None) -> str:
    """The summary table of a run's metrics records: its evaluated epochs (those with a
    ``val_*`` or ``test_*`` field; the last epoch where none was), in ``columns`` (default:
    those of :data:`EPOCH_COLUMNS` the records have, then their other ``val_*`` and
    ``test_*`` fields, such as the link task's ``val_auc``)."""
    records = [r for r in records if "epoch" in r]
    shown = [r for r in records if _measured(r)] or records[-1:]
    if columns is None:
        columns = [c for c in EPOCH_COLUMNS if any(c in r for r in shown)]
        columns += list(dict.fromkeys(k for r in shown for k in _measured(r)
                                      if k not in columns))
    return markdown_table(shown, columns)


def result_line(records: Iterable[dict[str, Any]]) -> str | None:
    """The run's test result in words (``test accuracy: 0.8010``; a link run's
    ``test_auc 0.9312, test_mrr 0.4120``), from the last record that has one; None without."""
    found = [r for r in records if any(k.startswith("test_") for k in r)]
    if not found:
        return None
    tests = {k: v for k, v in found[-1].items() if k.startswith("test_")}
    if set(tests) == {"test_acc"}:
        return f"test accuracy: {_number(tests['test_acc'])}"
    return ", ".join(f"{k} {_number(v)}" for k, v in tests.items())


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
