"""dorylus's pieces that need no process group: programs, parameter servers, options."""
import pytest
import torch

from dglx_dist.registry import RegistryError
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.dorylus import ParamServers
from dglx_dist.strategies.dorylus_pipeline import (backward_program, forward_program,
                                                   train_program)


def _names(program):
    return [f"{s.kind}{s.layer}" for s in program]


def test_programs_follow_the_papers_task_order():
    assert _names(train_program(2)) == ["GA0", "AV0", "SC0", "GA1", "AVL1", "BSC1", "BGA1",
                                        "BAV0"]
    assert _names(train_program(3)) == ["GA0", "AV0", "SC0", "GA1", "AV1", "SC1", "GA2",
                                        "AVL2", "BSC2", "BGA2", "BAV1", "BSC1", "BGA1", "BAV0"]
    assert _names(train_program(1)) == ["GA0", "AVL0"]
    assert _names(forward_program(2)) == ["GA0", "AV0", "SC0", "GA1", "AVO1"]
    assert _names(backward_program(2)) == ["BAV1", "BSC1", "BGA1", "BAV0"]


def test_param_servers_stash_versions_until_released():
    w = torch.nn.Parameter(torch.ones(3, 2))
    b = torch.nn.Parameter(torch.zeros(2))
    ps = ParamServers([(w, b)], count=2)
    first = ps.checkout()  # least-loaded server: 0, then 1
    second = ps.checkout()
    assert {first[0], second[0]} == {0, 1} and first[1] == second[1] == 0
    with torch.no_grad():
        w += 1.0
    ps.refresh()  # a weight update: version 1 is the latest, version 0 stays stashed
    third = ps.checkout()
    assert third[1] == 1
    assert (ps.weights(*first)[0][0] == 1.0).all()  # the stash, not the new weights
    assert (ps.weights(*third)[0][0] == 2.0).all()
    ps.release(*first)
    ps.release(*second)
    with pytest.raises(RuntimeError, match="no stash of version 0"):
        ps.weights(*first)
    assert ps.stashes() == 1


@pytest.mark.parametrize("options, message", [
    ({"mode": "eager"}, "mode 'eager'"),
    ({"staleness": 3}, "staleness 3"),
    ({"intervals": 0}, "each must be >= 1"),
    ({"dropout": 1.5}, "dropout 1.5"),
    ({"executor_options": ("workers",)}, "expected key=value"),
    ({"executor": "gpu"}, "executor 'gpu'; expected one of .*local"),
    ({"executor_options": ("threads=2",)}, "threads"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises((RegistryError, ValueError), match=message):
        STRATEGIES.build("dorylus", **options)
