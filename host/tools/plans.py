"""Failure plans from the command line: ``--inject-failures N --fail-at C --fail-in PHASE``.

They build the entry list of :class:`trainingcxl.host.protocol.timed.FailurePlan`
and summarise the failures of a run.
"""

import argparse
import textwrap

from trainingcxl.host.protocol.phases import BATCH_PHASES, PHASES
from trainingcxl.host.tools.argtypes import nonneg as _nonneg, plural

__all__ = ["PHASES", "BATCH_PHASES", "parse_fail_in", "parse_cycles", "failure_plan",
           "pool_failure_plan", "failure_summary", "add_failure_options", "staleness",
           "FAILURE_KEY"]


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


def failure_plan(*, fail_at=(), fail_in=(), random=0, kill_in=()):
    """Explicit cycles first (in order), then phase failures, then ``random`` random ones.

    A failure in phase ``recovery`` strikes the recovery of another failure: the
    k-th such entry follows the k-th failure of the rest of the plan. ``kill_in``
    entries are phase failures at which the simulator kills its own process
    (``SIGKILL``) instead of cutting the power: what a killed host leaves on a
    media file (``--pmem``)."""
    fail_in = list(fail_in or ()) + [dict(e, kill=True) for e in kill_in or ()]
    again = [e for e in fail_in if e["phase"] == "recovery"]
    first = ([{"at": c} for c in sorted(fail_at or ())]
             + [e for e in fail_in if e["phase"] != "recovery"] + [{"random": True}] * random)
    plan = []
    for k, entry in enumerate(first):
        plan.append(entry)
        if k < len(again):
            plan.append(again[k])
    return plan + again[len(first):]


#: The share of a pool's random failures that strike every device at once, and that
#: strike one device during the recovery from the failure before; the rest strike one
#: device while the others keep their power.
POOL_WHOLE, POOL_NESTED = 0.35, 0.2

#: Most cycles after the failure before that one during the pool's recovery strikes
#: (a recovery of ``tiny``'s pool takes 1,500-2,500 cycles).
POOL_AFTER = 1200

#: Where after the pool's GPU step begins a failure strikes: with this chance during
#: the GPU step, else from 200 cycles before its end to 1,500 after it, over the
#: update, the commit, the snapshot and the next lookup (at small batches the GPU step
#: is most of a batch).
POOL_IN_GPU = 0.4


def pool_failure_plan(rng, count, devices, gpu_cycles):
    """``count`` random failures of a pool of ``devices`` (entries of
    :func:`trainingcxl.host.protocol.pool.device_failures`), drawn with ``rng`` (a
    :class:`random.Random`); ``gpu_cycles``: the length of the GPU step."""
    plan = []
    for _ in range(count):
        roll = rng.random()
        if roll < POOL_NESTED and plan and "after" not in plan[-1]:
            plan.append({"after": rng.randint(1, POOL_AFTER), "devices": [rng.randrange(devices)]})
            continue
        offset = (rng.randint(1, gpu_cycles) if rng.random() < POOL_IN_GPU
                  else max(1, gpu_cycles + rng.randint(-200, 1500)))
        entry = {"pool_batch": "next", "skip": rng.randint(0, 2), "offset": offset}
        if roll >= POOL_NESTED + POOL_WHOLE:
            entry["devices"] = [rng.randrange(devices)]
        plan.append(entry)
    return plan


#: What the failure table's short headings mean (docs/design.md, "Invariants").
FAILURE_KEY = ("D: the last batch whose tables recovery restored (the newest durable batch); "
               "m: the batch of the MLP snapshot it restored; K: the staleness bound, "
               "D - K <= m <= D")


def _cpr_summary(rec):
    """A pool's failures under CPR's partial recovery, and its checkpoints."""
    failures, c = rec.cpr_failures or [], rec.cpr
    lines = [f"  CPR checkpoints    {rec.recovery}: interval {c.interval} batches, a "
             f"checkpoint every {c.every}; {c.checkpoints} taken, {c.rows_read:,} rows "
             f"read over CXL.mem in {c.read_cycles:,} cycles (the slowest device's)"]
    if not failures:
        return lines + ["  power failures     none"]
    good = sum(f.consistent for f in failures)
    lines += [f"  power failures     {len(failures)} of one device between batches; {good} of "
              f"{len(failures)} reloads equal the golden model's",
              "  after batch  device  checkpoint age  reload cycles  pool waited  tables"]
    lines += [f"  {f.batch:>11}  {f.device:>6}  {f.batches_since_checkpoint:>14}  "
              f"{f.reload_cycles:>13,}  {f.pool_recovery_cycles:>11,}  "
              f"{'reloaded' if f.consistent else 'DIFFER'}" for f in failures]
    return lines


