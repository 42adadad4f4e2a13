"""``trainingcxl train``: DLRM training on the device against the golden model, with
power failures, on a target (:data:`TARGETS`): the simulated device, the simulated
board top, or a board on a serial port (:mod:`.train_targets`). A target object
checks the command line for what it can do, runs the training and summarises it."""

import contextlib
import os
import signal
import sys
import time

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.jobs import JobError, TrainJob
from trainingcxl.host.model.partial import CPR_VARIANTS
from trainingcxl.host.tools.argtypes import fraction, nonneg, positive, save_figure, share
from trainingcxl.host.tools.plans import add_failure_options, failure_plan, failure_summary
from . import report
from .options import (cluster_options, config_arg, devices_option, sim_option, staleness_option,
                      with_devices, workload_options)
from .train_targets import Board, SimulatedBoard, add_target_options

__all__ = ["register"]


def register(sub):
    from trainingcxl.host.protocol.systems import SYSTEMS
    from trainingcxl.host.tools.argtypes import add_set_option
    sp = sub.add_parser("train", help="train DLRM on the simulated device against the golden model",
                        description="Trains DLRM with the embedding tables in the simulated device's "
                                    "PMEM: the device pools (LOOKUP) and updates (UPDATE) the "
                                    "embeddings, a GPU model runs the MLPs and charges its cycles. "
                                    "Every pooled vector, and the tables at regular checks, are "
                                    "compared bit for bit with the golden model; a float32 reference "
                                    "trains beside it. Each batch is committed and the MLP "
                                    "snapshotted; with --inject-failures, --fail-at or --fail-in "
                                    "the power fails at chosen moments, the device recovers "
                                    "(RECOVER), the invariants of docs/design.md, \"Invariants\", "
                                    "are checked against the golden model, and training resumes.")
    sim_option(sp)
    sp.add_argument("--config", type=config_arg, default=None,
                    help=f"a preset ({', '.join(PRESETS)}) or a .json/.toml file of configuration "
                         f"fields (default: small; on board targets the board's own)")
    add_set_option(sp)
    workload_options(sp, TrainJob)
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT, with the "
                                                  "job and a provenance record")
    sp.add_argument("--from-json", metavar="FILE",
                    help="rerun the run a `train --json` FILE (or a campaign's repro.json) "
                         "records: its configuration and job; --json, --plot, --dump, --export, "
                         "--quiet and --log-every still apply")
    TrainJob.add_arguments(sp, "quiet", "log_every", log_every={"type": positive, "metavar": "N"})
    add_target_options(sp, TARGETS)
    TrainJob.add_arguments(
        sp, "data", "on_bad_lines", "test", "test_fraction", "test_samples", "eval_every",
        "min_pooling", "system", "relaxed", "check_every", "dump", "export",
        "pmem", "resume", "overwrite",
        on_bad_lines={"choices": ("raise", "skip")}, test={"metavar": "FILE"},
        test_fraction={"type": fraction, "metavar": "F"},
        test_samples={"type": nonneg, "metavar": "N"}, eval_every={"type": nonneg, "metavar": "N"},
        min_pooling={"type": nonneg, "metavar": "N"},
        system={"choices": tuple(SYSTEMS)}, check_every={"type": positive}, dump={"metavar": "DIR"}, export={"metavar": "DIR"},
        pmem={"metavar": "FILE"})
    staleness_option(sp)
    devices_option(sp, more="one simulator each, coupled batch by batch")
    sp.add_argument("--workers", type=positive, metavar="W", default=None,
                    help="with --devices: simulators running at once (default: the cores, or "
                         "the cluster's CPUs, at most N); the results do not depend on it")
    cluster_options(sp, jobs=False, what="a pool's simulators (with --devices)")
    TrainJob.add_arguments(sp, "recovery", "failure_every", "pls", "fraction",
                           recovery={"choices": ("exact", *CPR_VARIANTS)},
                           failure_every={"type": nonneg, "metavar": "N"},
                           pls={"type": float}, fraction={"type": share, "metavar": "F"})
    sp.add_argument("--no-checkpoint", action="store_true",
                    help="no undo log, commits or snapshots (to measure what checkpointing "
                         "costs); power failures cannot be injected")
    sp.add_argument("--plot", metavar="OUT.png", help="draw the loss curve, device vs float32, "
                                                     "and the test AUC at each evaluation")
    add_failure_options(sp)
    sp.set_defaults(func=run)


def run(args):
    if args.from_json and args.target != "sim":
        raise SystemExit("error: --from-json reruns simulated runs (--target sim)")
    return TARGETS[args.target].train(args)


