"""Models for exactness tests."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

__all__ = ["seeded_model"]


def seeded_model(build: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``build()`` under a fixed seed, every bias then drawn non-zero too (stock convs start
    them at zero), so a test comparing gradients also checks the biases' paths."""
    torch.manual_seed(seed)
    model = build()
    for name, p in model.named_parameters():
        if "bias" in name:
            nn.init.normal_(p, std=0.1)
    return model
