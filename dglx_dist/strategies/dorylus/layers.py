"""Which :class:`~dglx_dist.convs.dorylus_base.LayerKind` runs a conv type: its adapter's
``dorylus`` (a :class:`~dglx_dist.convs.base.DorylusSupport`), read from
:data:`~dglx_dist.convs.LAYERS` (the seam: docs/architecture.md, "A conv type").
"""
from __future__ import annotations

from dglx_dist.convs import LAYERS
from dglx_dist.convs.base import DorylusSupport
from dglx_dist.convs.dorylus_base import LayerKind
from dglx_dist.errors import InvalidTypeError, InvalidValueError

__all__ = ["dorylus_conv_types", "ConvTypesOfAdapters", "layer_kind"]


class ConvTypesOfAdapters:
    """``conv_types`` computed on every access, on the class too: the registry may gain
    entry-point plug-ins (:func:`dorylus_conv_types`)."""

    def __get__(self, obj, owner=None) -> tuple[str, ...]:
        return dorylus_conv_types()


def dorylus_conv_types() -> tuple[str, ...]:
    """The conv class names dorylus runs: those whose adapter in
    :data:`~dglx_dist.convs.LAYERS` has dorylus support (entry-point plug-ins too)."""
    return tuple(name for name in LAYERS.names() if LAYERS.get(name).dorylus is not None)


def layer_kind(conv_type: str) -> tuple[type[LayerKind], DorylusSupport]:
    """The :class:`LayerKind` that runs conv class ``conv_type`` and its support record.

    Raises:
        InvalidValueError: dorylus has no layer kind for it (naming the ones it has).
        InvalidTypeError: the adapter's ``dorylus.kind`` is not a LayerKind.
    """
    support = LAYERS.get(conv_type).dorylus if conv_type in LAYERS else None
    if support is None:
        raise InvalidValueError(f"dorylus cannot run {conv_type}; it runs "
                                f"{', '.join(dorylus_conv_types())}")
    kind = support.kind
    if not (isinstance(kind, type) and issubclass(kind, LayerKind)):
        raise InvalidTypeError(f"the {conv_type} adapter's dorylus kind {kind!r} is not "
                               "a dglx_dist.convs.dorylus_base.LayerKind subclass")
    return kind, support


