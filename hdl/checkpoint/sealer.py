"""Commit records: the engine's COMMIT and a recovery's seal, through one header network."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS
from trainingcxl.spec.records import COMMIT, UNDO
from .crc import CRC_INIT
from .layouts import commit_layout, header_layout, record_layout, sealed_header

__all__ = ["CommitSealer"]


class CommitSealer(wiring.Component):
    """Writes commit records into their slots. One header network checks the walk's undo
    records (``record``, ``header``) and seals the commit records: a commit and a
    recovery's seal never run during a walk. While ``sealing`` it takes the commit
    record's fields. (Three networks of 160 inputs were the largest XOR logic of a
    board's device, and its most congested wiring.)

    Members
    -------
    load : In(stream of commit_layout, always ready), arm : In(1)
        A commit record's fields, taken with every descriptor (its checks do not run on
        into them); with ``arm``, the descriptor is a ``COMMIT`` to write.
    commit_write : In(1), commit_slot : In(range(commit_lines))
        Write the commit record into that slot; ``commit_taken`` as it leaves.
    commit_taken : Out(1)
    seal : In(stream, always ready)
        A recovery's seal: the commit record starting the next generation, and its slot.
    seal_write : In(1), seal_slot : Out(range(commit_lines))
        Write the seal into its slot.
    record : In(record_layout), header : Out(header_layout)
        The undo record checked, and the header the network makes of it (or, while
        ``sealing``, of the commit record).
    sealing : Out(1)
    buffered : In(LINE_BITS)
        With register slices, the register the sealed line passes (``RollbackWriter``'s
        line 0, loaded while ``sealing``): the network does not run on into the beats of
        the PMEM port. A write is then offered from its second cycle.
    req : Out(stream)
        The writes of commit records.
    """

    def __init__(self, config):
        self._config = config
        slots = range(config.commit_lines)
        super().__init__({
            "load": In(stream.Signature(commit_layout, always_ready=True)),
            "arm": In(1),
            "commit_write": In(1),
            "commit_slot": In(slots),
            "commit_taken": Out(1),
            "seal": In(stream.Signature(data.StructLayout({"fields": commit_layout,
                                                           "slot": slots}), always_ready=True)),
            "seal_write": In(1),
            "seal_slot": Out(slots),
            "record": In(record_layout),
            "header": Out(header_layout),
            "sealing": Out(1),
            "buffered": In(LINE_BITS),
            "req": Out(stream.Signature(data.StructLayout({
                "addr": config.media_addr_bits, "data": LINE_BITS}))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        sealing = self.sealing
        c_gen = Signal(16)
        c_batch = Signal(32)
        c_k = Signal(8)
        r = self.record
        header = sealed_header(m, magic=Mux(sealing, COMMIT, UNDO),
                               gen=Mux(sealing, c_gen, r.gen),
                               batch=Mux(sealing, c_batch, r.batch),
                               a=Mux(sealing, c_k, r.lsn), b=Mux(sealing, 0, r.addr),
                               crc=Mux(sealing, CRC_INIT, r.crc))
        m.d.comb += self.header.eq(header)
        settled = Signal()
        m.d.sync += settled.eq(0)
        if cfg.register_slices:
            line, ready_line = self.buffered, settled
        else:
            line, ready_line = header, C(1)

        with m.If(self.load.valid):
            f = self.load.payload
            m.d.sync += [c_gen.eq(f.gen), c_batch.eq(f.batch), c_k.eq(f.k)]
            with m.If(self.arm):
                m.d.sync += sealing.eq(1)
        with m.If(self.commit_write | self.seal_write):
            if cfg.register_slices:
                m.d.sync += settled.eq(1)
            with m.If(ready_line):
                slot = Mux(self.commit_write, self.commit_slot, self.seal_slot)
                m.d.comb += [self.req.valid.eq(1), self.req.payload.addr.eq(cfg.commit_base + slot),
                             self.req.payload.data.eq(line)]
                with m.If(self.req.ready):
                    m.d.sync += sealing.eq(0)
                    m.d.comb += self.commit_taken.eq(self.commit_write)
        with m.If(self.seal.valid):
            f = self.seal.payload.fields
            m.d.sync += [self.seal_slot.eq(self.seal.payload.slot), sealing.eq(1),
                         c_gen.eq(f.gen), c_batch.eq(f.batch), c_k.eq(f.k)]
        return m
