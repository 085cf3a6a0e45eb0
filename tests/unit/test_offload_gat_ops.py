"""GAT's tensor tasks against torch autograd (DGL's edge_softmax and GATConv) doing the same
math, with destinations that have no in-edges."""
import dgl
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dgl.ops import edge_softmax

from dglx_dist.offload.aws import split_request
from dglx_dist.offload.executor import InvocationError
from dglx_dist.convs.ops_base import dropout_mask
from dglx_dist.offload.tensor_fn.handler import handle
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

N, FIN, H, F_ = 13, 6, 3, 4


def _run(op, header, arrays):
    out_header, out = decode(handle(encode({"op": op, **header}, arrays)))
    assert out_header == {"op": op, "ok": True}
    return out


def _graph(seed=0):
    """Edges grouped by destination; destinations 0, 5 and 12 have no in-edges."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for v in range(N):
        if v in (0, 5, 12):
            continue
        for u in rng.choice(N, size=rng.integers(1, 5), replace=False):
            src.append(u)
            dst.append(v)
    src, dst = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=N))]).astype(np.int64)
    return src, dst, ptr


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_ae_and_ae_grad_match_edge_softmax():
    src, dst, ptr = _graph()
    rng = np.random.default_rng(1)
    el_node, er = _f32(rng, N, H), _f32(rng, N, H)
    arrays = {"EL": el_node[src], "ER": er, "ptr": ptr}
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=N)
    el_t = torch.tensor(arrays["EL"], requires_grad=True)
    er_t = torch.tensor(er, requires_grad=True)
    alpha = edge_softmax(g, F.leaky_relu(el_t + er_t[torch.from_numpy(dst)], 0.2))
    got = _run("gat_ae", {}, arrays)["A"]
    np.testing.assert_allclose(got, alpha.detach().numpy(), rtol=1e-5, atol=1e-6)

    da = _f32(rng, src.size, H)
    alpha.backward(torch.from_numpy(da))
    out = _run("gat_ae_grad", {}, {**arrays, "dA": da})
    np.testing.assert_allclose(out["DS"], el_t.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["dER"], er_t.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert np.all(out["dER"][[0, 5, 12]] == 0)


def test_attention_dropout_matches_autograd_with_the_same_mask():
    """Training with attention dropout: the dropped α and the gradients through the mask, the
    mask a hash of (seed, edge key, head); eval and p=0 leave α alone."""
    src, dst, ptr = _graph(seed=2)
    rng = np.random.default_rng(3)
    el_node, er = _f32(rng, N, H), _f32(rng, N, H)
    keys = (src * 1000 + dst).astype(np.int64)
    arrays = {"EL": el_node[src], "ER": er, "ptr": ptr, "keys": keys}
    header = {"dropout": 0.5, "seed": 21, "train": True}
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=N)
    el_t = torch.tensor(arrays["EL"], requires_grad=True)
    er_t = torch.tensor(er, requires_grad=True)
    mask = torch.from_numpy(dropout_mask(21, keys, H, 0.5))
    alpha = edge_softmax(g, F.leaky_relu(el_t + er_t[torch.from_numpy(dst)], 0.2))
    dropped = alpha * mask / 0.5
    got = _run("gat_ae", header, arrays)["A"]
    np.testing.assert_allclose(got, dropped.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert 0 < (got == 0).mean() < 1
    plain = _run("gat_ae", {**header, "train": False}, arrays)["A"]
    np.testing.assert_allclose(plain, alpha.detach().numpy(), rtol=1e-5, atol=1e-6)

    da = _f32(rng, src.size, H)
    dropped.backward(torch.from_numpy(da))
    out = _run("gat_ae_grad", header, {**arrays, "dA": da})
    np.testing.assert_allclose(out["DS"], el_t.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["dER"], er_t.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(PayloadError, match=r"'keys' is missing"):
        handle(encode({"op": "gat_ae", **header}, {k: v for k, v in arrays.items()
                                                   if k != "keys"}))


def test_ae_without_edges():
    arrays = {"EL": np.zeros((0, H), np.float32), "ER": np.ones((4, H), np.float32),
              "ptr": np.zeros(5, np.int64)}
    assert _run("gat_ae", {}, arrays)["A"].shape == (0, H)
    out = _run("gat_ae_grad", {}, {**arrays, "dA": np.zeros((0, H), np.float32)})
    assert out["DS"].shape == (0, H) and np.all(out["dER"] == 0)


def _vertex(rng, n=N, fin=FIN):
    return {"X": _f32(rng, n, fin), "W": _f32(rng, fin, H * F_), "al": _f32(rng, H, F_),
            "ar": _f32(rng, H, F_), "ids": rng.permutation(500)[:n].astype(np.int64),
            "bprev": _f32(rng, fin)}


def _torch_vertex(arrays, prev, p, seed):
    t = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items() if k != "ids"}
    x = t["X"]
    if prev == "elu":
        x = F.elu(x + t["bprev"])
    if p:
        mask = torch.from_numpy(dropout_mask(seed, arrays["ids"], x.shape[1], p))
        x = x * mask / (1 - p)
    z = (x @ t["W"]).view(-1, H, F_)
    return t, z, (z * t["al"]).sum(-1), (z * t["ar"]).sum(-1)


@pytest.mark.parametrize("prev, p", [("none", 0.0), ("elu", 0.0), ("elu", 0.4), ("none", 0.3)])
def test_av_and_av_grad_match_autograd(prev, p):
    rng = np.random.default_rng(2)
    arrays = _vertex(rng)
    header = {"heads": H, "prev": prev, "dropout": p, "seed": 7, "train": True}
    t, z, el, er = _torch_vertex(arrays, prev, p, 7)
    out = _run("gat_av", header, arrays)
    for name, ref in (("Z", z.reshape(N, -1)), ("EL", el), ("ER", er)):
        np.testing.assert_allclose(out[name], ref.detach().numpy(), rtol=1e-5, atol=1e-5)

    dz, d_el, d_er = _f32(rng, N, H * F_), _f32(rng, N, H), _f32(rng, N, H)
    torch.autograd.backward([z.reshape(N, -1), el, er],
                            [torch.from_numpy(a) for a in (dz, d_el, d_er)])
    grads = _run("gat_av_grad", {**header, "need_dX": True},
                 {**arrays, "dZ": dz, "dEL": d_el, "dER": d_er})
    pairs = [("dW", "W"), ("dal", "al"), ("dar", "ar"), ("dX", "X")]
    if prev == "elu":
        pairs.append(("dbprev", "bprev"))
    else:
        assert "dbprev" not in grads
    for name, param in pairs:
        np.testing.assert_allclose(grads[name], t[param].grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_vertex_tasks_chunk_by_rows():
    rng = np.random.default_rng(3)
    arrays = _vertex(rng)
    arrays.update(dZ=_f32(rng, N, H * F_), dEL=_f32(rng, N, H), dER=_f32(rng, N, H))
    header = {"heads": H, "prev": "elu", "dropout": 0.5, "seed": 5, "train": True,
              "need_dX": True}
    for name in ("gat_av", "gat_av_grad"):
        op = OPS[name]
        whole = _run(name, header, arrays)
        outs = [_run(name, header, {k: (v[lo:hi] if k in op.row_inputs else v)
                                    for k, v in arrays.items()})
                for lo, hi in ((0, 4), (4, 4), (4, N))]
        for key in op.row_outputs:
            if key in whole:
                np.testing.assert_allclose(np.concatenate([o[key] for o in outs]), whole[key],
                                           rtol=1e-6, err_msg=key)
        for key in op.sum_outputs:
            np.testing.assert_allclose(sum(o[key] for o in outs), whole[key], rtol=1e-4,
                                       atol=1e-5, err_msg=key)


def test_per_edge_tasks_are_not_chunked():
    src, _, ptr = _graph()
    rng = np.random.default_rng(4)
    request = encode({"op": "gat_ae"}, {"EL": _f32(rng, src.size, H), "ER": _f32(rng, N, H),
                                        "ptr": ptr})
    assert split_request(request, 1 << 20) == ([request], None)
    with pytest.raises(InvocationError, match="cannot be split"):
        split_request(request, 200)


@pytest.mark.parametrize("classes_heads", [(5, 1), (5, 2)])
def test_loss_and_out_match_autograd(classes_heads):
    c, h = classes_heads
    rng = np.random.default_rng(5)
    arrays = {"X": _f32(rng, N, h * c), "b": _f32(rng, h * c),
              "labels": rng.integers(0, c, N).astype(np.int64),
              "weight": rng.random(N).astype(np.float32)}
    x = torch.tensor(arrays["X"], requires_grad=True)
    b = torch.tensor(arrays["b"], requires_grad=True)
    logits = (x + b).view(N, h, c).mean(1)
    lp = torch.log_softmax(logits, 1)
    loss = -(torch.from_numpy(arrays["weight"]) * lp[torch.arange(N),
                                                     torch.from_numpy(arrays["labels"])]).sum()
    loss.backward()
    out = _run("gat_loss", {"heads": h}, arrays)
    np.testing.assert_allclose(out["loss"][0], float(loss), rtol=1e-5)
    np.testing.assert_allclose(out["dX"], x.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["db"], b.grad.numpy(), rtol=1e-4, atol=1e-6)
    got = _run("gat_out", {"heads": h}, {"X": arrays["X"], "b": arrays["b"]})["H"]
    np.testing.assert_allclose(got, logits.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_out_grad_matches_autograd():
    rng = np.random.default_rng(10)
    x = torch.tensor(_f32(rng, N, 2 * 5), requires_grad=True)
    b = torch.tensor(_f32(rng, 2 * 5), requires_grad=True)
    dh = _f32(rng, N, 5)
    (x + b).view(N, 2, 5).mean(1).backward(torch.from_numpy(dh))
    out = _run("gat_out_grad", {"heads": 2}, {"dH": dh})
    np.testing.assert_allclose(out["dX"], x.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(out["db"], b.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_tasks_compose_to_dgl_gatconv():
    """AV, AE and the server's sum over edges give GATConv's output; the backward tasks give
    its parameter and input gradients (the sums over edges done here as the server does)."""
    src, dst, ptr = _graph(seed=6)
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=N)
    torch.manual_seed(0)
    conv = dglnn.GATConv(FIN, F_, H, allow_zero_in_degree=True)
    x = torch.randn(N, FIN, requires_grad=True)
    ref = conv(g, x)
    dout = torch.randn_like(ref)
    ref.backward(dout)

    w = conv.fc.weight.detach().numpy().T.copy()
    al, ar = (a.detach().numpy().reshape(H, F_) for a in (conv.attn_l, conv.attn_r))
    base = {"X": x.detach().numpy(), "W": w, "al": al, "ar": ar,
            "ids": np.arange(N, dtype=np.int64)}
    av = _run("gat_av", {"heads": H}, base)
    edges = {"EL": av["EL"][src], "ER": av["ER"], "ptr": ptr}
    alpha = _run("gat_ae", {}, edges)["A"]
    z = av["Z"].reshape(N, H, F_)
    out = np.zeros((N, H, F_), np.float32)
    np.add.at(out, dst, alpha[:, :, None] * z[src])
    out += conv.bias.detach().numpy().reshape(H, F_)
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)

    d = dout.numpy()
    da = (d[dst] * z[src]).sum(-1)
    back = _run("gat_ae_grad", {}, {**edges, "dA": da})
    dz, d_el = np.zeros((N, H, F_), np.float32), np.zeros((N, H), np.float32)
    np.add.at(dz, src, alpha[:, :, None] * d[dst])
    np.add.at(d_el, src, back["DS"])
    grads = _run("gat_av_grad", {"heads": H, "need_dX": True},
                 {**base, "dZ": dz.reshape(N, -1), "dEL": d_el, "dER": back["dER"]})
    for name, ref_grad in (("dW", conv.fc.weight.grad.T), ("dal", conv.attn_l.grad[0]),
                           ("dar", conv.attn_r.grad[0]), ("dX", x.grad)):
        np.testing.assert_allclose(grads[name], ref_grad.numpy(), rtol=1e-3, atol=1e-5,
                                   err_msg=name)


def _edge_arrays():
    src, _, ptr = _graph()
    rng = np.random.default_rng(8)
    return {"EL": _f32(rng, src.size, H), "ER": _f32(rng, N, H), "ptr": ptr}


@pytest.mark.parametrize("op, change, match", [
    ("gat_ae", lambda a: a.pop("ptr"), r"missing input array\(s\) \['ptr'\]"),
    ("gat_ae", lambda a: a.update(ptr=a["ptr"][:-1]), r"'ptr' has 13 entries, expected 14"),
    ("gat_ae", lambda a: a.update(ptr=a["ptr"].astype(np.int32)), r"'ptr': dtype int32"),
    ("gat_ae", lambda a: a.update(ptr=a["ptr"] + 1), r"'ptr' runs from 1 to"),
    ("gat_ae", lambda a: a.update(ptr=np.r_[a["ptr"][:3], 0, a["ptr"][4:]]),
     r"'ptr' decreases"),
    ("gat_ae", lambda a: a.update(ER=a["ER"][:, :2]), r"the same number of heads"),
    ("gat_ae_grad", lambda a: a.update(dA=a["EL"][1:]), r"'dA' has shape"),
    ("gat_ae", lambda a: a.update(EL=a["EL"].astype(np.float64)), r"'EL': dtype float64"),
])
def test_invalid_edge_inputs_are_named(op, change, match):
    arrays = _edge_arrays()
    arrays["dA"] = np.zeros_like(arrays["EL"])
    change(arrays)
    with pytest.raises(PayloadError, match=match):
        handle(encode({"op": op}, arrays))


@pytest.mark.parametrize("header, change, match", [
    ({"heads": 5}, lambda a: None, r"'heads': got 5, expected a positive divisor"),
    ({"heads": H, "prev": "relu"}, lambda a: None, r"'prev': got 'relu'"),
    ({"heads": H, "prev": "elu"}, lambda a: a.pop("bprev"), r"'bprev' is missing"),
    ({"heads": H}, lambda a: a.update(al=a["al"][:, :2]), r"'al' has shape \(3, 2\)"),
    ({"heads": H}, lambda a: a.update(X=a["X"][:, :3]), r"'X' has 3 columns but 'W' has 6"),
    ({}, lambda a: None, r"'heads' is missing"),
])
def test_invalid_vertex_inputs_are_named(header, change, match):
    arrays = _vertex(np.random.default_rng(9))
    change(arrays)
    with pytest.raises(PayloadError, match=match):
        handle(encode({"op": "gat_av", **header}, arrays))
