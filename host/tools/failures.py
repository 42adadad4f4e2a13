"""Power-failure injection from the command line: plans, campaigns and sweeps.

``trainingcxl train --inject-failures N --fail-at C --fail-in PHASE`` builds a
failure plan (the entry list of :class:`trainingcxl.host.protocol.training.FailurePlan`);
``trainingcxl campaign`` runs many independent training runs with random
failures over mixed configurations, in parallel; ``trainingcxl sweep`` cuts
the power at every cycle (or every k-th) of a whole batch, and at every cycle
of a recovery after one of them. Each failure is followed by ``RECOVER`` and
the checks of the invariants (docs/design.md, "Invariants"); any inconsistent
run leaves a reproducer (and its waveform) behind.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from trainingcxl.host.protocol.phases import BATCH_PHASES, PHASES
from trainingcxl.host.tools.argtypes import nonneg as _nonneg, positive as _positive, write_json as _write_json

__all__ = ["PHASES", "BATCH_PHASES", "failure_plan", "check_checkpoint_regions", "failure_summary",
           "add_failure_options", "add_commands", "run_train", "parallel_runs", "prebuild",
           "Progress"]



def parse_fail_in(text):
    """``PHASE[@BATCH][+OFFSET]`` -> a plan entry."""
    rest, offset = (text.split("+", 1) + [None])[:2]
    phase, batch = (rest.split("@", 1) + [None])[:2]
    if phase not in PHASES:
        raise argparse.ArgumentTypeError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    entry = {"phase": phase}
    try:
        if batch is not None:
            entry["batch"] = int(batch)
        if offset is not None:
            entry["offset"] = int(offset)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PHASE[@BATCH][+OFFSET]") from None
    return entry


def parse_cycles(text):
    try:
        cycles = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of cycles") from None
    if not cycles or min(cycles) < 1:
        raise argparse.ArgumentTypeError("cycles must be positive integers, comma separated")
    return cycles


def failure_plan(*, fail_at=(), fail_in=(), random=0):
    """Explicit cycles first (in order), then phase failures, then ``random`` random ones.

    A failure in phase ``recovery`` strikes the recovery of another failure: the
    k-th such entry follows the k-th failure of the rest of the plan."""
    fail_in = list(fail_in or ())
    again = [e for e in fail_in if e["phase"] == "recovery"]
    first = ([{"at": c} for c in sorted(fail_at or ())]
             + [e for e in fail_in if e["phase"] != "recovery"] + [{"random": True}] * random)
    plan = []
    for k, entry in enumerate(first):
        plan.append(entry)
        if k < len(again):
            plan.append(again[k])
    return plan + again[len(first):]


def check_checkpoint_regions(config, batch_size):
    """Refuse a run the checkpoint regions cannot serve: an undo log that cannot hold
    two batches (the device would stall for good), or snapshot slots smaller than
    the MLPs (every ``SNAPSHOT_MLP`` would fail with ``BAD_SIZE``)."""
    need = 2 * config.records_per_batch(batch_size)
    if config.log_slots < need:
        raise ValueError(f"the undo log holds {config.log_slots} records; batches of {batch_size} "
                         f"need {need} (two batches of distinct rows): raise log_lines to "
                         f"{need * config.rec_lines} or leave it 0 with model.batch_size = {batch_size}")
    if config.snapshot_size < config.mlp_lines + 1:
        raise ValueError(f"a snapshot slot holds {config.snapshot_size - 1} lines of parameters; "
                         f"the MLPs ({config.mlp_params:,} float32) need {config.mlp_lines}: raise "
                         f"snapshot_lines to {config.mlp_lines + 1} or leave it 0")


def failure_summary(rec):
    """Readable lines about a run's power failures."""
    failures = rec.get("failures", [])
    if not failures:
        return [f"  power failures     none (checkpointing on, staleness K = {rec.get('staleness', 0)})"
                + (f"; {rec['failures_planned_left']} planned did not happen"
                   if rec.get("failures_planned_left") else "")]
    left = rec.get("failures_planned_left", 0)
    good = sum(f["consistent"] for f in failures)
    nested = sum(f["failures_during_recovery"] for f in failures)
    lines = [f"  power failures     {len(failures)} (+{nested} during recovery), {good} recovered "
             f"consistently, staleness K = {rec.get('staleness', 0)}",
             "      cycle  phase      batch  ->  D     m   recovery  rolled back  invariants"]
    for f in failures:
        lines.append(f"  {f['cycle']:>9}  {f['phase']:<9} {f['batch']:>5}    {f['recovered_batch']:>4} "
                     f"{f['recovered_mlp_batch']:>5} {f['recovery_cycles']:>9} {f['rolled_back']:>12}"
                     f"  {'hold' if f['consistent'] else 'BROKEN'}")
    if left:
        lines.append(f"  note               {left} planned failures did not happen: the run ended first")
    return lines


