"""Lookup datapath in amaranth.sim: engine + PMEM model + a behavioural host memory."""

import functools
import random

import numpy as np
import pytest

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.hdl.checkpoint.logger import UndoLogger
from trainingcxl.hdl.compute.lookup import LookupEngine
from trainingcxl.spec.config import PmemTiming
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import embedding_bag_sum
from trainingcxl.sim.amaranth_host import words_to_lines
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

TIMING = PmemTiming(read_latency=10, write_latency=6, write_rate=(1, 1), read_rate=(3, 5),
                    wpq_depth=8, read_depth=16)


@pytest.fixture
def cfg_for(small_config):
    """A small device on this file's PMEM timing, tables of 24 and 40 rows unless given."""
    return functools.partial(small_config, TIMING, tables=(24, 40))


@pytest.fixture
def run_lookups(engine_on_pmem):
    """``run_lookups(cfg, tables, batches, *, seed=0, ops=None, log=False)``: load ``tables``
    into PMEM, run one LOOKUP per batch, return the host writes of each.

    With ``log`` the undo logger takes the rows (generation 1), each batch id ``b``
    after batch ``b - 1`` was made durable; each result then ends in the records
    written so far."""

    def run(cfg, tables, batches, *, seed=0, ops=None, log=False):
        logger = UndoLogger(cfg) if log else None
        h = engine_on_pmem(cfg, LookupEngine(cfg), ["pmem"], logger=logger)
        eng = h.engine
        host, writes, results = {}, {}, []
        IDX, OFF, OUT = 0x1000, 0x2000, 0x3000

        async def main(ctx):
            ctx.set(h.pmem.port0.wack.ready, 1)
            await h.load(ctx, tables)
            if log:
                ctx.set(h.logger.enable, 1)
                ctx.set(h.logger.gen, 1)
            for b, (indices, offsets) in enumerate(batches):
                op, batch_id, relaxed = ops[b] if ops else (Op.LOOKUP, b, 0)
                if log:
                    ctx.set(h.logger.durable, batch_id - 1)
                    ctx.set(h.logger.durable_valid, batch_id > 0)
                if op != Op.FINISH:
                    host.clear()
                    writes.clear()
                for k, line in enumerate(words_to_lines(indices)):
                    host[IDX + k] = line
                for k, line in enumerate(words_to_lines(offsets)):
                    host[OFF + k] = line
                await stream_put(ctx, eng.desc, {
                    "op": op, "batch": batch_id, "n_bags": len(offsets) - 1, "relaxed": relaxed,
                    "n_indices": len(indices), "idx_addr": IDX, "off_addr": OFF, "vec_addr": OUT,
                })
                done = await stream_get(ctx, eng.done, timeout=50_000)
                assert done.batch == batch_id
                if log:
                    for _ in range(5000):
                        if ctx.get(h.logger.drained):
                            break
                        await ctx.tick()
                    results.append((done.error, dict(writes), ctx.get(h.logger.records)))
                else:
                    results.append((done.error, dict(writes)))

        h.simulate(main, (eng.off_mem, eng.idx_mem, eng.out_mem), host, random.Random(seed), writes)
        return results

    return run


def pooled_from_writes(cfg, writes, n_bags, base=0x3000):
    out = np.zeros((n_bags, cfg.dim), dtype=np.int32)
    for k in range(n_bags):
        raw = b"".join(writes[base + k * cfg.lines_per_row + j].to_bytes(64, "little")
                       for j in range(cfg.lines_per_row))
        out[k] = np.frombuffer(raw, dtype=np.int32)
    return out


@pytest.mark.parametrize("dim,registered", [(16, False), (32, False), (16, True)])
def test_lookup_matches_golden_bit_for_bit(dim, registered, cfg_for, run_lookups):
    cfg = cfg_for(dim=dim, registered=registered)
    tables = initial_tables(cfg, seed=3)
    wl = SyntheticWorkload(cfg, seed=5, batch_size=5)
    batches = []
    for i in range(2):
        b = wl.batch(i)
        batches.append((b.indices, b.offsets))
    # Edge cases: empty bags, repeats within and across bags, the first and
    # last row of each table, the largest pooling factor.
    last = [r - 1 for r in cfg.tables]
    bags = [[0, 0, last[0]], [], [last[0]] * cfg.max_pooling, [0, last[1], 0],
            [5, 5], [], [], [0]]
    indices = [i for bag in bags for i in bag]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in bags])])
    batches.append((np.array(indices, np.uint32), offsets.astype(np.uint32)))

    results = run_lookups(cfg, tables, batches)
    for (indices, offsets), (error, writes) in zip(batches, results):
        assert error == ErrorCode.NONE
        want = embedding_bag_sum(cfg, tables, indices, offsets)
        got = pooled_from_writes(cfg, writes, len(offsets) - 1)
        np.testing.assert_array_equal(got, want.pooled)


