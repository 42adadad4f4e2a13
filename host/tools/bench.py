"""``trainingcxl bench``: the configuration ladder, measured on the RTL.

See docs/design.md, "Configuration ladder".

Every system of :mod:`trainingcxl.host.protocol.systems` trains the same batches of
each workload twice, with checkpointing and without. A run measures a window
of batches (the first batch, which warms the device, and the table checks
are outside it) with the device's counters and the host's modelled time.
From the windows come cycles per batch, speedups over ``pmem``, checkpoint
overhead, PMEM and link bytes, and energy (:mod:`trainingcxl.host.model.energy`).
Separate runs measure the lookup and update engines against the PMEM
model's bandwidth bound, the recovery time against the log size, and the
simulators' speed on one run. Simulations are deterministic: the same seed
gives the same cycle counts.
"""

import dataclasses
import sys
import time
from dataclasses import dataclass, field

from trainingcxl.host.tools.argtypes import (add_set_option, nonneg, positive, save_figure,
                                             with_overrides, write_json)
from trainingcxl.host.tools.cluster import add_cluster_options, open_cluster
from trainingcxl.spec.config import LINE_BYTES, SCALE_BATCHES, SCALE_ROWS, Config, ModelShape
from trainingcxl.host.model.energy import DEFAULT_ENERGY, Activity, link_bytes
from trainingcxl.host.protocol.systems import SYSTEMS

__all__ = ["Workload", "WORKLOADS", "add_bench_command", "analyse_run"]


@dataclass(frozen=True)
class Workload:
    """A device configuration and the synthetic data a benchmark trains on."""
    name: str
    summary: str
    config: Config
    batch_size: int
    min_pooling: int
    zipf_alpha: float = 1.05
    args: dict = field(default_factory=dict)


#: Like the paper's RM1/RM2 (embedding-dominated) and RM3/RM4 (MLP-dominated), in
#: proportion rather than in size: on the ``pmem`` baseline the embedding work
#: takes most of a batch of the first and a minority of the second.
WORKLOADS = {w.name: w for w in (
    Workload("embedding-heavy",
             "4 tables of 128-1024 rows, bags of 0-16 rows (Zipf 1.05), small MLPs "
             "(13-64-16, 64-1), batches of 32",
             Config(tables=(512, 256, 1024, 128), max_pooling=16, max_bags=2048,
                    model=ModelShape(bottom_hidden=(64,), top_hidden=(64,), batch_size=32)),
             batch_size=32, min_pooling=0),
    Workload("mlp-heavy",
             "4 tables x 512 rows, bags of 1-4 rows (Zipf 1.05), large MLPs "
             "(13-256-64-16, 256-128-1), batches of 64",
             Config(tables=(512,) * 4, max_pooling=4, max_bags=2048,
                    model=ModelShape(bottom_hidden=(256, 64), top_hidden=(256, 128),
                                     batch_size=64)),
             batch_size=64, min_pooling=1),
)}


def overridden(workloads, assignments):
    """The workloads with ``--set`` applied to each one's configuration."""
    if not assignments:
        return workloads
    return [dataclasses.replace(w, config=with_overrides(w.config, assignments)) for w in workloads]


def _per_batch(value, batches):
    return value / max(1, batches)


#: Media accesses that ``host-pmem`` counts on the host (the device's counters do not see them).
HOST_PMEM_COUNTS = ("pmem_reads", "pmem_writes", "pmem_writes_data", "pmem_writes_log",
                    "pmem_writes_snapshot")
#: The systems the others are compared with: the paper's baseline and ours over CXL.mem.
BASELINES = ("host-pmem", "pmem")


def baseline_key(name):
    """``host-pmem`` -> ``host_pmem``: the suffix of ``speedup_vs_...`` figures."""
    return name.replace("-", "_")


