"""Outputs of ``dglx bench``: results.jsonl, the markdown table, the figure (matplotlib, the
``plot`` extra, imported only to draw it); :func:`draw`, the figure of panels every benchmark
script draws its plots with."""
from __future__ import annotations

import dataclasses
import itertools
import statistics
from pathlib import Path
from typing import Any

from dglx_dist.data.nolinks import replacing
from dglx_dist.errors import DglxError
from dglx_dist.report import json_record, markdown_table

__all__ = ["COLUMNS", "LINK_COLUMNS", "PANEL_KINDS", "Panel", "PlotUnavailable", "Series",
           "PHASES", "TABLES", "TARGETS", "TYPED_COLUMNS", "Targets", "draw", "markdown",
           "phases_table", "plot", "versus_dgl", "write_jsonl"]

COLUMNS = ("system", "network", "time_to_accuracy", "epoch_time", "floor_s", "vs_floor",
           "startup_s", "bytes_inter", "bytes_intra", "peak_mem_mb", "val_acc", "test_acc",
           "steps", "note")
"""The node task's table: time to accuracy first (what a user comparing systems wants),
then the epoch beside its floor (:mod:`dglx_dist.bench.floor`)."""
LINK_COLUMNS = ("system", "network", "epoch_time", "floor_s", "vs_floor", "bytes_inter",
                "bytes_intra", "peak_mem_mb", "val_mrr", "test_mrr", "test_hits@10", "test_auc",
                "steps", "note")
"""``--task link``'s table: ranking metrics instead of accuracy and time to accuracy."""
TYPED_COLUMNS = ("system", "network", "startup_s", "epoch_time_median",
                 "epoch_time_spread", "bytes_inter", "bytes_intra", "peak_mem_mb", "val_acc",
                 "test_acc", "steps", "note")
"""A typed dataset's table: the epoch time's median and range (without the first epoch)."""
TABLES = {"node": COLUMNS, "link": LINK_COLUMNS, "typed": TYPED_COLUMNS}
"""The columns of each table (``meta["table"]``, else the task's); ``run`` (which of
``--repeat``'s runs) comes first where rows have it."""


@dataclasses.dataclass(frozen=True)
class Targets:
    """A table's targets for a strategy against DGL's DistDGL in the same run."""

    metric: str
    """The test metric compared in points (100 x the difference)."""
    epoch_time: float = 0.8
    """The median epoch time at most this times DGL's."""
    points: float | None = None
    """The test metric within this many points of DGL's (None: shown, not a target)."""
    fewer_bytes: bool = False
    """Fewer inter-server bytes per epoch than DGL's (theirs count TCP/IP headers too)."""

    def legend(self) -> str:
        parts = [f"epoch time <= {self.epoch_time}x"] + (
            [f"{self.metric} within {self.points:g} point"] if self.points is not None
            else []) + (["fewer inter-server bytes"] if self.fewer_bytes else [])
        return ", ".join(parts)

    def verdict(self, values: dict[str, Any]) -> str:
        """PASS where the ratios ``values`` meet every target, else FAIL."""
        time = values.get("epoch_time_vs_dgl")
        points = values.get(f"{self.metric}_points_vs_dgl")
        nbytes = values.get("bytes_inter_vs_dgl")
        met = (time is not None and time <= self.epoch_time
               and (self.points is None or (points is not None and abs(points) <= self.points))
               and (not self.fewer_bytes or (nbytes is not None and nbytes < 1)))
        return "PASS" if met else "FAIL"


TARGETS = {"typed": Targets("test_acc", points=1.0), "link": Targets("test_mrr", fewer_bytes=True)}
"""The targets each table is checked against (issue 34's for typed graphs, issue 36's for link
prediction; :meth:`Targets.legend` says them)."""
REFERENCE = "dgl-distdgl"