class Simulation:
    """The device's own ports in simulation, with the timing models."""

    def train(self, args):
        return train_on_sim(args)


def sim_job(args, cfg):
    """The :class:`TrainJob` the command line asks of the simulated device, resolved and
    checked before anything is built; ``SystemExit`` says what does not fit."""
    if args.from_json:
        job = args.recorded_job.replace(dump=args.dump, export=args.export, quiet=args.quiet,
                                        log_every=args.log_every)
    else:
        if cfg.pool.devices > 1:
            failures = _pool_failures(args, cfg)
        else:
            failures = failure_plan(fail_at=args.fail_at, fail_in=args.fail_in,
                                    random=args.inject_failures, kill_in=args.kill_in)
        # A pool trains on until its last failure has struck: a device that ended its run
        # could not take part in the pool's recovery.
        pooled = {"extend": True} if cfg.pool.devices > 1 and failures else {}
        job = TrainJob.from_args(args, checkpointing=not args.no_checkpoint,
                                 failures=tuple(failures), **pooled)
    t0 = time.monotonic()
    if job.data != "synthetic":
        print(f"[data] reading {job.data}", file=sys.stderr, flush=True)
    try:
        job = job.validated(cfg, sim=args.sim,
                            note=lambda text: print(f"note: {text}", file=sys.stderr))
    except JobError as e:
        raise SystemExit(f"error: {e}")
    if job.data != "synthetic":
        print(f"[data] checked in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    return job


def _pool_failures(args, cfg):
    """A pool's failures (docs/pool.md): ``--inject-failures N`` random ones of the whole
    pool, of one device and of one during the pool's recovery, drawn from the seed."""
    import random
    from trainingcxl.host.model.gpu import step_cost
    from trainingcxl.host.tools.plans import pool_failure_plan
    for flag, value in (("--fail-at", args.fail_at), ("--fail-in", args.fail_in),
                        ("--kill-in", args.kill_in)):
        if value:
            raise SystemExit(f"error: {flag}: a pool's failures strike every device at the "
                             f"same cycle of the pool's batches; use --inject-failures N")
    batch_size = getattr(args, "batch_size", None) or cfg.model.batch_size
    return pool_failure_plan(random.Random(getattr(args, "seed", 0) or 0), args.inject_failures or 0,
                             cfg.pool.devices, step_cost(cfg, batch_size).cycles)


def train_on_sim(args):
    """Training on the simulated device: build, run, summarise."""
    from trainingcxl.host.protocol.systems import SYSTEMS
    from trainingcxl.host.runs.choice import runner_for
    from trainingcxl.host.runs.task import Task
    from trainingcxl.host.tools.argtypes import with_overrides
    from .options import check_device_top
    if args.from_json:
        rerun(args)
    media = _resumed_media(args) if args.pmem and args.resume else None
    if args.config is None:
        args.config = with_overrides(PRESETS["small"], args.set)
    for flag, value in (("--port", args.port), ("--baud", args.baud)):
        if value is not None:
            raise SystemExit(f"error: {flag} is for --target board")
    if args.devices is not None:
        args.config = with_devices(args.config, args.devices)
    elif args.config.pool.devices == 1 and (args.workers is not None or args.cluster != "local"):
        raise SystemExit("error: --workers and --cluster go with a pool (--devices N)")
    cfg = args.config
    check_device_top(cfg)
    if media is not None:
        _refuse(media.check_config, cfg)
        for name, value in media.run.items():
            given = getattr(args, name, None)
            if given not in (None, TrainJob._field(name).default, value):
                print(f"note: --{name.replace('_', '-')} {given} ignored: {args.pmem} continues "
                      f"a run with {value}", file=sys.stderr)
            setattr(args, name, value)
        args.no_checkpoint = not media.run["checkpointing"]
    job = sim_job(args, cfg)
    if job.pmem and not job.resume:
        from pathlib import Path
        from trainingcxl.host.pmem.media_file import RUN_FIELDS, create
        if Path(job.pmem).exists():
            with _media_in_use(job.pmem):       # not from under a run that is using it
                pass
        _refuse(create, job.pmem, cfg, {k: getattr(job, k) for k in RUN_FIELDS},
                overwrite=job.overwrite)
    system = SYSTEMS[job.system]
    order = "relaxed" if job.relaxed else "strict"
    checkpoints = f"staleness K = {job.staleness}" if job.checkpointing else "checkpointing off"
    if job.recovery != "exact":
        checkpoints = (f"CPR's partial recovery ({job.recovery}, no checkpoint engine), a failure "
                       f"of one device every {job.failure_every} batches on average")
    print(f"trainingcxl train: system {system.name} ({system.summary}); {job.batches} batches of "
          f"{job.batch_size} samples, {cfg.n_tables} tables x dim {cfg.dim}, data {job.data}, "
          f"{order} order, {checkpoints}, {report.plural(len(job.failures), 'power failure')} "
          f"planned, on {args.sim}", flush=True)
    t0 = time.monotonic()
    if cfg.pool.devices > 1:
        _say_pool(cfg)
    runner = runner_for(cfg, job, live=True, where=args.cluster)
    # One device's simulator ends its run after the batch in progress on SIGINT or SIGTERM.
    stop = _graceful_stop() if cfg.pool.devices == 1 else contextlib.nullcontext(_Stop())
    with stop as stopped, _media_in_use(job.pmem):
        _, rec, error = runner(Task("train", cfg, job, sim=args.sim, workers=args.workers))
    if rec is None and stopped.signum:
        print(f"\nstopped ({stopped.name}) before the first batch was trained", file=sys.stderr)
        return 128 + stopped.signum
    if rec is None:
        if cfg.pool.devices > 1:
            raise SystemExit(f"error: the pool's run failed: {error[-2000:]}")
        report.error(error)
        if job.pmem:
            print(f"{job.pmem} keeps the media as the run left it: `trainingcxl train "
                  f"--pmem {job.pmem} --resume --batches {job.batches}` continues it",
                  file=sys.stderr)
        return 1
    rec = rec.replace(sim=args.sim, config=cfg.to_dict(), data=job.data, job=job.to_dict(),
                      wall_s=time.monotonic() - t0)
    if rec.aborted is not None:
        # The run stopped part-way: say where and why, keep what it found.
        print(f"\nerror: the run stopped after {len(rec.loss)} of {job.batches} batches: "
              f"{rec.aborted}", file=sys.stderr)
        for text in failure_summary(rec):
            print(text)
        report.json_out(args.json, rec, "partial", args=args)
        return 1
    if not rec.loss:
        print(f"\nnothing to train: {args.pmem} is at batch "
              f"{rec.resumed.recovered_batch}, --batches {job.batches}")
        report.json_out(args.json, rec, args=args)
        return 0 if rec.golden_match else 1
    losses = rec.losses()
    first = sum(losses[:10]) / len(losses[:10])
    gap = abs(rec.final_loss - rec.final_loss_ref) / rec.final_loss_ref
    print()
    report.line("loss", f"{first:.4f} over the first batches -> {rec.final_loss:.4f} over the "
                        f"last (float32 reference {rec.final_loss_ref:.4f}, {100 * gap:.2f}% apart)")
    if rec.resumed is not None:
        r = rec.resumed
        report.line("resumed", f"{args.pmem}: RECOVER found D = {r.recovered_batch}, m = "
                               f"{r.recovered_mlp_batch} ({r.rolled_back} records rolled "
                               f"back, {r.earlier_recoveries} earlier recoveries replayed); "
                               f"trained batches {r.recovered_batch + 1} to {job.batches}")
    report.line("cycles", f"{rec.cycles:,} in all, {rec.cycles // max(1, len(rec.loss)):,} "
                          f"per batch (GPU model {rec.gpu_cycles_per_batch:,} per batch)")
    checked = ", ".join(str(c.batch + 1) for c in rec.checks)
    report.golden(rec.golden_match, f"pooled vectors of every batch, tables after batches {checked}")
    for text in _eval_summary(rec):
        print(text)
    for label, text in work_summary(rec, system):
        report.line(label, text)
    for text in failure_summary(rec):
        print(text)
    if rec.pool is not None:
        p = rec.pool
        per = ", ".join(f"{d.device}: "
                        f"{sum(d.cycles_per_batch.values()) // len(d.cycles_per_batch):,}"
                        for d in rec.devices)
        report.line("pool", f"{p.devices} device(s), switch {p.switch_latency} cycles each "
                            f"way, {p.workers} simulator(s) at once; cycles per batch by "
                            f"device {per}")
    report.line("wall time", f"{rec.wall_s:.1f} s")
    if args.plot:
        _plot_losses(rec, args.plot)
        report.line("plot", args.plot)
    if job.dump:
        report.line("dump", f"{args.dump} (tables.npz, mlp.npz, batches.npz)")
    if job.export:
        report.line("model", f"{args.export} (model.npz: a PyTorch state dict, model.json)")
    report.json_out(args.json, rec, args=args)
    if rec.interrupted:
        resume = (f"`trainingcxl train --pmem {job.pmem} --resume --batches {job.batches}` "
                  f"continues it" if job.pmem else "with --pmem FILE a run can be resumed")
        print(f"\ninterrupted ({stopped.name or 'SIGINT'}) after batch {rec.stopped_after} of "
              f"{job.batches} (committed, checked and durable, its MLPs snapshotted); {resume}",
              file=sys.stderr)
        return 128 + (stopped.signum or signal.SIGINT)
    return 0 if rec.golden_match else 1


def _say_pool(cfg):
    """Where a pool's tables go (:mod:`trainingcxl.host.runs.pool_coordinator`)."""
    from trainingcxl.spec.pool import shards
    plan = shards(cfg)
    print(f"  pool of {len(plan)} device(s), switch {cfg.pool.switch_latency if len(plan) > 1 else 0} "
          f"cycles each way; tables by device: "
          + "; ".join(f"{s.device}: {s.label(cfg.tables)}" for s in plan), flush=True)


class _Stop:
    """The first stop signal received, if any."""
    signum = None

    @property
    def name(self):
        return signal.Signals(self.signum).name if self.signum else None


def _children():
    """The process ids of this process's children (the simulator's)."""
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return pids


@contextlib.contextmanager
def _graceful_stop():
    """While the simulation runs, SIGINT or SIGTERM, sent to this process alone or to its
    group, ends the run after the batch in progress rather than this process: the
    simulator (a child, where the run's loop lives) is passed a SIGINT of its own."""
    stop = _Stop()

    def note(signum, _frame):
        if stop.signum is None:
            stop.signum = signum
            print(f"\n[stop] {stop.name}: stopping after the batch in progress", file=sys.stderr,
                  flush=True)
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
    before = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _media_in_use(path):
    """Hold ``path`` (a media file, or nothing) for this run: a second run on the same
    file is refused in one line rather than left to write over this one's media. The
    lock goes with the process, killed or not."""
    if not path:
        yield
        return
    import fcntl
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"error: {path} is in use by another run") from None
        yield


