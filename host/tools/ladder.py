"""The configuration ladder's runs and their analysis, shared by ``bench`` and ``bench
--scale``: the workloads, a training run per system with and without
checkpointing (:func:`train_spec`, :func:`run_ladder`), the analysis of a run's
measured window (:func:`analyse_run`), the recovery runs, and the summary
tables. See docs/design.md, "Configuration ladder".
"""

import dataclasses
from dataclasses import dataclass, field

from trainingcxl.spec.config import LINE_BYTES, Config, ModelShape
from trainingcxl.host.model.data import ZIPF_ALPHA
from trainingcxl.host.model.energy import DEFAULT_ENERGY, Activity, link_bytes
from trainingcxl.host.protocol.systems import DEFAULT_SYSTEM, SYSTEMS
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.runs.fanout import fan_out
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Task
from trainingcxl.host.tools.argtypes import with_overrides

__all__ = ["Workload", "WORKLOADS", "BASELINES", "overridden", "baseline_key", "analyse_run",
           "window_bounds_of", "add_bounds",
           "train_task", "run_key", "run_ladder", "recovery_task", "recovery_row", "summarise",
           "comparison", "table"]


@dataclass(frozen=True)
class Workload:
    """A device configuration and the synthetic data a benchmark trains on."""
    name: str
    summary: str
    config: Config
    batch_size: int
    min_pooling: int
    zipf_alpha: float = ZIPF_ALPHA
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


