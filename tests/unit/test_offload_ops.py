"""The tensor tasks against torch autograd doing the same math."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.convs.ops_base import dropout_mask
from dglx_dist.offload.tensor_fn.handler import handle, lambda_handler
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

N, FIN, FOUT = 23, 7, 5


def _inputs(seed=0, n=N, fin=FIN, fout=FOUT):
    rng = np.random.default_rng(seed)
    return {"A": rng.standard_normal((n, fin)).astype(np.float32),
            "W": rng.standard_normal((fin, fout)).astype(np.float32),
            "b": rng.standard_normal(fout).astype(np.float32),
            "ids": rng.permutation(1000)[:n].astype(np.int64)}


def _run(op, header, arrays):
    out_header, out = decode(handle(encode({"op": op, **header}, arrays)))
    assert out_header == {"op": op, "ok": True}
    return out


def _torch_forward(arrays, act, p, seed):
    a, w, b = (torch.tensor(arrays[k], requires_grad=True) for k in ("A", "W", "b"))
    z = a @ w + b
    h = torch.relu(z) if act == "relu" else z
    if p > 0:
        mask = torch.from_numpy(dropout_mask(seed, arrays["ids"], w.shape[1], p))
        h = h * mask / (1 - p)
    return (a, w, b), h


def _chunks(arrays, bounds, row_inputs):
    for lo, hi in zip(bounds, bounds[1:]):
        yield {k: (v[lo:hi] if k in row_inputs else v) for k, v in arrays.items()}


@pytest.mark.parametrize("act, p", [("relu", 0.5), ("none", 0.3), ("relu", 0.0)])
def test_av_and_av_grad_match_autograd(act, p):
    arrays = _inputs()
    header = {"act": act, "dropout": p, "seed": 11}
    (a, w, b), h_ref = _torch_forward(arrays, act, p, 11)
    h = _run("av", {**header, "train": True}, arrays)["H"]
    np.testing.assert_allclose(h, h_ref.detach().numpy(), rtol=1e-5, atol=1e-6)

    dh = np.random.default_rng(1).standard_normal(h.shape).astype(np.float32)
    h_ref.backward(torch.from_numpy(dh))
    grads = _run("av_grad", {**header, "need_dA": True}, {**arrays, "dH": dh})
    for name, ref in (("dW", w.grad), ("db", b.grad), ("dA", a.grad)):
        np.testing.assert_allclose(grads[name], ref.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    assert "dA" not in _run("av_grad", header, {**arrays, "dH": dh})


def test_av_eval_has_no_dropout():
    arrays = _inputs()
    h = _run("av", {"act": "relu", "dropout": 0.5, "seed": 3, "train": False}, arrays)["H"]
    ref = np.maximum(arrays["A"] @ arrays["W"] + arrays["b"], 0)
    np.testing.assert_allclose(h, ref, rtol=1e-6)


def test_chunked_rows_give_the_same_outputs():
    arrays = _inputs(seed=4)
    header = {"act": "relu", "dropout": 0.4, "seed": 99}
    whole = _run("av", {**header, "train": True}, arrays)["H"]
    bounds = [0, 3, 10, 10, N]
    parts = [_run("av", {**header, "train": True}, c)["H"]
             for c in _chunks(arrays, bounds, OPS["av"].row_inputs)]
    np.testing.assert_array_equal(np.concatenate(parts), whole)

    full = {**arrays, "dH": np.ones_like(whole)}
    ref = _run("av_grad", {**header, "need_dA": True}, full)
    outs = [_run("av_grad", {**header, "need_dA": True}, c)
            for c in _chunks(full, bounds, OPS["av_grad"].row_inputs)]
    np.testing.assert_array_equal(np.concatenate([o["dA"] for o in outs]), ref["dA"])
    for name in OPS["av_grad"].sum_outputs:
        np.testing.assert_allclose(sum(o[name] for o in outs), ref[name], rtol=1e-5, atol=1e-5)


def test_dropout_mask_is_a_function_of_seed_id_and_column():
    ids = np.arange(2000, dtype=np.int64)
    mask = dropout_mask(7, ids, 50, 0.3)
    assert abs(mask.mean() - 0.7) < 0.01
    perm = np.random.default_rng(0).permutation(2000)
    np.testing.assert_array_equal(dropout_mask(7, ids[perm], 50, 0.3), mask[perm])
    np.testing.assert_array_equal(dropout_mask(7, ids, 20, 0.3), mask[:, :20])
    assert (dropout_mask(8, ids, 50, 0.3) != mask).mean() > 0.3
    assert abs(mask[:, 0].mean() - mask[:, 1].mean()) < 0.05  # columns are not all alike
    assert dropout_mask(7, ids, 50, 0.0).all()


@pytest.mark.parametrize("act", [None, "none", "relu"])
def test_av_loss_matches_weighted_cross_entropy(act):
    """The fused last layer, with the conv's own activation on the logits (default none)."""
    arrays = _inputs(seed=2)
    del arrays["ids"]
    rng = np.random.default_rng(5)
    labels = rng.integers(0, FOUT, N).astype(np.int64)
    weight = (rng.random(N) < 0.6).astype(np.float32) * np.float32(1 / 14)
    a, w, b = (torch.tensor(arrays[k], requires_grad=True) for k in ("A", "W", "b"))
    logits = torch.relu(a @ w + b) if act == "relu" else a @ w + b
    if act == "relu":
        assert (logits == 0).any()
    losses = F.cross_entropy(logits, torch.from_numpy(labels), reduction="none")
    loss = (losses * torch.from_numpy(weight)).sum()
    loss.backward()
    header = {"need_dA": True} if act is None else {"act": act, "need_dA": True}
    out = _run("av_loss", header, {**arrays, "labels": labels, "weight": weight})
    assert out["loss"].shape == (1,) and out["loss"].dtype == np.float32
    np.testing.assert_allclose(out["loss"][0], loss.item(), rtol=1e-5)
    for name, ref in (("dW", w.grad), ("db", b.grad), ("dA", a.grad)):
        np.testing.assert_allclose(out[name], ref.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_av_loss_is_stable_for_large_logits():
    arrays = {"A": np.full((2, 1), 1e4, np.float32), "W": np.array([[1.0, -1.0]], np.float32),
              "b": np.zeros(2, np.float32), "labels": np.array([0, 1], np.int64),
              "weight": np.ones(2, np.float32)}
    out = _run("av_loss", {}, arrays)
    assert np.isfinite(out["loss"]).all() and np.isfinite(out["dW"]).all()
    np.testing.assert_allclose(out["loss"][0], 2e4, rtol=1e-5)


@pytest.mark.parametrize("op, header, change, match", [
    ("av", {"act": "relu"}, {"W": np.zeros((6, 5), np.float32)},
     r"'A' has 7 columns but 'W' has 6 rows"),
    ("av", {"act": "relu"}, {"b": np.zeros(4, np.float32)}, "'b' has 4 entries"),
    ("av", {"act": "relu"}, {"A": np.zeros((N, FIN), np.float64)},
     "array 'A': dtype float64, expected float32"),
    ("av", {"act": "relu"}, {"ids": np.zeros(3, np.int64)}, "'ids' has 3 entries, expected one"),
    ("av", {"act": "tanh"}, {}, r"header field 'act': got 'tanh', expected one of"),
    ("av", {}, {}, "header field 'act' is missing"),
    ("av", {"act": "relu", "dropout": 1.0}, {}, r"'dropout': got 1.0, expected .* \[0, 1\)"),
    ("av", {"act": "relu", "seed": "x"}, {}, "header field 'seed': expected int"),
    ("av_grad", {"act": "relu"}, {"dH": np.zeros((N, 4), np.float32)},
     "array 'dH' has shape"),
    ("av_grad", {"act": "relu"}, {}, r"missing input array\(s\) \['dH'\]"),
    ("nope", {}, {}, r"header field 'op': got 'nope', expected one of \['av', 'av_grad'"),
])
def test_invalid_inputs_are_named(op, header, change, match):
    arrays = {**_inputs(), **change}
    with pytest.raises(PayloadError, match=match):
        handle(encode({"op": op, **header}, arrays))


def test_av_loss_label_range():
    arrays = _inputs()
    del arrays["ids"]
    labels = np.zeros(N, np.int64)
    labels[3] = FOUT
    with pytest.raises(PayloadError, match=r"'labels': values in \[0, 5\], expected class ids "
                                           r"in \[0, 5\)"):
        handle(encode({"op": "av_loss"}, {**arrays, "labels": labels,
                                           "weight": np.ones(N, np.float32)}))


def test_lambda_handler_round_trip_and_errors():
    import base64
    arrays = _inputs()
    request = encode({"op": "av", "act": "none"}, arrays)
    result = lambda_handler({"payload": base64.b64encode(request).decode()}, None)
    assert base64.b64decode(result["payload"]) == handle(request)
    with pytest.raises(PayloadError, match="base64 string field 'payload'"):
        lambda_handler({"body": "x"}, None)
    with pytest.raises(PayloadError, match="not valid base64"):
        lambda_handler({"payload": "***"}, None)


def test_empty_interval():
    arrays = _inputs(n=0)
    out = _run("av_grad", {"act": "relu", "dropout": 0.5, "need_dA": True},
               {**arrays, "dH": np.zeros((0, FOUT), np.float32)})
    assert out["dA"].shape == (0, FIN) and not out["dW"].any()
