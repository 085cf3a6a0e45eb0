"""The memory estimate `dglx train` checks before it starts: each strategy's measured
per-rank model (the numbers of docs/cluster_model.md) and the one-line refusal."""
import math
import re
from pathlib import Path

import pytest

from dglx_dist.errors import InsufficientMemoryError, InvalidValueError
from dglx_dist.memory import MemoryModel
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.footprint import (MARGIN, JobSize, check_job_memory,
                                            fewest_servers, peak_per_rank)

ROOT = Path(__file__).resolve().parents[2]
PRODUCTS = dict(nodes=2_449_029, edges=61_859_140)  # ogbn-products' size
MB = 1 << 20


def _docs_fits() -> dict[str, dict]:
    """The fits table of docs/cluster_model.md's "Memory per rank", by strategy."""
    text = (ROOT / "docs" / "cluster_model.md").read_text()
    section = text.split("## Memory per rank")[1].split("\n## ")[0].split("### ")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| strategy")]
    return {cells[0].strip(): {"base_mb": int(cells[4]), "bytes_per_node": int(cells[5]),
                               "bytes_per_edge": float(cells[6])} for cells in rows}


def test_every_builtin_strategy_carries_the_measured_fit_of_the_docs():
    fits = _docs_fits()
    assert set(fits) == {"distdgl", "p3", "fullgraph", "granndis", "dorylus"}
    for name, fit in fits.items():
        assert STRATEGIES.build(name).cost.memory.public() == fit, name
    # granndis's class carries its own; an instance with the whole job as one group is
    # fullgraph, whatever name built it
    assert STRATEGIES.get("granndis").cost.memory.public() == fits["granndis"]
    assert STRATEGIES.build("granndis", scope="world").cost.memory.public() == \
        fits["fullgraph"]


def test_the_estimate_is_the_fit_at_the_jobs_share_of_the_graph():
    job = JobSize.homogeneous(**PRODUCTS, world=2, ranks_here=2)
    expected = 1508 * MB + (9921 * PRODUCTS["nodes"] + 167.8 * PRODUCTS["edges"]) / 2
    assert peak_per_rank(STRATEGIES.build("granndis"), job) == pytest.approx(expected)
    granndis, budget = STRATEGIES.build("granndis"), 20e9
    servers = fewest_servers(granndis, job, budget)
    fits = [2 * peak_per_rank(granndis, JobSize.homogeneous(**PRODUCTS, world=2 * s,
                                                            ranks_here=2)) * (1 + MARGIN)
            <= budget for s in (servers - 1, servers)]
    assert fits == [False, True]
    eight = JobSize.homogeneous(**PRODUCTS, world=8, ranks_here=8)
    assert fewest_servers(granndis, eight, 8 * MB * 1508) is None  # 8 bases exceed it
    with pytest.raises(InvalidValueError, match="must be finite numbers >= 0"):
        MemoryModel(base=-1, per_node=0, per_edge=math.nan)


def test_a_job_over_the_limit_is_refused_in_one_line_with_the_numbers():
    """Products under granndis, 2 ranks on one server, a 22 GB limit: the estimate per rank
    (the fit's 18,043 MiB plus the margin) and for the server's ranks, the graph, the limit,
    and what to do instead."""
    job = JobSize.homogeneous(**PRODUCTS, world=2, ranks_here=2)
    with pytest.raises(InsufficientMemoryError) as exc:
        check_job_memory(STRATEGIES.build("granndis"), job, 22_000_000_000,
                         override="--memory-limit BYTES")
    text = str(exc.value)
    assert "\n" not in text and MARGIN == 0.08
    for part in ("strategy 'granndis' on 2,449,029 nodes and 61,859,140 edges",
                 "about 19,487 MiB a rank by its fit measured at F=128 plus 8%",
                 "x 2 ranks on this machine",
                 "needs about 38,973 MiB at its peak but only 20,981 MiB is allowed",
                 "3 machines of 2 ranks each would fit",
                 "the least is 'distdgl': about 10,040 MiB a rank, 20,081 MiB for the 2 ranks "
                 "here, which fits",
                 "or set --memory-limit BYTES if you know the job fits"):
        assert part in text, text


def test_dorylus_at_products_size_is_refused_on_this_machine_and_distdgl_and_p3_are_not():
    """The run that was killed: dorylus on products, 2 ranks, the idle machine's 22,890 MiB
    (2 x its fit is just under it; the margin refuses it); distdgl and p3 trained there."""
    job, idle = JobSize.homogeneous(**PRODUCTS, world=2, ranks_here=2), 22_890 * MB
    with pytest.raises(InsufficientMemoryError, match="needs about 23,974 MiB at its peak"):
        check_job_memory(STRATEGIES.build("dorylus"), job, idle)
    assert 2 * peak_per_rank(STRATEGIES.build("dorylus"), job) < idle  # not without it
    for name in ("distdgl", "p3"):
        check_job_memory(STRATEGIES.build(name), job, idle)


def test_a_small_graph_fits_and_a_strategy_without_a_model_is_not_checked():
    cora = JobSize.homogeneous(nodes=2708, edges=10556, world=2, ranks_here=2)
    for name in STRATEGIES.names():
        check_job_memory(STRATEGIES.build(name), cora, 4 * 2**30)
    unmeasured = STRATEGIES.build("range_distdgl")  # the test plug-in: not Costed
    assert peak_per_rank(unmeasured, cora) is None
    check_job_memory(unmeasured, cora, 1)
    measured = [n for n in STRATEGIES.names() if peak_per_rank(STRATEGIES.build(n), cora)]
    least = min(measured, key=lambda n: peak_per_rank(STRATEGIES.build(n), cora))
    with pytest.raises(InsufficientMemoryError, match=re.escape(
            "more servers do not help (a rank's base alone is about ")) as exc:
        check_job_memory(STRATEGIES.build(least), cora, 1)
    assert f"no registered strategy needs less than {least!r} here" in str(exc.value)
    with pytest.raises(InvalidValueError, match="1 <= ranks_here <= world"):
        JobSize.homogeneous(nodes=10, edges=10, world=2, ranks_here=4)
