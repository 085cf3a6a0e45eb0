"""Models for exactness tests."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

__all__ = ["seeded_model", "assert_same_params"]


def seeded_model(build: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``build()`` under a fixed seed, every bias then drawn non-zero too (stock convs start
    them at zero), so a test comparing gradients also checks the biases' paths."""
    torch.manual_seed(seed)
    model = build()
    for name, p in model.named_parameters():
        if "bias" in name:
            nn.init.normal_(p, std=0.1)
    return model


def assert_same_params(what: str, reference: nn.Module, params: dict[str, list],
                       cols: list[int] | None, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Asserts that a rank's ``params`` (its wrapped model's state dict, as lists) equal the
    ``reference`` model's. p3 keeps its first conv's input linears as column slices
    (``<conv>.weights.<i>``, this rank's input columns ``cols``) and the rest of that conv
    under ``<conv>.conv.``: those are compared with the matching part of the reference."""
    from dglx_dist.convs import adapter_for, first_conv

    want = reference.state_dict()
    conv, conv_name = first_conv(reference)
    linears = adapter_for(conv).input_linears(conv)
    for key, value in params.items():
        got = torch.tensor(value)
        if key.startswith(f"{conv_name}.weights."):  # p3's column slice of an input linear
            lin = linears[int(key.rsplit(".", 1)[1])]
            ref = lin.columns(want[f"{conv_name}.{lin.path}"], torch.tensor(cols))
        elif key.startswith(f"{conv_name}.conv."):  # p3 keeps the rest of the conv
            ref = want[conv_name + key[len(conv_name) + 5:]]
        else:
            ref = want[key.replace(".conv.", ".")]
        np.testing.assert_allclose(got.numpy(), ref.float().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{what}: {key}")
