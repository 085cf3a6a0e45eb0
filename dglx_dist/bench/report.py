"""Outputs of ``dglx bench``: results.jsonl, the markdown table, the figure (matplotlib, the
``plot`` extra, imported only to draw it)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dglx_dist.errors import DglxError
from dglx_dist.report import json_record, markdown_table

__all__ = ["COLUMNS", "LINK_COLUMNS", "SWEEP_COLUMNS", "PlotUnavailable", "markdown", "plot", "write_jsonl"]

COLUMNS = ("system", "network", "epoch_time", "time_to_accuracy", "bytes_inter", "bytes_intra",
           "peak_mem_mb", "val_acc", "test_acc", "steps", "note")
LINK_COLUMNS = ("system", "network", "epoch_time", "bytes_inter", "bytes_intra", "peak_mem_mb",
                "val_mrr", "test_mrr", "test_hits@10", "test_auc", "steps", "note")
"""``--task link``'s table: ranking metrics instead of accuracy and time to accuracy."""
SWEEP_COLUMNS = {  # per sweep: the columns worth a table
    "p3-feature": ("system", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
                   "test_acc"),
    "p3-hidden": ("system", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
                  "test_acc"),
    "granndis-depth": ("system", "depth", "epoch_time", "epoch_time_1gbit", "bytes_inter",
                       "bytes_intra", "saved_mb", "time_to_acc", "test_acc"),
    "dorylus-staleness": ("system", "epoch_time", "epochs_to_acc", "test_acc", "invocations",
                          "mb_between_servers", "cost_usd", "value"),
}


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """One JSON object per run (sweep rows carry a ``sweep`` key)."""
    with open(path, "w") as f:
        for r in rows:
            f.write(json_record(r) + "\n")


def _cells(r: dict[str, Any], columns) -> dict[str, Any]:
    if "error" in r:
        return {"system": r.get("system") or r.get("sweep"), "network": r.get("network"),
                "note": r["error"].splitlines()[0][:160]}
    out = {c: r.get(c) for c in columns}
    for c in ("bytes_inter", "bytes_intra"):
        if isinstance(out.get(c), int):
            out[c] = f"{out[c]:,}"
    if "time_to_accuracy" in out and out["time_to_accuracy"] is None and "target_acc" in r:
        out["time_to_accuracy"] = "not reached"
    return {c: "" if v is None else v for c, v in out.items()}


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The main table, its legend, and a table per sweep that ran."""
    main = [r for r in rows if "sweep" not in r]
    setup = meta["setup"]
    link = setup.get("task") == "link"
    goal = (f"link prediction: {setup['train_edges']} training edges per epoch, "
            f"{setup['negatives']} uniform negative(s) each; MRR, Hits@10 and AUC against 100 "
            f"uniform negatives per held-out edge" if link else
            f"time-to-accuracy target: val_acc >= {meta['target_acc']} "
            f"({meta['target_fraction']} x single-process DGL's final)")
    columns = LINK_COLUMNS if link else COLUMNS
    text = [f"# benchmark: {meta['command']}", "",
            f"dataset {meta['dataset']}; model {setup['model']} "
            f"({setup['layers']} layers, hidden {setup['hidden']}); "
            f"{setup['servers']} servers x {setup['ranks_per_server']} rank(s) each; "
            f"{setup['epochs']} epochs; {goal}",
            "", markdown_table([_cells(r, columns) for r in main], columns)]
    sweeps = [r for r in rows if "sweep" in r]
    for name in dict.fromkeys(r["sweep"] for r in sweeps):
        mine = [r for r in sweeps if r["sweep"] == name]
        cols = SWEEP_COLUMNS.get(name) or tuple(  # a checks table: its own keys
            k for k in mine[0] if k not in ("sweep", "system", "network"))
        text += ["", f"## sweep {name}", "",
                 markdown_table([_cells(r, cols) for r in mine], cols)]
    return "\n".join(text) + "\n"


def _labels(values: list[Any], missing: str) -> list[str]:
    """Bar labels: ``missing`` where there is no value (a bar of height 0)."""
    return [missing if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
            for v in values]


class PlotUnavailable(DglxError, ImportError):
    """matplotlib is not installed."""


def _pyplot():
    """matplotlib's pyplot on the Agg backend, or one line naming the extra to install."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("the figure needs matplotlib: pip install 'dglx_dist[plot]' "
                              "(or pass --no-plot)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, ok: list[dict[str, Any]], key: str, label: str, missing: str) -> None:
    values = [r.get(key) for r in ok]
    bars = ax.bar(range(len(ok)), [v or 0 for v in values], color="tab:blue")
    ax.bar_label(bars, labels=_labels(values, missing), fontsize=7)
    ax.set_title(label)


def _bytes(ax, ok: list[dict[str, Any]]) -> None:
    xs = range(len(ok))
    for i, (key, label) in enumerate((("bytes_inter", "inter-server"),
                                      ("bytes_intra", "intra-server"))):
        values = [None if r.get(key) is None else r[key] / 2**20 for r in ok]
        bars = ax.bar([x + (i - 0.5) * 0.4 for x in xs], [v or 0 for v in values], 0.4,
                      label=label)
        ax.bar_label(bars, labels=_labels(values, "n/a"), fontsize=6)  # small counts too
    ax.set_title("MiB sent per epoch (all ranks)")
    ax.legend()


def _accuracy(ax, ok: list[dict[str, Any]], metric: str) -> None:
    xs = range(len(ok))
    for i, key in enumerate((f"val_{metric}", f"test_{metric}")):
        ax.bar([x + (i - 0.5) * 0.4 for x in xs], [r.get(key) or 0 for r in ok], 0.4, label=key)
    ax.set_title(f"final {metric}")
    ax.set_ylim(0, 1)
    ax.legend()


def _curves(ax, ok: list[dict[str, Any]], metric: str) -> None:
    for r in ok:
        t, acc, curve = 0.0, [], []
        for dt, a in zip(r["epoch_times"], r[f"val_{metric}_per_epoch"]):
            t += dt
            if a is not None:
                acc.append(a)
                curve.append(t)
        ax.plot(curve, acc, "o-", label=r["system"])
    if ok and ok[0].get("target_acc"):
        ax.axhline(ok[0]["target_acc"], color="grey", linestyle="--", label="target")
    ax.set_xlabel("training time (s)")
    ax.set_title(f"validation {metric}")
    ax.legend(fontsize=7)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """One figure: epoch time, time to accuracy (link: test AUC), bytes per epoch, peak
    memory, accuracy (link: MRR).

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    plt = _pyplot()
    ok = [r for r in rows if "sweep" not in r and "error" not in r]
    metric = "mrr" if any("val_mrr" in r for r in ok) else "acc"
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    _bars(axes[0][0], ok, "epoch_time", "epoch time (s)", "n/a")
    if metric == "mrr":  # the link task has no time-to-accuracy target
        _bars(axes[0][1], ok, "test_auc", "test AUC", "n/a")
    else:
        _bars(axes[0][1], ok, "time_to_accuracy", "time to accuracy (s; n/r: not reached)",
              "n/r")
    _bars(axes[1][0], ok, "peak_mem_mb", "peak memory of a rank (MB)", "n/a")
    _bytes(axes[0][2], ok)
    _accuracy(axes[1][1], ok, metric)
    _curves(axes[1][2], ok, metric)
    for ax in (axes[0][0], axes[0][1], axes[0][2], axes[1][0], axes[1][1]):
        ax.set_xticks(list(range(len(ok))))
        ax.set_xticklabels([r["system"] for r in ok], rotation=30, ha="right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
