"""RECOVER in amaranth.sim, against the host's reference (host/model/recovery.py), on media
images with torn records, torn rows, old generations, stale commits and ring headers; and
what it reads: the records it rolls back and a constant, whatever the ring or tables."""

import random
from dataclasses import replace

import pytest
from amaranth import Cat, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.checkpoint.engine import CheckpointEngine
from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.spec.descriptors import NO_TARGET, ErrorCode, Op
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config, PmemTiming, PoolShape
from trainingcxl.spec.config import GROUP_RECORDS
from trainingcxl.spec.records import (COMMIT, commit_record, ring_header, snapshot_header,
                                      undo_group, valid_header)
from trainingcxl.host.model.recovery import recover
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

CFG = Config(tables=(12, 20), dim=32, log_lines=3 * 13, commit_lines=3, snapshot_lines=4,
             pmem=PmemTiming(read_latency=6, write_latency=8, wpq_depth=4, read_depth=8))
WORD = (1 << 64) - 1


class Harness(wiring.Component):
    """The checkpoint engine on a PMEM controller, nothing else."""

    def __init__(self, cfg):
        self.ckpt = CheckpointEngine(cfg)
        self.pmem = PmemController(cfg, n_ports=2)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ckpt, m.submodules.pmem = self.ckpt, self.pmem
        wiring.connect(m, self.ckpt.pmem, self.pmem.port0)
        wiring.connect(m, self.ckpt.snap_pmem, self.pmem.port1)
        return m


def tear(rng, new, old):
    """``new`` with a random nonempty proper subset of its 8-byte words left ``old``."""
    keep = rng.randrange(1, 255)
    mask = sum(WORD << (64 * w) for w in range(8) if keep >> w & 1)
    return (new & mask) | (old & ~mask)


def put_groups(cfg, media, slot, groups):
    """Write undo groups ``(gen, batch, lsn, [(addr, row_lines)])`` into consecutive ring
    slots from ``slot``; returns the slot after the last."""
    for gen, batch, lsn, records in groups:
        at = cfg.log_base + slot * cfg.group_lines
        lines = undo_group(gen=gen, batch=batch, lsn=lsn, records=records)
        media[at:at + len(lines)] = lines
        slot = (slot + 1) % cfg.log_groups
    return slot


def slot_line(cfg, slot):
    return cfg.log_base + slot % cfg.log_groups * cfg.group_lines


def run_recover(media, staleness, cfg=CFG, target=NO_TARGET):
    """Recover ``media`` on the hardware; returns (error, D, m, rolled, media after)."""
    dut = Harness(cfg)
    out = {}

    async def tb(ctx):
        for addr, value in enumerate(media):
            ctx.set(dut.pmem.media.data[addr], value)
        ctx.set(dut.ckpt.staleness, staleness)
        await stream_put(ctx, dut.ckpt.desc, {"op": Op.RECOVER, "batch": target})
        done = await stream_get(ctx, dut.ckpt.done, timeout=200_000)
        for _ in range(4 * CFG.pmem.write_latency):     # nothing may be left in flight
            await ctx.tick()
        out["error"] = ErrorCode(done.error)
        out["d"], out["m"] = ctx.get(dut.ckpt.recovered_d), ctx.get(dut.ckpt.recovered_m)
        out["rolled"] = ctx.get(dut.ckpt.rolled_back)
        out["m_valid"] = bool(ctx.get(dut.ckpt.recovered_flags) & 2)
        out["gen"] = ctx.get(dut.ckpt.gen)
        out["k"] = ctx.get(dut.ckpt.staleness_in_force)
        out["lines"] = ctx.get(dut.ckpt.recover_lines)
        out["media"] = [ctx.get(dut.pmem.media.data[a]) for a in range(cfg.media_lines)]

    async def stream_rule(ctx):
        # A request offered and not taken must be offered again, unchanged (a
        # read's data and byte enables mean nothing and may change).
        req, offered = dut.ckpt.pmem.req, None
        p = req.payload
        async for _, _, valid, ready, op, addr, tag, line in ctx.tick().sample(
                req.valid, req.ready, p.op, p.addr, p.tag, Cat(p.data, p.be)):
            now = (op, addr, tag, line if op == LineOp.WRITE else None)
            if offered is not None and (not valid or now != offered):
                broken.append(f"a PMEM request offered and not taken was "
                              f"{'changed' if valid else 'withdrawn'}: {offered[:3]} -> {now[:3]}")
            offered = now if valid and not ready else None

    broken = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.add_testbench(stream_rule, background=True)
    sim.run()
    assert not broken, broken[0]
    return out


