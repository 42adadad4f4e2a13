"""RECOVER in amaranth.sim, against the host's reference (host/model/recovery.py), on media
images with torn records, torn rows, old generations and stale commits."""

import random
from dataclasses import replace

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from trainingcxl.hdl.checkpoint.engine import CheckpointEngine
from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.hdl.pmem.controller import PmemController
from trainingcxl.spec.config import Config, PmemTiming
from trainingcxl.spec.records import commit_record, snapshot_header, undo_record
from trainingcxl.host.model.recovery import recover
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

CFG = Config(tables=(12, 20), dim=32, log_lines=30, commit_lines=3, snapshot_lines=4,
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


def run_recover(media, staleness, cfg=CFG):
    """Recover ``media`` on the hardware; returns (error, D, m, rolled, media after)."""
    dut = Harness(cfg)
    out = {}

    async def tb(ctx):
        for addr, value in enumerate(media):
            ctx.set(dut.pmem.media.data[addr], value)
        ctx.set(dut.ckpt.staleness, staleness)
        await stream_put(ctx, dut.ckpt.desc, {"op": Op.RECOVER, "batch": 0})
        done = await stream_get(ctx, dut.ckpt.done, timeout=200_000)
        for _ in range(4 * CFG.pmem.write_latency):     # nothing may be left in flight
            await ctx.tick()
        out["error"] = ErrorCode(done.error)
        out["d"], out["m"] = ctx.get(dut.ckpt.recovered_d), ctx.get(dut.ckpt.recovered_m)
        out["rolled"] = ctx.get(dut.ckpt.rolled_back)
        out["gen"] = ctx.get(dut.ckpt.gen)
        out["k"] = ctx.get(dut.ckpt.staleness_in_force)
        out["media"] = [ctx.get(dut.pmem.media.data[a]) for a in range(CFG.media_lines)]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return out


def random_image(rng):
    """Tables, log, commits and snapshots as a power failure might leave them."""
    cfg = CFG
    lpr, slots = cfg.lines_per_row, cfg.log_slots
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
    # The log ring: records of this generation for batches around the commit, in
    # ring order, a lap of older records, some torn.
    start = rng.randrange(slots)
    lsn0 = rng.randrange(0, 1000)
    batch = committed - 2
    for k in range(slots):
        s = (start + k) % slots
        if rng.random() < 0.3:
            batch += 1
        g = gen if rng.random() < 0.85 else gen - 1
        t = rng.randrange(cfg.n_tables)
        row = rng.randrange(cfg.tables[t])
        addr = cfg.table_base[t] + row * lpr
        lines = undo_record(gen=g, batch=batch, lsn=lsn0 + k, addr=addr,
                            row_lines=[rng.getrandbits(512) for _ in range(lpr)])
        at = cfg.log_base + s * cfg.rec_lines
        if rng.random() < 0.15:
            j = rng.randrange(cfg.rec_lines)
            lines[j] = tear(rng, lines[j], rng.getrandbits(512))
        media[at:at + cfg.rec_lines] = lines
    return media


_IMAGES = ([(s, 1, False) for s in range(12)] + [(s, 4, False) for s in range(3)]
           + [(s, 1, True) for s in range(4)] + [(s, 4, True) for s in range(2)])


# Seed 0 of each kind is in the fast tier; the other seeds are marked slow.
@pytest.mark.parametrize("seed,folds,registered",
                         [c if c[0] == 0 else pytest.param(*c, marks=pytest.mark.slow)
                          for c in _IMAGES])
def test_recover_matches_the_reference_on_random_images(seed, folds, registered):
    """``registered``: the boards' register slices, which also delay each line's verdict by a
    cycle (with one-cycle checksums the rollback must then hold the next line back)."""
    rng = random.Random(seed)
    media = random_image(rng)
    register = rng.choice([0, 2])       # counts only without a checkpoint
    want = list(media)
    ref = recover(CFG, want, register)
    got = run_recover(media, register, replace(CFG, crc_folds=folds, register_slices=registered))
    assert got["k"] == ref.staleness
    if not ref.found:
        assert got["error"] == ErrorCode.NO_CHECKPOINT and got["gen"] == ref.gen
        return
    assert got["error"] == ErrorCode.NONE
    assert (got["d"], got["m"], got["rolled"], got["gen"]) == (ref.d, ref.m, ref.rolled_back,
                                                               ref.gen)
    bad = [a for a in range(CFG.media_lines) if got["media"][a] != want[a]]
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
    """A power failure during batch 5's update: the first record is intact and its row
    torn (half updated), the second record is torn, so write-ahead kept its row
    unchanged. Recovery restores the torn row and leaves the other: every row is
    as after batch 4, and generation 3 begins."""
    rng = random.Random(1)
    cfg = CFG
    lpr = cfg.lines_per_row
    after4, media = committed_media(rng, cfg, gen=2, batch=4)
    rows = [cfg.table_base[0] + 3 * lpr, cfg.table_base[1] + 7 * lpr]
    records = [undo_record(gen=2, batch=5, lsn=k, addr=a, row_lines=after4[a:a + lpr])
               for k, a in enumerate(rows)]
    for k, rec in enumerate(records):
        at = cfg.log_base + k * cfg.rec_lines
        media[at:at + cfg.rec_lines] = rec
    # The second record's header is torn: it never became persistent.
    hdr = cfg.log_base + 2 * cfg.rec_lines - 1
    media[hdr] = tear(rng, media[hdr], 0)
    # The first row was being rewritten: one line torn, one line updated.
    media[rows[0]] = tear(rng, rng.getrandbits(512), after4[rows[0]])
    media[rows[0] + 1] = rng.getrandbits(512)
    got = run_recover(media, 0)
    assert (got["error"], got["d"], got["m"], got["rolled"], got["gen"]) == (
        ErrorCode.NONE, 4, 4, 1, 3)
    assert got["media"][:cfg.table_lines] == after4


@pytest.mark.parametrize("registered", [False, True])
def test_a_lone_record_in_the_last_log_slot_is_rolled_back(registered):
    """The scan's last record is the only live one: its verdict (a cycle late with register
    slices) must be in before the scan decides whether anything is to be rolled back."""
    rng = random.Random(2)
    cfg = replace(CFG, register_slices=registered)
    lpr = cfg.lines_per_row
    before, media = committed_media(rng, cfg, gen=1, batch=6)
    row = cfg.table_base[1] + 5 * lpr
    at = cfg.log_base + (cfg.log_slots - 1) * cfg.rec_lines
    media[at:at + cfg.rec_lines] = undo_record(gen=1, batch=7, lsn=0, addr=row,
                                               row_lines=before[row:row + lpr])
    media[row:row + lpr] = [rng.getrandbits(512) for _ in range(lpr)]     # batch 7's update
    got = run_recover(media, 0, cfg)
    assert (got["error"], got["d"], got["rolled"], got["gen"]) == (ErrorCode.NONE, 6, 1, 2)
    assert got["media"][:cfg.table_lines] == before


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
    out = Signal(32)
    m.d.comb += out.eq(crc_part(state, line, index, folds))

    async def tb(ctx):
        for _ in range(4):
            value, crc = rng.getrandbits(512), rng.choice([CRC_INIT, rng.getrandbits(32)])
            ctx.set(line, value)
            acc = crc
            for k in range(folds):
                ctx.set(state, acc)
                ctx.set(index, k)
                acc = ctx.get(out)
            assert acc == crc_update(crc, value)

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
