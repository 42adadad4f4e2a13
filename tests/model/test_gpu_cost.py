"""The GPU's modelled cycles (:mod:`trainingcxl.host.model.gpu`)."""

from trainingcxl.host.model.gpu import embedding_cycles, step_cost
from trainingcxl.spec.presets import PRESETS, rm_config

CFG = rm_config(1000)


def test_pooling_reads_rows_that_fit_in_l2_once():
    """Repeats of rows that stay in the L2 cache cost their indices, not their rows; rows
    that do not fit are read once per index."""
    row = CFG.dim * 4
    fit = CFG.gpu.l2_bytes // row
    few = embedding_cycles(CFG, gathered=400_000, rows=8_000, bags=16_384, update=False)
    once = embedding_cycles(CFG, gathered=8_000, rows=8_000, bags=16_384, update=False)
    # 392,000 more indices: their 4 bytes each, not their 64-byte rows.
    assert few - once <= -(-392_000 * 4 // CFG.gpu.bytes_per_cycle) + 1
    spill = embedding_cycles(CFG, gathered=400_000, rows=fit + 1, bags=16_384, update=False)
    assert spill - few >= 392_000 * row // CFG.gpu.bytes_per_cycle


def test_step_cost_grows_with_the_batch():
    small, big = step_cost(PRESETS["tiny"], 32), step_cost(PRESETS["tiny"], 2048)
    assert big.flops == 64 * small.flops and big.cycles > small.cycles
