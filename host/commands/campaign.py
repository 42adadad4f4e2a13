"""Failure campaigns and sweeps: many training runs with power failures, tallied.

``trainingcxl campaign`` runs many independent training runs with random
failures over mixed configurations, in parallel; ``trainingcxl sweep`` cuts
the power at every cycle (or every k-th) of a whole batch, and at every cycle
of a recovery after one of them. Each failure is followed by ``RECOVER`` and
the checks of the invariants (docs/design.md, "Invariants"); any inconsistent
run leaves a reproducer (and its waveform) behind.
"""

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from . import report
from .options import (cluster_options, config_option, devices_option, json_option, pmem_dir_option,
                      staleness_option, with_devices, workload_options)
from trainingcxl.host.protocol.phases import BATCH_PHASES
from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, JobError, TrainJob
from trainingcxl.host.tools.argtypes import nonneg as _nonneg, positive as _positive
from trainingcxl.host.runs.cluster import open_cluster
from trainingcxl.host.runs.journal import Journal, default_journal, task_digest
from trainingcxl.host.model.gpu import step_cost
from trainingcxl.host.model.regions import check_checkpoint_regions
from trainingcxl.host.tools.plans import pool_failure_plan
from trainingcxl.host.runs.fanout import fan_out
from trainingcxl.host.runs.choice import runner_for
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Task

__all__ = ["register", "campaign_tasks", "cmd_campaign", "cmd_sweep", "run_tasks", "tally"]


def tally(results):
    """Aggregate the failures of many runs."""
    failures = [f for _, rec, _ in results if rec for f in rec.failures]
    by_phase = {}
    for f in failures:
        p = by_phase.setdefault(f.phase, {"failures": 0, "consistent": 0})
        p["failures"] += 1
        p["consistent"] += int(f.consistent)
    nested = sum(f.failures_during_recovery for f in failures)
    cycles = [f.recovery_cycles for f in failures]
    pools = {}
    if any(f.devices_failed is not None for f in failures):     # failures of a pool of devices
        sizes = [len(f.recovery_cycles_per_device) for f in failures]
        pools = {"pool": {
            "whole_pool": sum(len(f.devices_failed) == n for f, n in zip(failures, sizes)),
            "one_device": sum(len(f.devices_failed) < n for f, n in zip(failures, sizes)),
            "during_recovery": nested,
            "deepest_recovered_batch": max(f.recovered_batch for f in failures),
            "devices_rolled_back_with_power_on": sum(
                sum(r > 0 for d, r in enumerate(f.rolled_back_per_device)
                    if d not in f.devices_failed) for f in failures)}}
    return {
        "failures": len(failures) + nested,
        "failures_in_training": len(failures),
        "failures_during_recovery": nested,
        "consistent": sum(f.consistent for f in failures),
        "inconsistent": sum(not f.consistent for f in failures),
        "lost_commits": sum(max(0, f.durable_before - f.recovered_batch) for f in failures),
        "by_phase": dict(sorted(by_phase.items())),
        "recovery_cycles": {"median": statistics.median(cycles) if cycles else 0,
                            "max": max(cycles, default=0)},
        **pools,
    }


def _reproducer(out_dir, task, record, error):
    """Write what it takes to re-run a bad run exactly: its configuration and job
    (seeds and failure plan: the simulation is deterministic, so the job alone replays
    the run), the cycles the power failed at, the command that re-runs it, and (one
    device: re-run with tracing) its waveform."""
    folder = Path(out_dir) / f"run-{task.index}"
    folder.mkdir(parents=True, exist_ok=True)
    fired = [c for f in (record.failures if record else []) if f.cycle
             for c in [f.cycle, *f.recovery_failure_cycles]]
    repro = {"config": task.config.to_dict(), "job": task.job.to_dict(),
             "fired_cycles": fired, "error": error,
             "command": f"trainingcxl train --from-json {folder / 'repro.json'}"}
    (folder / "repro.json").write_text(json.dumps(repro, indent=2))
    if task.config.pool.devices == 1:
        DeviceRunner()(task.replace(waves_to=str(folder / "waves.vcd")))
    return folder