def add_failure_options(sp):
    sp.add_argument("--staleness", type=_staleness, default=None, metavar="K",
                    help="staleness bound K: training stalls while the newest MLP snapshot is "
                         "more than K batches behind the newest commit (0: strict, snapshot "
                         "every batch; default: the system's, 1 for cxl and 0 for the others)")
    sp.add_argument("--inject-failures", type=_nonneg, default=0, metavar="N",
                    help="cut the power N times at random cycles (drawn from --failure-seed), "
                         "recover, check the invariants and resume (default: 0)")
    sp.add_argument("--fail-at", type=parse_cycles, default=[], metavar="CYCLE[,CYCLE...]",
                    help="cut the power at these simulation cycles")
    sp.add_argument("--fail-in", type=parse_fail_in, action="append", default=[],
                    metavar="PHASE[@BATCH][+OFFSET]",
                    help=f"cut the power OFFSET cycles (default: random) into a phase "
                         f"({', '.join(PHASES)}), of batch BATCH if given; 'recovery' strikes "
                         f"the recovery after another failure; repeatable")
    sp.add_argument("--failure-seed", type=_nonneg, default=None,
                    help="seed of the random failure cycles (default: --seed)")


def _staleness(text):
    v = _nonneg(text)
    if v > 255:
        raise argparse.ArgumentTypeError("the staleness bound is at most 255")
    return v


# -- running jobs in parallel ------------------------------------------------------------

def run_train(spec):
    """One training job in its own process; returns ``(spec, record or None, error text)``."""
    from trainingcxl.spec.config import Config
    from trainingcxl.sim.runner import BenchFailure, run_bench
    cfg = Config.from_dict(spec["config"])
    with tempfile.TemporaryDirectory(prefix="trainingcxl-run-") as tmp:
        out = Path(tmp) / "run.json"
        args = {**spec["args"], "out": str(out), "quiet": True}
        error = None
        # The simulator's own output goes to a log, kept for the error message.
        log_path = Path(tmp) / "run.log"
        saved = os.dup(1), os.dup(2)
        with open(log_path, "w") as log_file:
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            try:
                run_bench(spec.get("sim", "verilator"), cfg, "trainingcxl.sim.jobs.job_train",
                          args=args, quiet=True, results_name=f"run{spec['index']}",
                          work_dir=tmp, waves=spec.get("waves", False), log=lambda text: None)
            except BenchFailure as e:
                error = str(e)[-500:]
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        if error:
            error += "\n" + log_path.read_text(errors="replace")[-3000:]
        record = json.loads(out.read_text()) if out.exists() else None
        if spec.get("waves") and spec.get("waves_to"):
            from trainingcxl.sim.runner import waves_file
            src = waves_file(spec.get("sim", "verilator"), cfg, work_dir=tmp)
            if src.exists():
                Path(spec["waves_to"]).parent.mkdir(parents=True, exist_ok=True)
                Path(spec["waves_to"]).write_bytes(src.read_bytes())
    return spec, record, error


