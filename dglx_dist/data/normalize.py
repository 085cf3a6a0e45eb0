"""Feature rows normalised as DGL's Planetoid loaders do (``--row-normalize``)."""
from __future__ import annotations

import warnings

import torch

__all__ = ["row_normalized"]


def row_normalized(x: torch.Tensor) -> torch.Tensor:
    """Each row divided by its sum; rows whose sum is not positive stay as they are (what DGL's
    Planetoid loaders do to non-negative bag-of-words features such as Cora's). Anything but
    a tensor (p3's feature handle: the strategy normalises the rows it stores when the model
    asks for it) passes as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    if bool((x < 0).any()):  # shown once per place (Python's warning filter)
        warnings.warn("row_normalize: the features have negative values, so row sums can be "
                      "near zero and the divided rows huge (DGL normalises non-negative "
                      "bag-of-words rows only); train without --row-normalize", stacklevel=2)
    total = x.sum(1, keepdim=True)
    return torch.where(total > 0, x / total.clamp(min=1e-12), x)
