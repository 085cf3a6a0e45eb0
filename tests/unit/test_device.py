"""Where a rank computes (runtime.device) and how host rows reach it (runtime.transfer): the
choice of device and backend for every launch shape, the one-line refusals of what a machine
cannot give, and the copies on a machine without CUDA. No DGL: part of `make test-core`."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from dglx_dist.errors import InvalidValueError
from dglx_dist.runtime.device import (Placement, choose_placement, group_backend, mixed_devices,
                                      module_devices, nccl_environment)
from dglx_dist.runtime.env import EnvError, read_env
from dglx_dist.runtime.transfer import DeviceCopies


def _place(local_rank=0, local_world=1, backend=None, device=None, gpus=0, rank=None):
    return choose_placement(local_rank if rank is None else rank, local_rank, local_world,
                            backend, device, gpus)


@pytest.mark.parametrize("local_rank, local_world, backend, device, gpus, want", [
    (0, 1, None, None, 0, ("cpu", "gloo")),            # no CUDA: the CPU over gloo
    (1, 2, None, "auto", 0, ("cpu", "gloo")),
    (1, 2, "gloo", "cpu", 4, ("cpu", "gloo")),          # a GPU machine asked for the CPU
    (3, 4, None, None, 4, ("cuda:3", "nccl")),          # one rank per GPU: local rank i, GPU i
    (3, 4, "gloo", None, 4, ("cuda:3", "gloo")),        # device compute, host collectives
    (3, 4, "gloo", "cuda", 2, ("cuda:1", "gloo")),      # four ranks share two GPUs over gloo
    (0, 2, "nccl", "cuda:1", 2, ("cuda:1", "nccl")),    # an explicit GPU
])
def test_placement_follows_the_launch(local_rank, local_world, backend, device, gpus, want):
    placement = _place(local_rank, local_world, backend, device, gpus)
    assert (str(placement.device), placement.backend) == want
    assert placement.on_gpu == want[0].startswith("cuda")


@pytest.mark.parametrize("kwargs, words", [
    # --backend nccl without CUDA
    ({"backend": "nccl", "gpus": 0, "rank": 5}, ["rank 5", "'nccl' needs a CUDA device",
                                                 "not available", "--backend gloo"]),
    # nccl asked for on a GPU machine whose rank was told to use the CPU
    ({"backend": "nccl", "device": "cpu", "gpus": 2}, ["its device is the CPU", "--backend gloo"]),
    # more local ranks than GPUs under NCCL
    ({"local_rank": 2, "local_world": 4, "gpus": 2}, ["rank 2 (local rank 2 of 4)",
                                                       "4 local ranks but 2 GPU(s)",
                                                       "--nproc-per-node 2", "--backend gloo"]),
    ({"device": "cuda", "gpus": 0}, ["device 'cuda' needs CUDA", "--device cpu"]),
    ({"device": "cuda:2", "gpus": 2}, ["cuda:2", "has 2 GPU(s) (cuda:0 to cuda:1)"]),
    ({"device": "gpu"}, ["device 'gpu'", "'auto', 'cpu', 'cuda' or 'cuda:N'"]),
    ({"device": "cpu:1"}, ["device 'cpu:1'"]),
    ({"backend": "mpi"}, ["backend 'mpi'", "'gloo' or 'nccl'"]),
])
def test_what_a_machine_cannot_give_is_one_line(kwargs, words):
    with pytest.raises(InvalidValueError) as err:
        _place(**kwargs)
    line = str(err.value)
    assert "\n" not in line
    for word in words:
        assert word in line, (word, line)


def test_group_backend_carries_host_traffic_on_gloo():
    assert group_backend("gloo") == "gloo"
    assert group_backend("nccl") == "cpu:gloo,cuda:nccl"


def test_nccl_environment_keeps_what_the_user_set():
    got = nccl_environment({}, timeout=120)
    assert got == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
                   "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "180"}
    assert nccl_environment({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, timeout=30) == {
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "90"}


def test_mixed_devices_names_the_ranks_of_each_kind():
    assert mixed_devices(["cuda:0", "cuda:1", "cuda:0", "cuda:1"]) is None
    assert mixed_devices(["cpu"] * 3) is None
    line = mixed_devices(["cuda:0", "cuda:1", "cpu", "cpu"])
    assert line.startswith("mixed devices among ranks: rank(s) 2, 3 on cpu; rank(s) 0, 1 on "
                           "cuda; expected every rank on the same kind of device")
    many = mixed_devices(["cpu"] + ["cuda:0"] * 20)
    assert "... (20 ranks) on cuda" in many


def test_module_devices_lists_what_is_elsewhere():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    named = list(model.named_parameters()) + list(model.named_buffers())
    assert module_devices(named, torch.device("cpu")) == []
    wrong = module_devices(named, torch.device("cuda", 1))
    assert wrong[0] == "0.weight on cpu" and len(wrong) == len(named)
    meta = nn.Linear(2, 2, device="meta")
    assert module_devices(meta.named_parameters(), torch.device("cpu")) == [
        "weight on meta", "bias on meta"]


def test_the_environment_names_the_device():
    env = read_env({"RANK": "0", "WORLD_SIZE": "1", "DGLX_DEVICE": "cuda:1"})
    assert env.device == "cuda:1"
    assert read_env({}).device is None
    with pytest.raises(EnvError, match="DGLX_DEVICE='tpu'; expected 'auto', 'cpu'"):
        read_env({"DGLX_DEVICE": "tpu"})


def test_copies_to_the_cpu_hand_over_the_tensor_itself():
    copies = DeviceCopies(torch.device("cpu"))
    assert not copies.pins  # page-locked memory only where a GPU copies from it
    rows = torch.randn(5, 2)
    assert copies.start(rows)() is rows


def test_copies_to_another_device_land_there():
    # meta stands in for a device other than the host's (no CUDA here): the copy is made,
    # to the device asked for, with the rows' shape and dtype
    copies = DeviceCopies(torch.device("meta"))
    assert not copies.pins
    out = copies.start(torch.ones(3, 2, dtype=torch.float64))()
    assert out.device.type == "meta" and out.shape == (3, 2) and out.dtype == torch.float64


def test_placement_is_frozen():
    placement = Placement(torch.device("cpu"), "gloo")
    with pytest.raises(AttributeError):
        placement.backend = "nccl"


@pytest.mark.parametrize("pin, side_stream", [(None, None), (False, False), (True, False),
                                              (False, True)])
def test_copies_land_whatever_the_pinning_and_the_stream(pin, side_stream):
    # DGL's pin_prefetcher and use_alternate_streams: on a GPU where there is one (meta
    # stands in for another device here), the rows arrive the same either way
    device = torch.device("cuda" if torch.cuda.is_available() else "meta")
    copies = DeviceCopies(device, pin, side_stream)
    assert copies.pins == (device.type == "cuda" and pin is not False)
    rows = torch.randn(4, 3)
    out = copies.start(rows)()
    assert out.device.type == device.type and out.shape == rows.shape
    if device.type == "cuda":
        assert torch.equal(out.cpu(), rows)
