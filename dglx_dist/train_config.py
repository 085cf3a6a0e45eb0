"""The flat training config of before :mod:`dglx_dist.config`, kept as a name only.

``TrainConfig(hidden=64, epochs=3, ...)`` returns the :class:`~dglx_dist.config.RunConfig`
with those flags' values (the old field names are the flags' ``dest`` s). Only
``dglx_dist/bench/sweeps/common.py`` still calls it; remove this module once it builds a
``RunConfig`` itself.
"""
from __future__ import annotations

import argparse
from typing import Any

from dglx_dist.cli_flags import flag_names, from_args
from dglx_dist.config import MODEL_NAMES, TRAINING, RunConfig

__all__ = ["MODEL_NAMES", "TrainConfig"]


def TrainConfig(**flat: Any) -> RunConfig:  # noqa: N802  (the old class's name)
    """The run config with the :data:`~dglx_dist.config.TRAINING` flags of ``flat`` set.

    Raises:
        TypeError: a name that is none of those flags.
    """
    unknown = sorted(set(flat) - set(flag_names(RunConfig, TRAINING)))
    if unknown:
        raise TypeError(f"TrainConfig: unknown field(s) {unknown}")
    return from_args(RunConfig, argparse.Namespace(**flat))
