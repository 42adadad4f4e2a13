"""The snapshot puller in amaranth.sim: it copies host lines into a PMEM slot and
seals it with the header the host model writes (spec/records.py), with the
checksum taken in one cycle or in parts, the host answering out of order and
both ports often not ready."""

import random

import pytest
from amaranth.sim import Simulator

from trainingcxl.hdl.checkpoint.snapshot import SnapshotPuller
from trainingcxl.spec.config import Config
from trainingcxl.spec.records import snapshot_header

SRC, COUNT, GEN, BATCH, SLOT = 100, 5, 3, 7, 1


def pull(folds, seed):
    """Run one pull; returns the slot's first media line, the lines written per
    media address (in order) and the host lines it copied."""
    cfg = Config(tables=(8, 8), dim=32, log_lines=40, commit_lines=2, snapshot_lines=COUNT + 1,
                 crc_folds=folds)
    dut = SnapshotPuller(cfg)
    rng = random.Random(seed)
    host = {SRC + k: rng.getrandbits(512) for k in range(COUNT)}
    written = {}

    async def testbench(ctx):
        for name, value in (("batch", BATCH), ("slot", SLOT), ("src", SRC), ("count", COUNT),
                            ("gen", GEN), ("start", 1)):
            ctx.set(getattr(dut, name), value)
        await ctx.tick()
        ctx.set(dut.start, 0)
        reads, acks, offer = [], 0, None
        for _ in range(3000):
            # Host reads are answered in any order; PMEM writes in order.
            answer = reads.pop(rng.randrange(len(reads))) if reads and rng.random() < 0.5 else None
            ctx.set(dut.host.rdata.valid, answer is not None)
            if answer is not None:
                ctx.set(dut.host.rdata.payload.tag, answer[1])
                ctx.set(dut.host.rdata.payload.data, host[answer[0]])
            ack = acks and rng.random() < 0.5
            ctx.set(dut.pmem.wack.valid, ack)
            acks -= bool(ack)
            ctx.set(dut.host.req.ready, rng.random() < 0.7)
            ctx.set(dut.pmem.req.ready, rng.random() < 0.4)
            if ctx.get(dut.host.req.valid & dut.host.req.ready):
                reads.append((ctx.get(dut.host.req.payload.addr), ctx.get(dut.host.req.payload.tag)))
            if ctx.get(dut.pmem.req.valid):
                now = (ctx.get(dut.pmem.req.payload.addr), ctx.get(dut.pmem.req.payload.data))
                assert offer in (None, now), "a PMEM write on offer changed before it was taken"
                offer = now
                if ctx.get(dut.pmem.req.ready):
                    written.setdefault(now[0], []).append(now[1])
                    acks, offer = acks + 1, None
            if ctx.get(dut.done):
                return
            await ctx.tick()
        raise AssertionError("the pull did not finish")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return cfg.snapshot_base[SLOT], written, [host[SRC + k] for k in range(COUNT)]


@pytest.mark.parametrize("folds", [1, 4, 8])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_pull_writes_the_lines_then_the_sealed_header(folds, seed):
    base, written, lines = pull(folds, seed)
    # The header is zeroed first (the slot is invalid from then on) and sealed last.
    assert written[base] == [0, snapshot_header(gen=GEN, batch=BATCH, data_lines=lines)]
    assert [written[base + 1 + k] for k in range(COUNT)] == [[line] for line in lines]