def test_pooling_wraps_and_is_order_independent(cfg_for, run_lookups):
    cfg = cfg_for(tables=(4, 4))
    big = np.full((4, 16), 0x7FFF0000, dtype=np.int32)
    big[1] = -0x7FFF0000
    tables = [big, big.copy()]
    # Bag 2's running sum leaves int32 after two rows and comes back with the
    # third: the exact sum fits, so the result is exact and not flagged.
    batches = [(np.array([0, 0, 1, 0, 0, 1, 0], np.uint32), np.array([0, 2, 3, 6, 7], np.uint32))]
    (error, writes), = run_lookups(cfg, tables, batches)
    want = embedding_bag_sum(cfg, tables, *batches[0])
    assert want.overflow.tolist() == [True, False, False, False]
    got = pooled_from_writes(cfg, writes, 4)
    np.testing.assert_array_equal(got, want.pooled)
    np.testing.assert_array_equal(got[2], big[0])
    assert got[0, 0] == np.int32(np.uint32((2 * 0x7FFF0000) & 0xFFFFFFFF).view(np.int32))


@pytest.mark.parametrize("case,code", [
    ("row", ErrorCode.ROW_RANGE),
    ("pooling", ErrorCode.POOLING),
    ("offsets", ErrorCode.BAD_OFFSETS),
    ("offsets_past_end", ErrorCode.BAD_OFFSETS),
    ("offsets_no_indices", ErrorCode.BAD_OFFSETS),
])
@pytest.mark.parametrize("registered", [False, True])
def test_bad_batches_complete_with_an_error_and_the_engine_keeps_working(case, code, registered,
                                                                         cfg_for, run_lookups):
    cfg = cfg_for(registered=registered)
    tables = initial_tables(cfg, seed=1)
    good = (np.array([1, 2, 3], np.uint32), np.array([0, 2, 3], np.uint32))
    if case == "row":
        bad = (np.array([1, cfg.tables[1], 3], np.uint32), np.array([0, 1, 3], np.uint32))
    elif case == "pooling":
        bad = (np.zeros(cfg.max_pooling + 1, np.uint32), np.array([0, cfg.max_pooling + 1], np.uint32))
    elif case == "offsets":
        bad = (np.array([1, 2, 3], np.uint32), np.array([0, 2, 1, 3], np.uint32))
    elif case == "offsets_past_end":
        # An inner offset beyond n_indices (not only the last one) is refused, not waited on.
        bad = (np.array([1, 2, 3], np.uint32), np.array([0, 5, 6, 7], np.uint32))
    else:
        bad = (np.array([], np.uint32), np.array([0, 1, 1, 1], np.uint32))
    results = run_lookups(cfg, tables, [bad, good])
    assert results[0][0] == code
    assert results[1][0] == ErrorCode.NONE
    want = embedding_bag_sum(cfg, tables, *good)
    np.testing.assert_array_equal(pooled_from_writes(cfg, results[1][1], 2), want.pooled)


