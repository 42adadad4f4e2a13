"""``trainingcxl bench-update``: the update engine's busy cycles against the bound the
PMEM model's read and write rates set."""

from trainingcxl.host.jobs import JobError, UpdateJob
from . import report
from .options import config_option, json_option, workload_options

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser("bench-update", help="measure UPDATE bandwidth against the PMEM model's bound",
                        description="Runs UPDATE batches (Zipf rows, so hot rows repeat) on Verilator "
                                    "and reports the busy cycles against the bound the PMEM model's "
                                    "read and write rates set for rewriting the touched lines "
                                    "(update_efficiency), checking the tables against the golden model.")
    config_option(sp, "bench")
    workload_options(sp, UpdateJob)
    json_option(sp)
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.sim.runner import BenchFailure
    cfg = args.config
    try:
        job = UpdateJob.bandwidth(cfg, seed=args.seed, batches=args.batches,
                                  batch_size=args.batch_size).validated(cfg)
    except JobError as e:
        raise SystemExit(f"error: {e}")
    print(f"UPDATE bandwidth: {job.batches} batches of {job.batch_size} samples on Verilator, "
          f"bags of {job.min_pooling} to {cfg.max_pooling} rows", flush=True)
    try:
        rec = launch(job, cfg)
    except BenchFailure as e:
        report.error(e)
        return 1
    print()
    report.line("update bandwidth", f"{100 * rec.update_efficiency:.1f}% of the PMEM bound "
                f"({rec.lines} lines rewritten in {rec.busy_cycles} busy cycles; the read "
                f"and write rates allow {rec.bound_cycles:.0f})")
    report.golden(rec.golden_match)
    report.json_out(args.json, rec, args=args)
    return 0 if rec.golden_match else 1
