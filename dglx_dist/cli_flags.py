"""Typed option plumbing for the command line: ``--opt key=value`` pairs and dataclass flags.

Used by the ``dglx`` command (:mod:`dglx_dist.cli`) and by training scripts of one's own (e.g.
``examples/train_node_classification.py``); it stays outside :mod:`dglx_dist.cli` so that such a
script does not import the command (and torch) to parse its flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Iterable

from dglx_dist.errors import InvalidValueError
from dglx_dist.registry import Bounds, coerce_option

__all__ = ["parse_key_values", "add_dataclass_arguments", "dataclass_from_args", "number"]


def number(kind: type, low: float | None = None, high: float | None = None, *,
           high_open: bool = False, low_open: bool = False):
    """An argparse ``type=`` for a finite ``kind`` (int or float) in ``[low, high]`` (either
    end open on request); anything else is refused naming the value and the range."""
    bounds = Bounds(low, high, low_open, high_open)
    expected = bounds.describe(f"a finite {kind.__name__}")

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
        if not bounds.holds(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


def parse_key_values(pairs: Iterable[str] | None, flag: str = "--opt") -> dict[str, str]:
    """Turns ``["k=v", ...]`` into a dict; values stay strings (the registry coerces them).

    Raises:
        InvalidValueError: a pair without '=' or with an empty key, or a repeated key.
    """
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise InvalidValueError(f"{flag} {pair!r}: expected KEY=VALUE")
        if key in out:
            raise InvalidValueError(f"{flag} {key} given twice")
        out[key] = value
    return out


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Adds one ``--field-name`` flag per field of dataclass ``cls`` (help from its metadata)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None,
                            metavar=getattr(hints[f.name], "__name__", "VALUE").upper(),
                            help=f"{f.metadata.get('help', '')} (default: {default})")


def dataclass_from_args(cls: type, args: argparse.Namespace) -> Any:
    """Builds ``cls`` from the flags :func:`add_dataclass_arguments` added (unset -> default)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        raw = getattr(args, f.name, None)
        if raw is not None:
            values[f.name] = coerce_option(raw, hints[f.name], f"--{f.name.replace('_', '-')}")
    return cls(**values)