def _reference_name(rows: list[dict[str, Any]]) -> str:
    """What the time to accuracy's target came from
    (:func:`~dglx_dist.bench.harness.add_time_to_accuracy`): single-process DGL where it ran,
    else the best row (e.g. where DGL is not installed)."""
    ran = any(r.get("system") == "dgl" and "error" not in r for r in rows)
    return "single-process DGL" if ran else "the best row"


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """One JSON object per run."""
    with replacing(path, "w") as f:
        for r in rows:
            f.write(json_record(r) + "\n")


def _cells(r: dict[str, Any], columns) -> dict[str, Any]:
    if "error" in r:
        return {"run": r.get("run", ""), "system": r.get("system"), "network": r.get("network"),
                "note": r["error"].splitlines()[0][:160]}
    out = {c: r.get(c) for c in columns}
    for c in ("bytes_inter", "bytes_intra"):
        if isinstance(out.get(c), int):
            out[c] = f"{out[c]:,}"
    if isinstance(out.get("epoch_time_spread"), list):
        out["epoch_time_spread"] = "..".join(map(str, out["epoch_time_spread"]))
    if "time_to_accuracy" in out and out["time_to_accuracy"] is None and "target_acc" in r:
        out["time_to_accuracy"] = "not reached"
    return {c: "" if v is None else v for c, v in out.items()}


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table and its legend (rows of the strategy sweeps, which ``dglx bench --sweeps``
    wrote here before they moved to benchmarks/, are left out)."""
    main = [r for r in rows if "sweep" not in r]
    setup = meta["setup"]
    table = meta.get("table") or setup.get("task", "node")
    goal = {"link": f"link prediction: {setup.get('train_edges')} training edges per epoch, "
                    f"{setup.get('negatives')} uniform negative(s) each; MRR, Hits@10 and AUC "
                    f"against 100 uniform negatives per held-out edge",
            "typed": f"fanouts {setup.get('fanouts')} per edge type, batch "
                     f"{setup.get('batch_size')} per rank; epoch time: median (and range) "
                     f"without the first epoch"}.get(table, (
                f"time-to-accuracy target: val_acc >= {meta['target_acc']} "
                f"({meta['target_fraction']} x {_reference_name(main)}'s final)"))
    columns = ["run"] * any("run" in r for r in main) + list(TABLES[table])
    text = [f"# benchmark: {meta['command']}", "",
            f"dataset {meta['dataset']}; model {setup['model']} "
            f"({setup['layers']} layers, hidden {setup['hidden']}); "
            f"{setup['servers']} servers x {setup['ranks_per_server']} rank(s) each; "
            f"{setup['epochs']} epochs; {goal}",
            "", markdown_table([_cells(r, columns) for r in main], columns)]
    if any("floor_s" in r for r in main):
        text += ["", "floor_s: the larger of the busiest server's inter-server bytes over its "
                     "link rate and single-process DGL's epoch over the ranks that compute at "
                     "once; vs_floor: epoch_time / floor_s (dglx_dist.bench.floor)"]
    if table in TARGETS:
        text += ["", versus_dgl(main, table)]
    if any(r.get("phases") for r in main):
        text += ["", phases_table(main)]
    return "\n".join(text) + "\n"


PHASES = ("sample", "sample work", "pull", "pull work", "forward", "backward+allreduce",
          "optimizer", "other")
"""The training step's phases both sides of a typed or link benchmark time (DGL's worker's);
``sample work`` and ``pull work`` are the package's only (the seconds its draws and its
pulls' calls took, on whichever thread, beside the step's waits:
:data:`~dglx_dist.api.metrics.STEP_PHASES`)."""


def phases_table(rows: list[dict[str, Any]]) -> str:
    """Seconds per epoch in each phase of the step, by row (mean without the first epoch, the
    largest over ranks); empty where no row has them."""
    timed = [r for r in rows if r.get("phases")]
    if not timed:
        return ""
    columns = ["run"] * any("run" in r for r in timed) + ["system", *PHASES]
    cells = [{"run": r.get("run", ""), "system": r["system"]} | {
        p: r["phases"].get(p, "") for p in PHASES} for r in timed]
    return ("Where an epoch's time goes (seconds in each phase of the step; mean without the "
            "first epoch, the largest over ranks; `sample` and `pull` are what the step "
            "waited for, `sample work` and `pull work` what the package's draws and its "
            "pulls' calls took, on whichever thread: what exceeds the wait ran on a worker "
            "thread beside the step):\n\n" + markdown_table(cells, columns))


def _columns(targets: Targets) -> tuple[str, ...]:
    return ("epoch_time_vs_dgl", f"{targets.metric}_points_vs_dgl", "bytes_inter_vs_dgl",
            "peak_mem_vs_dgl")


def _versus(row: dict[str, Any], ref: dict[str, Any], targets: Targets) -> dict[str, Any]:
    """``row``'s ratios to DGL's DistDGL's row ``ref``, its test metric's difference in
    points, and whether it meets the targets."""
    ratio = lambda key: (round(row[key] / ref[key], 3)  # noqa: E731
                         if row.get(key) and ref.get(key) else None)
    metric = targets.metric
    points = (None if row.get(metric) is None or ref.get(metric) is None
              else round(100 * (row[metric] - ref[metric]), 1))
    out = dict(zip(_columns(targets), (ratio("epoch_time_median"), points, ratio("bytes_inter"),
                                       ratio("peak_mem_mb"))))
    return out | {"meets_targets": targets.verdict(out)}


def _medians(pairs: list[dict[str, Any]], targets: Targets) -> list[dict[str, Any]]:
    """Per system, the median of each ratio over the runs."""
    out = []
    for name in dict.fromkeys(p["system"] for p in pairs):
        mine = [p for p in pairs if p["system"] == name]
        med = {k: round(statistics.median(v), 3) for k in _columns(targets)
               if (v := [p[k] for p in mine if p[k] is not None])}
        out.append({"run": "median", "system": name} | med |
                   {"meets_targets": targets.verdict(med)})
    return out


def versus_dgl(rows: list[dict[str, Any]], table: str) -> str:
    """Each strategy's row against DGL's DistDGL's of the same run (``run``), as ratios (and
    the test metric's difference in points), with whether it meets the ``table``'s
    :data:`TARGETS`; with several runs, also the medians over runs. Empty without DGL's row."""
    targets = TARGETS[table]
    ok = [r for r in rows if "error" not in r]
    refs = {r.get("run"): r for r in ok if r["system"] == REFERENCE}
    pairs = [{"run": r.get("run"), "system": r["system"]} |
             _versus(r, refs[r.get("run")], targets)
             for r in ok if r["system"] != REFERENCE and r.get("run") in refs]
    if not pairs:
        return ""
    several = len(refs) > 1
    columns = ["run"] * several + ["system", *_columns(targets), "meets_targets"]
    shown = pairs + (_medians(pairs, targets) if several else [])
    return (f"Against DGL's DistDGL in the same run (targets: {targets.legend()}):\n\n"
            + markdown_table([{c: "" if p.get(c) is None else p[c] for c in columns}
                              for p in shown], columns))


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


