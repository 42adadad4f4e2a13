"""A lookup workload on the simulated device: the job behind ``trainingcxl lookup-demo``
and ``trainingcxl bench-lookup``.

Arguments come from the runner (:func:`~trainingcxl.host.driver.ports.bench_args`):
``seed``, ``batches``, ``batch_size``, ``min_pooling``, ``max_pooling``,
``zipf_alpha``, ``host_delay`` (cycles, a pair), ``protocol_checks`` and ``out``
(where the JSON record goes).
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
from ..bench_env import bench_args, bench_config


def progress(text):
    print(text, file=sys.stderr, flush=True)


@cocotb.test()
async def lookup_job(dut):
    args = bench_args()
    cfg = bench_config()
    seed = args.get("seed", 0)
    delay = args.get("host_delay")
    tb = DeviceTB(dut, cfg, seed=seed, host_delay=tuple(delay) if delay else None,
                  protocol_checks=args.get("protocol_checks", False))
    await tb.reset()
    await tb.check_identity()

    tables = initial_tables(cfg, seed=seed)
    wall0 = time.perf_counter()
    c0 = await tb.cycles()
    await tb.load_tables(tables)
    load_cycles = await tb.cycles() - c0
    progress(f"  loaded {cfg.table_lines} table lines through CXL.mem in {load_cycles} cycles")

    wl = SyntheticWorkload(cfg, seed=seed, batch_size=args.get("batch_size", 16),
                           min_pooling=args.get("min_pooling", 0),
                           max_pooling=args.get("max_pooling"),
                           zipf_alpha=args.get("zipf_alpha", 1.05))
    batches = []
    sim_wall = 0.0
    sim_cycles = 0
    for i in range(args.get("batches", 4)):
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
        rec = {
            "batch": i, "bags": b.n_bags, "indices": b.n_indices, "cycles": res.cycles,
            "busy_cycles": busy, "pmem_lines": lines,
            "lines_per_cycle": lines / busy if busy else 0.0,
            "overflow_bags": int(want.overflow.sum()),
            "error": res.error.name, "golden_match": bool(match),
        }
        batches.append(rec)
        progress(f"  batch {i + 1}/{args.get('batches', 4)}: {b.n_bags} bags, {b.n_indices} rows, "
                 f"{res.cycles} cycles, {rec['lines_per_cycle']:.3f} lines/cycle, "
                 f"golden {'match' if match else 'MISMATCH'}")
    total = await tb.counters()
    record = {
        "config": cfg.to_dict(),
        "args": {k: v for k, v in args.items() if k != "out"},
        "load_cycles": load_cycles,
        "batches": batches,
        "counters": total,
        "lookup_wall_s": sim_wall,
        "lookup_sim_cycles": sim_cycles,
        "sim_cycles_per_s": sim_cycles / sim_wall if sim_wall else 0.0,
        "job_wall_s": time.perf_counter() - wall0,
        "total_cycles": total["cycles"] - c0,
        "total_cycles_per_s": (total["cycles"] - c0) / (time.perf_counter() - wall0),
        "golden_match": all(r["golden_match"] for r in batches),
    }
    if "out" in args:
        with open(args["out"], "w") as f:
            json.dump(record, f, indent=2)
    tb.check_models()
    assert record["golden_match"], "some batch differs from the golden model"
