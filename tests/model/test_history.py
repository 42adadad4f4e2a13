"""The golden models' history: undo records give what full copies after every batch gave."""

import copy
import tracemalloc

import numpy as np
import pytest

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.data import Batch, SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.golden import touched_rows
from trainingcxl.host.model.history import GoldenHistory

# Few rows and a steep Zipf: rows repeat within a batch and across batches.
CFG = Config(tables=(40, 30, 20), max_pooling=6, max_bags=512,
             model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6,), lr=0.5))
BATCHES = 12


def trainers(cfg=CFG, seed=3, tables=None):
    tables = initial_tables(cfg, seed=seed) if tables is None else tables
    return FixedPointTrainer(cfg, tables, seed=seed), FloatTrainer(cfg, tables, seed=seed)


def workload():
    return SyntheticWorkload(CFG, seed=4, batch_size=8, min_pooling=1, zipf_alpha=1.5)


def bits(arrays):
    """Arrays as their raw 32-bit words, so float32 compares bit for bit."""
    return [np.asarray(a).view(np.uint32) for a in arrays]


def state(golden, reference):
    return (bits(golden.tables), bits(reference.tables),
            bits([golden.dense.parameters(), reference.dense.parameters()]))


def assert_same(got, want):
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


def trained(n=BATCHES):
    """A history after ``n`` batches, and the full copies after every batch beside it."""
    history = GoldenHistory(*trainers())
    full = {0: copy.deepcopy((history.golden, history.reference))}
    data = workload()
    for b in range(1, n + 1):
        history.step(b, data.batch(b - 1))
        history.remember(b)
        full[b] = copy.deepcopy((history.golden, history.reference))
    return history, full


def test_the_batches_repeat_rows():
    """What the other tests rely on to mean anything."""
    data = workload()
    within = across = 0
    seen = set()
    for i in range(BATCHES):
        b = data.batch(i)
        table_of = np.repeat(np.arange(b.n_bags) % CFG.n_tables, np.diff(b.offsets.astype(int)))
        pairs = list(zip(table_of.tolist(), b.indices.tolist()))
        within += len(pairs) - len(set(pairs))
        across += len(seen & set(pairs))
        seen |= set(pairs)
    assert within > 50 and across > 50


def test_touched_rows_are_the_distinct_rows_of_each_table():
    b = workload().batch(0)
    table_of = np.repeat(np.arange(b.n_bags) % CFG.n_tables, np.diff(b.offsets.astype(int)))
    got = touched_rows(CFG, b.indices, b.offsets)
    for t in range(CFG.n_tables):
        np.testing.assert_array_equal(got[t], sorted(set(b.indices[table_of == t].tolist())))


@pytest.mark.parametrize("d", [0, 1, 5, BATCHES - 1, BATCHES])
def test_rollback_gives_the_full_copy(d):
    history, full = trained()
    assert history.tables_equal(d, full[d][0].tables)
    if d < BATCHES:
        assert not history.tables_equal(d, full[d + 1][0].tables)
    np.testing.assert_array_equal(history.mlp(d)[0], full[d][0].dense.parameters())
    np.testing.assert_array_equal(history.mlp(d)[1], full[d][1].dense.parameters())
    history.rollback(d)
    assert history.head == d
    assert_same(state(history.golden, history.reference), state(*full[d]))


def test_training_on_after_a_rollback_repeats_the_batches():
    history, full = trained()
    data = workload()
    history.rollback(4)
    for b in range(5, 9):
        history.step(b, data.batch(b - 1))
        history.remember(b)
    assert_same(state(history.golden, history.reference), state(*full[8]))
    history.rollback(2)
    assert_same(state(history.golden, history.reference), state(*full[2]))


def test_tables_equal_finds_any_wrong_row():
    history, full = trained()
    for d in (3, 7):
        for t, row in [(0, 0), (1, 29), (2, int(touched_rows(
                CFG, workload().batch(d).indices, workload().batch(d).offsets)[2][0]))]:
            tables = [x.copy() for x in full[d][0].tables]
            tables[t][row, 5] ^= 1
            assert not history.tables_equal(d, tables)
    assert not history.tables_equal(BATCHES + 1, full[BATCHES][0].tables)


def test_prune_forgets_what_only_older_states_need():
    history, full = trained()
    history.prune(5)
    assert not history.reachable(4) and history.mlp(4) is None
    assert all(history.reachable(d) for d in range(5, BATCHES + 1))
    assert len(history._undo) == BATCHES - 5 and len(history._mlp) == BATCHES - 4
    with pytest.raises(KeyError):
        history.rollback(4)
    history.rollback(5)
    assert_same(state(history.golden, history.reference), state(*full[5]))


def test_a_batch_costs_the_rows_it_touches_not_the_tables():
    """A table of 10**6 rows: stepping and remembering a batch allocates and keeps far less."""
    cfg = Config(tables=(1_000_000,), max_pooling=4, max_bags=256,
                 model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6,)))
    history = GoldenHistory(*trainers(cfg, tables=[np.zeros((10**6, cfg.dim), np.int32)]))
    table_bytes = history.golden.tables[0].nbytes + history.reference.tables[0].nbytes
    rng = np.random.default_rng(0)
    kept = 0
    for b in (1, 2):
        offsets = np.arange(0, 4 * 64 + 1, 4, dtype=np.uint32)
        batch = Batch(index=b - 1, indices=rng.integers(0, 10**6, 256).astype(np.uint32),
                      offsets=offsets, batch_size=64, n_tables=1,
                      dense=rng.standard_normal((64, 5)).astype(np.float32),
                      labels=rng.integers(0, 2, 64).astype(np.float32))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        history.step(b, batch)
        history.remember(b)
        kept, peak = tracemalloc.get_traced_memory()[0] - before, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak - before < table_bytes / 100
        assert kept < table_bytes / 1000
