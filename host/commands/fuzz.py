"""``trainingcxl fuzz``: invalid inputs mixed with checked training, in shards.

The cases are cut into shards of ``--shard-cases``; each shard is one run of
:mod:`trainingcxl.host.apps.fuzz_app` on a fresh device, seeded from the fuzz seed
and its shard number alone, so the tally does not depend on where or on how
many workers the shards ran (:mod:`.cluster`).
"""

import time

from . import report
from .options import cluster_options, config_option, json_option, sim_option, workload_options
from trainingcxl.host.tools.argtypes import positive
from trainingcxl.host.runs.cluster import open_cluster
from trainingcxl.host.runs.fanout import fan_out
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Task
from trainingcxl.host.apps.job_records import FuzzRecord
from trainingcxl.host.jobs import FuzzJob

__all__ = ["shard_seed", "merge_shards", "cmd_fuzz", "register"]

#: The counts of a shard's record that add up over shards.
COUNTS = ("cases", "invalid", "refused", "corruptions", "hangs", "lost_commits", "batches")


def shard_seed(seed, shard):
    """Shard 0 runs on the fuzz seed itself (one shard is the unsharded fuzz), the
    others on seeds no other fuzz seed's shard 0 uses."""
    return seed + (shard << 32)


def merge_shards(results):
    """One record (a :class:`~trainingcxl.host.apps.job_records.FuzzRecord`) from the shards'
    (in shard order): counts summed, the inputs not refused and the hangs named by shard."""
    merged = FuzzRecord(hang_notes=[], errors=[],
                        counters={"mem_errors": 0, "descriptor_errors": 0})
    for task, rec, error in results:
        shard = task.index
        if rec is None:         # a shard that failed with a record is judged by its counts
            merged.errors.append({"shard": shard, "error": (error or "")[-3000:]})
            continue
        for k in COUNTS:
            setattr(merged, k, getattr(merged, k) + getattr(rec, k))
        for kind, n in rec.by_kind.items():
            merged.by_kind[kind] = merged.by_kind.get(kind, 0) + n
        merged.not_refused += [x.replace(shard=shard) for x in rec.not_refused]
        if rec.hang:
            merged.hang_notes.append({"shard": shard, "hang": rec.hang})
        for k, v in rec.counters.items():
            merged.counters[k] += v
    return merged


def cmd_fuzz(args):
    cfg = args.config
    sizes = [min(args.shard_cases, args.cases - first)
             for first in range(0, args.cases, args.shard_cases)]
    tasks = [Task(k, cfg, FuzzJob(cases=n, seed=shard_seed(args.seed, k), every=args.every),
                  sim=args.sim)
             for k, n in enumerate(sizes)]
    print(f"trainingcxl fuzz: {args.cases} invalid inputs (seed {args.seed}) in {len(tasks)} "
          f"shard(s), a checked training batch every {args.every}, on {args.sim}", flush=True)
    t0 = time.monotonic()
    with open_cluster(args.cluster, args.jobs) as cluster:
        cluster.prebuild([cfg], sim=args.sim)
        results = sorted(fan_out(DeviceRunner(), tasks, cluster), key=lambda r: r.task.index)
        execution = {"cluster": cluster.name, "workers": cluster.workers}
    rec = merge_shards(results)
    execution["wall_s"] = round(time.monotonic() - t0, 1)
    rec = rec.replace(sim=args.sim, seed=args.seed, shards=len(tasks),
                      shard_cases=args.shard_cases, execution=execution)
    print()
    print(f"  invalid inputs   {rec.invalid} ({', '.join(f'{k} {n}' for k, n in rec.by_kind.items())})")
    print(f"  refused          {rec.refused} as specified")
    print(f"  training batches {rec.batches} between them, checked against the golden model")
    print(f"  corruptions      {rec.corruptions}   hangs {rec.hangs}   "
          f"lost commits {rec.lost_commits}")
    for e in rec.errors:
        print(f"  FAILED shard {e['shard']}: {(e['error'] or '')[:300]}")
    print(f"  time             {execution['wall_s']} s on {execution['workers']} workers "
          f"({execution['cluster']})")
    report.json_out(args.json, rec, args=args)
    good = (rec.refused == rec.invalid == args.cases and not rec.corruptions
            and not rec.hangs and not rec.lost_commits and not rec.errors)
    return 0 if good else 1


def register(sub):
    sp = sub.add_parser(
        "fuzz", help="send random invalid CXL.mem messages and descriptors between checked "
                     "training batches",
        description="Seeded fuzzing of the simulated device: invalid CXL.mem messages (unmapped, "
                    "protected, poisoned, reused tags, unimplemented opcodes) and descriptors "
                    "(rows out of range, bad offsets, oversized bags, unknown ops, misaligned "
                    "pointers, arrays outside the GPU window, updates without their lookup, "
                    "commits out of order, batches already committed), each checked to be "
                    "refused as specified, "
                    "with a lookup, update and commit checked against the golden model after "
                    "every --every of them and all tables compared at the end. The cases run "
                    "in shards of --shard-cases, each on a fresh device, in parallel. Exit "
                    "status 0 when everything was refused and nothing was corrupted, hung or lost.")
    config_option(sp, "tiny")
    sp.add_argument("--cases", type=positive, default=200, help="invalid inputs to send")
    workload_options(sp, FuzzJob, names=("seed",))
    sp.add_argument("--every", type=positive, default=10,
                    help="a checked training batch after every N invalid inputs")
    sp.add_argument("--shard-cases", type=positive, default=500,
                    help="invalid inputs per shard, the unit of work a worker takes")
    sim_option(sp)
    cluster_options(sp)
    json_option(sp)
    sp.set_defaults(func=cmd_fuzz)
