"""The partition cache stays bounded and removes only what it recorded (issue 40, case 14)."""
import os
import time
from pathlib import Path

import pytest

from dglx_dist.cache import CacheLimits, check_cache_dir, clear, entries, prune
from dglx_dist.cli import main
from dglx_dist.errors import InvalidValueError, OutputExistsError
from dglx_dist.partition import partition_dataset

DAY = 86400.0


@pytest.fixture
def cache(tiny, tmp_path):
    """Four entries last used 40, 10, 5 days and a minute ago."""
    root = tmp_path / "cache"
    now = time.time()
    for name, age in (("a", 40), ("b", 10), ("c", 5), ("d", 1 / 1440)):
        partition_dataset(tiny, root / name, "hash", 2)
        os.utime(root / name, (now - age * DAY, now - age * DAY))
    return root


def _names(root):
    return [e.path.name for e in entries(root)]


def test_least_recently_used_entries_go_first_and_recent_ones_never(cache):
    assert _names(cache) == ["a", "b", "c", "d"]
    size = entries(cache)[0].bytes
    limits = CacheLimits(max_bytes=2 * size, max_age_s=1000 * DAY)
    assert [p.name for p in prune(cache, limits, keep=(cache / "b",))] == ["a", "c"]
    assert _names(cache) == ["b", "d"]
    assert prune(cache, CacheLimits(max_bytes=0, max_age_s=0)) == [cache / "b"]  # d: in use


def test_old_entries_go_and_unrecorded_files_stay(cache):
    before = {p.name for p in (cache / "a").rglob("*")}
    (cache / "a" / "notes.txt").write_text("mine")
    old = time.time() - 40 * DAY
    os.utime(cache / "a", (old, old))
    removed = prune(cache, CacheLimits(max_bytes=1 << 40, max_age_s=7 * DAY))
    assert [p.name for p in removed] == ["b"]  # a holds the user's file: kept whole
    assert {p.name for p in (cache / "a").rglob("*")} == before | {"notes.txt"}
    check_cache_dir(cache)
    (cache / "mine.txt").write_text("x")
    with pytest.raises(OutputExistsError, match="holds mine.txt, which dglx did not write"):
        check_cache_dir(cache)


def test_clear_by_age_and_the_command(cache, capsys):
    assert [p.name for p in clear(cache, older_than_s=7 * DAY)] == ["a", "b"]
    assert main(["cache", "ls", "--cache-dir", str(cache)]) == 0
    assert "| c | partition |" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert entries(cache) == [] and list(cache.iterdir()) == []


def test_limits_from_the_environment():
    limits = CacheLimits.from_env({"DGLX_CACHE_MAX_GB": "1.5", "DGLX_CACHE_MAX_DAYS": "2"})
    assert limits == CacheLimits(max_bytes=int(1.5 * (1 << 30)), max_age_s=2 * DAY)
    assert CacheLimits.from_env({}) == CacheLimits()
    for bad in ("-1", "nan", "lots"):
        with pytest.raises(InvalidValueError, match="DGLX_CACHE_MAX_GB"):
            CacheLimits.from_env({"DGLX_CACHE_MAX_GB": bad})


def test_jobs_sharing_the_cache_make_an_entry_once(tmp_path, caplog):
    """Two launchers (threads here; processes in benchmarks/hostile_runs.py's
    cache-dir-shared) partitioning the same entry at once: one makes it, the other waits
    for its lock and uses it (issue 38: the second failed with OutputExistsError)."""
    import threading

    from dglx_dist.prepare import partition_ahead
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies import STRATEGIES

    strategy, topology, cache = STRATEGIES.build("distdgl"), Topology(2, 1), tmp_path / "c"
    got, errors = [], []

    def launch():
        try:
            got.append(partition_ahead("cora", strategy, topology, str(cache)))
        except Exception as exc:  # noqa: BLE001 - the test reports what a launcher raised
            errors.append(exc)

    with caplog.at_level("INFO", logger="dglx_dist.prepare"):
        threads = [threading.Thread(target=launch) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and len(got) == 2 and got[0] == got[1]
    assert sum("partitioning" in r.getMessage() for r in caplog.records) == 1
    check_cache_dir(cache)  # the lock file is the cache's own
    assert clear(cache) == [Path(got[0])] and list(cache.iterdir()) == []  # lock file too