def random_image(rng):
    """Tables, log, commits and snapshots as a power failure might leave them."""
    cfg = CFG
    media = [rng.getrandbits(512) for _ in range(cfg.table_lines)] + [0] * (
        cfg.media_lines - cfg.table_lines)
    gen = rng.randrange(1, 6)
    committed = rng.randrange(3, 40)
    # Commit records: the newest of this generation, older ones, an older generation's
    # later batch (a timeline a recovery undid), one maybe torn.
    k = rng.choice([0, 0, 1, 3])
    commits = [(gen, committed), (gen, committed - 1), (gen - 1, committed + 2)]
    rng.shuffle(commits)
    for slot, (g, b) in enumerate(commits):
        media[cfg.commit_base + slot] = commit_record(gen=g, batch=b, staleness=k)
    if rng.random() < 0.4:
        slot = rng.randrange(cfg.commit_lines)
        media[cfg.commit_base + slot] = tear(rng, media[cfg.commit_base + slot],
                                             rng.getrandbits(512))
    for k, base in enumerate(cfg.snapshot_base):
        b = committed - rng.randrange(0, 5) if rng.random() < 0.8 else committed + 1
        data = [rng.getrandbits(512) for _ in range(cfg.snapshot_size - 1)]
        media[base] = snapshot_header(gen=gen, batch=b, data_lines=data)
        if rng.random() < 0.2:
            media[base] = tear(rng, media[base], 0)
        media[base + 1:base + cfg.snapshot_size] = data
    # The log ring: groups of this generation for batches around the commit, in
    # ring order, a lap of older groups, some torn.
    lpr, groups = cfg.lines_per_row, cfg.log_groups
    start = rng.randrange(groups)
    lsn = lsn0 = rng.randrange(0, 1000)
    batch = committed
    batches, lsns = [], []
    for k in range(groups):
        if rng.random() < 0.6:
            batch += 1
        batches.append(batch)
        lsns.append(lsn)
        g = gen if rng.random() < 0.85 else gen - 1
        records = []
        for _ in range(rng.randrange(1, GROUP_RECORDS + 1)):
            t = rng.randrange(cfg.n_tables)
            addr = cfg.table_base[t] + rng.randrange(cfg.tables[t]) * lpr
            records.append((addr, [rng.getrandbits(512) for _ in range(lpr)]))
        lines = undo_group(gen=g, batch=batch, lsn=lsn, records=records)
        if rng.random() < 0.15:
            j = rng.randrange(len(lines))
            lines[j] = tear(rng, lines[j], rng.getrandbits(512))
        at = slot_line(cfg, start + k)
        media[at:at + len(lines)] = lines
        lsn += len(records)
    lsns.append(lsn)
    # Ring headers: how far the ring was persistent, one maybe older, torn, of another
    # generation or missing.
    for line in range(2):
        n = rng.randrange(groups + 1)
        g = gen if rng.random() < 0.8 else rng.choice([gen - 1, gen + 1])
        if rng.random() < 0.9:
            media[cfg.ring_base + line] = ring_header(
                gen=g, batch=batches[n - 1] if n else 0, next_lsn=lsns[n],
                next_slot=slot_line(cfg, start + n))
        if rng.random() < 0.15:
            media[cfg.ring_base + line] = tear(rng, media[cfg.ring_base + line],
                                               rng.getrandbits(512))
    return media


_IMAGES = ([(s, 1, False, 1) for s in range(12)] + [(s, 4, False, 1) for s in range(3)]
           + [(s, 1, True, 1) for s in range(4)] + [(s, 4, True, 1) for s in range(2)]
           + [(s, 8, True, 8) for s in range(3)])

