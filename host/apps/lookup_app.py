"""A lookup workload on the simulated device: the job behind ``trainingcxl lookup-demo``
and ``trainingcxl bench-lookup``.

The job is a :class:`~trainingcxl.host.jobs.LookupJob`.
Every batch is checked against the golden model; the test fails on any mismatch.
"""

import json
import sys
import time

import cocotb
import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import embedding_bag_sum
from trainingcxl.host.driver.ports import DeviceTB
from trainingcxl.sim.bench_env import bench_config
from trainingcxl.host.jobs import LookupJob
from .launch import read_job
from .job_records import LookupBatch, LookupRecord


def progress(text):
    print(text, file=sys.stderr, flush=True)


@cocotb.test()
async def lookup_job(dut):
    cfg = bench_config()
    job, out_path = read_job(LookupJob)
    seed = job.seed
    tb = DeviceTB(dut, cfg, seed=seed, host_delay=job.host_delay,
                  protocol_checks=job.protocol_checks)
    await tb.reset()
    await tb.check_identity()

    tables = initial_tables(cfg, seed=seed)
    wall0 = time.perf_counter()
    c0 = await tb.cycles()
    await tb.load_tables(tables)
    load_cycles = await tb.cycles() - c0
    progress(f"  loaded {cfg.table_lines} table lines through CXL.mem in {load_cycles} cycles")

    wl = SyntheticWorkload(cfg, seed=seed, batch_size=job.batch_size,
                           min_pooling=job.min_pooling, max_pooling=job.max_pooling,
                           zipf_alpha=job.zipf_alpha)
    batches = []
    sim_wall = 0.0
    sim_cycles = 0
    for i in range(job.batches):
        b = wl.batch(i)
        before = await tb.counters()
        t = time.perf_counter()
        res = await tb.lookup(i, b.indices, b.offsets)
        sim_wall += time.perf_counter() - t
        after = await tb.counters()
        sim_cycles += after["cycles"] - before["cycles"]
        want = embedding_bag_sum(cfg, tables, b.indices, b.offsets)
        match = res.error == ErrorCode.NONE and np.array_equal(res.pooled, want.pooled)
        busy = after["lookup_busy"] - before["lookup_busy"]
        lines = after["lookup_lines"] - before["lookup_lines"]
        one = LookupBatch(
            batch=i, bags=b.n_bags, indices=b.n_indices, cycles=res.cycles,
            busy_cycles=busy, pmem_lines=lines, lines_per_cycle=lines / busy if busy else 0.0,
            overflow_bags=int(want.overflow.sum()), error=res.error.name,
            golden_match=bool(match))
        batches.append(one)
        progress(f"  batch {i + 1}/{job.batches}: {b.n_bags} bags, {b.n_indices} rows, "
                 f"{res.cycles} cycles, {one.lines_per_cycle:.3f} lines/cycle, "
                 f"golden {'match' if match else 'MISMATCH'}")
    total = await tb.counters()
    # The PMEM read rate the engine reached while busy, against the model's peak.
    pmem_lines = sum(b.pmem_lines for b in batches)
    busy_cycles = sum(b.busy_cycles for b in batches)
    record = LookupRecord(
        config=cfg.to_dict(), job=job.to_dict(), load_cycles=load_cycles, batches=batches,
        counters=total, lookup_wall_s=sim_wall, lookup_sim_cycles=sim_cycles,
        sim_cycles_per_s=sim_cycles / sim_wall if sim_wall else 0.0,
        job_wall_s=time.perf_counter() - wall0, total_cycles=total["cycles"] - c0,
        total_cycles_per_s=(total["cycles"] - c0) / (time.perf_counter() - wall0),
        golden_match=all(b.golden_match for b in batches),
        pmem_lines=pmem_lines, busy_cycles=busy_cycles,
        peak_lines_per_cycle=cfg.pmem.read_rate[0] / cfg.pmem.read_rate[1],
        lines_per_cycle=pmem_lines / busy_cycles if busy_cycles else 0.0)
    with open(out_path, "w") as f:
        json.dump(record.to_dict(), f, indent=2)
    tb.check_models()
    assert record.golden_match, "some batch differs from the golden model"