def analyse_run(cfg, system_name, record, energy=DEFAULT_ENERGY):
    """Figures per batch of one run's measured window."""
    w = record["window"]
    c, host, n = dict(w["counters"]), w["host"], w["batches"]
    # host-pmem's CPU reaches the media on its own bus: its accesses are the host's counts.
    for k in HOST_PMEM_COUNTS:
        c[k] += host.get(k, 0)
    sysm = SYSTEMS[system_name]
    data = c["link_to_device_data"] + c["link_to_host_data"]
    other = c["link_to_device"] + c["link_to_host"] - data
    if not sysm.coherent and sysm.engines:
        # near-data: CXL.cache reaches the device's own buffer, not the link (a read is
        # a request and a data message; a write a request, a pull and a data message).
        data -= c["cache_reads"] + c["cache_writes"]
        other -= c["cache_reads"] + 2 * c["cache_writes"]
    link = link_bytes(max(0, data), max(0, other)) + host.get("copy_bytes_device_link", 0)
    gpu_busy = host.get("gpu_busy_cycles", 0) + host.get("gpu_embedding_cycles", 0)
    activity = Activity(
        cycles=w["cycles"], gpu_busy_cycles=min(gpu_busy, w["cycles"]),
        pmem_lines_read=c["pmem_reads"], pmem_lines_written=c["pmem_writes"],
        link_bytes=link + host.get("gpu_copy_bytes", 0),
        engine_line_ops=c["lookup_lines"] + c["update_lines"],
        host_line_ops=host.get("host_line_ops", 0),
        host_cpu_cycles=min(host.get("host_cpu_cycles", 0), w["cycles"]))
    joules = energy.energy(activity)
    phases = {k[len("phase_"):]: _per_batch(v, n) for k, v in host.items() if k.startswith("phase_")}
    return {
        "batches": n,
        "cycles_per_batch": _per_batch(w["cycles"], n),
        "phases_per_batch": phases,
        "pmem_bytes_written_per_batch": {
            "data": _per_batch(c["pmem_writes_data"] * LINE_BYTES, n),
            "log": _per_batch(c["pmem_writes_log"] * LINE_BYTES, n),
            "snapshot": _per_batch(c["pmem_writes_snapshot"] * LINE_BYTES, n),
            "total": _per_batch(c["pmem_writes"] * LINE_BYTES, n)},
        "pmem_bytes_read_per_batch": _per_batch(c["pmem_reads"] * LINE_BYTES, n),
        "link_bytes_per_batch": _per_batch(link, n),
        "gpu_copy_bytes_per_batch": _per_batch(host.get("gpu_copy_bytes", 0), n),
        "energy_per_batch_j": _per_batch(joules.total, n),
        "energy_breakdown_per_batch_j": {k: _per_batch(v, n) for k, v in joules.as_dict().items()},
        "stalls_per_batch": {k: _per_batch(c[k], n) for k in (
            "lookup_stalls", "update_stalls", "log_full", "ckpt_stalls", "log_barrier",
            "lookup_log_holds")},
        "busy_per_batch": {"lookup": _per_batch(c["lookup_busy"], n),
                           "update": _per_batch(c["update_busy"], n),
                           "log": _per_batch(c.get("log_busy", 0), n),
                           "snapshot": _per_batch(c.get("snapshot_busy", 0), n)},
        "undo_records_per_batch": _per_batch(c["log_records"], n),
    }


# -- the runs --------------------------------------------------------------------------

def _train_spec(index, workload, system_name, checkpointing, args, *, failures=(), config=None):
    sysm = SYSTEMS[system_name]
    k = sysm.staleness if args.staleness is None else args.staleness
    cfg = config or workload.config
    return {
        "index": index, "sim": "verilator", "config": cfg.to_dict(),
        "workload": workload.name, "system": system_name, "checkpointing": checkpointing,
        "args": {"seed": args.seed, "batches": args.batches, "batch_size": workload.batch_size,
                 "min_pooling": workload.min_pooling, "zipf_alpha": workload.zipf_alpha,
                 "check_every": 1 << 30, "relaxed": sysm.relaxed, "staleness": k,
                 "system": system_name, "checkpointing": checkpointing,
                 "measure_from": 2, "failures": list(failures)},
    }


