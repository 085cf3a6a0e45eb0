"""The loader's worker thread (dglx_dist.api.pipeline.Worker) without processes: how far it
runs is counted in steps taken, never in time; its error reaches the caller at its step;
closing it draws exactly the steps it was allowed and finishes each one not taken."""
import threading
import time

import pytest

from dglx_dist.api.pipeline import Lane, Worker


def _counting(n, drawn, fail_at=None):
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"step {i} failed")
        drawn.append(i)
        yield i


def _settle():
    time.sleep(0.2)  # the worker runs as far as it may


def test_the_worker_runs_depth_steps_ahead_of_the_caller():
    drawn = []
    worker = Worker(_counting(10, drawn), depth=2, rank=0, timeout=10)
    _settle()
    assert drawn == [0, 1]
    steps = iter(worker)
    assert next(steps) == 0
    _settle()
    assert drawn == [0, 1, 2]
    assert list(steps) == list(range(1, 10))
    assert drawn == list(range(10))


def test_an_error_while_drawing_reaches_the_caller_at_its_step():
    taken = []
    worker = Worker(_counting(10, [], fail_at=3), depth=2, rank=0, timeout=10)
    with pytest.raises(ValueError, match="step 3 failed"):
        for i in worker:
            taken.append(i)
    assert taken == [0, 1, 2]


def test_closing_draws_the_steps_allowed_and_finishes_those_not_taken():
    drawn, finished = [], []
    worker = Worker(_counting(10, drawn), depth=3, rank=0, timeout=10)
    steps = iter(worker)
    assert [next(steps), next(steps)] == [0, 1]  # allowed: 3 + 2 taken
    worker.close(finished.append)
    assert drawn == [0, 1, 2, 3, 4] and finished == [2, 3, 4]
    assert not any(t.name.startswith("dglx-loader") for t in threading.enumerate())


def test_a_lane_is_taken_by_one_worker_at_a_time():
    lane = Lane(session=None)
    assert lane.take() and not lane.take()
    lane.give_back()
    assert lane.take()


def test_a_loaders_times_move_the_rows_wait_to_pull_and_keep_work_out_of_the_sum():
    """dglx bench's phases: the hand-overs' wait for rows and the pulls started on the calling
    thread, lapped as the step's wait for its batch, are counted as ``pull``; the draws'
    seconds are ``sample work`` and the pulls' calls ``pull work``, beside the laps (a worker
    thread overlaps them), so the laps still add up to the epoch; the strategy's work before
    the first step is ``other``."""
    from dglx_dist.api.loader import LoaderTimes
    from dglx_dist.api.metrics import STEP_PHASES, PhaseTimer
    timer = PhaseTimer()
    timer.t.update({"sample": 0.5, "pull": 0.1, "forward": 1.0})
    timer.loader_epoch(LoaderTimes(draw=2.0, start=0.3, start_here=0.1, rows=0.2))
    phases = timer.finish(wall=3.0)
    assert phases["sample"] == pytest.approx(0.2) and phases["pull"] == pytest.approx(0.4)
    assert phases["sample work"] == 2.0 and phases["pull work"] == pytest.approx(0.5)
    assert phases["other"] == pytest.approx(1.4) and set(phases) <= set(STEP_PHASES)
    # a wait for rows larger than what was lapped as sample (another loop's times) moves
    # only what there is
    timer = PhaseTimer()
    timer.t["sample"] = 0.1
    timer.loader_epoch(LoaderTimes(rows=0.5))
    assert timer.t["sample"] == 0.0 and timer.t["pull"] == pytest.approx(0.1)
    # the strategy's work before the first step (distdgl's cache fill) is no phase's
    timer = PhaseTimer()
    timer.t.update({"sample": 0.5, "forward": 1.0})
    timer.loader_epoch(LoaderTimes(begin=0.25, rows=0.1))
    phases = timer.finish(wall=2.0)
    assert phases["sample"] == pytest.approx(0.15) and phases["pull"] == pytest.approx(0.1)
    assert phases["other"] == pytest.approx(0.75)


def test_a_loader_times_its_pulls_starts_and_says_on_which_thread():
    """``LoaderTimes.started`` starts a step's pull through the prefetcher, timed: on the
    calling thread both ``start`` and ``start_here`` grow; on a worker's, ``start`` alone."""
    import time

    from dglx_dist.api.loader import LoaderTimes

    class Slow:
        def start(self, step, store=None):
            time.sleep(0.02)
            return (step, store)

    times = LoaderTimes()
    assert times.started("a", Slow()) == ("a", None)
    assert times.started("b", Slow(), "store", here=False) == ("b", "store")
    assert times.start >= 0.04 and 0.02 <= times.start_here < times.start