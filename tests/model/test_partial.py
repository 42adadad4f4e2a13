"""CPR's partial checkpoints of a pool's tables (host/model/partial.py)."""

import numpy as np
import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.partial import PartialCheckpoints, cpr_interval

CFG = PRESETS["tiny"]


def test_the_interval_keeps_the_portion_of_lost_samples_at_its_target():
    # A failure loses half an interval on average: 10 batches of 50 is a PLS of 0.1.
    assert cpr_interval(0.1, 50) == 10 and cpr_interval(0.01, 10) == 1


def _touch(tables, batch):
    """Change every row the batch names, as training would."""
    offsets = np.asarray(batch.offsets)
    for k in range(len(offsets) - 1):
        tables[k % CFG.n_tables][batch.indices[offsets[k]:offsets[k + 1]]] += 1


def test_plain_cpr_saves_every_row_each_interval_and_restores_only_the_failed_tables():
    tables = initial_tables(CFG, seed=0)
    start = [t.copy() for t in tables]
    cps = PartialCheckpoints(CFG, tables, "cpr", interval=3)
    data = SyntheticWorkload(CFG, seed=0, batch_size=8)
    for b in range(1, 5):
        _touch(tables, data.batch(b - 1))
        cps.after_batch(b, data.batch(b - 1))
    at3 = [s.copy() for s in cps.saved]
    assert cps.rows_saved == sum(CFG.tables)            # once, after batch 3
    live = [t.copy() for t in tables]
    assert not all(np.array_equal(a, b) for a, b in zip(at3, live))     # batch 4 since
    cps.restore([1])
    assert np.array_equal(tables[1], at3[1]) and np.array_equal(tables[0], live[0])
    assert not np.array_equal(at3[1], start[1])


def test_mfu_saves_the_rows_used_most_and_ssu_rows_a_sample_touched():
    tables = initial_tables(CFG, seed=0)
    data = SyntheticWorkload(CFG, seed=1, batch_size=16)
    mfu = PartialCheckpoints(CFG, tables, "cpr-mfu", interval=8, fraction=0.125)
    assert mfu.every == 1
    batch = data.batch(0)
    counts = [np.bincount(np.asarray(r), minlength=n) for r, n in
              zip(mfu._rows_used(batch.indices, batch.offsets, batch.batch_size), CFG.tables)]
    before = [t.copy() for t in mfu.saved]
    _touch(tables, batch)
    mfu.after_batch(1, batch)
    for t, (c, old, new) in enumerate(zip(counts, before, mfu.saved)):
        saved = np.flatnonzero((old != new).any(axis=1))
        budget = -(-CFG.tables[t] // 8)
        assert 0 < len(saved) <= budget
        # Every row saved is used at least as often as every row left out.
        left = np.setdiff1d(np.flatnonzero(c), saved)
        assert c[saved].min() >= (c[left].max() if len(left) else 0)
    ssu = PartialCheckpoints(CFG, tables, "cpr-ssu", interval=8, fraction=0.5, seed=3)
    ssu.after_batch(ssu.every, batch)          # its first save
    assert 0 < ssu.rows_saved <= sum(-(-n // 2) for n in CFG.tables)


def test_an_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="cpr-mfu"):
        PartialCheckpoints(CFG, initial_tables(CFG, seed=0), "cpr-lru", interval=4)
