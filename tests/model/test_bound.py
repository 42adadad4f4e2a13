"""The PMEM bound of a batch (host/model/bound.py)."""

import dataclasses

import numpy as np

from trainingcxl.host.model.bound import batch_bound, window_bound, window_bounds
from trainingcxl.host.model.data import Batch
from trainingcxl.spec.config import GROUP_RECORDS
from trainingcxl.spec.presets import PRESETS


#: tiny with the media as the persistence domain (no energy-backed buffer).
TINY = PRESETS["tiny"].replace(pmem=dataclasses.replace(PRESETS["tiny"].pmem, buffer_lines=0))


def _batch(indices, offsets, n_tables):
    return Batch(index=0, indices=np.asarray(indices, np.uint32),
                 offsets=np.asarray(offsets, np.uint32),
                 batch_size=(len(offsets) - 1) // n_tables, n_tables=n_tables)


def test_the_bound_counts_distinct_rows_once():
    """Rows 3 and 5 of table 0, and row 3 of table 1 in two bags: three distinct rows,
    each read once and written once, with their undo records, a commit and a snapshot."""
    cfg = TINY
    batch = _batch([3, 3, 5, 3], [0, 1, 2, 3, 4], cfg.n_tables)   # bags: t0, t1, t0, t1
    b = batch_bound(cfg, batch)
    assert b.rows == 3
    assert b.lines_read == 3 * cfg.lines_per_row
    undo = 3 * cfg.lines_per_row + -(-3 // GROUP_RECORDS)
    assert b.lines_written == 3 * cfg.lines_per_row + undo + 1 + cfg.mlp_lines + 1
    # With K = 1 a snapshot every other batch at least: half a snapshot a batch.
    half = batch_bound(cfg, batch, staleness=1)
    assert half.lines_written == b.lines_written - (cfg.mlp_lines + 1) / 2
    (wl, wc) = cfg.pmem.write_rate
    assert b.write_cycles == b.lines_written * wc / wl
    assert b.cycles == max(b.read_cycles, b.write_cycles)


def test_both_bounds_by_hand_on_tiny():
    """Three distinct rows on tiny (one line a row, an MLP of 104 lines, reads 3 lines in
    5 cycles, writes 1 line in 10), by hand:

    * reads: 3 lines, 5 cycles;
    * the scheme's writes: 3 rows + 3 undo records + 1 group line + 1 commit + 105
      snapshot lines = 113, 1,130 cycles;
    * the floor's writes: 3 rows + 1 line of row addresses (12 bytes) + 1 commit + 105
      snapshot lines = 110, 1,100 cycles;
    * K = 1 halves the snapshot share: 60.5 and 57.5 lines."""
    cfg = TINY
    assert (cfg.lines_per_row, cfg.mlp_lines, cfg.pmem.read_rate, cfg.pmem.write_rate) == \
        (1, 104, (3, 5), (1, 10))
    batch = _batch([3, 3, 5, 3], [0, 1, 2, 3, 4], cfg.n_tables)
    b = batch_bound(cfg, batch)
    assert (b.lines_read, b.read_cycles) == (3, 5)
    assert (b.lines_written, b.write_cycles, b.cycles) == (113, 1130, 1130)
    assert (b.floor_lines_written, b.floor_write_cycles, b.floor_cycles) == (110, 1100, 1100)
    k1 = batch_bound(cfg, batch, staleness=1)
    assert (k1.lines_written, k1.floor_lines_written) == (60.5, 57.5)
    assert (k1.cycles, k1.floor_cycles) == (605, 575)


def test_the_floor_counts_a_line_of_addresses_per_sixteen_rows():
    """17 distinct rows of table 0 in one bag each: the scheme writes 17 + 17 + 3 group
    lines + 1 + 105 = 143 lines, the floor 17 + 2 lines of addresses (68 bytes) + 1 +
    105 = 125; 17 lines read take 28.33 cycles, so both are write-bound."""
    cfg = TINY
    n = 17
    indices = list(range(n))
    # Bags alternate tables (t0, t1, t0, ...): the rows go to table 0's bags, table 1's are empty.
    offsets = [0]
    for i in range(n):
        offsets += [offsets[-1] + 1, offsets[-1] + 1]
    b = batch_bound(cfg, _batch(indices, offsets, cfg.n_tables))
    assert b.rows == n
    assert b.lines_written == 143 and b.floor_lines_written == 125
    assert b.cycles == 1430 and b.floor_cycles == 1250
    assert b.read_cycles == n * 5 / 3


def test_window_bounds_average_both_and_sum_the_rows():
    cfg = TINY
    one = _batch([3, 3, 5, 3], [0, 1, 2, 3, 4], cfg.n_tables)       # 3 rows
    two = _batch([7], [0, 1, 1], cfg.n_tables)                       # 1 row
    w = window_bounds(cfg, [one, two])
    a, b = batch_bound(cfg, one), batch_bound(cfg, two)
    assert w.batches == 2 and w.rows == 4
    assert w.cycles == (a.cycles + b.cycles) / 2
    assert w.floor_cycles == (a.floor_cycles + b.floor_cycles) / 2
    assert window_bound(cfg, [one, two]) == w.cycles


def test_behind_the_buffer_only_the_rows_reach_the_media():
    """tiny as preset (its energy-backed buffer): the undo records, the commit, the row
    addresses and the MLP snapshots stay in the buffer; both bounds are the rows, once."""
    cfg = PRESETS["tiny"]
    assert cfg.buffer_size and cfg.snapshot_period(4) == 4 and cfg.snapshot_period(1) == 2
    batch = _batch([3, 3, 5, 3], [0, 1, 2, 3, 4], cfg.n_tables)      # 3 rows
    for k in (0, 1, 4):
        b = batch_bound(cfg, batch, staleness=k)
        assert b.lines_written == b.floor_lines_written == 3
        assert b.floor_cycles == b.cycles == 30
