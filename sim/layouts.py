"""Packs and unpacks Amaranth data layouts to and from the integers cocotb sees.

The benches use the very layouts the HDL uses, so a field cannot sit at a
different offset on the two sides.
"""

import enum as py_enum

from amaranth.hdl import Shape
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


#: ``id(shape) -> (shape, plan)``: what pack and unpack need of a shape, worked
#: out once (asking Amaranth for every field of every payload is slow).
_PLANS = {}


def _plan(shape):
    hit = _PLANS.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    layout = as_layout(shape)
    if isinstance(layout, data.StructLayout):
        plan = ("struct", {name for name, _ in layout},
                [(name, field.offset, _width(field.shape), field.shape) for name, field in layout])
    elif isinstance(layout, type) and issubclass(layout, py_enum.Enum):
        plan = ("enum", layout, _width(layout))
    else:
        cast = Shape.cast(layout)
        plan = ("int", cast.width, cast.signed)
    _PLANS[id(shape)] = (shape, plan)
    return plan


def pack(shape, value):
    """Integer encoding of ``value`` (int, enum member, or dict of fields) for ``shape``."""
    plan = _plan(shape)
    if isinstance(value, py_enum.Enum):
        value = value.value
    if plan[0] == "struct" and isinstance(value, dict):
        unknown = set(value) - plan[1]
        if unknown:
            raise KeyError(f"fields {sorted(unknown)} are not in {as_layout(shape)!r}")
        out = 0
        for name, offset, width, sub in plan[2]:
            if name in value:
                out |= (pack(sub, value[name]) & ((1 << width) - 1)) << offset
        return out
    width = plan[1] if plan[0] == "int" else plan[2] if plan[0] == "enum" else _width(shape)
    return int(value) & ((1 << width) - 1)


def unpack(shape, raw):
    """Decode the integer ``raw`` into a :class:`Payload` (structs) or an int/enum member."""
    plan = _plan(shape)
    if plan[0] == "struct":
        out = Payload()
        for name, offset, width, sub in plan[2]:
            out[name] = unpack(sub, (raw >> offset) & ((1 << width) - 1))
        return out
    if plan[0] == "enum":
        try:
            return plan[1](raw)
        except ValueError:
            return raw
    _, width, signed = plan
    if signed and raw >> (width - 1):
        return raw - (1 << width)
    return raw