#: PMEM timing with room for lines in 8 beats (``Config.min_read_latency``).
_BEATS_PMEM = replace(CFG.pmem, read_latency=16, write_latency=16)


# Seed 0 of each kind is in the fast tier; the other seeds are marked slow.
@pytest.mark.parametrize("seed,folds,registered,beats",
                         [c if c[0] == 0 else pytest.param(*c, marks=pytest.mark.slow)
                          for c in _IMAGES])
def test_recover_matches_the_reference_on_random_images(seed, folds, registered, beats):
    """``registered``: the boards' register slices, which also delay each line's verdict by a
    cycle (with one-cycle checksums the rollback must then hold the next line back).
    ``beats``: lines cross to PMEM in beats (the boards'), so the engine's port is
    often not ready; every run checks that it keeps what it offers (``run_recover``)."""
    rng = random.Random(seed)
    media = random_image(rng)
    register = rng.choice([0, 2])       # counts only without a checkpoint
    want = list(media)
    ref = recover(CFG, want, register)
    got = run_recover(media, register, replace(
        CFG, crc_folds=folds, register_slices=registered, line_beats=beats,
        pmem=CFG.pmem if beats == 1 else _BEATS_PMEM))
    assert got["k"] == ref.staleness
    if not ref.found:
        assert got["error"] == ErrorCode.NO_CHECKPOINT and got["gen"] == ref.gen
        return
    assert got["error"] == ErrorCode.NONE
    assert (got["d"], got["m"], got["rolled"], got["gen"]) == (ref.d, ref.m, ref.rolled_back,
                                                               ref.gen)
    bad = [a for a in range(CFG.media_lines) if got["media"][a] != want[a]]
    assert not bad, f"{len(bad)} media lines differ from the reference, first {bad[0]}"


@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow)
                                         for s in range(2, 10))])
def test_a_pool_device_rolls_back_to_the_batch_the_host_names(seed):
    """A device of a pool: RECOVER to the pool's durable batch, up to a few batches before
    the device's newest commit, matches the reference (D the target whatever the
    snapshots, m the newest snapshot not after it, the snapshots after it erased)."""
    rng = random.Random(1000 + seed)
    cfg = replace(CFG, pool=PoolShape(member=True))
    media = random_image(rng)
    commits = [valid_header(media[cfg.commit_base + k], COMMIT) for k in range(cfg.commit_lines)]
    newest = max(((h.gen, h.batch) for h in commits if h is not None), default=(0, 0))[1]
    target = max(0, newest - rng.randrange(0, 6)) if rng.random() < 0.9 else NO_TARGET
    want = list(media)
    ref = recover(cfg, want, 0, None if target == NO_TARGET else target)
    got = run_recover(media, 0, cfg, target)
    if not ref.found:
        assert got["error"] == ErrorCode.NO_CHECKPOINT
        return
    assert got["error"] == ErrorCode.NONE
    assert got["m_valid"] == (ref.m is not None)
    assert (got["d"], got["rolled"], got["gen"]) == (ref.d, ref.rolled_back, ref.gen)
    if ref.m is not None:
        assert got["m"] == ref.m
    bad = [a for a in range(cfg.media_lines) if got["media"][a] != want[a]]
    assert not bad, f"{len(bad)} media lines differ from the reference, first {bad[0]}"


def committed_media(rng, cfg, *, gen, batch):
    """Random tables, then a commit record and an intact snapshot in slot 0, both of
    ``batch`` in generation ``gen``; returns (tables, media)."""
    tables = [rng.getrandbits(512) for _ in range(cfg.table_lines)]
    media = list(tables) + [0] * (cfg.media_lines - cfg.table_lines)
    media[cfg.commit_base] = commit_record(gen=gen, batch=batch)
    data = [rng.getrandbits(512) for _ in range(cfg.snapshot_size - 1)]
    media[cfg.snapshot_base[0]] = snapshot_header(gen=gen, batch=batch, data_lines=data)
    media[cfg.snapshot_base[0] + 1:cfg.snapshot_base[1]] = data
    return tables, media


