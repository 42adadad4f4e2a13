"""Lines in beats: a sender and a receiver back to back give back every word, in order."""

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring

from trainingcxl.hdl.common.beats import BeatReceiver, BeatSender
from trainingcxl.sim.amaranth_streams import simulate, stream_get, stream_put


class _Link(wiring.Component):
    def __init__(self, width, beats):
        self.send = BeatSender(width=width, beats=beats, meta=8)
        self.recv = BeatReceiver(width=width, beats=beats, meta=8)
        super().__init__({"i": wiring.In(self.send.i.signature.flip()),
                          "o": wiring.Out(self.recv.o.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.send, m.submodules.recv = self.send, self.recv
        wiring.connect(m, wiring.flipped(self.i), self.send.i)
        wiring.connect(m, self.send.o, self.recv.i)
        wiring.connect(m, self.recv.o, wiring.flipped(self.o))
        return m


@pytest.mark.parametrize("beats", [2, 8])
def test_words_cross_in_beats_in_order_under_back_pressure(beats):
    width, n = 64, 40
    dut = _Link(width, beats)
    rng = random.Random(beats)
    words = [(rng.getrandbits(width), k) for k in range(n)]
    got, cycles = [], [0]

    async def producer(ctx):
        for word, meta in words:
            await stream_put(ctx, dut.i, {"data": word, "meta": meta})

    async def consumer(ctx):
        pace = random.Random(7)
        while len(got) < n:
            for _ in range(pace.randrange(3)):
                await ctx.tick()
                cycles[0] += 1
            rsp = await stream_get(ctx, dut.o)
            got.append((rsp.data, rsp.meta))

    simulate(dut, consumer, background=[producer])
    assert got == words


def test_a_word_every_beats_plus_one_cycles_when_taken_at_once():
    dut = _Link(64, 4)
    times = []

    async def producer(ctx):
        for k in range(10):
            await stream_put(ctx, dut.i, {"data": k, "meta": k})

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        for t in range(200):
            if ctx.get(dut.o.valid):
                times.append(t)
            await ctx.tick()

    simulate(dut, consumer, background=[producer])
    assert len(times) == 10
    assert {b - a for a, b in zip(times, times[1:])} == {5}


def test_a_word_unloaded_leaves_in_beats_and_the_next_word_is_whole():
    """Every other word is taken with ``unload``: its slices leave on ``tail`` in the
    beats cycles after the take, and the words after it still arrive whole (the beats
    the bus shifted in behind are pushed out)."""
    beats, width = 4, 64
    send = BeatSender(width=width, beats=beats, meta=8)
    recv = BeatReceiver(width=width, beats=beats, meta=8, unload=True)

    class Top(wiring.Component):
        def __init__(self):
            super().__init__({"i": wiring.In(send.i.signature.flip()),
                              "o": wiring.Out(recv.o.signature),
                              "unload": wiring.In(1), "tail": wiring.Out(width // beats)})

        def elaborate(self, platform):
            m = Module()
            m.submodules.send, m.submodules.recv = send, recv
            wiring.connect(m, wiring.flipped(self.i), send.i)
            wiring.connect(m, send.o, recv.i)
            wiring.connect(m, recv.o, wiring.flipped(self.o))
            m.d.comb += [recv.unload.eq(self.unload), self.tail.eq(recv.tail)]
            return m

    dut = Top()
    rng = random.Random(3)
    words = [rng.getrandbits(width) for _ in range(6)]
    got, tails = [], []

    async def producer(ctx):
        for k, word in enumerate(words):
            await stream_put(ctx, dut.i, {"data": word, "meta": k})

    async def consumer(ctx):
        for k in range(len(words)):
            ctx.set(dut.unload, k % 2)
            rsp = await stream_get(ctx, dut.o)
            got.append(rsp.data)
            if k % 2:                       # from the cycle after the take
                value = 0
                for b in range(beats):
                    value |= ctx.get(dut.tail) << (width // beats * b)
                    await ctx.tick()
                tails.append(value)

    simulate(dut, consumer, background=[producer])
    assert got == words
    assert tails == words[1::2]


def test_a_word_is_taken_as_its_last_beat_leaves_and_a_short_one_is_one_beat():
    """Each beat is the word's next slice (from the sender's own shift register
    after the first), the word is taken as its last beat is loaded, and a word
    marked ``short`` is one beat, its least significant slice."""
    beats, width = 4, 32
    step = width // beats
    dut = BeatSender(width=width, beats=beats, meta=8, short=True)
    rng = random.Random(5)
    words = [(rng.getrandbits(width), k, rng.random() < 0.4) for k in range(12)]
    takes, sent = [], []

    async def producer(ctx):
        t = 0
        for word, meta, short in words:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": word, "meta": meta, "short": short})
            while not ctx.get(dut.i.ready):
                await ctx.tick()
                t += 1
            takes.append(t)
            await ctx.tick()
            t += 1
            # Taken: what the producer shows next is not sent.
            ctx.set(dut.i.payload, {"data": ~word & (2**width - 1), "meta": 255, "short": 0})
            ctx.set(dut.i.valid, 0)
            await ctx.tick()
            t += 1

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        for t in range(200):
            if ctx.get(dut.o.valid):
                o = ctx.get(dut.o.payload)
                sent.append((t, o.data, o.meta, o.last))
            await ctx.tick()

    simulate(dut, consumer, background=[producer])
    want = []
    for word, meta, short in words:
        n = 1 if short else beats
        want += [(word >> (step * b) & (2**step - 1), meta, int(b == n - 1)) for b in range(n)]
    assert [s[1:] for s in sent] == want
    assert [t - 1 for t, _, _, last in sent if last] == takes
