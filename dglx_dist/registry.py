"""One generic registry for partitioners, strategies and executors.

A plug-in is a class with a nested frozen dataclass ``Config``. It is registered under a name
with a decorator; the same class may sit behind several names with different bound defaults::

    PARTITIONERS = Registry("partitioner", entry_point_group="dglx_dist.partitioners")

    @PARTITIONERS.register("hash")
    class HashPartitioner(Partitioner):
        @dataclass(frozen=True)
        class Config:
            seed: int = field(default=0, metadata={"help": "hash seed"})

``build(name, **options)`` validates the options against the Config (unknown names and options
fail listing the valid ones; strings from the command line are coerced to the field's type; a
float must be finite, and a field's ``"bounds"`` metadata, a :class:`Bounds`, may bound it,
as it bounds a :mod:`~dglx_dist.config` field's flag) and returns ``cls(config,
name=name)``: the instance knows the name it was built under as ``registered_name`` (the
plug-in bases take it in their constructor). Third parties add plug-ins through the
entry-point group; they are loaded the first time a name is looked up.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import typing
from importlib import metadata
from typing import Any, Callable, Generic, TypeVar

from dglx_dist.errors import DglxError

__all__ = ["Registry", "RegistryError", "OptionInfo", "Bounds", "coerce_option"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class RegistryError(DglxError, ValueError):
    """An unknown plug-in name or an invalid option for a plug-in."""


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One option of a plug-in's Config, for help texts and docs tables."""

    name: str
    type: str
    default: Any
    help: str


@dataclasses.dataclass(frozen=True)
class _Entry:
    cls: type
    bound: dict[str, Any]


