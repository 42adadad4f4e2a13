"""Golden model and synthetic data."""

import numpy as np
import pytest

from trainingcxl.spec.config import Config
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.fixed import from_fixed, to_fixed, wrap32
from trainingcxl.host.model.golden import check_batch, embedding_bag_sum

CFG = Config(tables=(50, 30, 20), max_pooling=8, max_bags=300)


def reference_pool(cfg, tables, indices, offsets):
    """A plain loop, independent of the vectorised golden model."""
    out = []
    for k in range(len(offsets) - 1):
        acc = [0] * cfg.dim
        for i in indices[offsets[k]:offsets[k + 1]]:
            for e in range(cfg.dim):
                acc[e] += int(tables[k % cfg.n_tables][i][e])
        out.append([((a + 2**31) % 2**32) - 2**31 for a in acc])
    return np.array(out, dtype=np.int64)


def test_golden_equals_a_plain_loop():
    tables = initial_tables(CFG, seed=1, scale=1000.0)
    b = SyntheticWorkload(CFG, seed=2, batch_size=20).batch(0)
    got = embedding_bag_sum(CFG, tables, b.indices, b.offsets)
    np.testing.assert_array_equal(got.pooled, reference_pool(CFG, tables, b.indices, b.offsets))
    assert got.pooled.dtype == np.int32


def test_wrapping_and_overflow_flag_are_order_independent():
    big = np.full((50, 16), 2**31 - 1, dtype=np.int32)
    tables = [big, big[:30].copy(), -big[:20]]
    idx = np.array([0, 0, 0, 0], np.uint32)
    off = np.array([0, 2, 2, 2, 4], np.uint32)
    r = embedding_bag_sum(CFG, tables, idx, off)
    assert r.overflow.tolist() == [True, False, False, True]
    assert r.pooled[0, 0] == wrap32(2 * (2**31 - 1))
    assert (r.pooled[1] == 0).all()
    # +max, +max, -max -max ... summed in any order is exact when the total fits.
    t2 = [np.concatenate([big[:1], -big[:1]] * 25), big[:30], big[:20]]
    r = embedding_bag_sum(CFG, t2, np.array([0, 0, 1, 1, 1], np.uint32), np.array([0, 5, 5, 5], np.uint32))
    assert not r.overflow[0] and r.pooled[0, 0] == -(2**31 - 1)


@pytest.mark.parametrize("indices,offsets,msg", [
    ([0], [1, 1], "offsets\\[0\\] must be 0"),
    ([0, 0], [0, 2, 1, 2], "offsets decrease at bag 1"),
    ([0], [0, 2], "offsets end at 2 but there are 1 indices"),
    ([0] * 9, [0, 9], "holds 9 indices; max_pooling is 8"),
    ([0, 30], [0, 1, 2], "row 30 of table 1, which has 30 rows"),
])
def test_check_batch_explains_what_is_wrong(indices, offsets, msg):
    with pytest.raises(ValueError, match=msg):
        check_batch(CFG, np.array(indices, np.uint32), np.array(offsets, np.uint32))


def test_batches_are_a_pure_function_of_seed_and_index():
    a = SyntheticWorkload(CFG, seed=3, batch_size=16)
    b = SyntheticWorkload(CFG, seed=3, batch_size=16)
    for i in (0, 5):
        np.testing.assert_array_equal(a.batch(i).indices, b.batch(i).indices)
        np.testing.assert_array_equal(a.batch(i).offsets, b.batch(i).offsets)
    assert not np.array_equal(a.batch(0).indices, a.batch(1).indices)
    c = SyntheticWorkload(CFG, seed=4, batch_size=16)
    assert not np.array_equal(a.batch(0).indices, c.batch(0).indices)


