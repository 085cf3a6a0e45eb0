"""Paths ``dglx train`` is given that cannot serve their role (hostile re-pass of issue 77):
``--metrics-out`` a named pipe nobody reads blocked rank 0 in ``open`` until its peer timed
out blaming it ("rank 0 has not reached world collective #3"), and one on a full disk
(``/dev/full``) ended rank 0 with ``OSError`` tracebacks through 10 of the package's frames;
``--cache-dir`` or ``--metrics-out`` inside ``--checkpoint-dir`` made the job refuse, as "not
checkpoints", the empty directory it had just written into. Now each is one line naming the
flag. tests/unit/test_console.py has what the metrics sink writes."""
import io
import os
import threading

import pytest

from dglx_dist.cli.train import _check_roles, _MetricsSink
from dglx_dist.config import RunConfig
from dglx_dist.errors import DiskFullError, InvalidValueError

LINE = '{"epoch": 0, "loss": 1.9}\n'


@pytest.mark.timeout(20)  # the old code waited in open() for good
def test_a_named_pipe_nobody_reads_is_refused_at_once_and_one_with_a_reader_is_written(
        tmp_path):
    fifo = tmp_path / "m.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidValueError, match=r"--metrics-out .*m.fifo: cannot be opened for "
                                                r"appending \(a named pipe nobody reads\)"):
        _MetricsSink(fifo, stream=io.StringIO())  # it blocked here for good
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    while not got and reader.is_alive():
        try:
            sink = _MetricsSink(fifo, stream=io.StringIO())
            break
        except InvalidValueError:  # the reader has not opened its end yet
            continue
    sink.write(LINE)
    sink.close()
    reader.join(5)
    assert got == [LINE]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_is_one_line_naming_the_file():
    sink = _MetricsSink("/dev/full", stream=io.StringIO())
    sink.write(LINE)  # buffered
    with pytest.raises(DiskFullError, match=r"--metrics-out /dev/full: the metrics records could "
                                            r"not be written \(No space left on device\)"):
        sink.flush()
    sink.write(LINE)  # the file given up: nothing more is written, nothing raised again
    sink.close()


@pytest.mark.parametrize("flags, refused", [
    ({"checkpoint_dir": "ck", "cache_dir": "ck"}, "--cache-dir ck is inside --checkpoint-dir ck"),
    ({"checkpoint_dir": "ck", "metrics_file": "ck/m.jsonl"}, "--metrics-out ck/m.jsonl is inside"),
    ({"checkpoint_dir": ".", "cache_dir": "dglx-partitions"}, "--cache-dir dglx-partitions is "),
    ({"checkpoint_dir": "ck", "partitions": "ck/p"}, "--partitions ck/p is inside"),
    ({"checkpoint_dir": "ck", "metrics_file": "ck2/m.jsonl"}, None),
    ({"checkpoint_dir": "cora", "data": "cora"}, None),  # a built-in name, no path
])
def test_a_path_inside_the_checkpoint_dir_is_refused_before_anything(tmp_path, monkeypatch,
                                                                     flags, refused):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    job = {k: flags[k] for k in ("checkpoint_dir", "metrics_file") if k in flags}
    data = {k: flags[k] for k in ("cache_dir", "partitions", "data") if k in flags}
    config = RunConfig().updated(job=job, data=data)
    if refused is None:
        _check_roles(config)
        return
    with pytest.raises(InvalidValueError, match=refused.replace(".", r"\.")):
        _check_roles(config)
    assert [p.name for p in tmp_path.iterdir()] == ["ck"] and not any((tmp_path / "ck").iterdir())


def test_layers_a_strategy_does_not_use_are_named(caplog):
    """``--layers 3`` under distdgl, whose fanouts give the depth, trained 2 layers without a
    word (hostile re-pass of issue 77); now it is said, and the depth stays the strategy's."""
    import logging

    from dglx_dist.cli.train import _model
    from dglx_dist.convs.base import graph_convs
    from dglx_dist.strategies import STRATEGIES

    for layers, said in ((3, True), (2, False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dglx_dist"):
            model = _model(RunConfig().updated(model={"layers": layers}),
                           STRATEGIES.build("distdgl"), 8, 3)
        assert len(graph_convs(model)) == 2
        warned = [r.getMessage() for r in caplog.records]
        assert bool(warned) == said, warned
        if said:
            assert "--layers 3 is not used" in warned[0] and "distdgl:fanouts=" in warned[0]
