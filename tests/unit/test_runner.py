"""``python -m dglx_dist.run`` (no processes): its pieces are installed only inside the runner,
bad arguments are one line, and the column layout it gives p3 is feature_dim's."""
import contextvars
import json
import logging
import sys

import numpy as np
import pytest
import torch

from dglx_dist.errors import StateError
from dglx_dist.registry import RegistryError
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.partition.columns import by_columns
from dglx_dist.testing import tiny_dataset
from test_hetero_partition import _toy


def _dgl_own():
    import dgl

    return dgl.distributed.__name__ == "dgl.distributed" and \
        dgl.distributed.__file__.startswith(dgl.__path__[0]) and \
        sys.modules["dgl.distributed"] is dgl.distributed and \
        dgl.dataloading.DistNodeDataLoader.__module__.startswith("dgl.") and \
        torch.nn.parallel.DistributedDataParallel is \
        torch.nn.parallel.distributed.DistributedDataParallel


def test_importing_dglx_dist_changes_nothing_in_dgl_or_torch():
    import dglx_dist
    import dglx_dist.dgl  # noqa: F401  (a script's hand-changed import)
    import dglx_dist.run  # noqa: F401

    dglx_dist.dgl.distributed  # noqa: B018
    assert _dgl_own()


def _options(tmp_path, *flags):
    from dglx_dist.dgl.run import parse

    script = tmp_path / "script.py"
    script.write_text("")
    return parse([*flags, str(script), "--part-config", "x.json", "--strategy", "theirs"])


def test_the_runner_installs_its_pieces_and_restores_dgl_and_torch(tmp_path):
    from dglx_dist.api.loader import DataLoader
    from dglx_dist.dgl.distributed import optim
    from dglx_dist.dgl.run import installed
    from dglx_dist.strategies import base

    options = _options(tmp_path, "--strategy", "granndis")
    assert options.script_args == ("--part-config", "x.json", "--strategy", "theirs")
    real_ddp = torch.nn.parallel.DistributedDataParallel
    with installed(options):
        import dgl
        import dgl.distributed.optim
        from dgl.distributed import DistGraph, DistNodeDataLoader, node_split, partition_graph
        from torch.nn.parallel import DistributedDataParallel

        import dglx_dist.dgl

        assert dglx_dist.dgl.distributed is dgl.distributed  # a hand-ported script's too
        assert dgl.distributed.optim is optim and dgl.distributed.optim.SparseAdam
        assert issubclass(DistNodeDataLoader, DataLoader)  # the package's, handing DGL's blocks
        assert dgl.dataloading.DistNodeDataLoader is DistNodeDataLoader
        assert node_split.__module__.startswith("dglx_dist")
        assert partition_graph.__module__.startswith("dgl.")  # not ours: DGL's own
        assert "part_config" in DistGraph.__code__.co_varnames
        assert base.DistributedDataParallel is real_ddp  # dglx_dist's own DDP stays torch's
        assert isinstance(real_ddp.__new__(real_ddp), DistributedDataParallel)
        assert not isinstance(torch.nn.Linear(1, 1), DistributedDataParallel)
        with pytest.raises(StateError, match="built no dgl.distributed.DistGraph"):
            contextvars.Context().run(DistributedDataParallel, torch.nn.ModuleList(
                [dgl.nn.GraphConv(1, 1)]), device_ids=[0])  # (without a conv: torch's DDP)
    assert _dgl_own() and dglx_dist.dgl.distributed.DistGraph.__module__ == "dglx_dist.dgl.distributed"


@pytest.mark.parametrize("flags,expected", [
    (["--strategy", "nope"], "unknown strategy 'nope'; valid names: distdgl, dorylus, "),
    (["--strategy", "p3", "--strategy-opt", "bogus=1"], "unknown option(s) ['bogus'] for "
                                                        "strategy 'p3'; valid options: "),
])
def test_bad_strategy_flags_are_refused_listing_the_valid_ones(tmp_path, flags, expected):
    with pytest.raises(RegistryError) as err:
        _options(tmp_path, *flags)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_bad_runner_input_is_one_line_and_exit_2(tmp_path, caplog, monkeypatch):
    from dglx_dist.dgl.run import main

    monkeypatch.delenv("RANK", raising=False)
    with caplog.at_level(logging.ERROR, logger="dglx_dist.dgl.run"):
        assert main(["--strategy", "p3", str(tmp_path / "missing.py"), "--epochs", "3"]) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"dglx_dist.run: InvalidValueError: script {tmp_path / 'missing.py'}: no such file; "
        "expected the path of a Python script (python -m dglx_dist.run [options] SCRIPT "
        "[ARGS])"]


def _same_columns(got: PartitionDir, want: PartitionDir) -> None:
    assert got.feature_layout == want.feature_layout == "columns"
    assert got.manifest["feature_slices"] == want.manifest["feature_slices"]
    assert got.manifest.get("type_feature_slices") == want.manifest.get("type_feature_slices")
    for p in range(want.num_parts):
        a, b = got.load_part(p), want.load_part(p)
        np.testing.assert_array_equal(a.core_gid, b.core_gid)
        np.testing.assert_array_equal(a.src, b.src)
        np.testing.assert_array_equal(a.feat, b.feat)
        assert a.feat_cols == b.feat_cols
        for t in want.type_slices:
            np.testing.assert_array_equal(got.load_type_feat(p, t), want.load_type_feat(p, t))


@pytest.mark.parametrize("dataset", [tiny_dataset, _toy], ids=["homogeneous", "typed"])
def test_by_columns_lays_out_row_partitions_as_feature_dim_does(tmp_path, dataset):
    """hash's parts by columns are feature_dim-over-hash's parts (P3's layout)."""
    ds = dataset()
    partition_dataset(ds, tmp_path / "rows", "hash", 3)
    partition_dataset(ds, tmp_path / "cols", "feature_dim", 3)
    by_columns(tmp_path / "rows", tmp_path / "out")
    _same_columns(PartitionDir(tmp_path / "out"), PartitionDir(tmp_path / "cols"))


def test_a_script_failing_before_its_session_tells_torchrun(tmp_path, monkeypatch, capsys):
    """Issue 61, case 2h: a runner script failing at import left torchrun's summary without
    the error ("To enable traceback see ..."); the error file now holds its line. Its
    traceback is the script's alone, as ``python SCRIPT`` shows it (hostile re-pass of issue
    77: the runner's own frames, 4 of this package's and runpy's, came before it), also for a
    script that does not compile; the exit status is Python's, 1."""
    from dglx_dist.dgl.run import main

    script = tmp_path / "bad.py"
    script.write_text("import json\nimport no_such_module_here\n")
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    assert main(["--strategy", "distdgl", str(script)]) == 1
    said = json.loads(error_file.read_text())["message"]["message"]
    assert said == "ModuleNotFoundError: No module named 'no_such_module_here' (at bad.py:2)"
    script.write_text("x = (\n")
    assert main(["--strategy", "distdgl", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last):") == 1, err  # a SyntaxError has none
    assert "dglx_dist" not in err and "runpy" not in err, err
    assert f'File "{script}", line 2, in <module>' in err and f'File "{script}", line 1\n' \
        in err and "SyntaxError: '(' was never closed" in err