@dataclasses.dataclass(frozen=True)
class Series:
    """One line, or one colour of bars: a value (None: none, a bar of height 0) per x."""

    label: str
    x: tuple
    y: tuple


@dataclasses.dataclass(frozen=True)
class Panel:
    """One plot of a figure (:func:`draw`)."""

    title: str
    series: tuple[Series, ...]
    kind: str = "bars"
    """``bars`` (x: categories; several series side by side) or ``lines`` (x: numbers)."""
    xlabel: str = ""
    ylabel: str = ""
    values: str | None = None
    """bars: label each with its value, and with this where there is none."""
    log2x: bool = False
    logy: bool = False
    hline: tuple[str, float] | None = None
    """A dashed grey line at this height, with this legend label."""
    ylim: tuple[float, float] | None = None


def _draw_bars(ax, panel: Panel) -> None:
    n, xs = len(panel.series), range(len(panel.series[0].x) if panel.series else 0)
    width = 0.8 / max(n, 1)
    for i, s in enumerate(panel.series):
        bars = ax.bar([x + (i - (n - 1) / 2) * width for x in xs], [v or 0 for v in s.y],
                      width, label=s.label)
        if panel.values is not None:
            ax.bar_label(bars, labels=_labels(list(s.y), panel.values),
                         fontsize=7 if n == 1 else 6)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([str(x) for x in panel.series[0].x] if panel.series else [],
                       rotation=30, ha="right", fontsize=8)


