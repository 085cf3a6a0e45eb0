"""benchmarks/plan_check.py's arithmetic: a configuration's ranks, and the constants fitted
from measured rows (a round across servers, each strategy's per-step overhead)."""
import os

import pytest

from benchmarks.plan_check import CONFIGS, FITTED, fit_constants
from benchmarks.costmodel.predict import costs
from dglx_dist.planner.units import load_measured


@pytest.fixture(autouse=True)
def _no_cached_units(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_a_configurations_ranks_are_its_last_servers_and_ranks_flags():
    assert CONFIGS["base"].world() == 2
    assert CONFIGS["4x1"].world() == 4 and CONFIGS["2x2"].world() == 4


def test_the_fit_recovers_the_constants_that_made_the_rows():
    """Rows made with a round of 5 ms and known overheads (and a predicted time the fit must
    look through: its own round and overheads taken out) give those constants back; the
    configurations outside FITTED (a typed graph, links) are left out."""
    true = {"distdgl": 0.012, "granndis": 0.004, "p3": 0.03}
    round_s, used = 0.005, load_measured().units.round_s
    verdicts = []
    for n, name in enumerate([*FITTED, "link"]):
        share = max(1.0, CONFIGS[name].world() / (os.cpu_count() or 1))
        points = []
        for strategy, ov in true.items():
            steps, rounds, predicted = 2 + n, (6 + n) * (strategy != "granndis") + 2, 0.1 + n / 50
            known = share * (steps * costs()[strategy].overhead_s_per_step + rounds * used)
            measured = predicted - known + share * (steps * ov + rounds * round_s)
            if name == "link":
                measured *= 3  # far off: must not count
            points.append({"strategy": strategy, "predicted": predicted, "measured": measured,
                           "steps": steps, "rounds": rounds})
        verdicts.append({"config": name, "points": points})
    got = fit_constants(verdicts, CONFIGS)
    assert got["round_s"] == pytest.approx(round_s, rel=1e-2) and got["points"] == len(FITTED)
    assert got["overhead_s_per_step"] == pytest.approx(true, rel=1e-2)


def _row(system, median, reached_at, options=(), strategy=None):
    accs = [0.5] * (reached_at - 1) + [0.9] * (7 - reached_at)
    row = {"system": system, "epoch_time_median": median, "epoch_times": [1.0] + [median] * 5,
           "val_acc_per_epoch": accs, "target_acc": 0.85, "options": list(options)}
    return row | ({"strategy": strategy, "plan": {"rows": [], "options": "-"}} if strategy else {})


def test_a_pick_run_as_its_strategys_own_row_counts_the_mean_of_the_two():
    """The auto row ran granndis with granndis's own options: two runs of one configuration,
    whose mean is granndis's time, so a pick of the fastest strategy is right however the
    two runs differ; with other options (a cache) the auto row stands alone."""
    from benchmarks.plan_check import verdict

    rows = [_row("auto (granndis)", 0.07, 5, strategy="granndis"), _row("granndis", 0.05, 5),
            _row("distdgl", 0.2, 2, ["batch_size=250"])]
    v = verdict(CONFIGS["base"], rows)
    assert v["right"] and v["pick_over_fastest"] == 1.0 and v["pick_s"] == pytest.approx(0.3)
    rows = [_row("auto (distdgl)", 0.3, 2, ["cache_mb=4"], strategy="distdgl"),
            _row("granndis", 0.05, 5), _row("distdgl", 0.2, 2)]
    v = verdict(CONFIGS["base"], rows)
    assert not v["right"] and v["pick_over_fastest"] == pytest.approx(0.6 / 0.25, rel=1e-3)
