"""dorylus's pieces that need no process group: programs, parameter servers, options."""
from types import SimpleNamespace

import dgl.nn as dglnn
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.convs import LAYERS, graph_convs
from dglx_dist.errors import InternalError
from dglx_dist.models import GAT, GCN, SAGE
from dglx_dist.registry import RegistryError
from dglx_dist.runtime.peer import PeerError
from dglx_dist.strategies import STRATEGIES
from dglx_dist.convs.dorylus_base import LayerKind, Stage, activation_name
from dglx_dist.convs.graphconv.dorylus import GcnLayers
from dglx_dist.strategies.dorylus.layers import layer_kind
from dglx_dist.strategies.dorylus.params import ParamServers
from dglx_dist.strategies.dorylus.pipeline import Pipeline, TensorSpec

train_program, forward_program, backward_program = (
    GcnLayers.train_program, GcnLayers.forward_program, GcnLayers.backward_program)


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


def _names_gat(program):
    return [f"{s.kind}{s.layer}" + ("*" if s.gate else "") for s in program]


def test_gat_programs_gate_attention_and_backward_gathers():
    """GAT: AV SC AE GA per layer (AE waits for the layer's scatter), the fused loss, then
    ∇AE ∇SC ∇GA ∇AV per layer (∇GA waits for the layer's backward scatter)."""
    kind, _ = layer_kind("GATConv")
    assert _names_gat(kind.train_program(2)) == [
        "AV0", "SC0", "AE0*", "GA0", "AV1", "SC1", "AE1*", "GA1", "AVL1",
        "BAE1", "BSC1", "BGA1*", "BAV1", "BAE0", "BSC0", "BGA0*", "BAV0"]
    assert _names_gat(kind.forward_program(1)) == ["AV0", "SC0", "AE0*", "GA0", "AVO0"]
    assert [s.gate for s in train_program(2) if s.gate] == [(False, 0), (True, 1)]


def _gat(**kw):
    torch.manual_seed(0)
    model = GAT(10, 4, 3, 2, dropout=0.0, heads=2)
    for conv in model.layers:
        for k, v in kw.items():
            setattr(conv, k, v)
    return model


class _Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([dglnn.GATConv(10, 4, 2), dglnn.GraphConv(8, 3)])


def _sage(aggregator="mean", **kw):
    torch.manual_seed(0)
    model = SAGE(10, 4, 3, 2, aggregator=aggregator, dropout=0.0)
    for k, v in kw.items():
        setattr(model.layers[1], k, v)
    return model


def _gcn(activation):
    model = GCN(10, 4, 3, 2, dropout=0.0)
    model.layers[0]._activation = activation
    return model


@pytest.mark.parametrize("build, message", [
    (lambda: _Mixed(), r"one conv type.*\['GATConv', 'GraphConv'\]"),
    (lambda: _sage("gcn"), r"cannot run layers.0 .*aggregator 'gcn'.*SAGEConv with aggregator "
                           r"'mean', norm=None, feat_drop=0 and activation None or ReLU"),
    (lambda: _sage("pool"), r"layers.0 .*aggregator 'pool'"),
    (lambda: _sage(norm=torch.nn.LayerNorm(3)), r"layers.1 .*norm=LayerNorm"),
    (lambda: _sage(feat_drop=torch.nn.Dropout(0.5)), r"layers.1 .*feat_drop=0.5"),
    (lambda: _sage(activation=torch.tanh), r"layers.1 .*activation=<built-in method tanh"),
    (lambda: _gcn(F.elu), r"layers.0 .*activation=<function elu.*ReLU \(F.relu, torch.relu, "
                          r"nn.ReLU\) or no activation"),
    (lambda: _gcn(torch.nn.LeakyReLU()), r"activation=LeakyReLU"),
    (lambda: _gat(activation=torch.relu), r"an activation inside the conv"),
    (lambda: _gat(res_fc=torch.nn.Identity()), r"residual=True"),
    (lambda: _gat(leaky_relu=torch.nn.LeakyReLU(0.1)), r"negative_slope=0.1"),
    (lambda: GCN(10, 4, 3, 3), r"has 3 graph convs"),
])
def test_models_dorylus_cannot_run_are_named(build, message):
    with pytest.raises(ValueError, match=message):
        STRATEGIES.build("dorylus", num_layers=2).wrap_model(build())