def test_synthetic_rows_are_valid_and_zipf_skewed():
    wl = SyntheticWorkload(CFG, seed=0, batch_size=100, min_pooling=4)
    counts = np.zeros(CFG.tables[0], int)
    for i in range(10):
        b = wl.batch(i)
        check_batch(CFG, b.indices, b.offsets)
        lengths = np.diff(b.offsets.astype(np.int64))
        assert lengths.min() >= 4 and lengths.max() <= CFG.max_pooling
        table0 = np.repeat(np.arange(b.n_bags) % CFG.n_tables == 0, lengths)
        np.add.at(counts, b.indices[table0], 1)
    # The hottest row is drawn far more often than under a uniform choice.
    assert counts.max() > 5 * counts.mean()


def test_fixed_point_rounding_and_saturation():
    assert to_fixed([0.25, -0.25, 1.25, 0.2], 1).tolist() == [1, -1, 3, 0]   # halves away from zero
    assert to_fixed([1e12, -1e12], 16).tolist() == [2**31 - 1, -2**31]
    assert from_fixed(to_fixed(0.75, 16), 16) == 0.75


def test_a_coalesced_update_changes_the_tables_as_the_batch_does():
    from trainingcxl.spec.presets import PRESETS
    from trainingcxl.host.model.golden import coalesce_update, embedding_update
    cfg = PRESETS["small"]
    rng = np.random.default_rng(3)
    batch = SyntheticWorkload(cfg, seed=3, batch_size=32).batch(0)
    tables = [rng.integers(-2**31, 2**31, (n, cfg.dim), dtype=np.int64).astype(np.int32)
              for n in cfg.tables]
    deltas = rng.integers(-2**31, 2**31, (batch.n_bags, cfg.dim), dtype=np.int64).astype(np.int32)
    idx, off, summed = coalesce_update(cfg, batch.indices, batch.offsets, deltas)
    want = embedding_update(cfg, tables, batch.indices, batch.offsets, deltas)
    got = embedding_update(cfg, tables, idx, off, summed)
    assert all(np.array_equal(w, g) for w, g in zip(want, got))
    lengths = np.diff(off)
    assert set(lengths.tolist()) <= {0, 1}
    # Each (table, row) once, and exactly the rows the batch touches.
    touched = {(k % cfg.n_tables, int(r)) for k, n in enumerate(np.diff(batch.offsets))
               for r in batch.indices[batch.offsets[k]:batch.offsets[k + 1]]}
    once = [(k % cfg.n_tables, int(idx[off[k]])) for k in range(len(lengths)) if lengths[k]]
    assert len(once) == len(set(once)) and set(once) == touched


def test_synthetic_batches_are_pinned():
    # Benchmarks' figures rest on these batches: drawing them faster must not change them.
    import hashlib
    from trainingcxl.spec.presets import PRESETS
    b = SyntheticWorkload(PRESETS["small"], seed=3, batch_size=32).batch(5)
    digest = hashlib.sha256(b.indices.tobytes() + b.offsets.tobytes() + b.dense.tobytes()
                            + b.labels.tobytes()).hexdigest()[:16]
    assert digest == "e69d9472670b94ab"


def test_a_batch_costs_what_it_touches_not_the_tables_size():
    import tracemalloc
    from trainingcxl.spec.presets import PRESETS
    cfg = PRESETS["rm-1m"]                     # 8 tables of a million rows, batches of 2048
    b = SyntheticWorkload(cfg, seed=1, batch_size=2048, min_pooling=16).batch(0)
    assert b.n_bags == 2048 * 8 and b.n_indices >= 2048 * 8 * 16
    check_batch(cfg, b.indices, b.offsets)
    # Tables that take no memory: row r of every table holds r in each element.
    rows = [np.broadcast_to(np.arange(n, dtype=np.int32)[:, None], (n, cfg.dim)) for n in cfg.tables]
    tracemalloc.start()
    try:
        got = embedding_bag_sum(cfg, rows, b.indices, b.offsets)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20          # the tables would be 512 MB; the batch's rows 50 MB
    sums = np.add.reduceat(b.indices.astype(np.int64), b.offsets[:-1].astype(np.int64))
    sums[np.diff(b.offsets) == 0] = 0
    np.testing.assert_array_equal(got.pooled[:, 0], wrap32(sums))