def test_torn_record_and_torn_row():
    """A power failure during batch 5's update: both its records are persistent in a
    group and a ring header says so; the first row is torn (half updated), the second
    not yet touched. Batch 6's early (relaxed) lookup had logged a third record in the
    next group after the header, its group line torn: the walk starts at the header, so
    it is never read. Recovery restores the torn row: every row is as after batch 4,
    and generation 3 begins."""
    rng = random.Random(1)
    cfg = CFG
    lpr = cfg.lines_per_row
    after4, media = committed_media(rng, cfg, gen=2, batch=4)
    rows = [cfg.table_base[0] + 3 * lpr, cfg.table_base[1] + 7 * lpr, cfg.table_base[1] + 2 * lpr]
    put_groups(cfg, media, 0, [
        (2, 5, 0, [(a, after4[a:a + lpr]) for a in rows[:2]]),
        (2, 6, 2, [(rows[2], after4[rows[2]:rows[2] + lpr])]),
    ])
    media[cfg.ring_base + 1] = ring_header(gen=2, batch=5, next_lsn=2, next_slot=slot_line(cfg, 1))
    media[slot_line(cfg, 1)] = tear(rng, media[slot_line(cfg, 1)], 0)
    # The first row was being rewritten: one line torn, one line updated.
    media[rows[0]] = tear(rng, rng.getrandbits(512), after4[rows[0]])
    media[rows[0] + 1] = rng.getrandbits(512)
    got = run_recover(media, 0)
    assert (got["error"], got["d"], got["m"], got["rolled"], got["gen"]) == (
        ErrorCode.NONE, 4, 4, 2, 3)
    assert got["media"][:cfg.table_lines] == after4


@pytest.mark.parametrize("registered", [False, True])
def test_a_lone_record_in_the_last_log_slot_is_rolled_back(registered):
    """The newest group is in the last slot (the ring header's next slot wrapped to the
    first), of one record, the only live one: the walk rolls it back, reads the group
    before it (batch 6, durable), and stops there; its verdict, a cycle late with
    register slices, must be in before the walk ends."""
    rng = random.Random(2)
    cfg = replace(CFG, register_slices=registered)
    lpr, groups = cfg.lines_per_row, cfg.log_groups
    before, media = committed_media(rng, cfg, gen=1, batch=6)
    row = lambda k: cfg.table_base[k % 2] + (k + 1) * lpr
    put_groups(cfg, media, 0, [
        (1, 6 if s < groups - 1 else 7, 2 * s,
         [(row(k), before[row(k):row(k) + lpr]) for k in (2 * s, 2 * s + 1)][:2 if s < groups - 1 else 1])
        for s in range(groups)])
    last = row(2 * (groups - 1))
    media[last:last + lpr] = [rng.getrandbits(512) for _ in range(lpr)]    # batch 7's update
    media[cfg.ring_base] = ring_header(gen=1, batch=7, next_lsn=2 * groups - 1,
                                       next_slot=cfg.log_base)
    got = run_recover(media, 0, cfg)
    assert (got["error"], got["d"], got["rolled"], got["gen"]) == (ErrorCode.NONE, 6, 1, 2)
    assert got["media"][:cfg.table_lines] == before


