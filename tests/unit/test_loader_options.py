"""DGL's loader options that say where the steps go (dglx_dist.api.loader_call.Delivery):
their defaults by device, as DGL's DataLoader decides them, and the combinations DGL (or
torch's DataLoader, which DGL passes them to) refuses, refused in one line."""
import pytest
import torch

from dglx_dist.api.loader_call import Delivery, delivery
from dglx_dist.errors import InvalidValueError, NotSupportedError

GPU = torch.cuda.is_available()


def test_defaults_pin_and_stream_only_for_a_gpu():
    host = delivery({}, 0).on(torch.device("cpu"))
    assert (host.device, host.pin, host.side_stream) == (torch.device("cpu"), False, False)
    gpu = Delivery().on(torch.device("cuda", 0))  # (no device is made: only decided)
    assert gpu.pin and gpu.side_stream
    asked = Delivery(pin=False, side_stream=False).on(torch.device("cuda", 0))
    assert not asked.pin and not asked.side_stream


def test_a_given_device_is_kept():
    assert delivery({"device": "cpu"}, 0).device == torch.device("cpu")
    assert delivery({"device": torch.device("cpu")}, 0).on(torch.device("cpu")).device.type \
        == "cpu"


@pytest.mark.parametrize("kwargs, workers, words", [
    ({"persistent_workers": True}, 0, "persistent_workers=True needs num_workers > 0"),
    ({"use_uva": True}, 2, "use_uva=True needs num_workers=0"),
    ({"device": "tpu"}, 0, "device='tpu'; expected"),
    ({"device": "cuda:7"}, 0, "device='cuda:7', but this rank has"),
])
def test_refused_in_one_line(kwargs, workers, words):
    with pytest.raises(InvalidValueError, match=r"^DataLoader: ") as info:
        delivery(kwargs, workers)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_gpu_is_needed_for_cuda_and_uva_where_there_is_none():
    for kwargs in ({"device": "cuda"}, {"use_uva": True}, {"device": 0}):
        if GPU:  # the same calls are taken where a GPU exists
            assert delivery(kwargs, 0).device.type == "cuda"
            continue
        with pytest.raises(InvalidValueError, match="no CUDA device|0 CUDA device"):
            delivery(kwargs, 0)


def test_uva_without_a_device_goes_to_the_current_gpu(monkeypatch):
    """DGL: with ``use_uva=True`` and no ``device``, the steps go to
    ``torch.cuda.current_device()`` (not the graph's device); a device given stays."""
    for name, value in (("is_available", True), ("device_count", 2), ("current_device", 1)):
        monkeypatch.setattr(torch.cuda, name, lambda value=value: value)
    assert delivery({"use_uva": True}, 0).device == torch.device("cuda", 1)
    assert delivery({"use_uva": True, "device": "cuda:0"}, 0).device == torch.device("cuda", 0)
    assert delivery({}, 0).device is None  # the strategy's, decided by the loader


def test_pinning_for_steps_that_stay_on_the_host_is_refused():
    with pytest.raises(InvalidValueError, match="pin_prefetcher=True, but the steps go to cpu"):
        delivery({"pin_prefetcher": True}, 0).on(torch.device("cpu"))


@pytest.mark.parametrize("gpu_cache, device, words", [
    ({"node": {"feat": 100}}, "cpu", "gpu_cache keeps rows on a GPU, and the steps go to cpu"),
    ({"node": {"feat": 0}}, "cuda", "gpu_cache['node']['feat']=0; expected a number of rows"),
    ({"node": {"feat": 2.5}}, "cuda", "gpu_cache['node']['feat']=2.5; expected a number"),
    ({"nodes": {"feat": 5}}, "cuda", "expected a dict such as {'node': {'feat': 500000}}"),
    ({"edge": {"w": 5}}, "cuda", "gpu_cache of edge data is not supported"),
])
def test_gpu_cache_is_dgls_form_of_node_rows_on_a_gpu(gpu_cache, device, words):
    with pytest.raises((InvalidValueError, NotSupportedError), match=r"^DataLoader: ") as info:
        Delivery(gpu_cache=gpu_cache).on(torch.device(device))  # (no device is made)
    assert words in str(info.value) and "\n" not in str(info.value)
    kept = Delivery(gpu_cache={"node": {"feat": 100, "label": 7}}).on(torch.device("cuda", 0))
    assert kept.gpu_cache == {"feat": 100, "label": 7}
    assert Delivery().on(torch.device("cpu")).gpu_cache == {}
