"""Typed configs as command-line flags: the one path from a frozen dataclass to argparse and back
(docs/architecture.md). A field declares its flag (:func:`option`); nested dataclass fields
are sections whose fields are flags too. :func:`add_flags` adds them to a parser,
:func:`from_args` reads the config back, :func:`to_argv` renders one as the same flags. A
flag's ``dest`` is its name without the dashes, so a namespace stays flat; a plain
dataclass's ``metadata["help"]`` is its help. Imports neither torch nor DGL.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Iterator

from dglx_dist.errors import InvalidValueError
from dglx_dist.registry import Bounds

__all__ = ["option", "check_fields", "add_flags", "from_args", "to_argv", "flag_names",
           "parse_key_values", "number", "tuple_of"]


def option(default: Any = None, help: str = "", *, flag: str | None = None,
           bounds: Bounds | None = None, choices: tuple[str, ...] | None = None,
           metavar: str | None = None, cli: bool = True, repeat: bool = False,
           aliases: tuple[str, ...] = ()) -> Any:
    """A config field that is also a command-line flag.

    Args:
        default: the one default (a bool is a switch: ``--name`` when False, and a True one
            needs a ``flag`` such as ``--no-progress``).
        help: the flag's help and the field's documentation.
        flag: the flag when not ``--field-name`` (e.g. ``--model`` for ``model.name``).
        bounds: the range of a number; refused outside it, on the command line and in Python.
        choices: the values a string may take.
        metavar: the value's name in the usage line.
        cli: False: no flag (set from Python only).
        repeat: a repeatable ``KEY=VALUE`` flag; the section's ``from_flags`` reads the pairs.
        aliases: other spellings the parser also takes (a flag's older name, kept working).
    """
    if isinstance(default, bool) and default and not flag:
        raise InvalidValueError("a bool option that defaults to True needs its --no-... flag")
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag, "bounds": bounds, "choices": choices, "metavar": metavar,
        "cli": cli, "repeat": repeat, "aliases": tuple(aliases)})


def check_fields(config: Any) -> None:
    """Refuses a field of ``config`` outside its ``bounds`` or ``choices`` (a section's
    ``__post_init__``), naming the field and what was expected.

    Raises:
        InvalidValueError: the first field that does not fit.
    """
    for f in dataclasses.fields(config):
        value, bounds, choices = (getattr(config, f.name), f.metadata.get("bounds"),
                                  f.metadata.get("choices"))
        where = f"{_Flag((f.name,), f, None).name} {value!r}"
        field = f"({type(config).__name__}.{f.name})"
        if bounds is not None and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
                or not bounds.holds(value)):
            raise InvalidValueError(f"{where}: expected {bounds.describe('a finite number')} "
                                    f"{field}")
        if choices and value not in choices:
            raise InvalidValueError(f"{where}: choose from {', '.join(choices)} {field}")


@dataclasses.dataclass(frozen=True)
class _Flag:
    path: tuple[str, ...]  # field names from the top config down
    field: dataclasses.Field
    kind: Any  # the field's type, ``X`` of ``X | None``

    @property
    def name(self) -> str:
        return self.field.metadata.get("flag") or "--" + self.path[-1].replace("_", "-")

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def _is_section(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _walk(cls: type, path: tuple[str, ...] = ()) -> Iterator[_Flag]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X of ``X | None``
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if _is_section(kind):
            yield from _walk(kind, path + (f.name,))
        elif f.metadata.get("cli", True):
            yield _Flag(path + (f.name,), f, kind)


def _flags(cls: type, sections: Iterable[str] | None, skip: Iterable[str]) -> list[_Flag]:
    wanted, skipped = None if sections is None else set(sections), set(skip)
    return [f for f in _walk(cls) if f.dest not in skipped
            and (wanted is None or len(f.path) < 2 or f.path[0] in wanted)]


def flag_names(cls: type, sections: Iterable[str] | None = None) -> list[str]:
    """The ``dest`` of every flag of ``cls`` (of ``sections`` only, if given)."""
    return [f.dest for f in _flags(cls, sections, ())]


def _get(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _argument(f: _Flag, default: Any, overlay: bool) -> dict[str, Any]:
    meta, help = f.field.metadata, f.field.metadata.get("help", "")
    overlaid = {"default": argparse.SUPPRESS} if overlay else {}
    if f.kind is bool:
        return {"action": "store_false" if f.field.default else "store_true", "help": help,
                **overlaid}
    if meta.get("repeat"):
        return {"action": "append", "metavar": meta.get("metavar") or "KEY=VALUE",
                "help": help, **overlaid}
    if f.kind in (int, float):
        kind = number(f.kind, **dataclasses.asdict(meta.get("bounds") or Bounds()))
    elif typing.get_origin(f.kind) is tuple:
        kind = tuple_of(typing.get_args(f.kind)[0])
        default = ",".join(map(str, default)) if default is not None else None
    else:
        kind = f.kind if f.kind in (str, Path) else str
    if default is not None:
        help += f" (default: {default})".replace("%", "%%")
    return {"type": kind, "choices": meta.get("choices"), "help": help,
            "metavar": meta.get("metavar"), "default": default, **overlaid}


def add_flags(parser: argparse.ArgumentParser, cls: type, *,
              sections: Iterable[str] | None = None, skip: Iterable[str] = (),
              base: Any = None, overlay: bool = False,
              changes: dict[str, dict[str, Any]] | None = None) -> None:
    """Adds a flag per field of config ``cls`` (nested sections included).

    Args:
        parser: where the flags go.
        cls: the config class.
        sections: only these top-level sections' flags (None: all).
        skip: flags (by ``dest``) this command sets itself.
        base: a config whose values are the flags' defaults (None: the fields' own).
        overlay: a flag not given stays off the namespace, so that :func:`from_args` takes
            it from a base chosen after parsing (a preset).
        changes: per ``dest``, ``add_argument`` keywords that differ for this command.
    """
    flags = _flags(cls, sections, skip)
    unknown = set(changes or ()) - {f.dest for f in flags}
    if unknown:
        raise InvalidValueError(f"changes to flags {sorted(unknown)} that {cls.__name__} "
                                f"does not add here")
    for f in flags:
        default = (_get(base, f.path) if base is not None else
                   None if f.field.default is dataclasses.MISSING else f.field.default)
        kwargs = _argument(f, default, overlay) | (changes or {}).get(f.dest, {})
        parser.add_argument(f.name, *f.field.metadata.get("aliases", ()), dest=f.dest, **kwargs)


def from_args(cls: type, args: argparse.Namespace, base: Any = None,
              sections: Iterable[str] | None = None, skip: Iterable[str] = ()) -> Any:
    """Config ``cls`` from the flags :func:`add_flags` added: each flag on ``args`` (of
    ``sections`` only, if given; not those in ``skip``) replaces its field of ``base``
    (default: ``cls()``). A section with a ``from_flags(base, **values)`` classmethod builds
    itself from its flags' values (the strategy's options)."""
    base, skip = cls() if base is None else base, set(skip)
    changes = {f.path[0]: getattr(args, f.dest) for f in _flags(cls, None, skip)
               if len(f.path) == 1 and hasattr(args, f.dest)}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if _is_section(hints[field.name]) and (sections is None or field.name in sections):
            changes[field.name] = from_args(hints[field.name], args,
                                            getattr(base, field.name), None, skip)
    if hasattr(cls, "from_flags"):
        return cls.from_flags(base, **changes)
    return dataclasses.replace(base, **changes) if changes else base


def to_argv(config: Any, *, sections: Iterable[str] | None = None,
            skip: Iterable[str] = ()) -> list[str]:
    """``config`` as the flags :func:`add_flags` reads back (None values, switches left at
    their default, and fields without a flag are left out)."""
    out: list[str] = []
    for f in _flags(type(config), sections, skip):
        value = _get(config, f.path)
        if f.kind is bool:
            out += [f.name] if value != f.field.default else []
        elif f.field.metadata.get("repeat"):
            section = _get(config, f.path[:-1])
            out += [a for pair in section.flag_pairs() for a in (f.name, pair)]
        elif isinstance(value, tuple):
            out += [f.name, ",".join(map(str, value))]
        elif value is not None:
            out += [f.name, str(value)]
    return out


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


def tuple_of(item: type):
    """An argparse ``type=`` for comma-separated ``item`` s (e.g. fanouts ``10,25``)."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(item(p) for p in text.split(",") if p.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected {item.__name__}s separated by commas") from None
        return values

    parse.__name__ = f"list of {item.__name__}"
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