def _draw_lines(ax, panel: Panel) -> None:
    for s in panel.series:
        pts = [(x, y) for x, y in zip(s.x, s.y) if y is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", label=s.label)
    if panel.log2x:
        ax.set_xscale("log", base=2)


PANEL_KINDS = {"bars": _draw_bars, "lines": _draw_lines}
"""How each :attr:`Panel.kind` is drawn."""


def draw(panels: list[Panel], path: Path, title: str = "", columns: int = 3) -> None:
    """One figure of ``panels``, ``columns`` a row, written to ``path`` (PNG).

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    plt = _pyplot()
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        PANEL_KINDS[panel.kind](ax, panel)
        if panel.hline:
            ax.axhline(panel.hline[1], color="grey", linestyle="--", label=panel.hline[0])
        if panel.logy:
            ax.set_yscale("log")
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        if len(panel.series) > 1 or panel.hline or panel.kind == "lines":
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with replacing(path) as f:
        fig.savefig(f, dpi=100, format="png")
    plt.close(fig)


def _curve(r: dict[str, Any], metric: str) -> Series:
    """Validation ``metric`` (acc, mrr) against the training time spent so far (evaluated
    epochs)."""
    pts = [(t, a) for t, a in zip(itertools.accumulate(r["epoch_times"]),
                                  r[f"val_{metric}_per_epoch"]) if a is not None]
    xs, ys = tuple(zip(*pts)) or ((), ())
    return Series(_name(r), xs, ys)


def _name(r: dict[str, Any]) -> str:
    return f"{r['system']} #{r['run']}" if "run" in r else r["system"]


def plot(rows: list[dict[str, Any]], path: Path, title: str, table: str = "node") -> None:
    """One figure: epoch time (a typed dataset's ``table``: its median), time to accuracy
    (link: test AUC), bytes per epoch, peak memory, accuracy (link: MRR).

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    ok = [r for r in rows if "sweep" not in r and "error" not in r]
    metric = "mrr" if any("val_mrr" in r for r in ok) else "acc"
    names = tuple(_name(r) for r in ok)
    median = table == "typed"
    col = lambda key, scale=1: tuple(  # noqa: E731
        None if r.get(key) is None else r[key] / scale for r in ok)
    bars = lambda t, key, missing: Panel(t, (Series("", names, col(key)),),  # noqa: E731
                                         values=missing)
    target = ok[0].get("target_acc") if ok else None
    draw([bars("epoch time (s, median)", "epoch_time_median", "n/a") if median else
          bars("epoch time (s)", "epoch_time", "n/a"),
          bars("test AUC", "test_auc", "n/a") if metric == "mrr" else  # no target
          bars("time to accuracy (s; n/r: not reached)", "time_to_accuracy", "n/r"),
          Panel("MiB sent per epoch (all ranks)", (
              Series("inter-server", names, col("bytes_inter", 2**20)),
              Series("intra-server", names, col("bytes_intra", 2**20))), values="n/a"),
          bars("peak memory of a rank (MB)", "peak_mem_mb", "n/a"),
          Panel(f"final {metric}", tuple(Series(k, names, col(k)) for k in (
              f"val_{metric}", f"test_{metric}")), ylim=(0, 1)),
          Panel(f"validation {metric}", tuple(_curve(r, metric) for r in ok), kind="lines",
                xlabel="training time (s)",
                hline=("target", target) if target else None)], path, title)
