"""``trainingcxl bench``: the configuration ladder, measured on the RTL.

See docs/design.md, "Configuration ladder".

Every system of :mod:`trainingcxl.host.protocol.systems` trains the same batches of
each workload twice, with checkpointing and without. A run measures a window
of batches (the first batch, which warms the device, the last, which only closes
the window, and the table checks are outside it) with the device's counters and
the host's modelled time.
From the windows come cycles per batch, speedups over ``host-pmem`` and ``pmem``, checkpoint
overhead, PMEM and link bytes, and energy (:mod:`trainingcxl.host.model.energy`).
Separate runs measure the lookup and update engines against the PMEM
model's bandwidth bound, the recovery time against the log size (on request), and the
simulators' speed on one run. Simulations are deterministic: the same seed
gives the same cycle counts.
"""

import dataclasses
import sys
import time

from trainingcxl.host.tools.argtypes import add_set_option, positive, save_figure
from trainingcxl.host.runs.cluster import open_cluster
from trainingcxl.spec.config import DEFAULT_MEDIA, MEDIA_PROFILES
from trainingcxl.spec.presets import SCALE_BATCHES, SCALE_ROWS
from trainingcxl.host.protocol.systems import DEFAULT_SYSTEM, SYSTEMS
from . import bench_scale
from trainingcxl.host.jobs import LookupJob, TrainJob, UpdateJob
from trainingcxl.host.runs.fanout import fan_out
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Task
from trainingcxl.host.tools.ladder import (BASELINES, WORKLOADS, baseline_key, overridden,
                                           recovery_row, recovery_task, run_ladder, summarise,
                                           table)

from . import report
from .options import (cluster_options, devices_option, int_list, json_option, pmem_dir_option,
                      staleness_option, workload_options)

__all__ = ["register"]