def long_history(cfg, *, live, seed=0):
    """A ring that wrapped many times: gen 3 committed batch 40 (and snapshot 40); the
    ring's slots hold groups of older batches and generations, then ``live`` records of
    batch 41 before the ring header; returns (tables after batch 40, media)."""
    rng = random.Random(seed)
    lpr, groups = cfg.lines_per_row, cfg.log_groups
    before, media = committed_media(rng, cfg, gen=3, batch=40)
    # Older batches' groups of four records fill the ring up to batch 41's.
    new = -(-live // GROUP_RECORDS)
    end = 7 * 4 * groups + live                         # records so far in generation 3
    slot = 7 * groups + 3                               # groups so far
    history = []
    lsn = end - live - 4 * (groups - new)
    for k in range(groups - new):
        rows = [cfg.table_base[t] + rng.randrange(cfg.tables[t]) * lpr
                for t in (rng.randrange(cfg.n_tables) for _ in range(4))]
        history.append((3, 40 - (groups - new - k) // 5, lsn,
                        [(r, [rng.getrandbits(512) for _ in range(lpr)]) for r in rows]))
        lsn += 4
    # One record per row and batch; batch 41's update has changed each since.
    touched = set()
    records = []
    while len(records) < live:
        t = rng.randrange(cfg.n_tables)
        row = cfg.table_base[t] + rng.randrange(cfg.tables[t]) * lpr
        if row not in touched:
            touched.add(row)
            records.append((row, before[row:row + lpr]))
            media[row:row + lpr] = [rng.getrandbits(512) for _ in range(lpr)]
    for k in range(0, live, GROUP_RECORDS):
        history.append((3, 41, lsn, records[k:k + GROUP_RECORDS]))
        lsn += len(records[k:k + GROUP_RECORDS])
    nxt = put_groups(cfg, media, (slot - groups) % groups, history)
    media[cfg.ring_base + 1] = ring_header(gen=3, batch=41, next_lsn=end,
                                           next_slot=slot_line(cfg, nxt))
    media[cfg.ring_base] = ring_header(gen=2, batch=90, next_lsn=end + 5,
                                       next_slot=cfg.log_base)     # an older timeline's
    return before, media


@pytest.mark.parametrize("tables,log_lines", [((12, 20), 26), ((12, 20), 300),
                                              ((200, 300), 26), ((200, 300), 300)])
def test_recovery_reads_the_records_it_rolls_back_and_a_constant(tables, log_lines):
    """Recovery cost is flat in the ring and table sizes: the lines RECOVER reads are
    the slots of the groups it rolls back, plus the commit, snapshot and ring headers,
    the group line that ends the walk and at most a window of reads issued ahead."""
    cfg = replace(CFG, tables=tables, log_lines=log_lines)
    window = max(cfg.lines_per_row, cfg.pmem.read_depth)
    const = cfg.commit_lines + 2 + 2 + 1 + window
    for live in (0, 1, 5, 8):
        if -(-live // GROUP_RECORDS) >= cfg.log_groups:
            continue
        before, media = long_history(cfg, live=live, seed=live)
        want = list(media)
        ref = recover(cfg, want, 0)
        got = run_recover(media, 0, cfg)
        assert (got["error"], got["d"], got["rolled"]) == (ErrorCode.NONE, 40, live)
        assert ref.rolled_back == live
        assert got["media"][:cfg.table_lines] == before == want[:cfg.table_lines]
        assert len(ref.reads) <= got["lines"] <= len(ref.reads) + window
        bound = -(-live // GROUP_RECORDS) * cfg.group_lines + const
        assert got["lines"] <= bound, (live, got["lines"])
        print(f"tables {tables} ring {cfg.log_groups} groups: {live} rolled back, "
              f"{got['lines']} lines read (reference {len(ref.reads)})")


@pytest.mark.parametrize("folds", [2, 4, 8])
def test_crc_parts_give_the_line_checksum(folds):
    """Feeding a line's parts in turn through crc_part gives the host's checksum."""
    from amaranth import Signal
    from amaranth.sim import Simulator
    from trainingcxl.hdl.checkpoint.crc import crc_part
    from trainingcxl.spec.records import CRC_INIT, crc_update

    rng = random.Random(folds)
    m = Module()
    state, line = Signal(32), Signal(512)
    index = Signal(range(folds))
    advance = Signal()
    out = Signal(32)
    m.d.comb += out.eq(crc_part(m, state, line, index, folds, advance))

    async def tb(ctx):
        for _ in range(4):
            value, crc = rng.getrandbits(512), rng.choice([CRC_INIT, rng.getrandbits(32)])
            ctx.set(line, value)
            acc = crc
            for k in range(folds):
                ctx.set(state, acc)
                ctx.set(index, k)
                ctx.set(advance, k != folds - 1)
                acc = ctx.get(out)
                await ctx.tick()
            assert acc == crc_update(crc, value)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
