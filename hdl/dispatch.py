"""Hands descriptors to the engine that runs them, one at a time, in submission order."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.descriptors import ErrorCode, Op, completion_layout, descriptor_layout
from trainingcxl.spec.registers import Reg

__all__ = ["Dispatcher"]


class Dispatcher(wiring.Component):
    """Routes ``LOOKUP`` to the lookup engine and ``UPDATE`` to the update engine.

    The next descriptor starts only after the previous one completed, so a
    batch's update never races its lookup (strict order). Operations no
    engine implements complete at once with ``BAD_OP``.

    The dispatcher remembers the last ``LOOKUP`` that completed without an
    error, one per batch parity. An ``UPDATE`` of the same batch over the same
    offsets and indices goes out ``checked``, so the update engine need not
    check the batch again before changing rows.

    Checkpointing (docs/design.md, "Checkpoint protocol"). ``COMMIT``, ``SNAPSHOT_MLP`` and
    ``RECOVER`` go to the checkpoint engine. While ``logging``:

    * a ``LOOKUP`` waits while ``hold_lookup`` (the newest snapshot lags the
      newest commit by more than the staleness bound); ``stall_cycles`` counts;
    * an ``UPDATE`` must be of the batch the last clean ``LOOKUP`` of its
      parity read with logging on (so every row it changes has an undo record), and, if that
      lookup was relaxed, after its ``FINISH`` (which logs the rows it
      deferred); otherwise it completes with ``NOT_LOGGED``, changing nothing.
      A ``coalesced`` UPDATE (each row once) needs that LOOKUP of its batch but
      not its arrays; the update engine then checks each of its rows against
      the logger before any row changes. Only a plain UPDATE uses the LOOKUP
      up: a batch's coalesced update may come in several descriptors;
    * an ``UPDATE`` waits until the undo logger is ``log_drained``: every
      record taken is persistent before any row is overwritten (write-ahead).
      ``barrier_cycles`` counts that wait;
    * a ``LOOKUP``, ``UPDATE`` or ``FINISH`` of a batch at or before the newest
      commit (``committed``) completes with ``BAD_BATCH``: its undo records
      would be reclaimed at once, so its changes could not be rolled back;
    * a logged ``LOOKUP`` or ``FINISH`` whose distinct rows (with the records
      already live) do not fit the undo ring completes with ``LOG_TOO_SMALL``:
      the undo logger finds it while the rows stream in (it counts records, one
      per distinct row, not indices) and the lookup engine reports it, so an
      ``UPDATE`` after it is refused.

    With ``register_slices`` the descriptor's compares with the lookups
    remembered and with ``committed``, and ``hold_lookup``, are registered: a
    descriptor is offered from its second cycle at the head in ``IDLE``. (A
    hold seen a cycle late is the same as a snapshot that lagged a cycle
    later: the newest commit moves only while a checkpoint descriptor runs.)

    Members
    -------
    desc : In(stream.Signature(descriptor_layout))
    lookup, update, ckpt : Out(stream.Signature(descriptor_layout))
    lookup_done, update_done, ckpt_done : In(stream.Signature(completion_layout))
    done : Out(stream.Signature(completion_layout))
    logging, hold_lookup, log_drained : In(1)
    committed : In(32), committed_valid : In(1)
    busy : Out(1)
    stall_cycles, barrier_cycles : Out(32)
    """

    def __init__(self, config):
        self._config = config
        desc = stream.Signature(descriptor_layout(config))
        done = stream.Signature(completion_layout)
        super().__init__({
            "desc": In(desc),
            "lookup": Out(desc),
            "update": Out(desc),
            "ckpt": Out(desc),
            "lookup_done": In(done),
            "update_done": In(done),
            "ckpt_done": In(done),
            "done": Out(done),
            "logging": In(1),
            "hold_lookup": In(1),
            "log_drained": In(1),
            "committed": In(32),
            "committed_valid": In(1),
            "busy": Out(1),
            "stall_cycles": Out(32),
            "barrier_cycles": Out(32),
        })

    @property
    def counters(self):
        """The control window's registers this dispatcher drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        # Without the checkpoint engine nothing holds a descriptor back: they read 0.
        return ({Reg.CKPT_STALLS: self.stall_cycles, Reg.LOG_BARRIER: self.barrier_cycles}
                if "checkpoint" in self._config.blocks else {})

    def elaborate(self, platform):
        m = Module()
        d = self.desc.payload
        m.d.comb += [self.lookup.payload.eq(d), self.ckpt.payload.eq(d)]

        # The last clean LOOKUP of an even and of an odd batch: in relaxed order
        # the lookup of batch n+1 comes between batch n's lookup and its update.
        seen = Array(Signal.like(d, name=f"seen{k}") for k in range(2))
        seen_valid = Signal(2)
        mine = seen[d.batch[0]]
        # The wide compares of the descriptor at the head (registered on a board,
        # where a descriptor waits a cycle for them: ``settled``).
        compares = {
            "same": (seen_valid.bit_select(d.batch[0], 1) & (mine.batch == d.batch)
                     & (mine.n_bags == d.n_bags) & (mine.n_indices == d.n_indices)
                     & (mine.idx_addr == d.idx_addr) & (mine.off_addr == d.off_addr)),
            "of_batch": seen_valid.bit_select(d.batch[0], 1) & (mine.batch == d.batch),
            "at_or_before": self.committed_valid & (d.batch <= self.committed),
            "hold": self.hold_lookup,
        }
        settled = C(1)
        if self._config.register_slices:
            settled = Signal()
            held_compares = {k: Signal(name=k) for k in compares}
            m.d.sync += [held_compares[k].eq(v) for k, v in compares.items()]
            compares = held_compares
        same, of_batch = compares["same"], compares["of_batch"]
        m.d.comb += [self.update.payload.eq(d),
                     self.update.payload.checked.eq(same & ~d.coalesced)]
        running = Signal(1)                       # parity of the lookup running
        running_relaxed = Signal()                # ... and whether it is relaxed
        clear_mask = Signal(2)
        set_mask = Signal(2)
        # A clean relaxed LOOKUP whose FINISH has not yet logged the rows it deferred.
        unfinished = Signal(2)
        unfinished_set = Signal(2)
        unfinished_clr = Signal(2)
        # Whether that LOOKUP logged its rows (logging on, and not ``nolog``).
        seen_logging = Signal(2)
        # A coalesced UPDATE names the batch's rows once each, not the lookup's bags:
        # it needs a clean logged LOOKUP of its batch, not the same arrays.
        logged = (Mux(d.coalesced, of_batch, same) & ~unfinished.bit_select(d.batch[0], 1)
                  & seen_logging.bit_select(d.batch[0], 1))
        # One update per lookup, except coalesced ones: a batch with more distinct rows
        # than a descriptor's bags goes out as several coalesced UPDATEs, each row of
        # each checked against the logger before it changes.
        with m.If(self.update.valid & self.update.ready & ~d.coalesced):
            m.d.comb += clear_mask.eq(1 << d.batch[0])

        # What IDLE offers for the descriptor at the head: a hand-off to an
        # engine or a refusal. Once offered and not taken, the same offer stands
        # in the next cycle whatever the status lines do (the stream rule).
        lookup_ops = d.op.as_value().matches(Op.LOOKUP, Op.FINISH)
        ckpt_ops = d.op.as_value().matches(Op.COMMIT, Op.SNAPSHOT_MLP, Op.RECOVER)
        is_update = d.op == Op.UPDATE
        fresh_refuse = Signal(ErrorCode)
        # A batch at or before the newest commit: its undo records would be
        # reclaimed at once, so its update could not be rolled back.
        stale = (d.op.as_value().matches(Op.LOOKUP, Op.UPDATE, Op.FINISH) & self.logging
                 & compares["at_or_before"])
        with m.If(stale):
            m.d.comb += fresh_refuse.eq(ErrorCode.BAD_BATCH)
        with m.Elif(is_update & self.logging & ~logged):
            m.d.comb += fresh_refuse.eq(ErrorCode.NOT_LOGGED)
        with m.Elif(~(lookup_ops | ckpt_ops | is_update)):
            m.d.comb += fresh_refuse.eq(ErrorCode.BAD_OP)
        held = compares["hold"] & (d.op == Op.LOOKUP)
        barrier = is_update & self.logging & ~self.log_drained & (fresh_refuse == ErrorCode.NONE)
        fresh = Cat(lookup_ops & ~held & (fresh_refuse == ErrorCode.NONE),
                    is_update & ~barrier & (fresh_refuse == ErrorCode.NONE),
                    ckpt_ops,
                    fresh_refuse != ErrorCode.NONE)
        standing = Signal(4)            # lookup, update, ckpt, refusal offered and not taken
        standing_refuse = Signal(ErrorCode)
        pick = Mux(standing.any(), standing, fresh)
        refuse = Mux(standing.any(), standing_refuse, fresh_refuse)
        offer = Signal(4)
        # A LOOKUP taken is remembered a cycle later, from a copy of the head
        # taken every cycle: the hand-off decision does not run on into the
        # enables of the wide ``seen`` registers. Nothing reads them before
        # the lookup completes.
        head = Signal.like(d)
        head_logging = Signal()
        took_lookup = Signal()
        m.d.sync += [head.eq(d), head_logging.eq(self.logging & ~d.nolog), took_lookup.eq(0)]
        with m.If(took_lookup):
            m.d.sync += [seen[head.batch[0]].eq(head),
                         seen_logging.bit_select(head.batch[0], 1).eq(head_logging)]
        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.desc.valid & settled):
                    m.d.comb += offer.eq(pick)
                    with m.If(~standing.any()):
                        with m.If(held & lookup_ops):
                            m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
                        with m.If(barrier):
                            m.d.sync += self.barrier_cycles.eq(self.barrier_cycles + 1)
                    with m.If(offer[0]):
                        m.d.comb += [self.lookup.valid.eq(1), self.desc.ready.eq(self.lookup.ready)]
                        with m.If(self.lookup.ready):
                            m.d.sync += [running.eq(d.batch[0]), running_relaxed.eq(d.relaxed)]
                            with m.If(d.op == Op.LOOKUP):
                                m.d.sync += took_lookup.eq(1)
                                m.d.comb += clear_mask.eq(1 << d.batch[0])
                            m.next = "LOOKUP"
                    with m.If(offer[1]):
                        m.d.comb += [self.update.valid.eq(1), self.desc.ready.eq(self.update.ready)]
                        with m.If(self.update.ready):
                            m.next = "UPDATE"
                    with m.If(offer[2]):
                        m.d.comb += [self.ckpt.valid.eq(1), self.desc.ready.eq(self.ckpt.ready)]
                        with m.If(self.ckpt.ready):
                            m.next = "CKPT"
                            with m.If(d.op == Op.RECOVER):
                                # Lookups before a recovery logged for a generation
                                # it ends: no update may lean on them.
                                m.d.comb += clear_mask.eq(0b11)
                    with m.If(offer[3]):
                        m.d.comb += [
                            self.done.valid.eq(1),
                            self.done.payload.batch.eq(d.batch),
                            self.done.payload.op.eq(d.op),
                            self.done.payload.error.eq(refuse),
                            self.desc.ready.eq(self.done.ready),
                        ]
                m.d.sync += [standing.eq(Mux(self.desc.ready, 0, offer)),
                             standing_refuse.eq(refuse)]
            for name, source in (("LOOKUP", self.lookup_done), ("UPDATE", self.update_done),
                                 ("CKPT", self.ckpt_done)):
                with m.State(name):
                    m.d.comb += self.busy.eq(1)
                    wiring.connect(m, wiring.flipped(source), wiring.flipped(self.done))
                    with m.If(source.valid & source.ready):
                        m.next = "IDLE"
                        if name == "LOOKUP":
                            clean = source.payload.error == ErrorCode.NONE
                            with m.If((source.payload.op == Op.LOOKUP) & clean):
                                m.d.comb += set_mask.eq(1 << running)
                                with m.If(running_relaxed):
                                    m.d.comb += unfinished_set.eq(1 << running)
                            with m.If((source.payload.op == Op.FINISH) & clean):
                                m.d.comb += unfinished_clr.eq(1 << running)
        m.d.sync += seen_valid.eq((seen_valid & ~clear_mask) | set_mask)
        if self._config.register_slices:
            m.d.sync += settled.eq(self.desc.valid & fsm.ongoing("IDLE") & ~self.desc.ready)
        m.d.sync += unfinished.eq((unfinished & ~clear_mask & ~unfinished_clr) | unfinished_set)
        return m
