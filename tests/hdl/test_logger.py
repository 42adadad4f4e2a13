"""The undo logger in amaranth.sim: records on the media, one per row and batch and
generation, in groups of one batch; a full ring says so without overwriting, reclaim
by durable batch, ring headers, write-ahead drain."""

import random
from dataclasses import replace

import pytest

from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.checkpoint.logger import UndoLogger
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config, PmemTiming
from trainingcxl.spec.records import (GROUP_RECORDS, RING, decode_group_line, decode_record,
                                      valid_header)

CFG = Config(tables=(8, 8), dim=32, log_lines=2 * (1 + GROUP_RECORDS * 2) + 1, commit_lines=2, snapshot_lines=2, log_buffer=8,
             pmem=PmemTiming(read_latency=6, write_latency=8, wpq_depth=4, read_depth=8))
LPR = CFG.lines_per_row


class Harness(wiring.Component):
    def __init__(self, cfg):
        self.logger = UndoLogger(cfg)
        self.pmem = PmemController(cfg, n_ports=1)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.logger, m.submodules.pmem = self.logger, self.pmem
        wiring.connect(m, self.logger.pmem, self.pmem.port0)
        return m


def row_addr(t, r):
    return CFG.table_base[t] + r * LPR


async def peek(ctx, log, addr):
    """Name the next row a cycle ahead, as the lookup's stage register does."""
    ctx.set(log.tap.peek_addr, addr)
    ctx.set(log.tap.peek, 1)
    await ctx.tick()
    ctx.set(log.tap.peek, 0)


async def query(ctx, log, addr, batch):
    """Whether batch ``batch`` logged the row at ``addr`` (answered the cycle after)."""
    ctx.set(log.query_addr, addr)
    ctx.set(log.query_batch, batch)
    ctx.set(log.query, 1)
    await ctx.tick()
    ctx.set(log.query, 0)
    return ctx.get(log.query_logged)


async def offer_row(ctx, log, addr, batch, lines, timeout=2000):
    """Offer a row the way the lookup does; returns whether it was taken (logged)."""
    tap = log.tap
    await peek(ctx, log, addr)
    ctx.set(tap.addr, addr)
    ctx.set(tap.batch, batch)
    ctx.set(tap.offer, 1)
    for _ in range(timeout):
        if not ctx.get(tap.need):
            ctx.set(tap.offer, 0)
            return False
        if ctx.get(tap.room):
            break
        await ctx.tick()
    else:
        raise AssertionError("the logger never had room")
    ctx.set(tap.take, 1)
    await ctx.tick()
    ctx.set(tap.take, 0)
    ctx.set(tap.offer, 0)
    for line in lines:
        ctx.set(tap.lines.payload, line)
        ctx.set(tap.lines.valid, 1)
        while not ctx.get(tap.lines.ready):
            await ctx.tick()
        await ctx.tick()
    ctx.set(tap.lines.valid, 0)
    return True


async def wait_drained(ctx, log, timeout=5000):
    """No lookup runs: the open group closes and a ring header covers it."""
    ctx.set(log.flush, 1)
    for _ in range(timeout):
        await ctx.tick()
        if ctx.get(log.drained):
            ctx.set(log.flush, 0)
            return
    raise AssertionError("not drained")


def ring_headers(ctx, pmem):
    return [valid_header(ctx.get(pmem.media.data[CFG.ring_base + k]), RING) for k in range(2)]


def slot_group(ctx, pmem, s, cfg=CFG):
    """The records of slot ``s``, oldest first, as ``(Header, row lines)``; every one intact."""
    at = cfg.log_base + s * cfg.group_lines
    lpr = cfg.lines_per_row
    fields, entries = decode_group_line(ctx.get(pmem.media.data[at]))
    out = []
    for k in range(len(entries)):
        rows = [ctx.get(pmem.media.data[at + 1 + k * lpr + j]) for j in range(lpr)]
        header = decode_record(fields, entries, k, rows)
        assert header is not None, f"record {k} of slot {s} is torn"
        out.append((header, rows))
    return out