def _resumed_media(args):
    """``--pmem FILE --resume``: the media file, whose configuration the run takes
    unless ``--config`` names the same one."""
    from trainingcxl.host.pmem.media_file import MediaFile
    media = _refuse(MediaFile, args.pmem)
    if args.config is None:
        args.config = media.config
    return media


def _refuse(call, *a, **kw):
    """``call(...)``, its :class:`~trainingcxl.host.pmem.media_file.MediaFileError` as
    the command's one-line error."""
    from trainingcxl.host.pmem.media_file import MediaFileError
    try:
        return call(*a, **kw)
    except MediaFileError as e:
        raise SystemExit(f"error: {e}") from None


def work_summary(rec, system):
    """``(label, text)`` lines on the embedding and checkpoint work, counted where it was
    done: the device's counters for its engines, the host's own counts for the
    software systems (whose work the device's engines never see)."""
    c = rec.counters
    if system.engines:
        return [("device", f"{c['lookup_lines']:,} PMEM lines gathered, {c['update_lines']:,} "
                           f"rewritten ({c['update_forwarded']:,} forwarded on chip)"),
                ("checkpointing", f"{c['log_records']:,} undo records, {c['snapshot_lines']:,} MLP "
                                  f"lines snapshotted; updates waited {c['log_barrier']:,} cycles "
                                  f"for the log, lookups {c['lookup_log_holds']:,} for log space "
                                  f"and {c['ckpt_stalls']:,} for snapshots")]
    # host-pmem: the CPU's loads and stores, counted by the host; pmem: the host's
    # CXL.mem reads and writes, which the device counts by region.
    n = (rec.host or {}) if system.host_bus else c
    where = "on its memory bus" if system.host_bus else "over CXL.mem"
    return [("host (software)", f"{n.get('pmem_reads', 0):,} PMEM lines read by the host {where}, "
                                f"{n.get('pmem_writes_data', 0):,} rewritten; the device's "
                                f"engines idle"),
            ("checkpointing", f"software: {n.get('pmem_writes_log', 0):,} log lines written "
                              f"(undo records, headers, commits), "
                              f"{n.get('pmem_writes_snapshot', 0):,} MLP snapshot lines")]