def overridden(workloads, assignments, media=None):
    """The workloads on the media profile ``media`` (``None``: their own), then with
    ``--set`` applied to each one's configuration."""
    if media is not None:
        workloads = [dataclasses.replace(w, config=w.config.with_media(media)) for w in workloads]
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
    """Figures per batch of one run's measured window. Behind an energy-backed write
    buffer the window's cycles include the media's time for the lines the buffer took
    in the window and had not drained at its end (the change in ``pmem_backlog``): the
    buffer moves writes in time, it does not make them free."""
    w = record.window
    c, host, n = dict(w.counters), w.host, w.batches
    lines, per = cfg.pmem.write_rate
    cycles = w.cycles + round(c.get("pmem_backlog", 0) * per / lines)
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
        cycles=cycles, gpu_busy_cycles=min(gpu_busy, cycles),
        pmem_lines_read=c["pmem_reads"], pmem_lines_written=c["pmem_writes"],
        link_bytes=link + host.get("gpu_copy_bytes", 0),
        engine_line_ops=c["lookup_lines"] + c["update_lines"],
        host_line_ops=host.get("host_line_ops", 0),
        host_cpu_cycles=min(host.get("host_cpu_cycles", 0), cycles))
    joules = energy.energy(activity)
    phases = {k[len("phase_"):]: _per_batch(v, n) for k, v in host.items() if k.startswith("phase_")}
    return {
        "batches": n,
        "cycles_per_batch": _per_batch(cycles, n),
        "phases_per_batch": phases,
        "pmem_bytes_written_per_batch": {
            "data": _per_batch(c["pmem_writes_data"] * LINE_BYTES, n),
            "log": _per_batch(c["pmem_writes_log"] * LINE_BYTES, n),
            "snapshot": _per_batch(c["pmem_writes_snapshot"] * LINE_BYTES, n),
            "total": _per_batch(c["pmem_writes"] * LINE_BYTES, n)},
        # Lines the energy-backed buffer kept (the checkpoint region): persistent, never
        # written to the media.
        "pmem_bytes_buffered_per_batch": _per_batch(c.get("pmem_writes_buffered", 0)
                                                    * LINE_BYTES, n),
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

def train_task(index, workload, system_name, checkpointing, args, *, failures=(), config=None,
               warmup=1):
    """A training run of the ladder: ``workload`` on ``system_name``, its window measured
    after ``warmup`` batches; the task's label is the workload's name."""
    sysm = SYSTEMS[system_name]
    k = sysm.staleness if args.staleness is None else args.staleness
    return Task(index, config or workload.config, TrainJob(
        seed=args.seed, batches=args.batches, batch_size=workload.batch_size,
        min_pooling=workload.min_pooling, zipf_alpha=workload.zipf_alpha,
        check_every=1 << 30, relaxed=sysm.relaxed, staleness=k, system=system_name,
        checkpointing=checkpointing, measure_from=warmup + 1, failures=tuple(failures),
        test_samples=0), label=workload.name, media_dir=getattr(args, "pmem_dir", None))


def run_key(task):
    """``(workload, system, checkpointing)``: what a ladder run measured."""
    return task.label, task.job.system, task.job.checkpointing


def run_ladder(args, workloads, systems, say, on_result=None, warmup=1):
    """Every workload on every system, with and without checkpointing, in parallel.

    Returns ``{(workload, system, checkpointing): (task, record)}`` and the failed
    runs (an error, no record, or a golden mismatch); ``on_result(result)`` is told
    of each run as it finishes."""
    tasks = []
    for w in workloads:
        for s in systems:
            for ckpt in (True, False):
                tasks.append(train_task(len(tasks), w, s, ckpt, args, warmup=warmup))
    say(f"[ladder] {len(tasks)} training runs ({len(workloads)} workloads x {len(systems)} "
        f"systems x checkpointing on/off), {args.batches} batches each, {args.fan_out.workers} "
        f"workers ({args.fan_out.name})")
    args.fan_out.prebuild([w.config for w in workloads])
    results, errors = {}, []
    for result in fan_out(DeviceRunner(), tasks, args.fan_out):
        task, record, error = result
        key = run_key(task)
        if error or not record or not record.golden_match:
            errors.append({"run": key, "error": error or (record and record.aborted) or "mismatch"})
        results[key] = (task, record)
        if on_result:
            on_result(result)
    return results, errors


def recovery_task(index, workload, args, config=None):
    """A run of 4 batches on the default system with a power failure 200 cycles into
    batch 3's update."""
    task = train_task(index, workload, DEFAULT_SYSTEM, True, args, config=config,
                      failures=[{"phase": "update", "batch": 3, "offset": 200}])
    return task.with_job(batches=4, measure_from=None, check_every=2)


def recovery_row(task, record, error):
    """The recovery of a :func:`recovery_task` run: its cycles, the records rolled back,
    the media lines it read (``recovery_lines``, when the device reports them) and the
    log ring's size."""
    f = record.failures[0] if record and record.failures else None
    consistent = bool(f and f.consistent)
    if not error and record and not record.golden_match:
        error = record.aborted or "golden mismatch"
    elif not error and not consistent:
        error = "no consistent recovery recorded"
    return {"workload": task.label, "log_lines": task.config.log_size,
            "recovery_cycles": f and f.recovery_cycles, "rolled_back": f and f.rolled_back,
            "recovery_lines": f and f.recovery_lines, "consistent": consistent, "error": error}


def window_bounds_of(workload, record, seed, staleness):
    """Both PMEM bounds (:mod:`trainingcxl.host.model.bound`: the scheme's and the floor
    of exact recovery) per batch of a run's measured window (the same batches every
    system of ``workload`` trains), with snapshots at least every ``staleness + 1``
    batches, and the distinct rows of the window's batches: a
    :class:`~trainingcxl.host.model.bound.WindowBound`."""
    from trainingcxl.host.model.bound import window_bounds
    from trainingcxl.host.model.data import SyntheticWorkload
    w = record.window
    data = SyntheticWorkload(workload.config, seed=seed, batch_size=workload.batch_size,
                             min_pooling=workload.min_pooling, zipf_alpha=workload.zipf_alpha)
    return window_bounds(workload.config,
                         [data.batch(b - 1) for b in range(w.first_batch, w.last_batch + 1)],
                         staleness=staleness)


def add_bounds(fig, bound):
    """``fig`` (a run's :func:`analyse_run` figures) against ``bound`` (its window's
    :class:`~trainingcxl.host.model.bound.WindowBound`): the scheme's bound and the floor
    of exact recovery, each as cycles per batch and as the share of the measured cycles
    they are, and the PMEM lines written per distinct row the window's batches update."""
    fig["bound_cycles"] = bound.cycles
    fig["fraction_of_bound"] = bound.cycles / fig["cycles_per_batch"]
    fig["floor_cycles"] = bound.floor_cycles
    fig["fraction_of_floor"] = bound.floor_cycles / fig["cycles_per_batch"]
    written = fig["pmem_bytes_written_per_batch"]["total"] * fig["batches"] / LINE_BYTES
    fig["write_lines_per_row"] = written / bound.rows if bound.rows else None
    return fig


def summarise(results, workloads, systems):
    """Per workload and system, the figures of the measured window
    (:func:`analyse_run`), its checkpoint overhead, its speedups and energy savings
    over the baselines, and its cycles against both PMEM bounds of the same batches
    (:func:`add_bounds`)."""
    out = {}
    for w in workloads:
        rows = {}
        bounds = {}     # (seed, K, window) -> bound: the systems of a workload share them
        for s in systems:
            on = results.get((w.name, s, True))
            off = results.get((w.name, s, False))
            if not on or not on[1] or on[1].window is None:
                continue
            fig = analyse_run(w.config, s, on[1])
            if off and off[1] and off[1].window is not None:
                base = analyse_run(w.config, s, off[1])
                fig["cycles_per_batch_no_checkpoint"] = base["cycles_per_batch"]
                fig["checkpoint_overhead"] = fig["cycles_per_batch"] / base["cycles_per_batch"] - 1
            fig["golden_match"] = bool(on[1].golden_match) and bool(off and off[1]
                                                                 and off[1].golden_match)
            seed, k = on[0].job.seed, on[0].job.staleness or 0
            key = (seed, k, on[1].window.first_batch, on[1].window.last_batch)
            if key not in bounds:
                bounds[key] = window_bounds_of(w, on[1], seed, k)
            add_bounds(fig, bounds[key])
            # Relaxed lookups that overflowed the deferred list and were redone in strict order.
            fig["strict_fallbacks"] = on[1].fallbacks
            rows[s] = fig
        for base in BASELINES:
            bf, key = rows.get(base), baseline_key(base)
            for fig in rows.values():
                if bf:
                    fig[f"speedup_vs_{key}"] = bf["cycles_per_batch"] / fig["cycles_per_batch"]
                    fig[f"energy_saving_vs_{key}"] = 1 - fig["energy_per_batch_j"] / bf["energy_per_batch_j"]
        out[w.name] = rows
    return out


def _share(value, fmt=".1%"):
    """A figure that may be missing (``-``)."""
    return "-" if value is None else format(value, fmt)


def comparison(value, kind):
    """A speedup (``"x"``: ``1.34x``) or a saving (``"%"``: ``35.6%``) over a baseline;
    ``-`` when the run has no such baseline (nothing to compare with, not 0)."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if kind == "x" else f"{value:.1%}"


def table(name, rows, say):
    say(f"\n  {name}")
    say(f"  {'system':<11} {'cyc/batch':>10} {'ckpt ovh':>9} {'of bound':>8} {'of floor':>8} "
        f"{'wr/row':>6} {'PMEM wr B':>10} {'link B':>10} "
        f"{'energy mJ':>10}  {'speedup over':>15}  {'energy saving over':>18}")
    say(f"  {'':<11} {'':>10} {'':>9} {'':>8} {'':>8} {'':>6} {'':>10} {'':>10} {'':>10}  "
        f"{'host-pmem':>9} {'pmem':>5}  {'host-pmem':>9} {'pmem':>8}")
    for s, f in rows.items():
        ovh = f.get("checkpoint_overhead")
        say(f"  {s:<11} {f['cycles_per_batch']:>10,.0f} "
            f"{'-' if ovh is None else f'{100 * ovh:.2f}%':>9} "
            f"{_share(f.get('fraction_of_bound')):>8} {_share(f.get('fraction_of_floor')):>8} "
            f"{_share(f.get('write_lines_per_row'), '.2f'):>6} "
            f"{f['pmem_bytes_written_per_batch']['total']:>10,.0f} {f['link_bytes_per_batch']:>10,.0f} "
            f"{1e3 * f['energy_per_batch_j']:>10.3f}  "
            f"{comparison(f.get('speedup_vs_host_pmem'), 'x'):>9} "
            f"{comparison(f.get('speedup_vs_pmem'), 'x'):>5}  "
            f"{comparison(f.get('energy_saving_vs_host_pmem'), '%'):>9} "
            f"{comparison(f.get('energy_saving_vs_pmem'), '%'):>8}")
