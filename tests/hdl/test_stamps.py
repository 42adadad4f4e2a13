"""The undo logger's row stamps in amaranth.sim against a dictionary of (generation,
batch) per row: full stamps, and epoch stamps whose epochs come round many times,
through power failures (resets that leave the RAM as it was)."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.hdl import ResetInserter
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.checkpoint.stamps import SCRUB_AGE, RowStamps, sweep_epochs

DEPTH = 24


class Harness(wiring.Component):
    def __init__(self, stamp_bits, registered):
        # Registered as on a board: the peek's answer a cycle later, queries answered
        # four cycles after (``Config.log_query_latency``).
        self.stamps = RowStamps(depth=DEPTH, stamp_bits=stamp_bits, registered=registered,
                                query_latency=4 if registered else 1)
        self.reset = Signal()
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.stamps = ResetInserter(self.reset)(self.stamps)
        return m


def run(stamp_bits, cycles, *, seed=1, batch_every=(1, 40), reset_every=None, hot=0.0,
        query_rate=0.3, registered=False):
    """Random peeks, stamps and queries (a share ``hot`` of the peeks at four rows, so
    that the others keep old stamps long); returns epoch moves and cycles held. With
    ``registered`` a peeked row waits a cycle for its answer, as the lookup does, and a
    query is answered four cycles after it is asked, for the stamps as they are two
    cycles after it was asked (the question passes a register first, and the word read
    another)."""
    latency = 4 if registered else 1
    dut = Harness(stamp_bits, registered)
    st = dut.stamps
    rng = random.Random(seed)
    stats = {"moves": 0, "held": 0}

    async def bench(ctx):
        ref = {}                    # row -> (gen, batch) that stamped it last
        keys = []                   # (gen, batch) pairs stamped, newest last
        gen, batch = 1, 1
        ctx.set(st.gen, gen)
        ctx.set(st.batch, batch)
        since = 0
        peeked = None
        pending = []                # queries: [answered at, judged at, addr, batch, hit]
        last_write = None
        waited = True

        def judge(cycle):
            for q in pending:
                if q[1] == cycle:
                    hit = ref.get(q[2]) == (gen, q[3])
                    if stamp_bits is not None:
                        hit = hit and (gen, q[3]) in keys[-4:]
                    q[4] = hit

        for cycle in range(cycles):
            # Answers to the queries asked ``latency`` cycles before.
            for q in [q for q in pending if q[0] == cycle]:
                assert ctx.get(st.query_hit) == q[4], (cycle, q, ref.get(q[2]))
                pending.remove(q)
            if peeked is not None and not waited:
                # The registered check: not known the cycle after the peek.
                assert not ctx.get(st.known)
                waited = True
                ctx.set(st.peek, 0)
                ctx.set(st.query, 0)
                judge(cycle)
                await ctx.tick()
                continue
            assert ctx.get(st.known)
            # The answer for the peek before.
            if peeked is not None and not ctx.get(st.hold):
                want = ref.get(peeked) != (gen, batch)
                assert ctx.get(st.need) == want, (cycle, peeked, ref.get(peeked), gen, batch)
            # Stamp the row peeked last cycle (the lookup's take), when not held.
            write = peeked is not None and rng.random() < 0.6
            if write and ctx.get(st.hold):
                stats["held"] += 1
                write = False
            ctx.set(st.write, write)
            if write:
                ctx.set(st.write_addr, peeked)
                if not keys or keys[-1] != (gen, batch):
                    keys.append((gen, batch))
                    stats["moves"] += 1
                ref[peeked] = (gen, batch)
            judge(cycle)
            peeked_before, peeked = peeked, None
            if rng.random() < 0.8:
                peeked = rng.randrange(4 if rng.random() < hot else DEPTH)
            ctx.set(st.peek, peeked is not None)
            waited = not registered or peeked is None
            ctx.set(st.peek_addr, peeked or 0)
            if rng.random() < query_rate and keys:
                queried = [cycle + latency, cycle + latency // 2, rng.randrange(DEPTH),
                           rng.choice([b for _, b in keys[-6:]]), None]
                ctx.set(st.query, 1)
                ctx.set(st.query_addr, queried[2])
                ctx.set(st.query_batch, queried[3])
                pending.append(queried)
                judge(cycle)
            else:
                ctx.set(st.query, 0)
            await ctx.tick()
            ctx.set(st.write, 0)
            if stamp_bits is not None and last_write is not None:
                # A stamp reaches the RAM the cycle after it is asked for. Every row
                # holding the epoch written then is one that (generation, batch)
                # stamped: no old stamp has come round to it.
                row0, key0, ref0 = last_write
                epoch = ctx.get(st.ram.data[row0])
                for row in range(DEPTH):
                    if ctx.get(st.ram.data[row]) == epoch:
                        assert ref0.get(row) == key0, (cycle, row, epoch, ref0.get(row))
            last_write = (peeked_before, (gen, batch), dict(ref)) if write else None
            since += 1
            if since >= rng.randint(*batch_every):
                since = 0
                batch += 1
                ctx.set(st.batch, batch)
            if reset_every and rng.random() < 1 / reset_every:
                # A power failure: registers lost, the RAM kept; a new generation.
                ctx.set(dut.reset, 1)
                await ctx.tick()
                ctx.set(dut.reset, 0)
                gen += 1
                ctx.set(st.gen, gen)
                if stamp_bits is not None:
                    ref.clear()     # cleared after the reset
                    keys.clear()
                peeked = last_write = None
                pending.clear()
                ctx.set(st.peek, 0)
                ctx.set(st.query, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return stats


@pytest.mark.parametrize("stamp_bits,registered", [(None, False), (6, False), (None, True),
                                                   (6, True)])
def test_stamps_say_which_rows_the_current_batch_stamped(stamp_bits, registered):
    stats = run(stamp_bits, 6000, batch_every=(1, 30), reset_every=1500, registered=registered)
    # Epochs of 6 bits come round every 63 moves: many times here.
    assert stats["moves"] > 4 * 63 if stamp_bits else stats["moves"] > 0


def test_epochs_wait_for_the_scrubber_when_batches_outrun_it():
    # A batch every cycle or two, and queries leave the scrubber a cycle in
    # four: the epoch would come round before a sweep of the RAM ends, so
    # stamping holds until the sweep catches up, and no answer is wrong.
    assert sweep_epochs(6) < 63 - SCRUB_AGE
    stats = run(6, 6000, seed=3, batch_every=(1, 2), hot=0.95, query_rate=0.75)
    assert stats["held"] > 0 and stats["moves"] > 2 * 63
