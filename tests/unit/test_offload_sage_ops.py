"""GraphSAGE's tensor tasks against torch autograd (and DGL's SAGEConv) doing the same math."""
import dgl
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.offload.aws import merge_responses, split_request
from dglx_dist.convs.ops_base import dropout_mask
from dglx_dist.offload.tensor_fn.handler import handle
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

N, FIN, FOUT = 17, 6, 4


def _run(op, header, arrays):
    out_header, out = decode(handle(encode({"op": op, **header}, arrays)))
    assert out_header == {"op": op, "ok": True}
    return out


def _inputs(seed=0, n=N):
    rng = np.random.default_rng(seed)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return {"X": f(n, FIN), "M": f(n, FIN), "Ws": f(FIN, FOUT), "Wn": f(FIN, FOUT),
            "b": f(FOUT), "ids": rng.permutation(1000)[:n].astype(np.int64)}


def _torch_forward(arrays, act, p, seed):
    t = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items() if k != "ids"}
    z = t["X"] @ t["Ws"] + t["M"] @ t["Wn"] + t["b"]
    h = torch.relu(z) if act == "relu" else z
    if p > 0:
        mask = torch.from_numpy(dropout_mask(seed, arrays["ids"], FOUT, p))
        h = h * mask / (1 - p)
    return t, h


@pytest.mark.parametrize("act, p", [("relu", 0.5), ("none", 0.3), ("relu", 0.0),
                                    ("none", 0.0)])
