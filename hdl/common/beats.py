"""Lines in beats: a wide word crosses the chip a slice at a time.

On an FPGA a 512-bit bus that fans out to several engines takes more
routing than logic; moved in beats of ``512 / beats`` bits it takes that
fraction of the wires, and the line is put together again next to the
engine that uses it (docs/design-notes.md, "Lines in beats on the board").
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BeatSender", "BeatReceiver", "beat_layout"]


def beat_layout(width, beats, meta):
    """A beat: a ``width // beats`` slice of the word, the word's ``meta``, and
    ``last`` on the word's last beat (its most significant slice)."""
    return data.StructLayout({"data": width // beats, "meta": meta, "last": 1})


def _check(width, beats):
    if beats not in (1, 2, 4, 8, 16) or width % beats:
        raise ValueError(f"beats must be 1, 2, 4, 8 or 16 and divide the width {width}, not {beats!r}")


class BeatSender(wiring.Component):
    """Sends each word of ``i`` as ``beats`` beats on ``o``, least significant first.

    ``o`` comes from a register. A word is taken (``i.ready``) as its last
    beat is loaded, so it stays on ``i`` while it is sent. Its first beat
    comes from ``i``, the others from a shift register of the sender's own
    that follows the word on ``i`` until the first beat leaves: no beat is
    picked from the word by an index that fans out over all its bits, and
    neither ``i.valid`` nor ``o.valid`` reaches that register's enables. One
    beat a cycle when ``o`` is taken at once.

    With ``short``, a word marked ``short`` goes in one beat, its least
    significant slice (a request without data), taken as it is loaded.

    Members
    -------
    i : In(stream.Signature(StructLayout({"data": width, "meta": meta[, "short": 1]})))
    o : Out(stream.Signature(beat_layout(width, beats, meta)))
    """

    def __init__(self, *, width, beats, meta, short=False):
        _check(width, beats)
        self._beats = beats
        self._short = short
        fields = {"data": width, "meta": meta}
        if short:
            fields["short"] = 1
        super().__init__({
            "i": In(stream.Signature(data.StructLayout(fields))),
            "o": Out(stream.Signature(beat_layout(width, beats, meta))),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._beats
        step = len(self.o.payload.data)
        one = C(1) if n == 1 else (self.i.payload.short if self._short else C(0))
        # ``left``: a bit per beat still in ``rest`` (none: ``o`` holds the
        # word's last beat or nothing), so the last beat needs no counter compare.
        left = Signal(max(1, n - 1))
        rest = Signal(max(1, (n - 1) * step))
        sending = left[0]
        final = ~left[1] if n > 2 else C(1)     # ``rest`` holds the last beat only
        room = ~self.o.valid | self.o.ready
        load = Signal()
        shift = Signal()
        # ``i.ready`` does not look at ``i.valid``: the producer's own valid
        # (often the end of its logic) does not run on into its ``ready``.
        m.d.comb += [
            load.eq(self.i.valid & room & ~sending),
            shift.eq(self.o.ready & sending),
            self.i.ready.eq(Mux(sending, self.o.ready & final, room & one)),
        ]
        with m.If(load):
            m.d.sync += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(self.i.payload.data[:step]),
                self.o.payload.meta.eq(self.i.payload.meta),
                self.o.payload.last.eq(one),
                left.eq(Mux(one, 0, -1)),
            ]
        with m.Elif(shift):
            m.d.sync += [
                self.o.payload.data.eq(rest[:step]),
                self.o.payload.last.eq(final),
                left.eq(left >> 1),
            ]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        # ``rest`` follows the word on ``i`` while nothing is sent from it; so it
        # holds the word's other beats from its first beat's load on.
        with m.If(~sending):
            m.d.sync += rest.eq(self.i.payload.data[step:])
        with m.Elif(self.o.ready):
            m.d.sync += rest.eq(rest >> step)
        return m


class BeatReceiver(wiring.Component):
    """Puts the beats of ``i`` together into words on ``o``.

    The beats shift into a word register from the top, so the bus feeds one
    slice of it and each other slice is fed by its neighbour; the word's
    ``meta`` is the last beat's. ``i.ready`` is a register (the word is not
    held, ``~o.valid``): a receiver takes no beat in the cycle its word is
    taken, which costs a cycle per word and keeps the consumer's ``ready`` off
    the bus.

    With ``unload``, a word taken while ``unload`` is high leaves again in
    beats through the same shift register: in each of the ``beats`` cycles
    after the take, ``tail`` is its next slice, least significant first, and
    no beat is taken meanwhile. A consumer that wants only the word's ``meta``
    at once then moves its data on a bus of one beat.

    Members
    -------
    i : In(stream.Signature(beat_layout(width, beats, meta)))
    o : Out(stream.Signature(StructLayout({"data": width, "meta": meta})))
    unload : In(1), tail : Out(width // beats)
        With ``unload`` only.
    """

    def __init__(self, *, width, beats, meta, unload=False):
        _check(width, beats)
        self._beats = beats
        self._unload = unload
        members = {
            "i": In(stream.Signature(beat_layout(width, beats, meta))),
            "o": Out(stream.Signature(data.StructLayout({"data": width, "meta": meta}))),
        }
        if unload:
            members.update({"unload": In(1), "tail": Out(width // beats)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        step = len(self.i.payload.data)
        word = self.o.payload.data
        if self._unload:
            # One bit per beat still to leave: the shift needs no counter compare.
            left = Signal(self._beats)
            with m.If(self.o.valid & self.o.ready & self.unload):
                m.d.sync += left.eq(-1)
            with m.Else():
                m.d.sync += left.eq(left >> 1)
            unloading = left[0]
            m.d.comb += [self.i.ready.eq(~self.o.valid & ~unloading), self.tail.eq(word[:step])]
        else:
            unloading = C(0)
            m.d.comb += self.i.ready.eq(~self.o.valid)
        # Unloading, whatever is on the bus shifts in behind the word's slices;
        # the next word's beats push it out again.
        take = self.i.valid & self.i.ready
        with m.If(take | unloading):
            m.d.sync += word.eq(Cat(word[step:], self.i.payload.data))
        with m.If(take & self.i.payload.last):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.meta.eq(self.i.payload.meta)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