def _engine_efficiency(args, workload, say):
    """The lookup and update engines against the PMEM model's bound, on the workload's
    tables with large batches (the existing bandwidth jobs)."""
    from trainingcxl.host.apps.launch import launch
    cfg = workload.config
    big = max(1, cfg.max_bags // cfg.n_tables)
    say(f"[engines] lookup and update bandwidth on {workload.name}, batches of {big} samples")
    look = launch(LookupJob.bandwidth(cfg, seed=args.seed, batches=2, batch_size=big), cfg)
    upd = launch(UpdateJob.bandwidth(cfg, seed=args.seed, batches=2, batch_size=big), cfg)
    return {"lookup_efficiency": look.lines_per_cycle / look.peak_lines_per_cycle,
            "lookup_lines": look.pmem_lines, "lookup_busy_cycles": look.busy_cycles,
            "update_efficiency": upd.update_efficiency, "update_lines": upd.lines,
            "update_busy_cycles": upd.busy_cycles, "update_bound_cycles": upd.bound_cycles,
            "golden_match": bool(look.golden_match and upd.golden_match)}


def _recovery_vs_log(args, workload, say):
    """Recovery cycles of the ``cxl`` system after a failure in an update, for log rings
    of 1x, 2x and 4x the automatic size (each a device of its own)."""
    base = workload.config
    sizes = [base.log_size * f for f in (1, 2, 4)]
    configs = [base.replace(log_lines=n) for n in sizes]
    say(f"[recovery] a power failure in an update, log rings of {', '.join(map(str, sizes))} lines")
    args.fan_out.prebuild(configs)
    tasks = [recovery_task(k, workload, args, cfg) for k, cfg in enumerate(configs)]
    out = [recovery_row(*result) for result in fan_out(DeviceRunner(), tasks, args.fan_out)]
    return sorted(out, key=lambda r: r["log_lines"])


#: Batches of a ladder run: the window measured is batches 2..8 (batch 9 closes it).
LADDER_BATCHES = 9
SPEED_RUNS = {"verilator": ("small", 30, None), "icarus": ("tiny", 3, 8)}


def _sim_speed(args, say):
    """Simulated cycles per wall-second of a ``cxl`` training run (with every golden
    check) under each simulator (:data:`SPEED_RUNS`); the build is not timed."""
    from trainingcxl.spec.presets import PRESETS
    from trainingcxl.sim.runner import build
    speed = {}
    for sim, (preset, batches, batch_size) in SPEED_RUNS.items():
        cfg = PRESETS[preset]
        batch_size = batch_size or cfg.model.batch_size
        say(f"[speed] train --config {preset} --batches {batches} --batch-size {batch_size} "
            f"({DEFAULT_SYSTEM}) on {sim}")
        task = Task(f"speed-{sim}", cfg, TrainJob(seed=args.seed, batches=batches,
                                                  batch_size=batch_size, test_samples=0),
                    sim=sim)
        build(sim, cfg, log=lambda text: print(text, file=sys.stderr, flush=True))
        t0 = time.monotonic()
        _, record, error = DeviceRunner()(task)
        wall = time.monotonic() - t0
        if record is None:
            raise RuntimeError(f"the speed run on {sim} failed: {error}")
        speed[sim] = {"config": preset, "batches": batches, "batch_size": batch_size,
                      "cycles": record.cycles, "wall_s": wall, "sim_wall_s": record.wall_s,
                      "cycles_per_s": record.cycles / record.wall_s}
    return speed


def _speed_lines(speed, say):
    for sim, v in speed.items():
        say(f"  {sim:<9} {v['config']:<6} {v['batches']} batches of {v['batch_size']}: "
            f"{v['cycles']:,} cycles in {v['sim_wall_s']:.2f} s of training "
            f"({v['wall_s']:.1f} s with start-up): {v['cycles_per_s']:,.0f} cycles/s")


# -- report ----------------------------------------------------------------------------

def _plot(summary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    phases = ("lookup", "gpu", "log", "update", "commit", "snapshot")
    fig, axes = plt.subplots(1, len(summary), figsize=(6 * len(summary), 4.2), squeeze=False)
    for ax, (name, rows) in zip(axes[0], summary.items()):
        systems = list(rows)
        bottom = [0.0] * len(systems)
        for ph in phases:
            vals = [rows[s]["phases_per_batch"].get(ph, 0.0) for s in systems]
            ax.bar(systems, vals, bottom=bottom, label=ph)
            bottom = [b + v for b, v in zip(bottom, vals)]
        other = [rows[s]["cycles_per_batch"] - b for s, b in zip(systems, bottom)]
        ax.bar(systems, [max(0.0, o) for o in other], bottom=bottom, label="other", color="0.8")
        ax.set_title(f"{name}: where a batch's cycles go")
        ax.set_ylabel("cycles per batch (host's critical path)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][-1].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _bench_cpu(args, say):
    """The host-pmem CPU's kernels on this machine, beside the figures the ladder charges
    (``HostPmemTiming``'s defaults)."""
    from trainingcxl.host.model.cpu_costs import measure
    from trainingcxl.spec.config import HostPmemTiming
    say("[cpu] the host-pmem CPU's kernels in C on one core (host/model/cpu_kernels.c), a batch "
        "of 400,000 indices of dim 16")
    got, charged = measure(), HostPmemTiming()
    for key, what in (("dedup_ns", "per index"), ("pool_ns", "per element pooled"),
                      ("scatter_ns", "per gradient element"), ("apply_ns", "per row element")):
        say(f"  {key:<11} {got[key]:7.3f} ns {what:<21} (the ladder charges "
            f"{getattr(charged, key):g} ns, over {charged.cores} cores)")
    report.json_out(args.json, {"cpu": got, "charged": dataclasses.asdict(charged)}, say=say,
                    args=args)
    return 0


def _bench_loader(args, say):
    """Lines per second of the Criteo loader (one core, no simulation): writes a sample file
    of ``args.loader_lines`` lines and loads it into the ``criteo-kaggle`` tables."""
    import tempfile
    from pathlib import Path
    from trainingcxl.host.model.criteo import CriteoDataset, write_sample
    from trainingcxl.spec.presets import PRESETS
    cfg, n = PRESETS["criteo-kaggle"], args.loader_lines
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sample.tsv"
        t0 = time.perf_counter()
        write_sample(path, lines=n, seed=args.seed)
        t1 = time.perf_counter()
        ds = CriteoDataset(cfg, path, batch_size=cfg.model.batch_size)
        t2 = time.perf_counter()
        size = path.stat().st_size
    result = {"lines": n, "bytes": size, "config": "criteo-kaggle",
              "write_s": t1 - t0, "write_lines_per_s": n / (t1 - t0),
              "load_s": t2 - t1, "load_lines_per_s": len(ds) / (t2 - t1),
              "load_mb_per_s": size / (t2 - t1) / 1e6}
    say(f"  Criteo loader: {n:,} lines ({size / 1e6:.0f} MB) loaded in {result['load_s']:.2f} s: "
        f"{result['load_lines_per_s']:,.0f} lines/s ({60 * result['load_lines_per_s'] / 1e6:.1f} M "
        f"lines/min, {result['load_mb_per_s']:.0f} MB/s)")
    say(f"  sample writer: {result['write_lines_per_s']:,.0f} lines/s")
    report.json_out(args.json, result, say=say, args=args)
    return 0


#: The campaign ``bench --fan-out`` times on each engine (tiny, 5 failures per run).
FAN_OUT_CAMPAIGN = {"per_run": 5, "batches": 6, "batch_size": 8, "staleness": [0, 1, 8],
                    "orders": ["strict", "relaxed"]}


def _bench_fan_out(args, say):
    """Failures per minute of one campaign on a local process pool and on a private
    local Ray instance with the same number of workers: Ray's own cost. The device
    is built before the clock starts; the engine's start-up is reported apart."""
    from trainingcxl.host.commands.campaign import campaign_tasks, tally
    from trainingcxl.spec.presets import PRESETS
    tasks = campaign_tasks(PRESETS["tiny"], failures=args.fan_out_failures, seed=args.seed,
                           **FAN_OUT_CAMPAIGN)
    say(f"[fan-out] a campaign of {len(tasks)} runs x {FAN_OUT_CAMPAIGN['per_run']} planned "
        f"failures on tiny, {args.jobs} workers: local pool, then local Ray")
    result = {"runs": len(tasks), "workers": args.jobs, "campaign": FAN_OUT_CAMPAIGN}
    tallies = {}
    for where in ("local", "ray"):
        t0 = time.monotonic()
        with open_cluster(where, args.jobs) as cluster:
            cluster.prebuild([PRESETS["tiny"]])
            t1 = time.monotonic()
            results = sorted(fan_out(DeviceRunner(), tasks, cluster), key=lambda r: r.task.index)
            t2 = time.monotonic()
        t = tallies[where] = tally(results)
        result[where] = {"startup_s": t1 - t0, "wall_s": t2 - t1, "failures": t["failures"],
                         "consistent": t["consistent"], "inconsistent": t["inconsistent"],
                         "failures_per_min": 60 * t["failures"] / (t2 - t1)}
        say(f"  {where:<6} {t['failures']} failures in {t2 - t1:.1f} s: "
            f"{result[where]['failures_per_min']:.0f} failures/min (start-up {t1 - t0:.1f} s)")
    result["ray_over_local"] = result["ray"]["failures_per_min"] / result["local"]["failures_per_min"]
    result["same_tally"] = tallies["local"] == tallies["ray"]
    say(f"  Ray runs at {100 * result['ray_over_local']:.1f}% of the local pool's rate; "
        f"tallies {'equal' if result['same_tally'] else 'DIFFERENT'}")
    report.json_out(args.json, result, say=say, args=args)
    return 0 if result["same_tally"] and not any(t["inconsistent"] for t in tallies.values()) else 1


def cmd_bench(args):
    def say(text):
        print(text, flush=True)
    alone = [o for o, v in (("--scale", args.scale), ("--pool", args.pool), ("--speed", args.speed),
                            ("--loader", args.loader), ("--fan-out", args.fan_out_failures),
                            ("--cpu", args.cpu)) if v]
    if len(alone) > 1:
        raise SystemExit(f"error: {' and '.join(alone)} are runs of their own; give one")
    if args.fan_out_failures:
        return _bench_fan_out(args, say)
    if args.loader:
        return _bench_loader(args, say)
    if args.cpu:
        return _bench_cpu(args, say)
    if args.speed:
        speed = _sim_speed(args, say)
        say("simulation speed (simulated cycles per wall-second of the training loop):")
        _speed_lines(speed, say)
        report.json_out(args.json, {"sim_speed": speed}, say=say, args=args)
        return 0
    if args.pool:
        from trainingcxl.host.commands import bench_pool
        args.batches = args.batches or bench_pool.DEFAULT_BATCHES
        return bench_pool.cmd_pool(args, say)
    scale_only = [o for o, v in (("--sizes", args.sizes), ("--batch-sizes", args.batch_sizes)) if v]
    if args.scale:
        args.systems = tuple((args.systems or ",".join(bench_scale.DEFAULT_SYSTEMS)).split(","))
        args.sizes = args.sizes or tuple(SCALE_ROWS)
        args.batch_sizes = args.batch_sizes or SCALE_BATCHES
        args.batches = args.batches or bench_scale.DEFAULT_BATCHES
        with open_cluster(args.cluster, args.jobs) as args.fan_out:
            return bench_scale.cmd_scale(args, say)
    if scale_only:
        raise SystemExit(f"error: {' and '.join(scale_only)} only apply with --scale")
    args.batches = args.batches or LADDER_BATCHES
    workloads = overridden([WORKLOADS[w] for w in args.workloads.split(",")], args.set,
                           args.media)
    say(f"[ladder] media: {_media(workloads)}")
    systems = (args.systems or ",".join(SYSTEMS)).split(",")
    t0 = time.monotonic()
    from trainingcxl.sim.runner import BenchFailure
    try:
        with open_cluster(args.cluster, args.jobs) as args.fan_out:
            results, errors = run_ladder(args, workloads, systems, say)
            summary = summarise(results, workloads, systems)
            recovery = ({} if args.skip_recovery or not args.recovery_series
                        else {workloads[0].name: _recovery_vs_log(args, workloads[0], say)})
        engines = {} if args.skip_engines else {w.name: _engine_efficiency(args, w, say) for w in workloads}
        speed = {} if args.skip_speed else _sim_speed(args, say)
    except (BenchFailure, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result = {
        "workloads": {w.name: {"summary": w.summary, "config": w.config.to_dict(),
                               "batch_size": w.batch_size, "min_pooling": w.min_pooling,
                               "zipf_alpha": w.zipf_alpha} for w in workloads},
        "batches": args.batches, "seed": args.seed, "media": _media(workloads),
        "systems": {s: SYSTEMS[s].summary for s in systems},
        "results": summary,
        **{f"speedup_vs_{baseline_key(b)}": {w: {s: f.get(f"speedup_vs_{baseline_key(b)}")
                                                 for s, f in rows.items()}
                                             for w, rows in summary.items()} for b in BASELINES},
        "checkpoint_overhead": {w: {s: f.get("checkpoint_overhead") for s, f in rows.items()}
                                for w, rows in summary.items()},
        **{f"energy_saving_vs_{baseline_key(b)}": {
            w: {s: f.get(f"energy_saving_vs_{baseline_key(b)}") for s, f in rows.items()}
            for w, rows in summary.items()} for b in BASELINES},
        "lookup_efficiency": {w: e["lookup_efficiency"] for w, e in engines.items()},
        "update_efficiency": {w: e["update_efficiency"] for w, e in engines.items()},
        "engines": engines,
        "recovery_vs_log_size": recovery,
        "sim_cycles_per_s": {sim: v["cycles_per_s"] for sim, v in speed.items()},
        "sim_speed": speed,
        "errors": errors,
        "wall_s": time.monotonic() - t0,
    }
    for name, rows in summary.items():
        table(name, rows, say)
    for name, e in engines.items():
        say(f"\n  engines on {name}: lookup {100 * e['lookup_efficiency']:.1f}% and update "
            f"{100 * e['update_efficiency']:.1f}% of the PMEM model's bandwidth bound")
    for name, series in recovery.items():
        say(f"  recovery on {name} (cxl, failure in an update): " + ", ".join(
            f"{r['recovery_cycles']} cycles with a {r['log_lines']}-line log" for r in series))
    if speed:
        say("  simulation speed:")
        _speed_lines(speed, say)
    for e in errors:
        say(f"  FAILED {e['run']}: {e['error'][:300]}")
    say(f"  wall time {result['wall_s']:.0f} s")
    if args.plot and summary:
        _plot(summary, args.plot)
        say(f"  plot  {args.plot}")
    report.json_out(args.json, result, say=say, args=args)
    return 1 if errors else 0


def _media(workloads):
    """The media profile the workloads ran on (``custom`` if ``--set`` changed it)."""
    return ",".join(sorted({w.config.media_profile for w in workloads}))


def register(sub):
    from trainingcxl.host.commands import bench_pool
    sp = sub.add_parser(
        "bench", help="run the configuration ladder (host-pmem ... cxl) and report speed, "
                      "checkpoint overhead and energy",
        description="Trains the same batches on every system of the ladder (host-pmem, pmem, "
                    "near-data, cxl-d, cxl-b, cxl), with checkpointing and without, on an "
                    "embedding-heavy and an MLP-heavy workload, all on Verilator with the same "
                    "PMEM and link model. Prints per workload: cycles per batch, speedup over "
                    "host-pmem and over pmem, checkpoint overhead, PMEM bytes written and link "
                    "bytes per batch, energy per batch and its saving over host-pmem and pmem; "
                    "then the lookup and update engines' bandwidth against the PMEM bound, "
                    "recovery cycles against the log size (--recovery-series), "
                    "and simulated cycles per second of a training run under Verilator (small) and Icarus (tiny). Every run is "
                    "checked against the golden model. Deterministic: the same seed prints the "
                    "same cycle counts.")
    sp.add_argument("--workloads", default=",".join(WORKLOADS), type=_choices(WORKLOADS),
                    help=f"comma-separated workloads (default: all: {', '.join(WORKLOADS)})")
    sp.add_argument("--systems", default=None, type=_choices(SYSTEMS),
                    help=f"comma-separated systems (default: all: {', '.join(SYSTEMS)}; with "
                         f"--scale: cxl)")
    workload_options(sp, names=("batches", "seed"), defaults={"batches": None},
                     helps={"batches": "batches per run; the window measured is batches "
                                       "2..N-1, with --scale 3..N-1 (batch N closes it) "
                                       f"(default: {LADDER_BATCHES}, with --scale "
                                       f"{bench_scale.DEFAULT_BATCHES})"},
                     batches={"type": _at_least(3)})
    staleness_option(sp, help="staleness bound K for every system")
    cluster_options(sp, jobs_default=2)
    sp.add_argument("--media", choices=tuple(MEDIA_PROFILES), default=DEFAULT_MEDIA,
                    help="the PMEM media every system of the ladder reaches: "
                         + "; ".join(f"{p.name}: {p.read_ns:g}/{p.write_ns:g} ns, "
                                     f"{p.read_gbps:g}/{p.write_gbps:g} GB/s read/write "
                                     f"({p.source})" for p in MEDIA_PROFILES.values()))
    add_set_option(sp)
    sp.add_argument("--skip-engines", action="store_true", help="leave out the engine bandwidth runs")
    sp.add_argument("--skip-recovery", action="store_true",
                    help="with --scale: leave out the recovery cycles per table size")
    sp.add_argument("--recovery-series", action="store_true",
                    help="also measure recovery cycles after a failure in an update with log "
                         "rings of 1x, 2x and 4x the automatic size (two more device builds, "
                         "minutes each; the cycles do not depend on the ring's size)")
    sp.add_argument("--skip-speed", action="store_true", help="leave out the simulator speed runs")
    sp.add_argument("--speed", action="store_true",
                    help="instead of the ladder: only the simulator speed runs (train --config "
                         "small on Verilator, tiny on Icarus)")
    sp.add_argument("--cpu", action="store_true",
                    help="instead of the ladder: time the host-pmem CPU's kernels (deduplication, "
                         "pooling, gradient summing, applying) in C on one core, beside the "
                         "figures the ladder charges (no simulation)")
    sp.add_argument("--loader", action="store_true",
                    help="instead of the ladder: the Criteo loader's lines per second on a sample "
                         "file it writes (one core, no simulation)")
    sp.add_argument("--loader-lines", type=positive, default=1_000_000,
                    help="lines of the --loader sample file (default: 1,000,000)")
    sp.add_argument("--scale", action="store_true",
                    help="instead of the ladder: the scale ladder (8 tables of 10^3, 10^5, 10^6 "
                         "rows; batches of 32, 256, 2048) on --systems, with and without "
                         "checkpointing: how cycles, checkpoint overhead, PMEM and link bytes, "
                         "energy and simulation time grow, and recovery cycles per table size")
    sp.add_argument("--fan-out", dest="fan_out_failures", type=positive, nargs="?", const=300,
                    default=None, metavar="FAILURES",
                    help="instead of the ladder: the same campaign (FAILURES planned power "
                         "failures on tiny, default 300) on a local process pool and on a local "
                         "Ray instance of --jobs workers: failures per minute of each, and "
                         "whether their tallies agree")
    sp.add_argument("--sizes", type=bench_scale.parse_sizes, default=None, metavar="1k,100k,1m",
                    help="with --scale: table sizes (default: all: 1k,100k,1m)")
    sp.add_argument("--batch-sizes", type=bench_scale.parse_batch_sizes, default=None,
                    metavar="32,256,2048",
                    help="with --scale: batch sizes (default: all: 32,256,2048)")
    sp.add_argument("--pool", action="store_true",
                    help="instead of the ladder: pools of --devices devices (docs/pool.md) "
                         "training the scale ladder's model, strong scaling (the same 8 "
                         "tables of --pool-rows rows spread wider) and weak (8 tables of "
                         "devices x --pool-rows rows), with and without checkpointing: cycles "
                         "per batch, samples per simulated and per wall second, checkpoint "
                         "overhead, the switch's latency")
    devices_option(sp, sizes=bench_pool.DEVICES, more="with --pool")
    sp.add_argument("--pool-rows", type=positive, default=1000, metavar="N",
                    help="with --pool: rows of each table at strong scaling (default: 1,000)")
    sp.add_argument("--pool-batch", type=positive, default=256, metavar="N",
                    help="with --pool: samples per batch (default: 256)")
    sp.add_argument("--pool-workers", type=int_list(), default=(), metavar="1,2",
                    help="with --pool: also run the largest pool with each of these numbers "
                         "of simulators at once: its wall time per batch (the cycles must not "
                         "change)")
    pmem_dir_option(sp)
    json_option(sp, help="write every figure as JSON to OUT")
    sp.add_argument("--plot", metavar="OUT.png",
                    help="draw each system's cycles per batch by phase (with --scale: how each "
                         "figure grows with table and batch size)")
    sp.set_defaults(func=cmd_bench)


def _choices(known):
    import argparse

    def parse(text):
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad) or 'empty list'}; choose from {', '.join(known)}")
        return ",".join(names)
    return parse


def _at_least(low):
    import argparse

    def parse(text):
        v = positive(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        return v
    return parse
