"""Typed option plumbing for the command line: ``--opt key=value`` pairs and dataclass flags.

A typed config declares its flags once, in its fields (:func:`flag_field`): a parser gets them
from :func:`add_config_flags`, the config comes back from :func:`config_from_args`, and a
launcher renders it as the same flags with :func:`config_argv` (``dglx bench`` starting
``dglx train``, :class:`~dglx_dist.train_config.TrainConfig`).

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

__all__ = ["parse_key_values", "add_dataclass_arguments", "dataclass_from_args", "number",
           "flag_field", "add_config_flags", "config_from_args", "config_argv"]


def number(kind: type, low: float | None = None, high: float | None = None, *,
           high_open: bool = False, low_open: bool = False):
    """An argparse ``type=`` for a finite ``kind`` (int or float) in ``[low, high]`` (either
    end open on request); anything else is refused naming the value and the range."""
    return _number(kind, Bounds(low, high, low_open, high_open))


def _number(kind: type, bounds: Bounds):
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
        parser.add_argument(_flag(f.name), dest=f.name, default=None,
                            metavar=getattr(hints[f.name], "__name__", "VALUE").upper(),
                            help=f"{f.metadata.get('help', '')} (default: {default})")


def dataclass_from_args(cls: type, args: argparse.Namespace, base: Any = None) -> Any:
    """Builds ``cls`` from the flags :func:`add_dataclass_arguments` added (unset: ``base``'s
    value, or the default)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        raw = getattr(args, f.name, None)
        if raw is not None:
            values[f.name] = coerce_option(raw, hints[f.name], _flag(f.name))
    return cls(**values) if base is None else dataclasses.replace(base, **values)


def flag_field(default: Any, help: str, *, bounds: Bounds | None = None,
               choices: tuple[str, ...] | None = None) -> Any:
    """A field of a typed config that is also a command-line flag: ``--name-with-dashes``,
    parsed as the field's type, refused outside ``bounds`` or ``choices`` (a bool field is a
    switch and defaults to False)."""
    if isinstance(default, bool) and default:
        raise InvalidValueError("a bool flag_field is a store_true switch: its default is False")
    return dataclasses.field(default=default, metadata={"help": help, "bounds": bounds,
                                                         "choices": choices})


def _flag_fields(cls: type, names: Iterable[str] | None) -> list[dataclasses.Field]:
    wanted = None if names is None else set(names)
    return [f for f in dataclasses.fields(cls) if "bounds" in f.metadata
            and (wanted is None or f.name in wanted)]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser, cls: type,
                     names: Iterable[str] | None = None, **changes: dict[str, Any]) -> None:
    """Adds the flags of config ``cls``'s :func:`flag_field` s (only ``names``, if given).

    ``changes``, by field name, are ``add_argument`` keywords that differ for this command:
    e.g. ``epochs={"default": None}`` where a preset fills it in later.
    """
    hints = typing.get_type_hints(cls)
    fields = _flag_fields(cls, names)
    unknown = set(changes) - {f.name for f in fields}
    if unknown:
        raise InvalidValueError(f"changes to flags {sorted(unknown)} that {cls.__name__} does "
                                f"not add here")
    for f in fields:
        kind = next(a for a in (typing.get_args(hints[f.name]) or (hints[f.name],))
                    if a is not type(None))  # X of ``X | None``
        if kind is bool:
            kwargs = {"action": "store_true", "help": f.metadata["help"]}
        else:
            kwargs = {"type": (_number(kind, f.metadata["bounds"] or Bounds())
                               if kind in (int, float) else kind),
                      "default": f.default, "choices": f.metadata["choices"],
                      "help": f.metadata["help"]}
        kwargs |= changes.get(f.name, {})
        if kwargs.get("default") is not None:
            kwargs["help"] += " (default: %(default)s)"
        parser.add_argument(_flag(f.name), dest=f.name, **kwargs)


def config_from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """Config ``cls`` from the flags :func:`add_config_flags` added (fields without a flag on
    ``args`` keep their defaults), then ``overrides``."""
    given = {f.name: getattr(args, f.name) for f in _flag_fields(cls, None)
             if hasattr(args, f.name) and f.name not in overrides}
    return cls(**given, **overrides)


def config_argv(config: Any, names: Iterable[str] | None = None) -> list[str]:
    """``config`` as the flags :func:`add_config_flags` reads back (only ``names``, if given;
    None values and unset switches are left out)."""
    out: list[str] = []
    for f in _flag_fields(type(config), names):
        value = getattr(config, f.name)
        if value is True:
            out.append(_flag(f.name))
        elif value is not None and value is not False:
            out += [_flag(f.name), str(value)]
    return out