def test_relu_inside_a_conv_is_applied_by_the_last_apply_only():
    """A conv's own ReLU: between layers the model's ReLU is applied anyway (ReLU twice is
    ReLU), so only the last layer's apply takes the conv's activation."""
    for act, name in ((None, "none"), (torch.nn.Identity(), "none"), (F.relu, "relu"),
                      (torch.relu, "relu"), (torch.nn.ReLU(), "relu")):
        assert activation_name(act, "conv") == name
    model = GCN(10, 4, 3, 3, dropout=0.0)
    model.layers[0]._activation = F.relu
    model.layers[2]._activation = torch.nn.ReLU()
    GcnLayers.check(graph_convs(model))
    plan = GcnLayers.plan(None, graph_convs(model))
    assert plan.acts == ("relu", "none", "relu")
    assert [plan.act(l) for l in range(3)] == ["relu", "relu", "relu"]
    model.layers[2]._activation = None
    assert [GcnLayers.plan(None, graph_convs(model)).act(l) for l in range(3)] == \
        ["relu", "relu", "none"]


def test_sage_kind_is_registered_with_gcns_program():
    kind, _ = layer_kind("SAGEConv")
    assert "SAGEConv" in STRATEGIES.get("dorylus").conv_types
    assert _names(kind.train_program(2)) == _names(train_program(2))
    kind.check(graph_convs(_sage(activation=F.relu)))


def test_conv_types_are_the_convs_whose_adapter_has_a_dorylus_kind():
    """The test plug-in's GINConv adapter has no dorylus kind: registered, but not run."""
    assert "GINConv" in LAYERS.names()
    assert STRATEGIES.get("dorylus").conv_types == ("GATConv", "GraphConv", "SAGEConv")
    for name in STRATEGIES.get("dorylus").conv_types:
        kind, support = layer_kind(name)
        assert issubclass(kind, LayerKind) and support is LAYERS.get(name).dorylus
    with pytest.raises(ValueError, match="dorylus cannot run GINConv; it runs GATConv, "
                                         "GraphConv, SAGEConv"):
        layer_kind("GINConv")


def test_the_pipeline_submits_only_the_conv_types_tasks():
    submitted = []
    pipe = Pipeline.__new__(Pipeline)  # _submit needs no graph server
    pipe.ps = SimpleNamespace(weights=lambda ps, version: None)
    pipe.ctl = SimpleNamespace(submit=lambda *args: submitted.append(args))
    pipe.layers = SimpleNamespace(spec=TensorSpec((0.0,), 0, frozenset({"av"})),
                                  request=lambda st, *args: ({"op": st.kind.lower()}, {}))
    interval = SimpleNamespace(index=0, epoch=0, ps=0, version=0)
    pipe._submit("k", Stage("AV", 0), interval, True, {})
    assert [args[1]["op"] for args in submitted] == ["av"]
    with pytest.raises(InternalError, match=r"task 'ae' for stage AE0; its conv type's tasks "
                                            r"are \['av'\]"):
        pipe._submit("k", Stage("AE", 0), interval, True, {})


def test_a_stalled_pipeline_names_the_frozen_peer_of_its_weight_update():
    """The pipeline waits on nothing but a weight update's all-reduce (its messages are in)
    when a peer freezes: after its deadline it fails as that collective timing out, naming
    the frozen rank and breaking the group, instead of a DeadlineError that blames nobody and
    leaves the group usable for a closing barrier to wait on again (issue 77, item 4)."""
    from dglx_dist.runtime.pending import Pending
    from dglx_dist.strategies.dorylus.params import WeightUpdates
    from tests.unit.test_health import _comm, _FrozenPeerHealth

    comm = _comm(_FrozenPeerHealth())
    never = SimpleNamespace(is_completed=lambda: False, wait=lambda timeout=None: True)
    updates = WeightUpdates.__new__(WeightUpdates)
    updates._queue = [(4, Pending(comm, "all_reduce", never, lambda: None))]
    pipe = Pipeline.__new__(Pipeline)
    pipe.comm, pipe._recvs, pipe._sends = comm, {}, []
    pipe.ctl = SimpleNamespace(in_flight=0)
    with pytest.raises(PeerError, match="all_reduce on the world group failed on rank 0: "
                                        "rank 1 sent no heartbeat") as got:
        pipe._stalled(20.0, updates)
    assert got.value.ranks == [1] and comm.failure is got.value