def rerun(args):
    """``--from-json``: the configuration and job a record names, in place of the
    command line's; ``SystemExit`` says what the file lacks."""
    import json
    from trainingcxl.spec.config import Config, ConfigError
    from trainingcxl.host.jobs import JobError
    given = [flag for flag, value in (("--config", args.config), ("--set", args.set),
                                      ("--fail-at", args.fail_at), ("--fail-in", args.fail_in),
                                      ("--inject-failures", args.inject_failures))
             if value]
    if given:
        raise SystemExit(f"error: --from-json reruns the recorded job; drop {', '.join(given)}")
    try:
        with open(args.from_json) as f:
            recorded = json.load(f)
        args.config = Config.from_dict(recorded["config"])
        args.recorded_job = TrainJob.from_dict(recorded["job"])
    except (OSError, ValueError, KeyError, TypeError, ConfigError, JobError) as e:
        why = f"no {e} entry" if isinstance(e, KeyError) else str(e)
        raise SystemExit(f"error: --from-json {args.from_json}: {why}") from None
    args.sim = recorded.get("sim", args.sim)


def _eval_summary(rec):
    """The summary's lines on the held-out evaluation after the last batch."""
    if not rec.eval:
        return []
    last = rec.eval[-1]
    d, r = last.device, last.reference
    head = f"  test set           {rec.test_set.name} ({d['positives']:,} positive), after " \
           f"batch {last.batch}:"
    if d["auc"] is None:
        return [head, f"                     {d['note']}; log loss {d['log_loss']:.4f} "
                      f"(float32 {r['log_loss']:.4f})"]
    return [head, f"                     AUC {d['auc']:.4f} (float32 {r['auc']:.4f}), log loss "
                  f"{d['log_loss']:.4f} ({r['log_loss']:.4f}), accuracy {100 * d['accuracy']:.2f}% "
                  f"({100 * r['accuracy']:.2f}%)"]