def run_tasks(kind, args, cluster, runner, tasks, note):
    """Run ``tasks`` with ``runner`` on ``cluster`` through the journal of
    ``--journal``/``--resume``.

    Returns the results sorted by task index (what the JSON is made of, so it does not
    depend on the order tasks finished in) and the ``execution`` record: where they
    ran, on how many workers, and how many came from the journal."""
    digest = task_digest(kind, [t.to_dict() for t in tasks])
    path = Path(args.journal) if args.journal else default_journal(kind, digest)
    try:
        journal = Journal(path, kind, digest, resume=args.resume)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    resumed = len(journal.results())
    print(f"  {len(tasks)} tasks on {cluster.name} ({cluster.workers} workers); journal {path}"
          + (f", {resumed} done before" if args.resume else ""), flush=True)
    results = []
    with journal:
        try:
            results.extend(fan_out(runner, tasks, cluster, note, journal=journal))
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(journal.results())} of {len(tasks)} tasks are in the "
                  f"journal; the same command with --resume goes on from there", file=sys.stderr)
            raise SystemExit(130) from None
    return (sorted(results, key=lambda r: r.task.index),
            {"cluster": cluster.name, "workers": cluster.workers, "tasks": len(tasks),
             "resumed_tasks": resumed})


# -- trainingcxl campaign ------------------------------------------------------------------

