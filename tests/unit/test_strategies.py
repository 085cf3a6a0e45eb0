"""What every strategy checks before any process group work: partition fit and options."""
import pytest

from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.base import check_partitions
from dglx_dist.testing import tiny_dataset


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    ds = tiny_dataset(num_nodes=60)
    out = {}
    for method, options in (("metis", {}), ("feature_dim", {"structure": "hash"})):
        out[method] = tmp_path_factory.mktemp("p") / method
        partition_dataset(ds, out[method], method, 2, options)
    return {k: PartitionDir(v) for k, v in out.items()}


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_every_strategy_names_the_partition_it_needs(parts, name):
    strategy = STRATEGIES.build(name)
    topo = Topology(2, 1)
    spec = strategy.partition_spec(topo)
    fits = parts["feature_dim" if spec.method == "feature_dim" else "metis"]
    check_partitions(strategy, fits, topo)
    wrong = parts["metis" if spec.method == "feature_dim" else "feature_dim"]
    if spec.feature_layout:
        with pytest.raises(ValueError, match=f"needs {spec.feature_layout}.*--method "
                                             f"{spec.method}"):
            check_partitions(strategy, wrong, topo)
    bigger = strategy.partition_spec(Topology(4, 1)).num_parts
    with pytest.raises(ValueError, match=f"has 2 parts.*needs {bigger}"):
        check_partitions(strategy, fits, Topology(4, 1))


# A GPU job's session, as parallelize reads it (device and rank): no CUDA exists here, so the
# device is named, not used.
GPU_JOB = {"device": "cuda:1", "rank": 3}


def _gpu_session():
    import types

    import torch

    return types.SimpleNamespace(device=torch.device(GPU_JOB["device"]), rank=GPU_JOB["rank"])


def test_which_strategies_compute_on_the_jobs_device():
    import torch

    session = _gpu_session()
    built_in = ("distdgl", "p3", "granndis", "fullgraph", "dorylus")
    on_gpu = {name for name in built_in
              if STRATEGIES.build(name).compute_device(session) == session.device}
    assert on_gpu == set(built_in) - {"dorylus"}  # dorylus trains on the host by design
    assert all(STRATEGIES.build(name).compute_device(session) == torch.device("cpu")
               for name in set(built_in) - on_gpu)


def test_parallelize_refuses_a_model_off_the_strategys_device():
    from dglx_dist.api.parallel import _check_device
    from dglx_dist.errors import InvalidValueError
    from dglx_dist.models import SAGE

    session, model = _gpu_session(), SAGE(5, 4, 3, 2)
    first = next(model.named_parameters())[0]
    count = len(list(model.parameters())) + len(list(model.buffers()))
    with pytest.raises(InvalidValueError) as err:
        _check_device(model, STRATEGIES.build("distdgl"), session)
    assert str(err.value) == (
        f"parallelize on rank 3: the model's {first} on cpu (and {count - 1} more); expected "
        f"every parameter on cuda:1: call model.to('cuda:1') before parallelize (or set "
        f"DGLX_DEVICE=cpu to train on the CPU)")
    # dorylus computes on the host by design: a CPU model is what it needs in a GPU job
    _check_device(model, STRATEGIES.build("dorylus"), session)
    with pytest.raises(InvalidValueError, match=f"model's {first} on meta .*expected every "
                       "parameter on cpu \\(strategy 'dorylus' computes on the host; the job's "
                       "device is cuda:1\\)"):
        _check_device(model.to("meta"), STRATEGIES.build("dorylus"), session)


def test_a_cobatch_layer_moved_to_a_device_keeps_its_source_order():
    """GraNNDis's last layer computing only a step's outputs reorders its sources
    (``outputs_only``); moving that layer keeps the order its exchange reads them in."""
    import torch

    from dglx_dist.graphcore.block import Block
    from dglx_dist.strategies.granndis.cobatch import SOURCE_DEGREE, LayerPlan, outputs_only

    block = Block.untyped(torch.arange(4), torch.tensor([4, 5, 0, 2]), torch.tensor([0, 1, 2, 3]),
                          torch.arange(4))
    block.edata[SOURCE_DEGREE] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    plan = LayerPlan(block, [[torch.arange(2)]], [[0]])
    cut = outputs_only(plan, torch.tensor([1, 3]))
    moved = cut.to(torch.device("cpu"))
    assert cut.order is not None and torch.equal(moved.order[0], cut.order[0])
    assert torch.equal(moved.block.edata[SOURCE_DEGREE], cut.block.edata[SOURCE_DEGREE])
    assert cut.block.edata[SOURCE_DEGREE].tolist() == [2.0, 4.0]  # the kept edges' own