def test_an_update_in_place_equals_the_copying_one():
    from trainingcxl.host.model.golden import embedding_update
    tables = initial_tables(CFG, seed=3)
    b = SyntheticWorkload(CFG, seed=4, batch_size=30).batch(1)
    deltas = np.random.default_rng(5).integers(-2**31, 2**31, size=(b.n_bags, CFG.dim), dtype=np.int32)
    want = embedding_update(CFG, tables, b.indices, b.offsets, deltas)
    mine = [t.copy() for t in tables]
    got = embedding_update(CFG, mine, b.indices, b.offsets, deltas, inplace=True)
    assert all(g is m for g, m in zip(got, mine))
    for g, w, t in zip(got, want, tables):
        np.testing.assert_array_equal(g, w)
        assert not np.array_equal(g, t)              # the batch did change every table
    # Against a plain loop over the bags.
    ref = [t.astype(np.int64) for t in tables]
    for k in range(b.n_bags):
        for i in b.indices[b.offsets[k]:b.offsets[k + 1]]:
            ref[k % CFG.n_tables][i] -= deltas[k]
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, wrap32(r))


@pytest.mark.slow
def test_the_largest_ladder_model_trains_a_batch_on_the_host():
    import time
    from trainingcxl.spec.presets import PRESETS
    from trainingcxl.host.model.dlrm import FixedPointTrainer
    cfg = PRESETS["rm-1m"]
    t0 = time.monotonic()
    tables = initial_tables(cfg, seed=0)
    assert time.monotonic() - t0 < 60               # seconds, not minutes
    b = SyntheticWorkload(cfg, seed=0, batch_size=2048, min_pooling=16).batch(0)
    trainer = FixedPointTrainer(cfg, tables, seed=0)
    step = trainer.step(b)
    np.testing.assert_array_equal(step.pooled, embedding_bag_sum(cfg, tables, b.indices, b.offsets).pooled)
    touched = np.unique(b.indices[np.repeat(np.arange(b.n_bags), np.diff(b.offsets.astype(np.int64)))
                                  % cfg.n_tables == 0])
    untouched = np.setdiff1d(np.arange(1000), touched)
    np.testing.assert_array_equal(trainer.tables[0][untouched], tables[0][untouched])


def test_the_gpu_pools_distinct_rows_as_the_device_pools_bags():
    """Each distinct row gathered once (in the coalesced layout), then pooled per bag:
    bit-exact with pooling every index, wrapping included."""
    from trainingcxl.spec.presets import PRESETS
    from trainingcxl.host.model.golden import (batch_keys, coalesced_layout, embedding_bag_sum,
                                               pool_rows)
    cfg = PRESETS["small"]
    rng = np.random.default_rng(4)
    batch = SyntheticWorkload(cfg, seed=4, batch_size=32).batch(0)
    tables = [rng.integers(-2**31, 2**31, (n, cfg.dim), dtype=np.int64).astype(np.int32)
              for n in cfg.tables]
    keys, _ = batch_keys(cfg, batch.indices, batch.offsets)
    distinct, slots = np.unique(keys, return_inverse=True)
    idx, off, bags = coalesced_layout(cfg, distinct)
    # The device pools each coalesced bag: one row, or nothing.
    gathered = embedding_bag_sum(cfg, tables, idx, off).pooled
    rows = gathered[bags]
    assert np.array_equal(rows, np.stack([tables[k >> 32][k & 0xFFFF_FFFF] for k in distinct]))
    got = pool_rows(cfg, rows, slots, batch.offsets)
    assert np.array_equal(got, embedding_bag_sum(cfg, tables, batch.indices, batch.offsets).pooled)
