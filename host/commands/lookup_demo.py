"""``trainingcxl lookup-demo``: LOOKUP batches on the simulated device, each checked
against the golden model."""

import time

from trainingcxl.host.jobs import JobError, LookupJob
from trainingcxl.host.tools.argtypes import nonneg
from . import report
from .options import config_option, json_option, sim_option, workload_options

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser("lookup-demo", help="run LOOKUP batches on the simulated device and check them",
                        description="Loads random embedding tables into the device's PMEM through "
                                    "CXL.mem, runs synthetic batches (Zipf row popularity) through "
                                    "the lookup engine, and compares every pooled vector with the "
                                    "golden model bit for bit.")
    sim_option(sp, "icarus is about 50x slower")
    config_option(sp, "small")
    workload_options(sp, LookupJob, "max_pooling", max_pooling={"type": nonneg})
    json_option(sp)
    sp.add_argument("--waves", metavar="FILE",
                    help="record a waveform of the whole run into FILE (VCD for Verilator, FST "
                         "for Icarus); slower, and the device is compiled again with tracing")
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.sim.runner import BenchFailure
    cfg = args.config
    try:
        job = LookupJob.from_args(args).validated(cfg)
    except JobError as e:
        raise SystemExit(f"error: {e}")
    print(f"trainingcxl lookup demo: {cfg.n_tables} tables {list(cfg.tables)} x dim {cfg.dim}, "
          f"{job.batches} batches of {job.batch_size} samples on {args.sim}", flush=True)
    t0 = time.monotonic()
    try:
        rec = launch(job, cfg, sim=args.sim, waves=args.waves)
    except BenchFailure as e:
        report.error(e)
        return 1
    peak = rec.peak_lines_per_cycle
    summary = {
        "sim": args.sim,
        "batches": len(rec.batches),
        "bags": sum(b.bags for b in rec.batches),
        "rows_gathered": sum(b.indices for b in rec.batches),
        "cycles_per_batch": [b.cycles for b in rec.batches],
        "lines_per_cycle": rec.lines_per_cycle,
        "pmem_peak_lines_per_cycle": peak,
        "golden_match": rec.golden_match,
        "sim_cycles_per_s": rec.sim_cycles_per_s,
        "wall_s": time.monotonic() - t0,
        "job": rec.to_dict(),
    }
    print()
    report.line("batches", f"{summary['batches']} ({summary['bags']} bags, "
                           f"{summary['rows_gathered']} rows gathered from PMEM)")
    report.line("cycles per batch", ", ".join(map(str, summary["cycles_per_batch"])))
    report.line("PMEM read rate", f"{summary['lines_per_cycle']:.3f} lines/cycle (peak {peak:.3f}, "
                                  f"{100 * summary['lines_per_cycle'] / peak:.1f}%)")
    report.golden(rec.golden_match, "every batch")
    report.line("simulation", f"{summary['sim_cycles_per_s']:,.0f} cycles/s, "
                              f"{summary['wall_s']:.1f} s in all")
    if args.waves:
        report.line("waveform", args.waves)
    report.json_out(args.json, summary, args=args)
    return 0 if rec.golden_match else 1
