"""Failure plans from the command line: ``--inject-failures N --fail-at C --fail-in PHASE``.

They build the entry list of :class:`trainingcxl.host.protocol.timed.FailurePlan`
and summarise the failures of a run.
"""

import argparse
import textwrap

from trainingcxl.host.protocol.phases import BATCH_PHASES, PHASES
from trainingcxl.host.tools.argtypes import nonneg as _nonneg, plural

__all__ = ["PHASES", "BATCH_PHASES", "parse_fail_in", "parse_cycles", "failure_plan",
           "failure_summary", "add_failure_options", "staleness", "FAILURE_KEY"]


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


#: What the failure table's short headings mean (docs/design.md, "Invariants").
FAILURE_KEY = ("D: the last batch whose tables recovery restored (the newest durable batch); "
               "m: the batch of the MLP snapshot it restored; K: the staleness bound, "
               "D - K <= m <= D")


def failure_summary(rec):
    """Readable lines about a run's power failures: one row per failure, a row for
    each failure that struck a recovery under the failure whose recovery it cut, and
    the key of the headings."""
    failures = rec.get("failures", [])
    k = rec.get("staleness", 0)
    if not failures:
        return [f"  power failures     none (checkpointing on, staleness K = {k})"
                + (f"; {plural(rec['failures_planned_left'], 'planned failure')} did not "
                   f"happen" if rec.get("failures_planned_left") else "")]
    left = rec.get("failures_planned_left", 0)
    good = sum(f["consistent"] for f in failures)
    nested = sum(f["failures_during_recovery"] for f in failures)
    during = f", {nested} of them during a recovery" if nested else ""
    lines = [f"  power failures     {len(failures) + nested}{during}; {good} of "
             f"{len(failures)} recoveries consistent, staleness K = {k}",
             "      cycle  phase      batch  ->  D     m   recovery  rolled back  lines read  invariants"]
    for f in failures:
        read = f.get("recovery_lines")
        lines.append(f"  {f['cycle']:>9}  {f['phase']:<9} {f['batch']:>5}    {f['recovered_batch']:>4} "
                     f"{f['recovered_mlp_batch']:>5} {f['recovery_cycles']:>9} {f['rolled_back']:>12}"
                     f" {'-' if read is None else read:>11}  {'hold' if f['consistent'] else 'BROKEN'}")
        for cycle in f.get("recovery_failure_cycles", ()):
            lines.append(f"  {cycle:>9}  {'recovery':<9} {f['batch']:>5}    (cut the recovery above, "
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