def coerce_option(value: Any, annotation: Any, where: str) -> Any:
    """Converts ``value`` (often a command-line string) to ``annotation``'s type.

    Supports bool, int, float, str, Optional[...] and tuple[X, ...] (comma-separated strings).

    Raises:
        RegistryError: when the value cannot be read as that type; the message names ``where``.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or str(origin) == "types.UnionType":
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return coerce_option(value, inner[0], where)
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        items = [i.strip() if isinstance(i, str) else i for i in items]
        items = [i for i in items if not (isinstance(i, str) and not i)]
        return tuple(coerce_option(i, args[0], where) for i in items)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise RegistryError(f"{where}: expected true/false, got {value!r}")
    if annotation in (int, float, str):
        if isinstance(value, bool) and annotation is not str:
            raise RegistryError(f"{where}: expected {annotation.__name__}, got {value!r}")
        try:
            out = annotation(value)
        except (TypeError, ValueError):
            raise RegistryError(
                f"{where}: expected {annotation.__name__}, got {value!r}") from None
        if annotation is int and isinstance(value, float) and out != value:
            raise RegistryError(f"{where}: expected an integer, got {value!r}")
        if annotation is float and not math.isfinite(out):
            raise RegistryError(f"{where}: expected a finite number, got {value!r}")
        return out
    return value


class Registry(Generic[T]):
    """Name -> plug-in class, with per-name bound defaults and validated options.

    Args:
        kind: what the plug-ins are ("partitioner", "strategy"), used in error messages.
        entry_point_group: setuptools entry-point group scanned for third-party plug-ins.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None):
        self.kind = kind
        self._group = entry_point_group
        self._entries: dict[str, _Entry] = {}
        self._entry_points_loaded = entry_point_group is None

    def register(self, name: str, **bound: Any) -> Callable[[type[T]], type[T]]:
        """Class decorator registering ``cls`` under ``name`` with ``bound`` default options."""

        def deco(cls: type[T]) -> type[T]:
            self.add(name, cls, **bound)
            return cls

        return deco

    def add(self, name: str, cls: type, **bound: Any) -> None:
        """Registers ``cls`` under ``name`` (the non-decorator form)."""
        if name in self._entries:
            raise RegistryError(f"{self.kind} {name!r} is already registered "
                                f"(by {self._entries[name].cls.__qualname__})")
        config_cls = getattr(cls, "Config", None)
        if config_cls is None or not dataclasses.is_dataclass(config_cls):
            raise RegistryError(f"{cls.__qualname__} needs a nested dataclass named Config")
        if not config_cls.__dataclass_params__.frozen:
            raise RegistryError(f"{cls.__qualname__}.Config must be a frozen dataclass")
        valid = {f.name for f in dataclasses.fields(config_cls)}
        unknown = sorted(set(bound) - valid)
        if unknown:
            raise RegistryError(f"bound options {unknown} are not fields of "
                                f"{cls.__qualname__}.Config (valid: {sorted(valid)})")
        self._entries[name] = _Entry(cls, dict(bound))

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_entry_points()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return name in self._entries

    def get(self, name: str) -> type[T]:
        """The class registered under ``name``."""
        return self._entry(name).cls

    def options(self, name: str) -> list[OptionInfo]:
        """The options ``name`` accepts, with the name's bound defaults applied."""
        entry = self._entry(name)
        hints = typing.get_type_hints(entry.cls.Config)
        out = []
        for f in dataclasses.fields(entry.cls.Config):
            if f.name in entry.bound:
                default = entry.bound[f.name]
            elif f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            out.append(OptionInfo(f.name, _type_name(hints[f.name]), default,
                                  f.metadata.get("help", "")))
        return out

    def options_markdown(self, names: list[str] | None = None) -> str:
        """A markdown table of the options of ``names`` (default: every name); the docs'
        options tables come from here."""
        from dglx_dist.report import markdown_table

        rows = [{self.kind: f"`{name}`", "option": f"`{o.name}`", "type": o.type,
                 "default": f"`{o.default}`", "help": o.help}
                for name in (names or self.names()) for o in self.options(name)]
        return markdown_table(rows)

    def make_config(self, name: str, **options: Any) -> Any:
        """Validates ``options`` for ``name`` and returns its frozen Config instance."""
        entry = self._entry(name)
        config_cls = entry.cls.Config
        fields = {f.name: f for f in dataclasses.fields(config_cls)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise RegistryError(
                f"unknown option(s) {unknown} for {self.kind} {name!r}; "
                f"valid options: {sorted(fields)}")
        hints = typing.get_type_hints(config_cls)
        values = dict(entry.bound)
        for key, value in options.items():
            where = f"{self.kind} {name!r} option {key!r}"
            values[key] = _bounded(coerce_option(value, hints[key], where), fields[key], where)
        try:
            return config_cls(**values)
        except (TypeError, ValueError) as exc:
            raise RegistryError(f"invalid options for {self.kind} {name!r}: {exc}") from exc

    def build(self, name: str, **options: Any) -> T:
        """Instantiates the plug-in ``name`` with validated ``options``."""
        config = self.make_config(name, **options)
        return self._entry(name).cls(config, name=name)

    def _entry(self, name: str) -> _Entry:
        self._load_entry_points()
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(f"unknown {self.kind} {name!r}; valid names: "
                                f"{', '.join(sorted(self._entries)) or '(none)'}") from None

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in metadata.entry_points(group=self._group):
            if ep.name in self._entries:
                log.warning("entry point %s=%s ignored: %s %r is already registered",
                            ep.name, ep.value, self.kind, ep.name)
                continue
            try:
                cls = ep.load()
            except Exception as exc:  # a broken third-party plug-in must not break the rest
                log.warning("could not load %s plug-in %s=%s: %s", self.kind, ep.name, ep.value, exc)
                continue
            self.add(ep.name, cls)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A range of finite numbers, either end open or absent (for options and flags)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        """Whether ``value`` is finite and in the range."""
        return (math.isfinite(value)
                and (self.low is None or (value > self.low if self.low_open else
                                          value >= self.low))
                and (self.high is None or (value < self.high if self.high_open else
                                           value <= self.high)))

    def describe(self, noun: str) -> str:
        """``noun`` with the range, e.g. "a value >= 0 and < 1"."""
        ends = [f"{op} {end}" for op, end in ((">" if self.low_open else ">=", self.low),
                                              ("<" if self.high_open else "<=", self.high))
                if end is not None]
        return " ".join([noun, " and ".join(ends)]) if ends else noun


def _bounded(value: Any, field: dataclasses.Field, where: str) -> Any:
    """``value`` if it is in the field's ``"bounds"`` metadata (a :class:`Bounds`)."""
    bounds = field.metadata.get("bounds")
    if bounds is not None and isinstance(value, (int, float)) and \
            not isinstance(value, bool) and not bounds.holds(value):
        raise RegistryError(f"{where}: {value!r}; expected {bounds.describe('a value')}")
    return value


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")