class Progress:
    """A progress bar on stderr (a line per tenth when stderr is not a terminal)."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.monotonic()

    def step(self, note=""):
        self.done += 1
        width = 30
        filled = width * self.done // max(1, self.total)
        rate = self.done / max(1e-9, time.monotonic() - self.t0)
        eta = (self.total - self.done) / rate if rate else 0
        text = (f"  [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.what}"
                f"{note}, ETA {eta:4.0f} s ")
        if sys.stderr.isatty():
            print("\r" + text, end="", file=sys.stderr, flush=True)
            if self.done == self.total:
                print(file=sys.stderr)
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            print(text, file=sys.stderr, flush=True)     # a log file gets a line per tenth


def parallel_runs(specs, jobs, progress_note):
    """Run ``specs`` on ``jobs`` processes; yields ``(spec, record, error)`` as they finish."""
    bar = Progress(len(specs), "runs")
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_train, s) for s in specs]
        for fut in as_completed(futures):
            result = fut.result()
            bar.step(progress_note(result))
            yield result


def prebuild(configs, sim="verilator"):
    """Build each configuration once, before the parallel runs share the build."""
    from trainingcxl.sim.runner import build
    for cfg in configs:
        build(sim, cfg, log=lambda text: print(text, file=sys.stderr, flush=True))


def _tally(results):
    """Aggregate the failures of many runs."""
    failures = [f for _, rec, _ in results if rec for f in rec.get("failures", [])]
    by_phase = {}
    for f in failures:
        p = by_phase.setdefault(f["phase"], {"failures": 0, "consistent": 0})
        p["failures"] += 1
        p["consistent"] += int(f["consistent"])
    nested = sum(f["failures_during_recovery"] for f in failures)
    cycles = [f["recovery_cycles"] for f in failures]
    return {
        "failures": len(failures) + nested,
        "failures_in_training": len(failures),
        "failures_during_recovery": nested,
        "consistent": sum(f["consistent"] for f in failures),
        "inconsistent": sum(not f["consistent"] for f in failures),
        "lost_commits": sum(max(0, f["durable_before"] - f["recovered_batch"]) for f in failures),
        "by_phase": dict(sorted(by_phase.items())),
        "recovery_cycles": {"median": statistics.median(cycles) if cycles else 0,
                            "max": max(cycles, default=0)},
    }


def _reproducer(out_dir, spec, record, error):
    """Write what it takes to re-run a bad run exactly: the config, the job arguments
    (seeds and failure plan), the cycles the power failed at as a ``train`` command
    line, and (re-run with tracing) its waveform."""
    folder = Path(out_dir) / f"run-{spec['index']}"
    folder.mkdir(parents=True, exist_ok=True)
    fired = [{"at": c} for f in (record or {}).get("failures", []) if f.get("cycle")
             for c in [f["cycle"], *f.get("recovery_failure_cycles", [])]]
    a = spec["args"]
    command = (f"trainingcxl train --config {folder / 'config.json'} --seed {a['seed']} "
               f"--system {a.get('system', 'cxl-b')} "
               f"--batches {a['batches']} --batch-size {a['batch_size']} "
               f"--staleness {a['staleness']}{' --relaxed' if a['relaxed'] else ''}"
               + (f" --fail-at {','.join(str(f['at']) for f in fired)}" if fired else ""))
    # The simulation is deterministic: the job arguments alone replay the run.
    repro = {"config": spec["config"], "args": a, "fired_cycles": [f["at"] for f in fired],
             "error": error, "command": command}
    (folder / "repro.json").write_text(json.dumps(repro, indent=2))
    (folder / "config.json").write_text(json.dumps(spec["config"], indent=2))
    _, _, _ = run_train({**spec, "args": repro["args"], "waves": True,
                          "waves_to": str(folder / "waves.vcd")})
    return folder


# -- trainingcxl campaign ------------------------------------------------------------------

def cmd_campaign(args):
    base = args.config
    staleness = [int(k) for k in args.staleness.split(",")]
    orders = args.orders.split(",")
    if "relaxed" in orders and "relaxed" not in base.blocks:
        raise SystemExit("error: --orders includes relaxed, but the configuration leaves out the "
                         "relaxed block; use --orders strict")
    per_run = args.per_run
    runs = max(1, -(-args.failures // per_run))
    rng = random.Random(args.seed)
    specs = []
    for i in range(runs):
        k = staleness[i % len(staleness)]
        relaxed = orders[(i // len(staleness)) % len(orders)] == "relaxed"
        cfg = base.replace(relaxed_lookup=False)
        try:
            check_checkpoint_regions(cfg, args.batch_size)
        except ValueError as e:
            raise SystemExit(f"error: {e}")
        plan = []
        for _ in range(per_run):
            roll = rng.random()
            if roll < 0.2 and plan and plan[-1].get("phase") != "recovery":
                plan.append({"phase": "recovery"})        # a second failure, during RECOVER
            elif roll < 0.6:
                plan.append({"phase": rng.choice(BATCH_PHASES)})
            else:
                plan.append({"random": True})
        specs.append({"index": i, "config": cfg.to_dict(), "args": {
            "seed": args.seed * 1000 + i, "batches": args.batches, "batch_size": args.batch_size,
            "check_every": 1000, "relaxed": relaxed, "staleness": k, "failures": plan,
            "extend": True,
            "failure_seed": args.seed * 1000 + i}, "staleness": k, "relaxed": relaxed})
    jobs = args.jobs or os.cpu_count() or 1
    print(f"trainingcxl campaign: {runs} runs x {per_run} planned power failures, "
          f"K in {staleness}, {'/'.join(orders)} order, {args.batches} batches of "
          f"{args.batch_size}, on {jobs} processes", flush=True)
    t0 = time.monotonic()
    prebuild([base.replace(relaxed_lookup=False)])
    results = []
    bad = 0

    def note(result):
        nonlocal bad
        _, rec, error = result
        if error or not rec or not rec.get("golden_match"):
            bad += 1
        return f", {bad} bad"
    for result in parallel_runs(specs, jobs, note):
        results.append(result)
    summary = {"runs": runs, **_tally(results), "wall_s": time.monotonic() - t0,
               "config": base.to_dict(), "seed": args.seed, "jobs": jobs}
    by_config = {}
    details = []
    reproducers = []
    for spec, rec, error in sorted(results, key=lambda r: r[0]["index"]):
        key = f"K={spec['staleness']} {'relaxed' if spec['relaxed'] else 'strict'}"
        c = by_config.setdefault(key, {"runs": 0, "failures": 0, "consistent": 0})
        fs = (rec or {}).get("failures", [])
        c["runs"] += 1
        c["failures"] += len(fs)
        c["consistent"] += sum(f["consistent"] for f in fs)
        ok = bool(rec) and rec.get("golden_match") and not error
        details.append({"index": spec["index"], "seed": spec["args"]["seed"],
                        "staleness": spec["staleness"], "relaxed": spec["relaxed"],
                        "failures": len(fs), "ok": ok, "error": error})
        if not ok and args.reproducers:
            reproducers.append(str(_reproducer(args.reproducers, spec, rec, error)))
    summary["by_config"] = by_config
    summary["bad_runs"] = sum(not d["ok"] for d in details)
    summary["reproducers"] = reproducers
    summary["run_details"] = details
    _print_tally("campaign", summary)
    if args.json:
        _write_json(args.json, summary)
        print(f"  JSON               {args.json}")
    return 0 if summary["inconsistent"] == 0 and summary["bad_runs"] == 0 else 1


def _print_tally(what, s):
    print()
    print(f"  {what:<18} {s['failures']} power failures ({s['failures_during_recovery']} during "
          f"recovery) over {s['runs']} runs in {s['wall_s']:.0f} s")
    print(f"  consistent         {s['consistent']} of {s['failures_in_training']} recoveries; "
          f"inconsistent {s['inconsistent']}; durable batches lost {s['lost_commits']}")
    print(f"  recovery           {s['recovery_cycles']['median']:.0f} cycles median, "
          f"{s['recovery_cycles']['max']} max")
    print("  by phase           " + ", ".join(f"{p} {v['consistent']}/{v['failures']}"
                                               for p, v in s["by_phase"].items()))
    for key, v in s.get("by_config", {}).items():
        print(f"  {key:<18} {v['runs']} runs, {v['consistent']}/{v['failures']} consistent")
    if s.get("bad_runs"):
        print(f"  BAD RUNS           {s['bad_runs']}; reproducers: {', '.join(s['reproducers']) or '-'}")


# -- trainingcxl sweep ----------------------------------------------------------------------

def cmd_sweep(args):
    cfg = args.config.replace(relaxed_lookup=False)
    try:
        check_checkpoint_regions(cfg, args.batch_size)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    jobs = args.jobs or os.cpu_count() or 1
    common = {"seed": args.seed, "batch_size": args.batch_size, "check_every": 1000,
              "relaxed": False, "staleness": args.staleness, "until_plan_done": True}
    prebuild([cfg])
    t0 = time.monotonic()
    # 1. Measure: a batch's length, and a recovery's after a failure in an update.
    spec = {"index": 0, "config": cfg.to_dict(),
            "args": {**common, "batches": 4, "failures": [{"phase": "update", "batch": 3, "offset": 20}]}}
    _, probe, error = run_train(spec)
    if error or not probe:
        print(f"error: the measuring run failed: {error}", file=sys.stderr)
        return 1
    batch_len = probe["cycles_per_batch"][1]
    rec_len = probe["failures"][0]["recovery_cycles"]
    span = batch_len + args.margin
    offsets = list(range(0, span, args.every))
    # Offsets count from the host's decision to recover; the device's RECOVER
    # starts a few register writes later, so the margin covers its last cycles.
    rec_offsets = (list(range(0, rec_len + args.margin, args.recovery_every))
                   if args.recovery_every else [])
    print(f"trainingcxl sweep: a batch is {batch_len} cycles and a recovery {rec_len}; power "
          f"failures at {len(offsets)} points of a batch (every {args.every} cycles over "
          f"{span}) and second failures at {len(rec_offsets)} points of the recovery after "
          f"one in the update; {jobs} processes", flush=True)
    # 2. The points, in chunks: each run re-runs the batch after each recovery.
    chunks = []
    per = max(1, -(-len(offsets) // (jobs * 4)))
    for i in range(0, len(offsets), per):
        part = offsets[i:i + per]
        chunks.append([{"next_batch": True, "offset": o} for o in part])
    per = max(1, -(-len(rec_offsets) // (jobs * 4))) if rec_offsets else 1
    for i in range(0, len(rec_offsets), per):
        part = rec_offsets[i:i + per]
        plan = []
        for r in part:
            plan += [{"phase": "update", "offset": 20}, {"phase": "recovery", "offset": r}]
        chunks.append(plan)
    specs = [{"index": k, "config": cfg.to_dict(),
              "args": {**common, "batches": 3 + len(plan) + 2, "failures": plan}}
             for k, plan in enumerate(chunks)]
    results = list(parallel_runs(specs, jobs, lambda r: ""))
    summary = {"runs": len(specs), **_tally(results), "wall_s": time.monotonic() - t0,
               "batch_cycles": batch_len, "recovery_cycles_probe": rec_len,
               "batch_points": len(offsets), "recovery_points": len(rec_offsets),
               "every": args.every, "recovery_every": args.recovery_every,
               "config": cfg.to_dict(), "staleness": args.staleness}
    # Idempotence: a failure in an update recovers to the batch before it, however
    # many times the power fails during that recovery (K = 0).
    again = [f for _, rec, _ in results if rec for f in rec["failures"]
             if f["failures_during_recovery"] and f["phase"] == "update"]
    summary["recovery_sweep_same_result"] = bool(again) and all(
        f["recovered_batch"] == f["batch"] - 1 and f["consistent"] for f in again) \
        if args.staleness == 0 and rec_offsets else None
    summary["bad_runs"] = sum(1 for _, rec, err in results if err or not rec or not rec["golden_match"])
    summary["errors"] = [err for _, _, err in results if err][:5]
    summary["reproducers"] = []
    if args.reproducers:
        for spec, rec, err in results:
            if err or not rec or not rec["golden_match"]:
                summary["reproducers"].append(str(_reproducer(args.reproducers, spec, rec, err)))
    _print_tally("sweep", summary)
    if summary["recovery_sweep_same_result"] is not None:
        print(f"  idempotent         {'yes' if summary['recovery_sweep_same_result'] else 'NO'}: "
              f"a recovery cut short at any of {len(rec_offsets)} points, then run again, "
              f"returns to the batch before the update")
    if args.json:
        _write_json(args.json, summary)
        print(f"  JSON               {args.json}")
    ok = summary["inconsistent"] == 0 and summary["bad_runs"] == 0
    return 0 if ok and summary["recovery_sweep_same_result"] is not False else 1


def add_commands(sub, config_option):
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
    sp.add_argument("--failures", type=_positive, default=100, help="power failures to plan in all (default: 100)")
    sp.add_argument("--per-run", type=_positive, default=10, help="failures planned per run (default: 10)")
    sp.add_argument("--batches", type=_positive, default=6, help="batches per run (default: 6)")
    sp.add_argument("--batch-size", type=_positive, default=8, help="samples per batch (default: 8)")
    sp.add_argument("--staleness", default="0,1,8", help="staleness bounds to mix (default: 0,1,8)")
    sp.add_argument("--orders", default="strict,relaxed", help="lookup orders to mix (default: strict,relaxed)")
    sp.add_argument("--jobs", type=_positive, default=None, help="parallel processes (default: all cores)")
    sp.add_argument("--seed", type=_nonneg, default=0, help="campaign seed (default: 0)")
    sp.add_argument("--reproducers", metavar="DIR", default="campaign-failures",
                    help="where bad runs leave a reproducer and waveform (default: campaign-failures)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
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
    sp.add_argument("--every", type=_positive, default=1, help="cycle step over the batch (default: 1)")
    sp.add_argument("--recovery-every", type=_nonneg, default=1,
                    help="cycle step over the recovery; 0 skips it (default: 1)")
    sp.add_argument("--margin", type=_nonneg, default=200,
                    help="cycles swept past the measured batch length (default: 200)")
    sp.add_argument("--batch-size", type=_positive, default=4, help="samples per batch (default: 4)")
    sp.add_argument("--staleness", type=_staleness, default=0, help="staleness bound K (default: 0)")
    sp.add_argument("--seed", type=_nonneg, default=0, help="workload seed (default: 0)")
    sp.add_argument("--jobs", type=_positive, default=None, help="parallel processes (default: all cores)")
    sp.add_argument("--reproducers", metavar="DIR", default="sweep-failures",
                    help="where bad runs leave a reproducer and waveform (default: sweep-failures)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    sp.set_defaults(func=cmd_sweep)
