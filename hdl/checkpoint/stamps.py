"""Row stamps: which batch last logged each row, in a RAM with synchronous reads."""

from types import SimpleNamespace

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..common.ram import Ram
from ..common.register_slice import a_cycle_later

__all__ = ["RowStamps", "SCRUB_AGE", "sweep_epochs"]

#: An epoch stamp this many epochs old or older is cleared by the scrubber.
SCRUB_AGE = 32


def sweep_epochs(bits):
    """Epochs a scrubber sweep may span with ``bits``-bit epochs (see :class:`RowStamps`)."""
    return ((1 << bits) - 1 - SCRUB_AGE - 1) // 2



class RowStamps(wiring.Component):
    """A stamp per table line: the (generation, batch) that last logged the row.

    Reads are synchronous, so the RAM can be block RAM: the row to check is
    named as it enters the lookup's stage register (``peek_addr`` with
    ``peek``) and ``need`` answers for it from the cycle after, for as long as
    it waits; ``query_addr`` likewise, answered on ``query_hit``
    ``query_latency`` cycles after (1, or 4 with the question, the word read
    and the answer registered). Stamps reach the RAM a cycle after they are asked for, from
    registers, and writes a read has not seen yet are forwarded to it.

    With ``stamp_bits`` None a stamp is the full generation and batch (48
    bits): it never needs clearing (the generation only grows, see
    :class:`~.logger.UndoLogger`). With ``stamp_bits`` = E a stamp is an
    epoch of E bits, 1 to 2**E - 1 (0: never logged): the epoch moves on each
    time a row is stamped for another (generation, batch). For an old epoch
    never to be taken for the current one,

    * after reset the whole RAM is cleared (``ready`` rises after
      ``depth`` cycles; stamps written before the reset may be of any epoch);
    * a scrubber sweeps the RAM through the query port's idle cycles and
      clears stamps :data:`SCRUB_AGE` or more epochs old, using the write
      port's idle cycles;
    * the epoch may not move on while the sweep in progress started
      ``sweep_epochs(E)`` or more epochs ago (``hold``). A stamp written at
      epoch w is old at w + SCRUB_AGE; the sweep after the one in progress then
      ends by w + SCRUB_AGE + 2 * sweep_epochs(E) < w + 2**E - 1, before the
      epoch comes round to its value again.

    An epoch stamp answers queries for the four newest (generation, batch)
    pairs stamped; full stamps answer any.

    Members
    -------
    peek : In(1), peek_addr : In(addr_bits)
    gen : In(16), batch : In(32)
        The (generation, batch) rows are checked and stamped for (with
        ``registered`` and epoch stamps: as they were the cycle before).
    need : Out(1)
        The row peeked last has no stamp of (``gen``, ``batch``), as its stamp was
        when peeked (answered from the cycle after the peek on).
    known : Out(1)
        ``need`` holds for the row peeked: always, or with ``registered`` (a
        board's clock) from the second cycle after the peek on.
    hold : Out(1)
        Stamping for (``gen``, ``batch``) must wait (clearing after reset, or
        the epoch cannot move on yet).
    write : In(1), write_addr : In(addr_bits)
        Stamp that row for (``gen``, ``batch``).
    query : In(1), query_addr : In(addr_bits), query_batch : In(32)
    query_hit : Out(1)
        The row queried ``query_latency`` cycles before is stamped for
        (``gen``, ``query_batch``).
    """

    _HISTORY = 4

    def __init__(self, *, depth, stamp_bits=None, registered=False, query_latency=1):
        if query_latency not in (1, 4):
            raise ValueError(f"query_latency must be 1 or 4, not {query_latency!r}")
        self._depth = depth
        self._bits = stamp_bits
        self._registered = registered
        self._query_latency = query_latency
        abits = max(1, (depth - 1).bit_length())
        super().__init__({
            "peek": In(1), "peek_addr": In(abits),
            "gen": In(16), "batch": In(32),
            "need": Out(1), "known": Out(1), "hold": Out(1),
            "write": In(1), "write_addr": In(abits),
            "query": In(1), "query_addr": In(abits), "query_batch": In(32),
            "query_hit": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = 48 if self._bits is None else self._bits
        abits = len(self.peek_addr)
        m.submodules.ram = self.ram = ram = Ram(shape=width, depth=self._depth)
        rd = ram.read_port()
        rq = ram.read_port()
        wr = ram.write_port()
        # Writes are asked for (``req``) and reach the RAM a cycle later from
        # registers, and reads are always enabled: no RAM port depends on a word
        # read in the same cycle (a RAM this deep spreads over the whole chip).
        req = SimpleNamespace(en=Signal(), addr=Signal(abits), data=Signal(width))
        m.d.comb += [req.en.eq(self.write), req.addr.eq(self.write_addr)]
        m.d.sync += [wr.en.eq(req.en), wr.addr.eq(req.addr), wr.data.eq(req.data)]

        def forwarded(port, addr):
            """The word read the cycle before at ``addr``, with the writes not yet in the
            RAM then (the one reaching it, the one asked for) forwarded, newest first."""
            # Which of them, if any, is decided as the read is asked for: the
            # word read meets one multiplexer (the RAM's own read multiplexer,
            # over many blocks, comes before it).
            hit = Signal()
            fwd = Signal(width)
            hit_new = req.en & (req.addr == addr)
            m.d.comb += [port.addr.eq(addr), port.en.eq(1)]
            m.d.sync += [hit.eq(hit_new | (wr.en & (wr.addr == addr))),
                         fwd.eq(Mux(hit_new, req.data, wr.data))]
            return Mux(hit, fwd, port.data)

        # The peeked row's word, kept while its request waits (the lookup stamps
        # that row only as the request leaves). Registered, it is known a cycle
        # later, and the RAM's read path ends at a register.
        fresh = Signal()
        held = Signal(width)
        m.d.sync += fresh.eq(self.peek)
        read = forwarded(rd, self.peek_addr)
        with m.If(fresh):
            m.d.sync += held.eq(read)
        # Registered, no row is stamped while its own word is on its way (it cannot
        # leave the stage before ``known``).
        word = held if self._registered else Mux(fresh, read, held)
        m.d.comb += self.known.eq(~fresh if self._registered else 1)

        # With a latency of 4 the question, the word read and the answer each
        # pass a register: the stamp RAM's read multiplexer and the compares
        # after it are two paths.
        late = self._query_latency == 4

        def later(value, name):
            """``value``, a cycle later when the word read is registered."""
            return a_cycle_later(m, value, name) if late else value

        def query_word(addr):
            """The word the query port read at ``addr`` the cycle before (a cycle
            later still, registered, with the write asked for in between forwarded)."""
            word = forwarded(rq, addr)
            if not late:
                return word
            at = later(addr, "query_word_addr")
            settled = Signal(width, name="query_word")
            m.d.sync += settled.eq(Mux(req.en & (req.addr == at), req.data, word))
            return settled

        query = SimpleNamespace(valid=self.query, addr=self.query_addr, batch=self.query_batch)
        hit = Signal()
        if late:
            query = SimpleNamespace(valid=Signal(), addr=Signal(abits), batch=Signal(32))
            m.d.sync += [query.valid.eq(self.query), query.addr.eq(self.query_addr),
                         query.batch.eq(self.query_batch), self.query_hit.eq(hit)]
        else:
            m.d.comb += self.query_hit.eq(hit)

        if self._bits is None:
            m.d.comb += [
                req.data.eq(Cat(self.batch, self.gen)),
                self.need.eq(word != req.data),
            ]
            qword = query_word(query.addr)
            key = Signal(48)
            m.d.sync += key.eq(Cat(query.batch, self.gen))
            m.d.comb += hit.eq(qword == later(key, "key_late"))
            return m

        self._epochs(m, req, word, query_word, later, query, hit)
        return m

    def _epochs(self, m, req, word, query_word, later, query, hit):
        bits = self._bits
        period = (1 << bits) - 1
        depth = self._depth
        abits = len(self.peek_addr)

        epoch = Signal(bits)            # 0 until the first stamp
        key = Signal(48)                # the (generation, batch) ``epoch`` stands for
        nxt = Mux(epoch == period, 1, epoch + 1)
        if self._registered:
            # (generation, batch) are taken a cycle late, and whether ``key``
            # stands for them is a register (exact for the copy): the stamp
            # checks and the epoch's move start at flip-flops. A row is
            # therefore checked and stamped for the (generation, batch) of the
            # cycle before; they change only between lookups.
            now = Signal(48)
            same = Signal()
            m.d.sync += now.eq(Cat(self.batch, self.gen))
            moving = self.write & ~same
            m.d.sync += same.eq(Mux(moving, now == Cat(self.batch, self.gen),
                                    (key == Cat(self.batch, self.gen)) & (epoch != 0)))
        else:
            now = Cat(self.batch, self.gen)
            same = (key == now) & (epoch != 0)
            moving = self.write & ~same     # this write moves the epoch on

        def age(e):
            d = Signal(bits + 1)
            m.d.comb += d.eq(epoch - e)
            return Mux(d[-1], d + period, d)[:bits]

        # -- clearing after reset, then the scrubber
        clearing = Signal(init=1)
        cursor = Signal(abits)
        last_addr = depth - 1
        sweep_start = Signal(bits)
        m.d.comb += self.hold.eq(clearing | (~same & (epoch != 0)
                                             & (age(sweep_start) >= sweep_epochs(bits))))
        with m.If(moving):
            m.d.sync += [epoch.eq(nxt), key.eq(now)]
        m.d.comb += [req.data.eq(Mux(same, epoch, nxt)), self.need.eq(~same | (word != epoch))]

        # History of epochs, for queries: (key, epoch), newest first.
        hist = [(Signal(48, name=f"hkey{k}"), Signal(bits, name=f"hepoch{k}"))
                for k in range(self._HISTORY)]
        with m.If(moving):
            m.d.sync += [hist[0][0].eq(now), hist[0][1].eq(nxt)]
            for (k1, e1), (k0, e0) in zip(hist[1:], hist):
                m.d.sync += [k1.eq(k0), e1.eq(e0)]

        # The query port: queries first, the scrubber in its idle cycles.
        s_valid = Signal()
        s_addr = Signal(abits)
        m.d.sync += [s_valid.eq(~clearing & ~query.valid), s_addr.eq(cursor)]
        s_valid, s_addr = later(s_valid, "s_valid_late"), later(s_addr, "s_addr_late")
        q_word = query_word(Mux(query.valid, query.addr, cursor))
        q_key = Signal(48)
        m.d.sync += q_key.eq(Cat(query.batch, self.gen))
        q_key = later(q_key, "q_key_late")
        m.d.comb += hit.eq(Cat((k == q_key) & (e != 0) & (q_word == e) for k, e in hist).any())

        stale = (q_word != 0) & (age(q_word) >= SCRUB_AGE)
        with m.If(clearing):
            m.d.comb += [req.addr.eq(cursor), req.data.eq(0), req.en.eq(1)]
            m.d.sync += cursor.eq(Mux(cursor == last_addr, 0, cursor + 1))
            with m.If(cursor == last_addr):
                m.d.sync += [clearing.eq(0), sweep_start.eq(epoch)]
        with m.Elif(s_valid):
            # The word of ``s_addr`` is here: clear it if stale and no row is being
            # stamped; move on unless it still has to be cleared.
            clear = stale & ~self.write
            with m.If(clear):
                m.d.comb += [req.addr.eq(s_addr), req.data.eq(0), req.en.eq(1)]
            with m.If(~stale | clear):
                with m.If(s_addr == cursor):
                    m.d.sync += cursor.eq(Mux(cursor == last_addr, 0, cursor + 1))
                    with m.If(cursor == last_addr):
                        m.d.sync += sweep_start.eq(epoch)