def _ladder(args, workloads, systems, say, on_result=None):
    """Every workload on every system, with and without checkpointing, in parallel.

    Returns ``{(workload, system, checkpointing): (spec, record)}`` and the failed
    runs (an error, no record, or a golden mismatch); ``on_result(spec, record,
    error)`` is told of each run as it finishes."""
    from trainingcxl.host.tools.pool import parallel_runs
    specs = []
    for w in workloads:
        for s in systems:
            for ckpt in (True, False):
                specs.append(_train_spec(len(specs), w, s, ckpt, args))
    say(f"[ladder] {len(specs)} training runs ({len(workloads)} workloads x {len(systems)} "
        f"systems x checkpointing on/off), {args.batches} batches each, {args.fan_out.workers} "
        f"workers ({args.fan_out.name})")
    args.fan_out.prebuild([w.config for w in workloads])
    results, errors = {}, []
    for spec, record, error in parallel_runs(specs, args.fan_out, lambda r: ""):
        key = (spec["workload"], spec["system"], spec["checkpointing"])
        if error or not record or not record.get("golden_match"):
            errors.append({"run": key, "error": error or (record or {}).get("aborted", "mismatch")})
        results[key] = (spec, record)
        if on_result:
            on_result(spec, record, error)
    return results, errors


def _engine_efficiency(args, workload, say):
    """The lookup and update engines against the PMEM model's bound, on the workload's
    tables with large batches (the existing bandwidth jobs)."""
    from trainingcxl.host.tools.jobs import run_job
    cfg = workload.config
    big = max(1, cfg.max_bags // cfg.n_tables)
    say(f"[engines] lookup and update bandwidth on {workload.name}, batches of {big} samples")
    job = {"seed": args.seed, "batches": 2, "batch_size": big, "min_pooling": cfg.max_pooling // 2}
    look = run_job("verilator", cfg, job, job="lookup")
    lines = sum(b["pmem_lines"] for b in look["batches"])
    busy = sum(b["busy_cycles"] for b in look["batches"])
    peak = cfg.pmem.read_rate[0] / cfg.pmem.read_rate[1]
    upd = run_job("verilator", cfg, {**job, "min_pooling": cfg.max_pooling // 4}, job="update")
    return {"lookup_efficiency": lines / busy / peak, "lookup_lines": lines, "lookup_busy_cycles": busy,
            "update_efficiency": upd["update_efficiency"], "update_lines": upd["lines"],
            "update_busy_cycles": upd["busy_cycles"], "update_bound_cycles": upd["bound_cycles"],
            "golden_match": bool(look["golden_match"] and upd["golden_match"])}


def _recovery_vs_log(args, workload, say):
    """Recovery cycles of the ``cxl`` system after a failure in an update, for log rings
    of 1x, 2x and 4x the automatic size (each a device of its own)."""
    from trainingcxl.host.tools.pool import parallel_runs
    base = workload.config
    sizes = [base.log_size * f for f in (1, 2, 4)]
    configs = [base.replace(log_lines=n) for n in sizes]
    say(f"[recovery] a power failure in an update, log rings of {', '.join(map(str, sizes))} lines")
    args.fan_out.prebuild(configs)
    specs = [_recovery_spec(k, workload, args, cfg) for k, cfg in enumerate(configs)]
    out = [_recovery_row(*result) for result in parallel_runs(specs, args.fan_out, lambda r: "")]
    return sorted(out, key=lambda r: r["log_lines"])


def _recovery_spec(index, workload, args, config=None):
    """A ``cxl`` run of 4 batches with a power failure 200 cycles into batch 3's update."""
    spec = _train_spec(index, workload, "cxl", True, args, config=config,
                       failures=[{"phase": "update", "batch": 3, "offset": 200}])
    spec["args"].update({"batches": 4, "measure_from": None, "check_every": 2})
    return spec


def _recovery_row(spec, record, error):
    """The recovery of a :func:`_recovery_spec` run: its cycles, the records rolled back,
    the media lines it read (``recovery_lines``, when the device reports them) and the
    log ring's size."""
    from trainingcxl.spec.config import Config
    f = (record or {}).get("failures") or [{}]
    consistent = bool(f[0].get("consistent", False))
    if not error and record and not record.get("golden_match"):
        error = record.get("aborted", "golden mismatch")
    elif not error and not consistent:
        error = "no consistent recovery recorded"
    return {"workload": spec["workload"], "log_lines": Config.from_dict(spec["config"]).log_size,
            "recovery_cycles": f[0].get("recovery_cycles"), "rolled_back": f[0].get("rolled_back"),
            "recovery_lines": f[0].get("recovery_lines"), "consistent": consistent, "error": error}


#: The speed runs: ``train --config small`` on Verilator, and a run small enough for Icarus.
SPEED_RUNS = {"verilator": ("small", 30, None), "icarus": ("tiny", 3, 8)}


def _sim_speed(args, say):
    """Simulated cycles per wall-second of a ``cxl`` training run (with every golden
    check) under each simulator (:data:`SPEED_RUNS`); the build is not timed."""
    from trainingcxl.spec.config import PRESETS
    from trainingcxl.host.tools.pool import run_train
    from trainingcxl.sim.runner import build
    speed = {}
    for sim, (preset, batches, batch_size) in SPEED_RUNS.items():
        cfg = PRESETS[preset]
        batch_size = batch_size or cfg.model.batch_size
        say(f"[speed] train --config {preset} --batches {batches} --batch-size {batch_size} "
            f"(cxl) on {sim}")
        spec = {"index": f"speed-{sim}", "sim": sim, "config": cfg.to_dict(),
                "args": {"seed": args.seed, "batches": batches, "batch_size": batch_size,
                         "relaxed": True, "staleness": 1, "system": "cxl", "check_every": 10}}
        build(sim, cfg, log=lambda text: print(text, file=sys.stderr, flush=True))
        t0 = time.monotonic()
        _, record, error = run_train(spec)
        wall = time.monotonic() - t0
        if record is None:
            raise RuntimeError(f"the speed run on {sim} failed: {error}")
        speed[sim] = {"config": preset, "batches": batches, "batch_size": batch_size,
                      "cycles": record["cycles"], "wall_s": wall, "sim_wall_s": record["wall_s"],
                      "cycles_per_s": record["cycles"] / record["wall_s"]}
    return speed


def _speed_lines(speed, say):
    for sim, v in speed.items():
        say(f"  {sim:<9} {v['config']:<6} {v['batches']} batches of {v['batch_size']}: "
            f"{v['cycles']:,} cycles in {v['sim_wall_s']:.2f} s of training "
            f"({v['wall_s']:.1f} s with start-up): {v['cycles_per_s']:,.0f} cycles/s")


# -- report ----------------------------------------------------------------------------

def _summarise(results, workloads, systems):
    out = {}
    for w in workloads:
        rows = {}
        for s in systems:
            on = results.get((w.name, s, True))
            off = results.get((w.name, s, False))
            if not on or not on[1] or "window" not in on[1]:
                continue
            fig = analyse_run(w.config, s, on[1])
            if off and off[1] and "window" in off[1]:
                base = analyse_run(w.config, s, off[1])
                fig["cycles_per_batch_no_checkpoint"] = base["cycles_per_batch"]
                fig["checkpoint_overhead"] = fig["cycles_per_batch"] / base["cycles_per_batch"] - 1
            fig["golden_match"] = bool(on[1].get("golden_match")) and bool(off and off[1]
                                                                        and off[1].get("golden_match"))
            rows[s] = fig
        for base in BASELINES:
            bf, key = rows.get(base), baseline_key(base)
            for fig in rows.values():
                if bf:
                    fig[f"speedup_vs_{key}"] = bf["cycles_per_batch"] / fig["cycles_per_batch"]
                    fig[f"energy_saving_vs_{key}"] = 1 - fig["energy_per_batch_j"] / bf["energy_per_batch_j"]
        out[w.name] = rows
    return out


def comparison(value, kind):
    """A speedup (``"x"``: ``1.34x``) or a saving (``"%"``: ``35.6%``) over a baseline;
    ``-`` when the run has no such baseline (nothing to compare with, not 0)."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if kind == "x" else f"{value:.1%}"


def _table(name, rows, say):
    say(f"\n  {name}")
    say(f"  {'system':<10} {'cyc/batch':>10} {'ckpt ovh':>9} {'PMEM wr B':>10} {'link B':>10} "
        f"{'energy mJ':>10}  {'speedup over':>15}  {'energy saving over':>18}")
    say(f"  {'':<10} {'':>10} {'':>9} {'':>10} {'':>10} {'':>10}  "
        f"{'host-pmem':>9} {'pmem':>5}  {'host-pmem':>9} {'pmem':>8}")
    for s, f in rows.items():
        ovh = f.get("checkpoint_overhead")
        say(f"  {s:<10} {f['cycles_per_batch']:>10,.0f} "
            f"{'-' if ovh is None else f'{100 * ovh:.2f}%':>9} "
            f"{f['pmem_bytes_written_per_batch']['total']:>10,.0f} {f['link_bytes_per_batch']:>10,.0f} "
            f"{1e3 * f['energy_per_batch_j']:>10.3f}  "
            f"{comparison(f.get('speedup_vs_host_pmem'), 'x'):>9} "
            f"{comparison(f.get('speedup_vs_pmem'), 'x'):>5}  "
            f"{comparison(f.get('energy_saving_vs_host_pmem'), '%'):>9} "
            f"{comparison(f.get('energy_saving_vs_pmem'), '%'):>8}")


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


def _bench_loader(args, say):
    """Lines per second of the Criteo loader (one core, no simulation): writes a sample file
    of ``args.loader_lines`` lines and loads it into the ``criteo-kaggle`` tables."""
    import tempfile
    from pathlib import Path
    from trainingcxl.host.model.criteo import CriteoDataset, write_sample
    from trainingcxl.spec.config import PRESETS
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
    if args.json:
        write_json(args.json, result)
        say(f"  JSON  {args.json}")
    return 0


#: The campaign ``bench --fan-out`` times on each engine (tiny, 5 failures per run).
FAN_OUT_CAMPAIGN = {"per_run": 5, "batches": 6, "batch_size": 8, "staleness": [0, 1, 8],
                    "orders": ["strict", "relaxed"]}


def _bench_fan_out(args, say):
    """Failures per minute of one campaign on a local process pool and on a private
    local Ray instance with the same number of workers: Ray's own cost. The device
    is built before the clock starts; the engine's start-up is reported apart."""
    from trainingcxl.host.tools.campaign import campaign_specs, tally
    from trainingcxl.host.tools.pool import parallel_runs
    from trainingcxl.spec.config import PRESETS
    specs = campaign_specs(PRESETS["tiny"], failures=args.fan_out_failures, seed=args.seed,
                           **FAN_OUT_CAMPAIGN)
    say(f"[fan-out] a campaign of {len(specs)} runs x {FAN_OUT_CAMPAIGN['per_run']} planned "
        f"failures on tiny, {args.jobs} workers: local pool, then local Ray")
    result = {"runs": len(specs), "workers": args.jobs, "campaign": FAN_OUT_CAMPAIGN}
    tallies = {}
    for where in ("local", "ray"):
        t0 = time.monotonic()
        with open_cluster(where, args.jobs) as cluster:
            cluster.prebuild([PRESETS["tiny"]])
            t1 = time.monotonic()
            results = sorted(parallel_runs(specs, cluster, lambda r: ""), key=lambda r: r[0]["index"])
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
    if args.json:
        write_json(args.json, result)
        say(f"  JSON  {args.json}")
    return 0 if result["same_tally"] and not any(t["inconsistent"] for t in tallies.values()) else 1


def cmd_bench(args):
    def say(text):
        print(text, flush=True)
    alone = [o for o, v in (("--scale", args.scale), ("--speed", args.speed),
                            ("--loader", args.loader), ("--fan-out", args.fan_out_failures)) if v]
    if len(alone) > 1:
        raise SystemExit(f"error: {' and '.join(alone)} are runs of their own; give one")
    if args.fan_out_failures:
        return _bench_fan_out(args, say)
    if args.loader:
        return _bench_loader(args, say)
    if args.speed:
        speed = _sim_speed(args, say)
        say("simulation speed (simulated cycles per wall-second of the training loop):")
        _speed_lines(speed, say)
        if args.json:
            write_json(args.json, {"sim_speed": speed})
            say(f"  JSON  {args.json}")
        return 0
    scale_only = [o for o, v in (("--sizes", args.sizes), ("--batch-sizes", args.batch_sizes)) if v]
    if args.scale:
        from trainingcxl.host.tools import bench_scale
        args.systems = tuple((args.systems or ",".join(bench_scale.DEFAULT_SYSTEMS)).split(","))
        args.sizes = args.sizes or tuple(SCALE_ROWS)
        args.batch_sizes = args.batch_sizes or SCALE_BATCHES
        args.batches = args.batches or bench_scale.DEFAULT_BATCHES
        with open_cluster(args.cluster, args.jobs) as args.fan_out:
            return bench_scale.cmd_scale(args, say)
    if scale_only:
        raise SystemExit(f"error: {' and '.join(scale_only)} only apply with --scale")
    args.batches = args.batches or 8
    workloads = overridden([WORKLOADS[w] for w in args.workloads.split(",")], args.set)
    systems = (args.systems or ",".join(SYSTEMS)).split(",")
    t0 = time.monotonic()
    from trainingcxl.sim.runner import BenchFailure
    try:
        with open_cluster(args.cluster, args.jobs) as args.fan_out:
            results, errors = _ladder(args, workloads, systems, say)
            summary = _summarise(results, workloads, systems)
            recovery = ({} if args.skip_recovery
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
        "batches": args.batches, "seed": args.seed,
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
        _table(name, rows, say)
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
    if args.json:
        write_json(args.json, result)
        say(f"  JSON  {args.json}")
    return 1 if errors else 0


def add_bench_command(sub):
    from trainingcxl.host.tools import bench_scale     # it builds on this module
    sp = sub.add_parser(
        "bench", help="run the configuration ladder (pmem ... cxl) and report speed, "
                      "checkpoint overhead and energy",
        description="Trains the same batches on every system of the ladder (pmem, near-data, "
                    "cxl-d, cxl-b, cxl), with checkpointing and without, on an embedding-heavy "
                    "and an MLP-heavy workload, all on Verilator with the same PMEM and link "
                    "model. Prints per workload: cycles per batch, speedup over pmem, "
                    "checkpoint overhead, PMEM bytes written and link bytes per batch, energy "
                    "per batch and its saving over pmem; then the lookup and update engines' "
                    "bandwidth against the PMEM bound, recovery cycles against the log size, "
                    "and simulated cycles per second of a training run under Verilator (small) and Icarus (tiny). Every run is "
                    "checked against the golden model. Deterministic: the same seed prints the "
                    "same cycle counts.")
    sp.add_argument("--workloads", default=",".join(WORKLOADS), type=_choices(WORKLOADS),
                    help=f"comma-separated workloads (default: all: {', '.join(WORKLOADS)})")
    sp.add_argument("--systems", default=None, type=_choices(SYSTEMS),
                    help=f"comma-separated systems (default: all: {', '.join(SYSTEMS)}; with "
                         f"--scale: cxl)")
    sp.add_argument("--batches", type=_at_least(3), default=None,
                    help="batches per run; the window measured is batches 2..N (default: 8; "
                         "with --scale: 3)")
    sp.add_argument("--staleness", type=nonneg, default=None,
                    help="staleness bound K for every system (default: each system's own)")
    sp.add_argument("--seed", type=nonneg, default=0, help="workload and table seed (default: 0)")
    add_cluster_options(sp, jobs_default=2)
    add_set_option(sp)
    sp.add_argument("--skip-engines", action="store_true", help="leave out the engine bandwidth runs")
    sp.add_argument("--skip-recovery", action="store_true", help="leave out the recovery-time series")
    sp.add_argument("--skip-speed", action="store_true", help="leave out the simulator speed runs")
    sp.add_argument("--speed", action="store_true",
                    help="instead of the ladder: only the simulator speed runs (train --config "
                         "small on Verilator, tiny on Icarus)")
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
    sp.add_argument("--json", metavar="OUT", help="write every figure as JSON to OUT")
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
