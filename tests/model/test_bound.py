"""The PMEM bound of a batch (host/model/bound.py)."""

import numpy as np

from trainingcxl.host.model.bound import batch_bound
from trainingcxl.host.model.data import Batch
from trainingcxl.spec.config import GROUP_RECORDS
from trainingcxl.spec.presets import PRESETS


def _batch(indices, offsets, n_tables):
    return Batch(index=0, indices=np.asarray(indices, np.uint32),
                 offsets=np.asarray(offsets, np.uint32),
                 batch_size=(len(offsets) - 1) // n_tables, n_tables=n_tables)


def test_the_bound_counts_distinct_rows_once():
    """Rows 3 and 5 of table 0, and row 3 of table 1 in two bags: three distinct rows,
    each read once and written once, with their undo records, a commit and a snapshot."""
    cfg = PRESETS["tiny"]
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
