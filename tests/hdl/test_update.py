"""Update engine in amaranth.sim: engine + PMEM model + behavioural host memory."""

import functools
import random

import numpy as np
import pytest

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.hdl.common.line_port import LineOp
from trainingcxl.hdl.compute.update import UpdateEngine
from trainingcxl.spec.config import PmemTiming
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import embedding_update
from trainingcxl.sim.amaranth_host import row_lines, words_to_lines
from trainingcxl.sim.amaranth_streams import stream_get, stream_put

TIMING = PmemTiming(read_latency=10, write_latency=12, write_rate=(1, 2), read_rate=(3, 5),
                    wpq_depth=4, read_depth=8)


@pytest.fixture
def cfg_for(small_config):
    """A small device on this file's PMEM timing, tables of 12 and 20 rows unless given."""
    return functools.partial(small_config, TIMING, tables=(12, 20))


@pytest.fixture
def run_updates(engine_on_pmem):
    """``run_updates(cfg, tables, batches, *, seed=0)``: load ``tables``, run one UPDATE per
    ``(indices, offsets, deltas)``; return errors and final tables."""

    def run(cfg, tables, batches, *, seed=0):
        h = engine_on_pmem(cfg, UpdateEngine(cfg), ["pmem_rd", "pmem_wr"])
        eng = h.engine
        host, writes = {}, {}
        errors, final, counters = [], [], {}
        IDX, OFF, VEC = 0x1000, 0x2000, 0x3000
        lpr = cfg.lines_per_row

        async def main(ctx):
            port = h.pmem.port0
            ctx.set(port.wack.ready, 1)
            ctx.set(port.rdata.ready, 1)
            await h.load(ctx, tables)
            for b, (indices, offsets, deltas) in enumerate(batches):
                host.clear()
                for base, lines in ((IDX, words_to_lines(indices)), (OFF, words_to_lines(offsets)),
                                    (VEC, row_lines(deltas))):
                    for k, line in enumerate(lines):
                        host[base + k] = line
                await stream_put(ctx, eng.desc, {
                    "op": Op.UPDATE, "batch": b, "n_bags": len(offsets) - 1,
                    "n_indices": len(indices), "idx_addr": IDX, "off_addr": OFF, "vec_addr": VEC,
                })
                done = await stream_get(ctx, eng.done, timeout=100_000)
                assert done.batch == b
                errors.append(done.error)
                # Completion means persistent: the write-pending queue is already empty.
                assert ctx.get(h.pmem.wpq_level) == 0
            for t, rows in enumerate(cfg.tables):
                raw = b""
                for k in range(rows * lpr):
                    await stream_put(ctx, port.req, {"op": LineOp.READ,
                                                     "addr": cfg.table_base[t] + k})
                    raw += (await stream_get(ctx, port.rdata)).data.to_bytes(64, "little")
                final.append(np.frombuffer(raw, np.int32).reshape(rows, cfg.dim))
            counters["forwarded"] = ctx.get(eng.forwarded)
            counters["lines"] = ctx.get(eng.lines)

        h.simulate(main, (eng.off_mem, eng.idx_mem, eng.delta_mem), host, random.Random(seed),
                   writes)
        return errors, final, counters

    return run


def random_deltas(rng, n_bags, dim):
    return rng.integers(-2**20, 2**20, size=(n_bags, dim)).astype(np.int32)


@pytest.mark.parametrize("dim,registered", [(16, False), (32, False), (16, True)])
def test_update_with_heavy_duplication_matches_golden(dim, registered, cfg_for, run_updates):
    cfg = cfg_for(dim=dim, registered=registered)
    rng = np.random.default_rng(4)
    tables = initial_tables(cfg, seed=2)
    batches = []
    # Zipf batches (hot rows repeat across bags) ...
    wl = SyntheticWorkload(cfg, seed=3, batch_size=6, zipf_alpha=1.5)
    for i in range(2):
        b = wl.batch(i)
        batches.append((b.indices, b.offsets, random_deltas(rng, b.n_bags, dim)))
    # ... one row in every bag of its table, back to back, several times per bag,
    # plus empty bags and the last row of each table.
    bags = [[3, 3, 3], [0] * 6, [], [7, 7], [3], [cfg.tables[1] - 1, 0], [cfg.tables[0] - 1, 3], []]
    indices = np.array([i for bag in bags for i in bag], np.uint32)
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in bags])]).astype(np.uint32)
    batches.append((indices, offsets, random_deltas(rng, len(bags), dim)))

    errors, final, counters = run_updates(cfg, tables, batches)
    assert errors == [ErrorCode.NONE] * len(batches)
    assert counters["lines"] == sum(len(i) for i, _, _ in batches) * cfg.lines_per_row
    assert counters["forwarded"] > 0, "no request exercised forwarding"
    want = tables
    for indices, offsets, deltas in batches:
        want = embedding_update(cfg, want, indices, offsets, deltas)
    for t in range(cfg.n_tables):
        np.testing.assert_array_equal(final[t], want[t])


def test_update_wraps(cfg_for, run_updates):
    cfg = cfg_for(tables=(4, 4))
    tables = [np.full((4, 16), -2**31 + 5, np.int32), np.zeros((4, 16), np.int32)]
    deltas = np.full((2, 16), 10, np.int32)
    batch = (np.array([1, 1], np.uint32), np.array([0, 2, 2], np.uint32), deltas)
    errors, final, _ = run_updates(cfg, tables, [batch])
    assert (final[0][1] == np.int32(2**31 - 15)).all()     # -2**31 + 5 - 20 wraps
    assert (final[0][0] == tables[0][0]).all()


@pytest.mark.parametrize("registered", [False, True])
def test_a_bad_batch_changes_nothing_and_the_next_one_runs(registered, cfg_for, run_updates):
    cfg = cfg_for(registered=registered)
    tables = initial_tables(cfg, seed=5)
    rng = np.random.default_rng(1)
    # Two good bags, then a row outside table 0: refused before any row changes.
    bad = (np.array([2, 3, cfg.tables[0]], np.uint32), np.array([0, 1, 2, 3, 3], np.uint32),
           random_deltas(rng, 4, 16))
    good = (np.array([2, 2, 5], np.uint32), np.array([0, 2, 3], np.uint32), random_deltas(rng, 2, 16))
    bad_offsets = (np.array([2, 3], np.uint32), np.array([0, 1, 3, 1, 2], np.uint32),
                   random_deltas(rng, 4, 16))
    errors, final, _ = run_updates(cfg, tables, [bad, bad_offsets, good])
    assert errors == [ErrorCode.ROW_RANGE, ErrorCode.BAD_OFFSETS, ErrorCode.NONE]
    want = embedding_update(cfg, tables, *good)
    for t in range(cfg.n_tables):
        np.testing.assert_array_equal(final[t], want[t])