def campaign_tasks(base, *, failures, per_run, batches, batch_size, staleness, orders, seed,
                   min_pooling=0, pmem_dir=None, workers=None):
    """The runs of a campaign: ``ceil(failures / per_run)`` training runs cycling over
    the staleness bounds and lookup orders, each with a failure plan drawn from
    ``seed`` (a third in named phases, a fifth during the recovery of the one before,
    the rest at random cycles); a pool's simulators on ``workers`` processes.
    ``ValueError`` says what the configuration cannot do."""
    if "relaxed" in orders and "relaxed" not in base.blocks:
        raise ValueError("the orders include relaxed, but the configuration leaves out the "
                         "relaxed block; use --orders strict")
    cfg = base.replace(relaxed_lookup=False)
    devices = cfg.pool.devices
    if devices == 1:
        check_checkpoint_regions(cfg, batch_size)
    elif pmem_dir:
        raise ValueError("--pmem-dir: a pool's devices keep their media in memory yet")
    rng = random.Random(seed)
    tasks = []
    for i in range(max(1, -(-failures // per_run))):
        k = staleness[i % len(staleness)]
        relaxed = orders[(i // len(staleness)) % len(orders)] == "relaxed"
        plan = [] if devices == 1 else pool_failure_plan(rng, per_run, devices,
                                                         step_cost(cfg, batch_size).cycles)
        for _ in range(per_run if devices == 1 else 0):
            roll = rng.random()
            if roll < 0.2 and plan and plan[-1].get("phase") != "recovery":
                plan.append({"phase": "recovery"})        # a second failure, during RECOVER
            elif roll < 0.6:
                plan.append({"phase": rng.choice(BATCH_PHASES)})
            else:
                plan.append({"random": True})
        job = TrainJob(seed=seed * 1000 + i, batches=batches, batch_size=batch_size,
                       min_pooling=min_pooling, system=CAMPAIGN_SYSTEM, check_every=1000,
                       relaxed=relaxed, staleness=k, failures=tuple(plan), extend=True, failure_seed=seed * 1000 + i,
                       test_samples=0)
        if devices > 1:
            try:
                job.validated(cfg)
            except JobError as e:
                raise ValueError(str(e)) from None
        tasks.append(Task(i, cfg, job, media_dir=pmem_dir,
                          workers=workers if devices > 1 else None))
    return tasks


def _mix(job):
    """A run's mix of staleness bound and lookup order, as the summary names it."""
    return f"K={job.staleness} {'relaxed' if job.relaxed else 'strict'}"


def cmd_campaign(args):
    if args.kill:
        if args.devices is not None and args.devices > 1:
            raise SystemExit("error: --kill kills the process of one device's run; a pool's "
                             "failures are planned (--devices without --kill)")
        if args.pmem_dir:
            raise SystemExit("error: a --kill campaign keeps its media files in its own "
                             "folder; --pmem-dir is for planned power failures")
        return cmd_kill_campaign(args)
    base = args.config
    base = with_devices(base, args.devices)
    try:
        tasks = campaign_tasks(base, failures=args.failures, per_run=args.per_run,
                               batches=args.batches, batch_size=args.batch_size,
                               staleness=args.staleness, orders=args.orders, seed=args.seed,
                               min_pooling=args.min_pooling, pmem_dir=args.pmem_dir,
                               workers=args.jobs)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    runs, per_run, staleness, orders = len(tasks), args.per_run, args.staleness, args.orders
    print(f"trainingcxl campaign: {runs} runs x {per_run} planned power failures, "
          f"K in {staleness}, {'/'.join(orders)} order, {args.batches} batches of "
          f"{args.batch_size}", flush=True)
    mixes = len(staleness) * len(orders)
    if runs < mixes:
        print(f"note: {runs} runs cover {runs} of the {mixes} mixes of K and order "
              f"({', '.join(_mix(t.job) for t in tasks)}); --failures "
              f"{mixes * per_run} covers each once", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    bad = 0

    def note(result):
        nonlocal bad
        _, rec, error = result
        if error or not rec or not rec.golden_match:
            bad += 1
        return f", {bad} bad"
    pooled = base.pool.devices > 1
    runner = runner_for(tasks[0].config, tasks[0].job)
    with open_cluster(args.cluster, 1 if pooled else args.jobs) as cluster:
        if pooled:      # one pool at a time, its devices' simulators on --jobs workers
            from trainingcxl.spec.pool import device_configs
            cluster.prebuild(list({c.to_json(): c for c in device_configs(
                base.replace(relaxed_lookup=False))}.values()))
        else:
            cluster.prebuild([base.replace(relaxed_lookup=False)])
        results, execution = run_tasks("campaign", args, cluster, runner, tasks, note)
    execution["wall_s"] = round(time.monotonic() - t0, 1)
    summary = {"runs": runs, **tally(results), "config": base.to_dict(), "seed": args.seed}
    by_config = {}
    details = []
    reproducers = []
    for task, rec, error in results:
        key = _mix(task.job)
        c = by_config.setdefault(key, {"runs": 0, "failures": 0, "consistent": 0})
        fs = rec.failures if rec else []
        c["runs"] += 1
        c["failures"] += len(fs)
        c["consistent"] += sum(f.consistent for f in fs)
        ok = bool(rec) and bool(rec.golden_match) and not error
        details.append({"index": task.index, "seed": task.job.seed,
                        "staleness": task.job.staleness, "relaxed": task.job.relaxed,
                        "failures": len(fs), "ok": ok, "error": error})
        if not ok and args.reproducers:
            reproducers.append(str(_reproducer(args.reproducers, task, rec, error)))
    summary["by_config"] = by_config
    summary["bad_runs"] = sum(not d["ok"] for d in details)
    summary["reproducers"] = reproducers
    summary["run_details"] = details
    summary["execution"] = execution
    _print_tally("campaign", summary)
    report.json_out(args.json, summary, args=args)
    return 0 if summary["inconsistent"] == 0 and summary["bad_runs"] == 0 else 1


def cmd_kill_campaign(args):
    """``campaign --kill N``: real training processes killed with SIGKILL and resumed from
    their media files (:mod:`trainingcxl.host.runs.kills`)."""
    from trainingcxl.host.runs.kills import KILL_WINDOW_S, kill_tasks
    tasks = kill_tasks(args.config, kills=args.kill, per_run=args.per_run,
                       staleness=args.staleness, orders=args.orders, seed=args.seed)
    print(f"trainingcxl campaign --kill: {len(tasks)} media files x up to {args.per_run} "
          f"SIGKILLs of the training process, {KILL_WINDOW_S[0]}-{KILL_WINDOW_S[1]} s after "
          f"each start, K in {args.staleness}, {'/'.join(args.orders)} order", flush=True)
    t0 = time.monotonic()
    bad = 0

    def note(result):
        nonlocal bad
        bad += bool(result[2]) or not (result[1] and result[1].final_golden_match)
        return f", {bad} bad"
    with open_cluster(args.cluster, args.jobs) as cluster:
        cluster.prebuild([args.config.replace(relaxed_lookup=False)])
        results, execution = run_tasks("kill-campaign", args, cluster,
                                       runner_for(args.config, tasks[0].job, kills=True), tasks,
                                       note)
    execution["wall_s"] = round(time.monotonic() - t0, 1)
    rounds = [r for _, rec, _ in results if rec for r in rec.rounds]
    resumes = [r.resumed for r in rounds if r.resumed]
    summary = {
        "kills": sum(r.killed for r in rounds), "rounds": len(rounds),
        "resumes": len(resumes), "consistent": sum(r.consistent for r in resumes),
        "inconsistent": sum(not r.consistent for r in resumes),
        "recover_differs_from_software": sum(not r.as_before for r in resumes),
        "lost_durable": sum(r.lost for r in rounds),
        "final_bit_exact": sum(bool(rec and rec.final_golden_match) for _, rec, _ in results),
        "media_files": len(results), "errors": [e for _, _, e in results if e][:5],
        "kills_per_minute": round(60 * sum(r.killed for r in rounds)
                                  / max(1e-9, execution["wall_s"]), 1),
        "config": args.config.to_dict(), "seed": args.seed, "execution": execution,
        "tasks": [{"index": task.index, "staleness": task.job.staleness,
                   "relaxed": task.job.relaxed, **(rec.to_dict() if rec else {}), "error": err}
                  for task, rec, err in results],
    }
    s = summary
    print()
    print(f"  kills              {s['kills']} SIGKILLs over {s['media_files']} media files in "
          f"{execution['wall_s']:.0f} s ({s['kills_per_minute']} a minute, "
          f"{execution['workers']} workers, {execution['cluster']})")
    print(f"  resumes            {s['consistent']} of {s['resumes']} consistent (RECOVER, the "
          f"golden model replayed, the invariants); inconsistent {s['inconsistent']}; RECOVER "
          f"differing from the software recovery {s['recover_differs_from_software']}")
    print(f"  durable batches    lost {s['lost_durable']} (a file's durable batch never fell)")
    print(f"  to the end         {s['final_bit_exact']} of {s['media_files']} files resumed and "
          f"trained bit-exactly to the end")
    for e in s["errors"]:
        print(f"  ERROR              {e.strip().splitlines()[-1][:200] if e.strip() else e}")
    report.json_out(args.json, summary, args=args)
    ok = (s["inconsistent"] == 0 and s["lost_durable"] == 0 and not s["errors"]
          and s["recover_differs_from_software"] == 0 and s["final_bit_exact"] == s["media_files"])
    return 0 if ok else 1


def _print_tally(what, s):
    print()
    print(f"  {what:<18} {s['failures']} power failures ({s['failures_during_recovery']} during "
          f"recovery) over {s['runs']} runs in {s['execution']['wall_s']:.0f} s "
          f"({s['execution']['workers']} workers, {s['execution']['cluster']})")
    print(f"  consistent         {s['consistent']} of {s['failures_in_training']} recoveries; "
          f"inconsistent {s['inconsistent']}; durable batches lost {s['lost_commits']}")
    print(f"  recovery           {s['recovery_cycles']['median']:.0f} cycles median, "
          f"{s['recovery_cycles']['max']} max")
    print("  by phase           " + ", ".join(f"{p} {v['consistent']}/{v['failures']}"
                                               for p, v in s["by_phase"].items()))
    if "pool" in s:
        p = s["pool"]
        print(f"  pool               {p['whole_pool']} of the whole pool, {p['one_device']} of one "
              f"device (the others kept their power: {p['devices_rolled_back_with_power_on']} "
              f"of them rolled back with it), {p['during_recovery']} during the pool's "
              f"recovery; every device at the same D and m after each")
    for key, v in s.get("by_config", {}).items():
        print(f"  {key:<18} {v['runs']} runs, {v['consistent']}/{v['failures']} consistent")
    if s.get("bad_runs"):
        print(f"  BAD RUNS           {s['bad_runs']}; reproducers: {', '.join(s['reproducers']) or '-'}")


# -- trainingcxl sweep ----------------------------------------------------------------------

def _chunks(points, size):
    return [points[i:i + size] for i in range(0, len(points), size)]


def cmd_sweep(args):
    cfg = args.config.replace(relaxed_lookup=False)
    if args.relaxed and "relaxed" not in cfg.blocks:
        raise SystemExit("error: --relaxed needs the relaxed block, which this configuration "
                         "leaves out")
    try:
        check_checkpoint_regions(cfg, args.batch_size, relaxed=args.relaxed)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    common = TrainJob(seed=args.seed, batch_size=args.batch_size,
                      min_pooling=args.min_pooling, system=CAMPAIGN_SYSTEM,
                      check_every=1000, relaxed=args.relaxed, staleness=args.staleness,
                      until_plan_done=True, test_samples=0)
    common.replace(batches=4).validated(cfg)        # the job's own checks, before any build
    t0 = time.monotonic()
    with open_cluster(args.cluster, args.jobs) as cluster:
        cluster.prebuild([cfg])
        # 1. Measure: a batch's length, and a recovery's after a failure in an update.
        task = Task(0, cfg, common.replace(
            batches=4, failures=({"phase": "update", "batch": 3, "offset": 20},)))
        _, (_, probe, error) = next(iter(cluster.run(DeviceRunner(), [task])))
        if error or not probe:
            print(f"error: the measuring run failed: {error}", file=sys.stderr)
            return 1
        batch_len = probe.cycles_per_batch[2]           # a batch after the first
        rec_len = probe.failures[0].recovery_cycles
        span = batch_len + args.margin
        offsets = list(range(0, span, args.every))
        # Offsets count from the host's decision to recover; the device's RECOVER
        # starts a few register writes later, so the margin covers its last cycles.
        rec_offsets = (list(range(0, rec_len + args.margin, args.recovery_every))
                       if args.recovery_every else [])
        print(f"trainingcxl sweep: a batch is {batch_len} cycles and a recovery {rec_len}; power "
              f"failures at {len(offsets)} points of a batch (every {args.every} cycles over "
              f"{span}) and second failures at {len(rec_offsets)} points of the recovery after "
              f"one in the update; K = {args.staleness}, "
              f"{'relaxed' if args.relaxed else 'strict'} order", flush=True)
        # 2. The points, in runs of --points-per-run (so the tasks do not depend on the
        # number of workers): each run re-runs the batch after each recovery.
        plans = [[{"next_batch": True, "offset": o} for o in part]
                 for part in _chunks(offsets, args.points_per_run)]
        plans += [[e for r in part for e in ({"phase": "update", "offset": 20},
                                             {"phase": "recovery", "offset": r})]
                  for part in _chunks(rec_offsets, args.points_per_run)]
        tasks = [Task(k, cfg, common.replace(batches=3 + len(plan) + 2, failures=tuple(plan)),
                      media_dir=args.pmem_dir)
                 for k, plan in enumerate(plans)]
        results, execution = run_tasks("sweep", args, cluster, DeviceRunner(), tasks,
                                       lambda r: "")
    execution["wall_s"] = round(time.monotonic() - t0, 1)
    summary = {"runs": len(tasks), **tally(results),
               "batch_cycles": batch_len, "recovery_cycles_probe": rec_len,
               "batch_points": len(offsets), "recovery_points": len(rec_offsets),
               "every": args.every, "recovery_every": args.recovery_every,
               "config": cfg.to_dict(), "staleness": args.staleness, "relaxed": args.relaxed,
               "batch_size": args.batch_size, "min_pooling": args.min_pooling, "seed": args.seed}
    # Idempotence: a failure in an update recovers to the batch before it, however
    # many times the power fails during that recovery (K = 0).
    again = [f for _, rec, _ in results if rec for f in rec.failures
             if f.failures_during_recovery and f.phase == "update"]
    summary["recovery_sweep_same_result"] = bool(again) and all(
        f.recovered_batch == f.batch - 1 and f.consistent for f in again) \
        if args.staleness == 0 and rec_offsets else None
    summary["bad_runs"] = sum(1 for _, rec, err in results if err or not rec or not rec.golden_match)
    summary["errors"] = [err for _, _, err in results if err][:5]
    summary["reproducers"] = []
    if args.reproducers:
        for task, rec, err in results:
            if err or not rec or not rec.golden_match:
                summary["reproducers"].append(str(_reproducer(args.reproducers, task, rec, err)))
    summary["execution"] = execution
    _print_tally("sweep", summary)
    if summary["recovery_sweep_same_result"] is not None:
        print(f"  idempotent         {'yes' if summary['recovery_sweep_same_result'] else 'NO'}: "
              f"a recovery cut short at any of {len(rec_offsets)} points, then run again, "
              f"returns to the batch before the update")
    report.json_out(args.json, summary, args=args)
    ok = summary["inconsistent"] == 0 and summary["bad_runs"] == 0
    return 0 if ok and summary["recovery_sweep_same_result"] is not False else 1


def _orders(text):
    orders = text.split(",")
    if not orders or set(orders) - {"strict", "relaxed"}:
        raise argparse.ArgumentTypeError(f"{text!r}: expected strict, relaxed or strict,relaxed")
    return orders


def _fan_out_options(sp, kind):
    cluster_options(sp)
    sp.add_argument("--journal", metavar="FILE",
                    help=f"where finished tasks are recorded as they finish (default: a file "
                         f"under .cache/journals named after the {kind}'s arguments)")
    sp.add_argument("--resume", action="store_true",
                    help="take the tasks the journal holds as done and run the rest (the same "
                         "command line as the interrupted run; without it the journal starts anew)")


def _min_pooling_option(sp):
    TrainJob.add_arguments(sp, "min_pooling", min_pooling={"type": _nonneg, "metavar": "N"})


def register(sub):
    sp = sub.add_parser(
        "campaign", help="many training runs with random power failures, in parallel",
        description="Runs independent training runs on Verilator, each with random power "
                    "failures (some in named phases, some during the recovery of the one "
                    "before), over every staleness bound and lookup order given; every "
                    "failure is recovered from and the invariants of docs/design.md, "
                    "\"Invariants\", are checked "
                    "against the golden model. Prints a summary; --json writes runs, "
                    "failures, consistent, inconsistent, lost_commits and a breakdown by phase "
                    "and configuration. A bad run leaves a reproducer and its waveform.")
    config_option(sp, "tiny")
    sp.add_argument("--failures", type=_positive, default=100, help="power failures to plan in all")
    sp.add_argument("--kill", type=_positive, metavar="N",
                    help="instead of planned power failures: N SIGKILLs of real `train --pmem` "
                         "processes at random wall-clock moments, each file resumed after "
                         "each kill (--per-run kills a file); tallies consistent resumes and "
                         "durable batches lost")
    sp.add_argument("--per-run", type=_positive, default=10, help="failures planned per run")
    workload_options(sp, defaults={"batches": 6, "batch_size": 8},
                     helps={"batches": "batches per run",
                            "seed": "campaign seed: run i trains with seed 1000 x SEED + i"})
    _min_pooling_option(sp)
    devices_option(sp, more="failures of the whole pool, of one device while the others keep "
                            "their power, and of one device during the pool's recovery; every "
                            "device rolls back to the pool's durable batch. One pool runs at a "
                            "time, its simulators on --jobs processes")
    staleness_option(sp, many=True, default=[0, 1, 8])
    sp.add_argument("--orders", type=_orders, default=["strict", "relaxed"], metavar="ORDER[,ORDER]",
                    help="lookup orders to mix: strict, relaxed")
    _fan_out_options(sp, "campaign")
    sp.add_argument("--reproducers", metavar="DIR", default="campaign-failures",
                    help="where bad runs leave a reproducer and waveform")
    pmem_dir_option(sp)
    json_option(sp)
    sp.set_defaults(func=cmd_campaign)

    sp = sub.add_parser(
        "sweep", help="a power failure at every cycle of a batch, and of a recovery",
        description="Measures a batch and a recovery, then cuts the power at every cycle "
                    "(or every --every-th) of a whole batch (lookup, GPU compute, update, "
                    "commit, snapshot), recovering and checking the invariants after each; "
                    "then, after a failure in an update, cuts the power again at every cycle "
                    "(or every --recovery-every-th) of the recovery, and checks that the "
                    "recovery after that gives the same result.")
    config_option(sp, "tiny")
    sp.add_argument("--every", type=_positive, default=1, help="cycle step over the batch")
    sp.add_argument("--recovery-every", type=_nonneg, default=1,
                    help="cycle step over the recovery; 0 skips it")
    sp.add_argument("--margin", type=_nonneg, default=200,
                    help="cycles swept past the measured batch length")
    workload_options(sp, names=("batch_size", "seed"), defaults={"batch_size": 4})
    _min_pooling_option(sp)
    staleness_option(sp, default=0)
    sp.add_argument("--relaxed", action="store_true",
                    help="train in relaxed order: the next batch's lookup overlaps this batch "
                         "(default: strict)")
    sp.add_argument("--points-per-run", type=_positive, default=50,
                    help="crash points per training run, the unit of work a worker takes")
    _fan_out_options(sp, "sweep")
    sp.add_argument("--reproducers", metavar="DIR", default="sweep-failures",
                    help="where bad runs leave a reproducer and waveform")
    pmem_dir_option(sp)
    json_option(sp)
    sp.set_defaults(func=cmd_sweep)
