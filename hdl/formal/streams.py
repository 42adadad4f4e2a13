"""The stream rule as a formal property, and a harness that applies it to a block's ports."""

from amaranth import *
from amaranth.hdl import Assert, Assume
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import Flow

__all__ = ["stream_rule", "stream_members", "StreamContract"]


def stream_rule(m, s, *, name, assume=False, exempt=C(0)):
    """Once ``s.valid`` is high and ``s.ready`` low, the next cycle keeps ``valid``
    high and the payload unchanged.

    ``assume`` turns the check into an assumption (for a stream the block
    receives: its producer obeys the rule). ``exempt`` is a condition of the
    previous cycle that releases the rule (a power failure resets producers).
    """
    held = Signal(name=f"{name}__held")
    held_payload = Signal(Value.cast(s.payload).shape(), name=f"{name}__held_payload")
    released = Signal(name=f"{name}__released")
    m.d.sync += [
        held.eq(s.valid & ~s.ready),
        held_payload.eq(Value.cast(s.payload)),
        released.eq(exempt),
    ]
    kind = Assume if assume else Assert
    with m.If(held & ~released):
        m.d.comb += kind(s.valid & (Value.cast(s.payload) == held_payload),
                         f"{name}: valid or payload changed before ready")


def stream_members(signature, obj, path=()):
    """Every stream in ``signature`` (nested signatures included), as
    ``(path, stream_interface, produced)``: ``produced`` is true when the block
    that owns ``signature`` drives the stream's ``valid`` and payload.

    A nested member's signature is already seen from the owner (``In(sig)``
    gives ``sig.flip()``), so each stream's own flow says who drives it."""
    for name, member in signature.members.items():
        if not member.is_signature:
            continue
        sub = getattr(obj, name)
        if isinstance(member.signature, stream.Signature):
            yield path + (name,), sub, member.flow == Flow.Out
        else:
            yield from stream_members(member.signature, sub, path + (name,))


class StreamContract(wiring.Component):
    """Wraps ``block``: its ports become this harness's ports (free inputs to a
    solver), every stream it receives is assumed to obey the stream rule, and
    every stream it produces is asserted to.

    ``reset`` names a 1-bit input of the block that resets its producers (a
    power failure): the rule restarts after it. ``properties(m, block)``, if
    given, adds the block's own assertions and assumptions. ``streams=False``
    keeps only the assumptions on the streams the block receives (for a proof
    about something else, where the wide payloads only cost solver time).
    """

    def __init__(self, block, *, reset=None, properties=None, streams=True):
        self._block = block
        self._streams = streams
        self._reset = reset
        self._properties = properties
        super().__init__(block.signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self._block
        for name, member in self.signature.members.items():
            ours, theirs = getattr(self, name), getattr(block, name)
            if member.is_signature:
                wiring.connect(m, wiring.flipped(ours), theirs)
            elif member.flow == Flow.In:
                m.d.comb += theirs.eq(ours)
            else:
                m.d.comb += ours.eq(theirs)
        exempt = getattr(block, self._reset) if self._reset else C(0)
        for path, s, produced in stream_members(block.signature, block):
            if not (self._streams or not produced):
                continue
            stream_rule(m, s, name="__".join(path), assume=not produced, exempt=exempt)
        if self._properties is not None:
            self._properties(m, block)
        return m