@pytest.mark.parametrize("folds", [1, 4])
def test_records_once_per_row_and_batch_and_a_full_ring_says_so(folds):
    # crc_folds = 4 checksums each line in four parts; the records must not change.
    dut = Harness(replace(CFG, crc_folds=folds))
    log = dut.logger
    assert CFG.log_groups == 2
    rng = random.Random(3)
    rows = {a: [rng.getrandbits(512) for _ in range(LPR)]
            for a in (row_addr(0, 1), row_addr(1, 2), row_addr(0, 5), row_addr(1, 7))}
    a0, a1, a2, a3 = rows

    async def tb(ctx):
        ctx.set(log.enable, 1)
        ctx.set(log.gen, 7)
        assert await offer_row(ctx, log, a0, 1, rows[a0])
        assert not await offer_row(ctx, log, a0, 1, rows[a0])     # the same row again: no record
        assert await offer_row(ctx, log, a1, 1, rows[a1])
        assert await offer_row(ctx, log, a0, 2, rows[a0])         # next batch: logged again
        await wait_drained(ctx, log)
        # A group per batch: batch 1's two records share slot 0.
        got = [[(h.gen, h.batch, h.a, h.b, data) for h, data in slot_group(ctx, dut.pmem, s)]
               for s in range(2)]
        assert got == [[(7, 1, 0, a0, rows[a0]), (7, 1, 1, a1, rows[a1])],
                       [(7, 2, 2, a0, rows[a0])]]
        assert ctx.get(log.live) == 3 and ctx.get(log.records) == 3
        # Drained only after a ring header says where the newest record is.
        first, second = ring_headers(ctx, dut.pmem)
        assert (first.gen, first.batch, first.a, first.b) == (7, 2, 3, CFG.log_base)
        assert second is None
        # The ring is full and nothing can be reclaimed: no room, and the tap says
        # so instead of letting the lookup wait for good; nothing is overwritten.
        await peek(ctx, log, a2)
        ctx.set(log.tap.addr, a2)
        ctx.set(log.tap.batch, 2)
        assert ctx.get(log.tap.need) and not ctx.get(log.tap.room) and ctx.get(log.tap.full)
        assert slot_group(ctx, dut.pmem, 0)[0][0].batch == 1
        # Only the cycles a row is offered count as waiting for the ring.
        waited = ctx.get(log.full_cycles)
        ctx.set(log.tap.offer, 1)
        for _ in range(3):
            await ctx.tick()
        ctx.set(log.tap.offer, 0)
        await ctx.tick()
        assert ctx.get(log.full_cycles) == waited + 3
        # Batch 1 durable: its group is free, the next one goes to slot 0.
        ctx.set(log.durable, 1)
        ctx.set(log.durable_valid, 1)
        await ctx.tick()
        assert not ctx.get(log.tap.full)
        assert await offer_row(ctx, log, a2, 2, rows[a2])
        await wait_drained(ctx, log)
        [(header, data)] = slot_group(ctx, dut.pmem, 0)
        assert (header.batch, header.a, header.b, data) == (2, 3, a2, rows[a2])
        assert ctx.get(log.live) == 2
        assert ring_headers(ctx, dut.pmem)[1].a == 4              # the other line, in turn
        # Disabled: nothing is needed.
        ctx.set(log.enable, 0)
        assert not await offer_row(ctx, log, a3, 2, rows[a3])
        ctx.set(log.enable, 1)
        # A coalesced UPDATE's check: batch 2 of generation 7 logged a0, batch 1 did not
        # (batch 2 logged it since).
        for batch, want in ((2, 1), (1, 0), (3, 0)):
            assert await query(ctx, log, a0, batch) == want
        # Restart (a recovery): the ring is empty at once, nothing is scrubbed, and
        # batch ids repeat in the new generation: the old stamps do not match it.
        ctx.set(log.restart, 1)
        await ctx.tick()
        ctx.set(log.restart, 0)
        ctx.set(log.gen, 8)
        assert ctx.get(log.live) == 0
        assert not await query(ctx, log, a0, 2)
        assert await offer_row(ctx, log, a0, 2, rows[a0])          # logged again after a restart
        assert not await offer_row(ctx, log, a0, 2, rows[a0])
        await wait_drained(ctx, log)
        [(header, data)] = slot_group(ctx, dut.pmem, 0)
        assert (header.gen, header.batch, header.a, data) == (8, 2, 0, rows[a0])
        assert ring_headers(ctx, dut.pmem)[0].gen == 8

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


def test_groups_close_when_full_at_a_new_batch_and_when_no_lookup_runs():
    """Dim 16: a group is six rows of a batch; the seventh row, a row of the next
    batch, or ``flush`` with no row waiting closes it; ``drained`` waits for that."""
    cfg = Config(tables=(64,), dim=16, log_lines=6 * (1 + GROUP_RECORDS), log_buffer=16,
                 pmem=CFG.pmem)
    assert cfg.lines_per_row == 1 and cfg.log_groups == 6
    dut = Harness(cfg)
    log = dut.logger
    rng = random.Random(5)
    rows = {a: [rng.getrandbits(512)] for a in range(cfg.table_base[0], cfg.table_base[0] + 20)}
    plan = [(1, a) for a in list(rows)[:13]] + [(2, a) for a in list(rows)[13:15]]

    async def tb(ctx):
        ctx.set(log.enable, 1)
        ctx.set(log.gen, 1)
        for batch, a in plan:
            assert await offer_row(ctx, log, a, batch, rows[a])
        for _ in range(200):                                       # a lookup still runs
            await ctx.tick()
        assert not ctx.get(log.drained) and ctx.get(log.records) == 13
        await wait_drained(ctx, log)
        a = list(rows)[15]
        assert await offer_row(ctx, log, a, 2, rows[a])            # the same batch, after a flush
        await wait_drained(ctx, log)
        got = [[(h.batch, h.a, h.b) for h, _ in slot_group(ctx, dut.pmem, s, cfg)]
               for s in range(5)]
        assert [len(g) for g in got] == [6, 6, 1, 2, 1]
        assert [h for g in got for h in g] == [(b, lsn, a) for lsn, (b, a) in
                                              enumerate(plan + [(2, a)])]
        assert ctx.get(log.records) == 16 and ctx.get(log.live) == 16

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
