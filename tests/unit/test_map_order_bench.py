"""benchmarks/map_order.py runs on a small grid: it times both orders of SAGEConv's
neighbourhood map and reports the order ``map_first`` picks for each block."""
import json

from benchmarks import map_order


def test_map_order_times_both_orders_and_reports_the_rules_pick(capsys):
    assert map_order.main(["--shapes", "3000:300:8,900:800:3", "--widths", "64:8",
                            "--reps", "3"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[0])
    assert len(out["rows"]) == 4  # two blocks, each with and without a gradient
    for row in out["rows"]:
        assert row["first_ms"] > 0 and row["after_ms"] > 0 and row["pick_vs_best"] >= 1.0
        assert row["edges"] == row["destinations"] * (8 if row["destinations"] == 300 else 3)
    # a sampled layer (10x the sources of its destinations) sums first; a near-full one maps
    rules = {row["destinations"]: row["rule"] for row in out["rows"]}
    assert rules == {300: "after", 800: "first"}
    assert out["pick_vs_best_worst"] == max(row["pick_vs_best"] for row in out["rows"])
