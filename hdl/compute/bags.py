"""Turns a batch's CSR offsets into one (table, length) per bag, checking them on the way."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.descriptors import ErrorCode
from ..common.register_slice import on_entry, through_slice

__all__ = ["bag_layout", "BagSequencer"]


def bag_layout(config):
    return data.StructLayout({
        "table": range(config.n_tables),
        "length": range(config.max_pooling + 1),
    })


class BagSequencer(wiring.Component):
    """Offsets ``o[0..n_bags]`` in, bag ``k`` = ``(k % tables, o[k+1] - o[k])`` out.

    Every offset is checked as it arrives: ``o[0]`` must be 0; offsets never
    decrease and never exceed ``n_indices``; the last one equals ``n_indices``;
    no bag is longer than ``max_pooling``. A failing offset is not consumed and
    ``error`` names the failure while it is at the head.

    With ``config.register_slices`` the offsets reach their checks, and the
    bags leave, through a register slice each (emptied by ``start``): the
    reader before, the checks and the consumer after are three timing paths,
    not one. ``error`` then comes from a register, a cycle late.

    Members
    -------
    start : In(1)
        Pulse before a batch: the next offset is ``o[0]``.
    n_bags : In(24), n_indices : In(32)
        Of the current batch; stable from ``start`` on while it runs.
    offsets : In(stream.Signature(32))
    bags : Out(stream.Signature(bag_layout))
    error : Out(ErrorCode)
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "start": In(1),
            "n_bags": In(24),
            "n_indices": In(32),
            "offsets": In(stream.Signature(32)),
            "bags": Out(stream.Signature(bag_layout(config))),
            "error": Out(ErrorCode),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        n_tables = cfg.n_tables
        offs, bags = self.offsets, self.bags
        if cfg.register_slices:
            offs = through_slice(m, "offset_slice", wiring.flipped(self.offsets), cut_ready=True,
                                 reset=self.start)
            bags = stream.Signature(bag_layout(cfg)).create()
            wiring.connect(m, through_slice(m, "bag_slice", bags, reset=self.start),
                           wiring.flipped(self.bags))

        first = Signal()
        prev = Signal(32)
        table = Signal(range(n_tables))
        left = Signal(24)                   # bags still to come, the current one included

        def checked(offset):
            """The check of ``offset`` as the next offset, and its bag's length."""
            length = Signal(32)
            check = Signal(ErrorCode)
            m.d.comb += length.eq(offset - prev)
            with m.If(first):
                with m.If(offset != 0):
                    m.d.comb += check.eq(ErrorCode.BAD_OFFSETS)
            with m.Elif((offset < prev) | (offset > self.n_indices)):
                # Every offset is checked against n_indices, not just the last: a bag
                # reaching past the indices would wait forever for words never read.
                m.d.comb += check.eq(ErrorCode.BAD_OFFSETS)
            with m.Elif(length > cfg.max_pooling):
                m.d.comb += check.eq(ErrorCode.POOLING)
            with m.Elif((left == 1) & (offset != self.n_indices)):
                m.d.comb += check.eq(ErrorCode.BAD_OFFSETS)
            return check, length

        # Registered, checked as the offset enters its slice: the state the
        # check reads moves only when an offset leaves it.
        check, length = Signal(ErrorCode), Signal(32)
        m.d.comb += Cat(check, length).eq(
            on_entry(m, offs, Cat(*checked(self.offsets.payload))) if cfg.register_slices
            else Cat(*checked(offs.payload)))
        ok = check == ErrorCode.NONE
        error = Mux(offs.valid, check, ErrorCode.NONE)
        if cfg.register_slices:
            # A failing offset stays at the head: the error may be told a cycle late.
            m.d.sync += self.error.eq(Mux(self.start, ErrorCode.NONE, error))
        else:
            m.d.comb += self.error.eq(error)
        m.d.comb += [
            bags.valid.eq(offs.valid & ~first & ok),
            bags.payload.table.eq(table),
            bags.payload.length.eq(length),
            offs.ready.eq(ok & (first | bags.ready)),
        ]
        with m.If(offs.valid & offs.ready):
            m.d.sync += [prev.eq(offs.payload), first.eq(0)]
            with m.If(~first):
                m.d.sync += [left.eq(left - 1),
                             table.eq(Mux(table == n_tables - 1, 0, table + 1))]
        with m.If(self.start):
            m.d.sync += [first.eq(1), prev.eq(0), table.eq(0), left.eq(self.n_bags)]
        return m
