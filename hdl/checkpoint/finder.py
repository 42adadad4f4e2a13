"""Where a recovery returns to: the newest commit, the snapshots and ring headers, D."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import RING_HEADERS
from trainingcxl.spec.records import COMMIT, RING, SNAPSHOT
from .layouts import verdict_layout, walk_layout

__all__ = ["CheckpointFinder"]


class CheckpointFinder(wiring.Component):
    """Keeps what a recovery's one-line records say (their ``verdict``): the newest intact
    commit record, the intact snapshot headers and the ring headers of its generation.
    Told to ``decide``, it picks the snapshots not after the newest commit C (or after
    the pool's target), the batch D to return to (the newest snapshot plus the staleness
    bound, at most C; or the target) and whether the ring is walked back to D.

    Members
    -------
    verdict : In(stream of verdict_layout, always ready)
    clear : In(1)
        A recovery begins: nothing found yet.
    decide : In(1)
        Every header is read: decide from the next cycle.
    slots_valid : In(2)
        The engine's snapshot slots, as ``snapshots`` set them.
    target : In(32), targeted : In(1)
        A device of a pool (``Config.pool.member``; absent otherwise): D is ``target`` if
        that is older than C, whatever the snapshots.
    found : Out(1), best_gen : Out(16), best_slot : Out(range(commit_lines)), best_k : Out(8)
        The newest intact commit record.
    snapshots : Out(1), snapshots_valid : Out(2), snapshot_batches : Out(ArrayLayout(32, 2))
        In the cycle they are weighed: the intact snapshot slots not after C (or the
        target), and their batches.
    none : Out(1)
        The decision: no checkpoint to return to.
    d_batch, m_batch : Out(32)
    walk : Out(stream of walk_layout, always ready), skip : Out(1)
        The decision: walk the ring back to D, or no record of the ring is after D.
    drop : Out(stream of a snapshot slot)
        A pool's device: a snapshot after D, to erase before the seal (it belongs to the
        timeline the recovery ends); taken, it is no longer one.
    """

    def __init__(self, config):
        self._config = config
        super().__init__({
            "verdict": In(stream.Signature(verdict_layout, always_ready=True)),
            "clear": In(1),
            "decide": In(1),
            "slots_valid": In(2),
            **({"target": In(32), "targeted": In(1), "drop": Out(stream.Signature(1))}
               if config.pool.member else {}),
            "found": Out(1),
            "best_gen": Out(16),
            "best_slot": Out(range(config.commit_lines)),
            "best_k": Out(8),
            "snapshots": Out(1),
            "snapshots_valid": Out(2),
            "snapshot_batches": Out(data.ArrayLayout(32, 2)),
            "none": Out(1),
            "d_batch": Out(32),
            "m_batch": Out(32),
            "walk": Out(stream.Signature(walk_layout(config.media_addr_bits), always_ready=True)),
            "skip": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        groups = cfg.log_groups
        last_slot = cfg.log_base + (groups - 1) * cfg.group_lines
        best_gen, best_slot, best_k, found = self.best_gen, self.best_slot, self.best_k, self.found
        best_batch = Signal(32)
        rsv = Signal(2)
        rsb = Array(Signal(32, name=f"rslot{k}_batch") for k in range(2))
        mk = Signal(33)                 # the snapshot's batch plus the staleness bound
        rhv = Signal(RING_HEADERS)                                  # ring header of gen g
        rh_next = Array(Signal(32, name=f"ring{k}_next") for k in range(RING_HEADERS))
        rh_slot = Array(Signal(32, name=f"ring{k}_slot") for k in range(RING_HEADERS))
        rh_batch = Array(Signal(32, name=f"ring{k}_batch") for k in range(RING_HEADERS))
        # The walk the newest ring header asks for.
        w_any, w_newest = Signal(name="walk_any"), Signal(32, name="walk_newest")
        plan = self.walk.payload
        # A device of a pool may be told the batch to roll back to (``target``).
        member = cfg.pool.member
        targeted = self.targeted if member else C(0)
        limit = Signal(32)              # the newest batch D may be: C, or an older target
        if member:
            m.d.comb += limit.eq(Mux(targeted & (self.target < best_batch), self.target,
                                     best_batch))
            drops = Cat(targeted & rsv[k] & (rsb[k] > self.d_batch) for k in range(2))
            m.d.comb += [self.drop.valid.eq(drops.any()), self.drop.payload.eq(~drops[0])]
        else:
            m.d.comb += limit.eq(best_batch)

        v = self.verdict.payload
        with m.If(self.verdict.valid & v.intact):
            with m.Switch(v.phase):
                with m.Case(0):
                    newer = Cat(v.hdr.batch, v.hdr.gen) > Cat(best_batch, best_gen)
                    with m.If((v.hdr.magic == COMMIT) & (~found | newer)):
                        m.d.sync += [found.eq(1), best_gen.eq(v.hdr.gen),
                                     best_batch.eq(v.hdr.batch), best_k.eq(v.hdr.a[:8]),
                                     best_slot.eq(cfg.commit_lines - v.left)]
                with m.Case(1):
                    k = (v.left == 1)
                    with m.If(v.hdr.magic == SNAPSHOT):
                        m.d.sync += [rsv.bit_select(k, 1).eq(1), rsb[k].eq(v.hdr.batch)]
                with m.Case(2):
                    k = Signal(range(RING_HEADERS))
                    m.d.comb += k.eq(RING_HEADERS - v.left)
                    with m.If((v.hdr.magic == RING) & (v.hdr.gen == best_gen)):
                        m.d.sync += [rhv.bit_select(k, 1).eq(1), rh_next[k].eq(v.hdr.a),
                                     rh_slot[k].eq(v.hdr.b), rh_batch[k].eq(v.hdr.batch)]
        with m.If(self.clear):
            m.d.sync += [found.eq(0), rsv.eq(0), rhv.eq(0)]

        # The newest intact snapshot not after the newest commit, and the newest
        # batch it may restart from, into registers: the choice in CHOOSE starts
        # from them. Registered, the compares are taken into registers first
        # (DECIDE) and the picks made from them (WEIGH).
        def weigh(usable, first, k1):
            # Both sums are made beside the compares, not after the choice.
            m.d.comb += [self.snapshots.eq(1), self.snapshots_valid.eq(usable),
                         self.snapshot_batches[0].eq(rsb[0]),
                         self.snapshot_batches[1].eq(rsb[1])]
            m.d.sync += [self.m_batch.eq(Mux(first, rsb[0], rsb[1])),
                         mk.eq(Mux(first, rsb[0] + best_k, rsb[1] + best_k))]
            # The ring header of generation g that says the most records: where
            # the walk would start.
            e = Mux(k1, rh_next[1], rh_next[0])
            nxt = Mux(k1, rh_slot[1], rh_slot[0])
            m.d.sync += [w_any.eq(rhv.any() & (e != 0)), plan.end.eq(e),
                         w_newest.eq(Mux(k1, rh_batch[1], rh_batch[0])),
                         plan.slot.eq(Mux(nxt == cfg.log_base, last_slot, nxt - cfg.group_lines)),
                         plan.groups.eq(Mux(e >= groups, groups, e))]
            m.next = "CHOOSE"

        def start_walk(rollback):
            m.d.comb += [self.walk.valid.eq(rollback), self.skip.eq(~rollback)]
            m.next = "IDLE"

        # Roll back only if the ring holds records of batches after D.
        # Registered, that compare of 32 bits is taken into a register of
        # its own, and the walk starts a cycle later.
        rollback = w_any & (w_newest > self.d_batch)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.decide):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                usable = Signal(2)
                m.d.comb += usable.eq(Cat(rsv[0] & (rsb[0] <= limit),
                                          rsv[1] & (rsb[1] <= limit)))
                first = usable[0] & (~usable[1] | (rsb[0] >= rsb[1]))
                k1 = rhv[1] & (~rhv[0] | (rh_next[1] > rh_next[0]))
                if cfg.register_slices:
                    picks = Signal(4)
                    m.d.sync += picks.eq(Cat(usable, first, k1))
                    m.next = "WEIGH"
                else:
                    weigh(usable, first, k1)
            if cfg.register_slices:
                with m.State("WEIGH"):
                    weigh(picks[:2], picks[2], picks[3])
            with m.State("CHOOSE"):
                with m.If(~found | (~targeted & (self.slots_valid == 0))):
                    m.d.comb += self.none.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += self.d_batch.eq(Mux(targeted, limit,
                                                    Mux(mk < best_batch, mk, best_batch)))
                    m.next = "PLAN"
            with m.State("PLAN"):
                if cfg.register_slices:
                    rollback_late = Signal()
                    m.d.sync += rollback_late.eq(rollback)
                    m.next = "START"
                else:
                    start_walk(rollback)
            if cfg.register_slices:
                with m.State("START"):
                    start_walk(rollback_late)
        if member:
            with m.If(self.drop.valid & self.drop.ready):
                m.d.sync += rsv.bit_select(self.drop.payload, 1).eq(0)
        return m