def failure_summary(rec):
    """Readable lines about a run's power failures (``rec``: a
    :class:`~trainingcxl.host.protocol.run_record.TrainRecord`): one row per failure, a row
    for each failure that struck a recovery under the failure whose recovery it cut,
    and the key of the headings."""
    if (rec.recovery or "exact") != "exact":
        return _cpr_summary(rec)
    failures, k = rec.failures, rec.staleness
    left = rec.failures_planned_left or 0
    if not failures:
        return [f"  power failures     none (checkpointing on, staleness K = {k})"
                + (f"; {plural(left, 'planned failure')} did not happen" if left else "")]
    good = sum(f.consistent for f in failures)
    nested = sum(f.failures_during_recovery for f in failures)
    during = f", {nested} of them during a recovery" if nested else ""
    pool = failures[0].devices_failed is not None      # a pool's: which devices lost their power
    lines = [f"  power failures     {len(failures) + nested}{during}; {good} of "
             f"{len(failures)} recoveries consistent, staleness K = {k}",
             "      cycle  phase      batch  ->  D     m   recovery  rolled back  lines read  invariants"
             + ("  devices failed" if pool else "")]
    for f in failures:
        read = f.recovery_lines
        failed = ""
        if pool:
            every = len(f.devices_failed) == len(f.recovery_cycles_per_device)
            failed = "  all" if every else "  " + ",".join(map(str, f.devices_failed))
            failed = f"{failed:>16}"
        lines.append(f"  {f.cycle:>9}  {f.phase:<9} {f.batch:>5}    {f.recovered_batch:>4} "
                     f"{f.recovered_mlp_batch:>5} {f.recovery_cycles:>9} {f.rolled_back:>12}"
                     f" {'-' if read is None else read:>11}  {'hold' if f.consistent else 'BROKEN'}"
                     f"{failed}")
        for cycle in f.recovery_failure_cycles:
            lines.append(f"  {cycle:>9}  {'recovery':<9} {f.batch:>5}    (cut the recovery above, "
                         f"which began again; its figures are on that row)")
    lines.extend(textwrap.wrap(FAILURE_KEY, 100, initial_indent="  key                ",
                               subsequent_indent=" " * 21))
    if left:
        lines.append(f"  note               {plural(left, 'planned failure')} did not happen: "
                     f"the run ended first")
    return lines


def add_failure_options(sp):
    sp.add_argument("--inject-failures", type=_nonneg, default=0, metavar="N",
                    help="cut the power N times at random cycles (drawn from --failure-seed), "
                         "recover, check the invariants and resume")
    sp.add_argument("--fail-at", type=parse_cycles, default=[], metavar="CYCLE[,CYCLE...]",
                    help="cut the power at these simulation cycles")
    sp.add_argument("--fail-in", type=parse_fail_in, action="append", default=[],
                    metavar="PHASE[@BATCH][+OFFSET]",
                    help=f"cut the power OFFSET cycles (default: random) into a phase "
                         f"({', '.join(PHASES)}), of batch BATCH if given; 'recovery' strikes "
                         f"the recovery after another failure; repeatable")
    sp.add_argument("--kill-in", type=parse_fail_in, action="append", default=[],
                    metavar="PHASE[@BATCH][+OFFSET]",
                    help="as --fail-in, but the simulator kills its process with SIGKILL "
                         "there instead: with --pmem, the media file is left as that cycle "
                         "left it, for --resume; repeatable")
    from trainingcxl.host.jobs import TrainJob
    TrainJob.add_arguments(sp, "failure_seed", failure_seed={"type": _nonneg})


def staleness(text):
    """A staleness bound K from the command line (0 to 255)."""
    v = _nonneg(text)
    if v > 255:
        raise argparse.ArgumentTypeError("the staleness bound is at most 255")
    return v
