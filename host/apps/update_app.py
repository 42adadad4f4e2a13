"""UPDATE throughput on the simulated device: the job behind ``trainingcxl bench-update``.

Runs each batch's LOOKUP and then its UPDATE with random deltas, as training
does, and reports for the UPDATE, per batch, the PMEM lines
rewritten, how many took a forwarded value, the busy cycles, and the bound the
PMEM model's bandwidth sets: a rewritten line costs one write (at
``write_rate``) and, unless forwarded, one read (at ``read_rate``), so no
engine can finish in fewer than ``max(reads / read_rate, writes / write_rate)``
cycles. Tables are checked against the golden model after the last batch.
"""

import json

import cocotb
import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import embedding_update
from trainingcxl.host.driver.ports import DeviceTB
from trainingcxl.sim.bench_env import bench_config
from trainingcxl.host.jobs import UpdateJob
from .launch import read_job
from .lookup_app import progress
from .job_records import UpdateBatch, UpdateRecord


@cocotb.test()
async def update_job(dut):
    cfg = bench_config()
    job, out_path = read_job(UpdateJob)
    seed = job.seed
    tb = DeviceTB(dut, cfg, seed=seed, protocol_checks=False)
    await tb.reset()
    tables = initial_tables(cfg, seed=seed)
    await tb.load_tables(tables)
    wl = SyntheticWorkload(cfg, seed=seed, batch_size=job.batch_size,
                           min_pooling=job.min_pooling)
    rng = np.random.default_rng(seed)
    rd_num, rd_den = cfg.pmem.read_rate
    wr_num, wr_den = cfg.pmem.write_rate
    want = tables
    batches = []
    n = job.batches
    for i in range(n):
        b = wl.batch(i)
        deltas = rng.integers(-2**10, 2**10, size=(b.n_bags, cfg.dim)).astype(np.int32)
        # As in training: the batch's LOOKUP first, which also checks it.
        looked = await tb.lookup(i, b.indices, b.offsets)
        assert looked.error == ErrorCode.NONE, f"lookup {i}: {looked.error!r}"
        before = await tb.counters()
        error, cycles = await tb.update(i, b.indices, b.offsets, deltas)
        after = await tb.counters()
        want = embedding_update(cfg, want, b.indices, b.offsets, deltas)
        lines = after["update_lines"] - before["update_lines"]
        fwd = after["update_forwarded"] - before["update_forwarded"]
        busy = after["update_busy"] - before["update_busy"]
        bound = max((lines - fwd) * rd_den / rd_num, lines * wr_den / wr_num)
        one = UpdateBatch(batch=i, error=error.name, lines=lines, forwarded=fwd,
                          busy_cycles=busy, cycles=cycles, bound_cycles=bound,
                          efficiency=bound / busy if busy else 0.0)
        batches.append(one)
        progress(f"  update {i + 1}/{n}: {lines} lines ({fwd} forwarded), {busy} busy cycles, "
                 f"bound {bound:.0f}: {100 * one.efficiency:.1f}%")
    got = await tb.read_tables()
    match = all(np.array_equal(g, w) for g, w in zip(got, want)) and all(
        one.error == ErrorCode.NONE.name for one in batches)
    busy = sum(one.busy_cycles for one in batches)
    bound = sum(one.bound_cycles for one in batches)
    record = UpdateRecord(batches=batches, lines=sum(one.lines for one in batches),
                          bound_cycles=bound, busy_cycles=busy,
                          update_efficiency=bound / busy if busy else 0.0, golden_match=match)
    with open(out_path, "w") as f:
        json.dump(record.to_dict(), f, indent=2)
    assert match, "the tables differ from the golden model after the updates"