def _plot_losses(record, path):
    """The loss curve, device against float32, with the power failures marked where
    they struck; the test AUC at each evaluation beside it, or, after a single
    evaluation, its figures as text (an axis around one point would magnify a
    difference of 1e-5 into a gap)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    evals = [e for e in record.eval or () if e.device["auc"] is not None]
    fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(12 if evals else 7, 4), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if evals else None)
    ax = axes[0][0]
    x = range(1, len(record.loss) + 1)
    ax.plot(x, record.losses("loss"), label="device (fixed-point embeddings)", lw=1.5)
    ax.plot(x, record.losses("loss_ref"), label="float32 reference", lw=1, ls="--")
    for k, f in enumerate(record.failures):
        nested = f.failures_during_recovery
        ax.axvline(f.batch, color="tab:red", lw=0.8, alpha=0.6,
                   label="power failure (batch it struck)" if k == 0 else None)
        ax.annotate(f"D={f.recovered_batch}" + (f", +{nested} in recovery" if nested else ""),
                    (f.batch, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="tab:red")
    ax.set_xlabel("batch")
    ax.set_ylabel("training loss (binary cross-entropy)")
    ax.set_title("trainingcxl: DLRM training on the RTL")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if evals:
        ax = axes[0][1]
        ax.set_title(f"held out: {record.test_set.name}", fontsize=10)
        if len(evals) == 1:
            _eval_table(ax, evals[0])
        else:
            b = [e.batch for e in evals]
            ax.plot(b, [e.device["auc"] for e in evals], "o-", label="device", lw=1.5)
            ax.plot(b, [e.reference["auc"] for e in evals], "x--", label="float32 reference",
                    lw=1)
            # An AUC axis no narrower than 0.05: seed-to-seed noise must not look like a trend.
            lo = min(min(e.device["auc"], e.reference["auc"]) for e in evals)
            hi = max(max(e.device["auc"], e.reference["auc"]) for e in evals)
            pad = max(0.0, 0.05 - (hi - lo)) / 2
            ax.set_ylim(max(0.0, lo - pad), min(1.0, hi + pad))
            ax.set_xlabel("batch")
            ax.set_ylabel("test ROC AUC")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _eval_table(ax, e):
    """One evaluation's figures as a small table in ``ax``."""
    d, r = e.device, e.reference
    rows = [("ROC AUC", f"{d['auc']:.4f}", f"{r['auc']:.4f}"),
            ("log loss", f"{d['log_loss']:.4f}", f"{r['log_loss']:.4f}"),
            ("accuracy", f"{100 * d['accuracy']:.2f}%", f"{100 * r['accuracy']:.2f}%")]
    ax.axis("off")
    table = ax.table(cellText=[list(row[1:]) for row in rows], rowLabels=[row[0] for row in rows],
                     colLabels=["device", "float32"], loc="center", cellLoc="center")
    table.scale(1, 1.6)
    ax.text(0.5, 0.12, f"after batch {e['batch']}", ha="center", transform=ax.transAxes,
            fontsize=9)


#: Where ``train`` runs, by ``--target``.
TARGETS = {"sim": Simulation(), "sim-board": SimulatedBoard(), "board": Board()}