def test_av_and_av_grad_match_autograd(act, p):
    arrays = _inputs()
    header = {"act": act, "dropout": p, "seed": 11}
    t, h_ref = _torch_forward(arrays, act, p, 11)
    h = _run("sage_av", {**header, "train": True}, arrays)["H"]
    np.testing.assert_allclose(h, h_ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    if p:
        assert (h == 0).mean() > 0.2  # the mask did drop entries
    dh = np.random.default_rng(1).standard_normal(h.shape).astype(np.float32)
    h_ref.backward(torch.from_numpy(dh))
    grads = _run("sage_av_grad", {**header, "need_dX": True}, {**arrays, "dH": dh})
    for name, param in (("dWs", "Ws"), ("dWn", "Wn"), ("db", "b"), ("dX", "X"), ("dM", "M")):
        np.testing.assert_allclose(grads[name], t[param].grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    plain = _run("sage_av_grad", header, {**arrays, "dH": dh})
    assert "dX" not in plain and "dM" not in plain
    np.testing.assert_array_equal(plain["dWs"], grads["dWs"])


def test_av_eval_has_no_dropout():
    arrays = _inputs(seed=3)
    h = _run("sage_av", {"act": "relu", "dropout": 0.5, "seed": 3, "train": False}, arrays)["H"]
    a = arrays
    ref = np.maximum(a["X"] @ a["Ws"] + a["M"] @ a["Wn"] + a["b"], 0)
    np.testing.assert_allclose(h, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("act", ["none", "relu"])
def test_loss_matches_weighted_cross_entropy(act):
    arrays = _inputs(seed=2)
    del arrays["ids"]
    rng = np.random.default_rng(5)
    labels = rng.integers(0, FOUT, N).astype(np.int64)
    weight = (rng.random(N) < 0.6).astype(np.float32) * np.float32(1 / 14)
    t, logits = _torch_forward(arrays, act, 0.0, 0)
    losses = F.cross_entropy(logits, torch.from_numpy(labels), reduction="none")
    loss = (losses * torch.from_numpy(weight)).sum()
    loss.backward()
    header = {"need_dX": True} if act == "none" else {"act": act, "need_dX": True}
    out = _run("sage_loss", header, {**arrays, "labels": labels, "weight": weight})
    np.testing.assert_allclose(out["loss"][0], loss.item(), rtol=1e-5)
    for name, param in (("dWs", "Ws"), ("dWn", "Wn"), ("db", "b"), ("dX", "X"), ("dM", "M")):
        np.testing.assert_allclose(out[name], t[param].grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)


def test_rows_chunk_like_the_aws_executor_splits_them():
    """Split by rows under a small payload limit and merged: the whole task's outputs."""
    arrays = _inputs(seed=4, n=40)
    arrays["dH"] = np.random.default_rng(6).standard_normal((40, FOUT)).astype(np.float32)
    header = {"act": "relu", "dropout": 0.4, "seed": 9, "train": True, "need_dX": True}
    for name in ("sage_av", "sage_av_grad"):
        request = encode({"op": name, **header}, arrays)
        chunks, op = split_request(request, 2000)
        assert op is OPS[name] and len(chunks) > 2
        merged = decode(merge_responses([handle(c) for c in chunks], op))[1]
        whole = decode(handle(request))[1]
        assert sorted(merged) == sorted(whole)
        for key, value in whole.items():
            np.testing.assert_allclose(merged[key], value, rtol=1e-5, atol=1e-5, err_msg=key)


def test_tasks_compose_to_dgl_sageconv():
    """The graph server's neighbour mean, then sage_av, give SAGEConv (mean, ReLU inside)'s
    output; sage_av_grad and the mean's gradient sent back to the sources (divided by the
    destination's in-degree) give its parameter and input gradients. With a node without
    in-edges and a repeated edge."""
    src = np.array([1, 2, 2, 3, 0, 4, 4, 5, 1, 1], dtype=np.int64)
    dst = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4], dtype=np.int64)  # 5: no in-edges
    n = 6
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
    torch.manual_seed(0)
    conv = dglnn.SAGEConv(FIN, FOUT, "mean", activation=F.relu)
    torch.nn.init.normal_(conv.fc_self.bias)
    x = torch.randn(n, FIN, requires_grad=True)
    ref = conv(g, x)
    dout = torch.randn_like(ref)
    ref.backward(dout)

    adj = np.zeros((n, n), np.float32)  # the graph server's mean matrix D_in^-1 A
    np.add.at(adj, (dst, src), 1.0)
    adj /= np.maximum(adj.sum(1, keepdims=True), 1)
    xs = x.detach().numpy()
    arrays = {"X": xs, "M": adj @ xs, "Ws": conv.fc_self.weight.detach().numpy().T.copy(),
              "Wn": conv.fc_neigh.weight.detach().numpy().T.copy(),
              "b": conv.fc_self.bias.detach().numpy(), "ids": np.arange(n, dtype=np.int64)}
    out = _run("sage_av", {"act": "relu"}, arrays)["H"]
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert (out == 0).any()  # the ReLU cut something
    grads = _run("sage_av_grad", {"act": "relu", "need_dX": True},
                 {**arrays, "dH": dout.numpy()})
    dx = grads["dX"] + adj.T @ grads["dM"]  # the backward gather: the mean's transpose
    np.testing.assert_allclose(dx, x.grad.numpy(), rtol=1e-4, atol=1e-5)
    for name, ref_grad in (("dWs", conv.fc_self.weight.grad.T),
                           ("dWn", conv.fc_neigh.weight.grad.T), ("db", conv.fc_self.bias.grad)):
        np.testing.assert_allclose(grads[name], ref_grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


@pytest.mark.parametrize("op, header, change, match", [
    ("sage_av", {"act": "relu"}, {"M": np.zeros((N, FIN + 1), np.float32)},
     r"'M' has shape \(17, 7\), expected \(17, 6\)"),
    ("sage_av", {"act": "relu"}, {"Wn": np.zeros((FIN, FOUT + 1), np.float32)},
     r"'Ws' \(6, 4\) and 'Wn' \(6, 5\)"),
    ("sage_av", {"act": "relu"}, {"X": np.zeros((N, 3), np.float32),
                                  "M": np.zeros((N, 3), np.float32)},
     r"'X' has 3 columns but 'Ws' has 6 rows"),
    ("sage_av", {"act": "relu"}, {"b": np.zeros(5, np.float32)}, "'b' has 5 entries"),
    ("sage_av", {"act": "relu"}, {"ids": np.zeros(2, np.int64)},
     r"'ids' has 2 entries, expected one per row of 'X'"),
    ("sage_av", {"act": "elu"}, {}, r"header field 'act': got 'elu'"),
    ("sage_av", {}, {}, "header field 'act' is missing"),
    ("sage_av_grad", {"act": "relu"}, {"dH": np.zeros((N, FOUT + 2), np.float32)},
     r"'dH' has shape \(17, 6\), expected \(17, 4\)"),
    ("sage_av_grad", {"act": "relu"}, {}, r"missing input array\(s\) \['dH'\]"),
    ("sage_loss", {"act": "tanh"}, {"labels": np.zeros(N, np.int64),
                                    "weight": np.ones(N, np.float32)}, r"'act': got 'tanh'"),
])
def test_invalid_inputs_are_named(op, header, change, match):
    arrays = {**_inputs(), **change}
    with pytest.raises(PayloadError, match=match):
        handle(encode({"op": op, **header}, arrays))


def test_empty_interval():
    arrays = _inputs(n=0)
    out = _run("sage_av_grad", {"act": "relu", "dropout": 0.5, "need_dX": True},
               {**arrays, "dH": np.zeros((0, FOUT), np.float32)})
    assert out["dX"].shape == (0, FIN) and out["dM"].shape == (0, FIN)
    assert not out["dWs"].any() and not out["dWn"].any()