@pytest.mark.parametrize("dim", [16, 32])
def test_relaxed_lookup_then_finish_equals_strict(dim, cfg_for, run_lookups):
    # With no update in between, deferring rows and adding them in FINISH must
    # give exactly the strict pooled vectors; the second batch shares many rows.
    cfg = cfg_for(dim=dim, tables=(24, 40))
    tables = initial_tables(cfg, seed=3)
    wl = SyntheticWorkload(cfg, seed=0, batch_size=6, zipf_alpha=1.5)
    b0, b1 = wl.batch(0), wl.batch(1)
    assert len(np.intersect1d(b0.indices, b1.indices)) > 0
    runs = [(b0.indices, b0.offsets), (b1.indices, b1.offsets), (b1.indices, b1.offsets),
            (b1.indices, b1.offsets), (b1.indices, b1.offsets)]
    ops = [(Op.LOOKUP, 0, 0), (Op.LOOKUP, 1, 1), (Op.FINISH, 1, 0),
           (Op.FINISH, 1, 0),     # finished already: refused
           (Op.FINISH, 2, 0)]     # no relaxed lookup of batch 2: refused
    results = run_lookups(cfg, tables, runs, ops=ops)
    assert [e for e, _ in results] == [ErrorCode.NONE] * 3 + [ErrorCode.NOT_DEFERRED] * 2
    want = embedding_bag_sum(cfg, tables, b1.indices, b1.offsets).pooled
    partial = pooled_from_writes(cfg, results[1][1], b1.n_bags)
    assert not np.array_equal(partial, want), "nothing was deferred"
    final = pooled_from_writes(cfg, {**results[1][1], **results[2][1]}, b1.n_bags)
    np.testing.assert_array_equal(final, want)


def test_without_the_relaxed_block_relaxed_lookup_and_finish_are_refused(cfg_for, run_lookups):
    # Boards leave relaxed-lookup support out: no row marks, no deferred list,
    # no finisher. A relaxed LOOKUP or a FINISH must then be refused rather
    # than run as something else, and strict lookups must stay exact.
    cfg = cfg_for().replace(blocks=("update", "checkpoint"))
    tables = initial_tables(cfg, seed=3)
    wl = SyntheticWorkload(cfg, seed=0, batch_size=6, zipf_alpha=1.5)
    b0, b1 = wl.batch(0), wl.batch(1)
    runs = [(b0.indices, b0.offsets), (b1.indices, b1.offsets), (b1.indices, b1.offsets),
            (b1.indices, b1.offsets)]
    ops = [(Op.LOOKUP, 0, 0), (Op.LOOKUP, 1, 1), (Op.FINISH, 1, 0), (Op.LOOKUP, 1, 0)]
    results = run_lookups(cfg, tables, runs, ops=ops)
    assert [e for e, _ in results] == [ErrorCode.NONE, ErrorCode.BAD_OP, ErrorCode.BAD_OP,
                                       ErrorCode.NONE]
    assert results[1][1] == {} and results[2][1] == {}, "a refused descriptor wrote host memory"
    want = embedding_bag_sum(cfg, tables, b1.indices, b1.offsets).pooled
    np.testing.assert_array_equal(pooled_from_writes(cfg, results[3][1], b1.n_bags), want)


def test_log_too_small_counts_distinct_rows(cfg_for, run_lookups):
    """A ring of two groups (12 records of a batch): a batch of 24 indices over 12
    distinct rows is logged (12 records); a batch of 13 distinct rows completes with
    LOG_TOO_SMALL once the ring is full of its records, which nothing can free before
    it ends, instead of waiting for good; its pooled vectors are still right."""
    cfg = cfg_for(tables=(24, 40))
    assert cfg.log_groups == 2
    tables = initial_tables(cfg, seed=4)
    rows = [1, 2, 3, 7, 9, 11]
    repeats = (np.array(rows * 2 + rows[::-1] + [3, 3, 2, 2, 1, 1], np.uint32),
               np.array([0, 6, 12, 18, 24], np.uint32))         # bags of tables 0, 1, 0, 1
    thirteen = (np.array([1, 2, 3, 4, 5, 6] * 2 + [7], np.uint32), np.array([0, 6, 12, 13], np.uint32))
    results = run_lookups(cfg, tables, [repeats, thirteen],
                          ops=[(Op.LOOKUP, 1, 0), (Op.LOOKUP, 2, 0)], log=True)
    assert [(error, records) for error, _, records in results] == [
        (ErrorCode.NONE, 12), (ErrorCode.LOG_TOO_SMALL, 24)]
    for (indices, offsets), (_, writes, _) in zip([repeats, thirteen], results):
        want = embedding_bag_sum(cfg, tables, indices, offsets)
        np.testing.assert_array_equal(pooled_from_writes(cfg, writes, len(offsets) - 1),
                                      want.pooled)
