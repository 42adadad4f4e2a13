"""Stands in for an engine a configuration leaves out."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.descriptors import ErrorCode, completion_layout, descriptor_layout

__all__ = ["AbsentEngine"]


class AbsentEngine(wiring.Component):
    """Completes every descriptor it is handed with ``BAD_OP``, one per cycle.

    Members
    -------
    desc : In(stream.Signature(descriptor_layout))
    done : Out(stream.Signature(completion_layout))
    """

    def __init__(self, config):
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(config))),
            "done": Out(stream.Signature(completion_layout)),
        })

    @property
    def counters(self):
        """No registers: a missing engine's counters read 0."""
        return {}

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [
            self.done.valid.eq(self.desc.valid),
            self.desc.ready.eq(self.done.ready),
            self.done.payload.batch.eq(self.desc.payload.batch),
            self.done.payload.op.eq(self.desc.payload.op),
            self.done.payload.error.eq(ErrorCode.BAD_OP),
        ]
        return m
