"""``trainingcxl bench-lookup``: the lookup engine's PMEM read rate against the PMEM
model's peak, and the simulators' speed."""

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.jobs import JobError, LookupJob
from . import report
from .options import config_option, json_option, workload_options

__all__ = ["register"]

#: The bandwidth run's batches, larger than the demo's so that the gather streams.
DEFAULTS = {"batches": 2, "batch_size": 256}
#: The simulator speed runs: the same small workload on both simulators.
SPEED_PRESET, SPEED_JOB = "tiny", {"batches": 4, "batch_size": 128}


def register(sub):
    sp = sub.add_parser("bench-lookup", help="measure lookup bandwidth and simulation speed",
                        description="Runs a large batch on Verilator and reports the PMEM lines the "
                                    "lookup engine reads per busy cycle against the PMEM model's peak "
                                    "read rate (lookup_efficiency), then runs one small workload under "
                                    "Verilator and Icarus (tiny preset, 4 batches of 128 samples) and "
                                    "reports simulated cycles per wall-second, table load included.")
    config_option(sp, "bench")
    workload_options(sp, LookupJob, defaults=DEFAULTS)
    json_option(sp)
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.sim.runner import BenchFailure
    big = args.config
    try:
        job = LookupJob.bandwidth(big, seed=args.seed, batches=args.batches,
                                  batch_size=args.batch_size).validated(big)
    except JobError as e:
        raise SystemExit(f"error: {e}")
    result = {}
    try:
        print(f"[1/3] bandwidth: {job.batches} batches of {job.batch_size} samples on Verilator, "
              f"config with {big.n_tables} tables", flush=True)
        rec = launch(job, big)
        achieved, peak = rec.lines_per_cycle, rec.peak_lines_per_cycle
        result.update({
            "lookup_efficiency": achieved / peak,
            "achieved_lines_per_cycle": achieved,
            "peak_lines_per_cycle": peak,
            "pmem_lines": rec.pmem_lines,
            "busy_cycles": rec.busy_cycles,
            "rows_per_cycle": achieved / big.lines_per_row,
            "golden_match": rec.golden_match,
            "bandwidth_run": rec.to_dict(),
        })
        speed = {}
        for k, sim in enumerate(("verilator", "icarus")):
            print(f"[{2 + k}/3] simulation speed on {sim}: the same small workload", flush=True)
            rec = launch(LookupJob(seed=args.seed, **SPEED_JOB), PRESETS[SPEED_PRESET], sim=sim)
            speed[sim] = rec.total_cycles_per_s
            result.setdefault("speed_runs", {})[sim] = rec.to_dict()
            result["golden_match"] = result["golden_match"] and rec.golden_match
        result["sim_cycles_per_s"] = speed
    except BenchFailure as e:
        report.error(e)
        return 1
    print()
    report.line("lookup bandwidth", f"{achieved:.3f} lines/cycle of a {peak:.3f} peak: "
                f"{100 * result['lookup_efficiency']:.1f}% ({result['pmem_lines']} lines in "
                f"{result['busy_cycles']} busy cycles)")
    report.line("simulation speed", f"Verilator {speed['verilator']:,.0f} cycles/s, "
                f"Icarus {speed['icarus']:,.0f} cycles/s "
                f"({speed['verilator'] / max(speed['icarus'], 1e-9):.0f}x)")
    report.golden(result["golden_match"])
    report.json_out(args.json, result, args=args)
    return 0 if result["golden_match"] else 1
