"""Packs and unpacks Amaranth data layouts to and from the integers cocotb sees.

The benches use the very layouts the HDL uses, so a field cannot sit at a
different offset on the two sides.
"""

import enum as py_enum

from amaranth.hdl import Shape, ShapeCastable
from amaranth.lib import data

__all__ = ["Payload", "as_layout", "pack", "unpack"]


class Payload(dict):
    """A decoded payload: a dict whose fields are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def as_layout(shape):
    if isinstance(shape, data.Layout):
        return shape
    if isinstance(shape, type) and issubclass(shape, data.View):
        return data.Layout.cast(shape)
    return shape


def _width(shape):
    return Shape.cast(shape).width


def pack(shape, value):
    """Integer encoding of ``value`` (int, enum member, or dict of fields) for ``shape``."""
    layout = as_layout(shape)
    if isinstance(value, py_enum.Enum):
        value = value.value
    if isinstance(layout, data.StructLayout) and isinstance(value, dict):
        unknown = set(value) - {name for name, _ in layout}
        if unknown:
            raise KeyError(f"fields {sorted(unknown)} are not in {layout!r}")
        out = 0
        for name, field in layout:
            if name in value:
                w = _width(field.shape)
                out |= (pack(field.shape, value[name]) & ((1 << w) - 1)) << field.offset
        return out
    return int(value) & ((1 << _width(layout)) - 1)


def unpack(shape, raw):
    """Decode the integer ``raw`` into a :class:`Payload` (structs) or an int/enum member."""
    layout = as_layout(shape)
    if isinstance(layout, data.StructLayout):
        out = Payload()
        for name, field in layout:
            w = _width(field.shape)
            out[name] = unpack(field.shape, (raw >> field.offset) & ((1 << w) - 1))
        return out
    if isinstance(layout, type) and issubclass(layout, py_enum.Enum):
        try:
            return layout(raw)
        except ValueError:
            return raw
    if isinstance(layout, ShapeCastable) and not isinstance(layout, data.Layout):
        pass
    shape_ = Shape.cast(layout)
    if shape_.signed and raw >> (shape_.width - 1):
        return raw - (1 << shape_.width)
    return raw
